//! ISE, the idle state: enter, status, exit, and the job that closes stays
//! at their limit. A stay keeps entry, exit, duration and what it cost,
//! nothing else; it is no declaration and no log leaf.
//!
//! The price of a stay (the loaded generation's): nothing up to
//! `ise_free_seconds`, then `ise_fee`, flat. `free` stays are never charged
//! and end at the free seconds; `earned_only` ones are paid from Earned DAC
//! (400 `INSUFFICIENT_DAC` keeps the stay open); `external` ones from Trial,
//! else over x402 (DAB applies), settled before the answer. A stay open for
//! `ise_max_minutes` is closed by the job and charged from balances only,
//! else closed unpaid.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::ise::IseMode;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_store::{AgentRecord, IseClose, IseClosed, IseFunding, IseRecord};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const EXIT: Route = Route { method: "POST", path: "/v1/ise/exit" };

/// The generation's ISE terms.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub fee: MilliDac,
    pub free_seconds: i64,
    pub max_minutes: i64,
}

pub fn terms(services: &Services) -> AppResult<Terms> {
    let prices = services.pricing.services()?.ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price ISE stays".into(),
    })?;
    Ok(Terms { fee: prices.ise_fee, free_seconds: i64::from(prices.ise_free_seconds), max_minutes: i64::from(prices.ise_max_minutes) })
}

impl Terms {
    /// What a stay from `entered` to `exited` costs.
    pub fn price(&self, mode: IseMode, entered: DateTime<Utc>, exited: DateTime<Utc>) -> MilliDac {
        if mode == IseMode::Free || (exited - entered).num_seconds() <= self.free_seconds { MilliDac::ZERO } else { self.fee }
    }

    /// When a stay entered at `entered` ends by itself.
    pub fn limit(&self, mode: IseMode, entered: DateTime<Utc>) -> DateTime<Utc> {
        match mode {
            IseMode::Free => entered + Duration::seconds(self.free_seconds),
            _ => entered + Duration::minutes(self.max_minutes),
        }
    }
}

/// POST /v1/ise/enter: 409 `SESSION_EXISTS` while a stay is open.
pub async fn enter(services: &Services, agent: &AgentRecord, mode: Option<IseMode>) -> AppResult<(IseRecord, Terms)> {
    let terms = terms(services)?;
    let session_id = Uuid::new_v4();
    if !services.store.enter_ise(session_id, agent.agent_id, mode.unwrap_or(IseMode::Free), services.clock.now()).await? {
        return Err(AppError::Conflict {
            code: "SESSION_EXISTS",
            message: "this agent is in an ISE session already; exit it first".into(),
        });
    }
    let open = services.store.open_ise(agent.agent_id).await?;
    let record = open.filter(|r| r.session_id == session_id).ok_or_else(|| AppError::Internal(anyhow::anyhow!("ISE stay vanished")))?;
    Ok((record, terms))
}

/// GET /v1/ise/status: the open stay, if there is one.
pub async fn status(services: &Services, agent: &AgentRecord) -> AppResult<(Option<IseRecord>, Terms)> {
    Ok((services.store.open_ise(agent.agent_id).await?, terms(services)?))
}

/// Closes the stay for the pipeline's funding.
struct CloseStay<'a> {
    services: &'a Services,
    stay: &'a IseRecord,
    exited_at: DateTime<Utc>,
    charged: MilliDac,
}

#[async_trait]
impl Commit for CloseStay<'_> {
    type Output = (IseRecord, Option<(String, String)>);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let (funding, settlement) = match funding {
            Funding::Trial => (IseFunding::Trial, None),
            Funding::Settled { payment_id, reference, payer } => (IseFunding::External { payment_id }, Some((reference, payer))),
            Funding::External { .. } => return Err(AppError::Internal(anyhow::anyhow!("an ISE stay settles inline"))),
        };
        match close(self.services, self.stay, self.exited_at, self.charged, funding, "agent").await? {
            IseClosed::Closed(record) => Ok(Committed::Done((record, settlement))),
            IseClosed::TrialShort { balance, expired } => Ok(Committed::TrialShort { balance, expired }),
            IseClosed::EarnedShort { balance } => Ok(Committed::EarnedShort { balance }),
            IseClosed::NotOpen => Err(no_session()),
        }
    }
}

fn no_session() -> AppError {
    AppError::not_found("NO_ACTIVE_SESSION", "this agent is not in an ISE session")
}

async fn close(
    services: &Services,
    stay: &IseRecord,
    exited_at: DateTime<Utc>,
    charged: MilliDac,
    funding: IseFunding,
    closed_by: &'static str,
) -> AppResult<IseClosed> {
    let close = IseClose {
        session_id: stay.session_id,
        agent_id: stay.agent_id,
        exited_at,
        charged,
        funding,
        closed_by,
        now: services.clock.now(),
        priced_by: services.priced_by(),
    };
    Ok(services.store.close_ise(&close).await?)
}

/// POST /v1/ise/exit: the stay and, when it was paid over x402, the settlement.
pub async fn exit(services: &Services, agent: &AgentRecord, offered: Offered) -> AppResult<(IseRecord, Option<(String, String)>)> {
    let stay = services.store.open_ise(agent.agent_id).await?.ok_or_else(no_session)?;
    let terms = terms(services)?;
    let now = services.clock.now();
    // A stay past its limit ends at its limit (the job may not have closed it yet).
    let exited_at = now.min(terms.limit(stay.mode, stay.entered_at));
    let charged = terms.price(stay.mode, stay.entered_at, exited_at);
    if charged == MilliDac::ZERO {
        return match close(services, &stay, exited_at, charged, IseFunding::Nothing { unpaid: false }, "agent").await? {
            IseClosed::Closed(record) => Ok((record, None)),
            _ => Err(no_session()),
        };
    }
    if stay.mode == IseMode::EarnedOnly {
        let threshold = crate::earned::terms(services)?.threshold;
        return match close(services, &stay, exited_at, charged, IseFunding::Earned { threshold }, "agent").await? {
            IseClosed::Closed(record) => Ok((record, None)),
            IseClosed::EarnedShort { balance } => Err(AppError::invalid(
                "INSUFFICIENT_DAC",
                format!(
                    "this stay costs {charged} DAC from Earned DAC, which holds {balance} unexpired (it pays from {threshold}); the session stays open"
                ),
            )),
            _ => Err(no_session()),
        };
    }
    let order = Order {
        agent_id: agent.agent_id,
        route: EXIT,
        path: None,
        total: charged,
        description: format!("ISE stay of {} s ({charged} DAC)", (exited_at - stay.entered_at).num_seconds()),
        trial: TrialUse::Whole,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::IseSession, id: stay.session_id }),
        pending: None,
    };
    charge::charge(services, order, &CloseStay { services, stay: &stay, exited_at, charged }).await
}

/// The job: closes the stays at their limit (free ones at the free seconds,
/// the others at the maximum, charged from Trial or Earned if they can pay,
/// else unpaid); returns how many.
pub async fn close_due(services: &Services) -> anyhow::Result<usize> {
    let terms = terms(services).map_err(|e| anyhow::anyhow!("{e}"))?;
    let now = services.clock.now();
    let due = services.store.due_ise(now - Duration::seconds(terms.free_seconds), now - Duration::minutes(terms.max_minutes), 100).await?;
    let mut closed = 0;
    for stay in due {
        let exited_at = terms.limit(stay.mode, stay.entered_at);
        let charged = terms.price(stay.mode, stay.entered_at, exited_at);
        let funding = match stay.mode {
            IseMode::Free => IseFunding::Nothing { unpaid: false },
            IseMode::External => IseFunding::Trial,
            IseMode::EarnedOnly => {
                IseFunding::Earned { threshold: crate::earned::terms(services).map_err(|e| anyhow::anyhow!("{e}"))?.threshold }
            }
        };
        let outcome = match close(services, &stay, exited_at, charged, funding, "service").await.map_err(|e| anyhow::anyhow!("{e}"))? {
            IseClosed::TrialShort { .. } | IseClosed::EarnedShort { .. } => {
                close(services, &stay, exited_at, MilliDac::ZERO, IseFunding::Nothing { unpaid: true }, "service")
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?
            }
            other => other,
        };
        if matches!(outcome, IseClosed::Closed(_)) {
            closed += 1;
        }
    }
    Ok(closed)
}
