//! ISE, the idle state: enter, status, exit, and the job that closes stays
//! at their limit. A stay keeps entry, exit, duration and what it cost,
//! nothing else; it is no declaration and no log leaf.
//!
//! The price of a stay (the loaded generation's, decision 0062): `ise_fee`,
//! flat, whatever its length, as the interface prices every ISE exit at the
//! base fee. `free` stays are never charged and end at `ise_free_seconds`;
//! `earned_only` ones are paid from Earned DAC
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
use anchor_domain::records::{AgentRecord, IseRecord};
use anchor_ports::{IseClose, IseClosed, IseFunding, IseUnpaid};

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
    /// What a stay costs: nothing in the free mode, else the flat fee.
    pub fn price(&self, mode: IseMode) -> MilliDac {
        if mode == IseMode::Free { MilliDac::ZERO } else { self.fee }
    }

    /// When a stay entered at `entered` ends by itself.
    pub fn limit(&self, mode: IseMode, entered: DateTime<Utc>) -> DateTime<Utc> {
        match mode {
            IseMode::Free => entered + Duration::seconds(self.free_seconds),
            _ => entered + Duration::minutes(self.max_minutes),
        }
    }
}

/// An open stay as its agent sees it: the record, the terms in force, when
/// it ends by itself, how long it has lasted and what exiting now costs.
#[derive(Clone, Debug)]
pub struct Stay {
    pub record: IseRecord,
    pub terms: Terms,
    pub ends_at: DateTime<Utc>,
    pub elapsed_seconds: i64,
    pub if_exited_now: MilliDac,
}

impl Stay {
    fn of(record: IseRecord, terms: Terms, now: DateTime<Utc>) -> Stay {
        Stay {
            ends_at: terms.limit(record.mode, record.entered_at),
            elapsed_seconds: (now - record.entered_at).num_seconds().max(0),
            if_exited_now: terms.price(record.mode),
            record,
            terms,
        }
    }
}

/// POST /v1/ise/enter: 409 `SESSION_EXISTS` while a stay is open.
pub async fn enter(services: &Services, agent: &AgentRecord, mode: Option<IseMode>) -> AppResult<Stay> {
    let terms = terms(services)?;
    // Microseconds, as both engines keep them: the answer says what a later read says.
    let now = chrono::SubsecRound::trunc_subsecs(services.clock.now(), 6);
    let (session_id, mode) = (Uuid::new_v4(), mode.unwrap_or(IseMode::Free));
    if !services.store.enter_ise(session_id, agent.agent_id, mode, now).await? {
        return Err(AppError::Conflict {
            code: "SESSION_EXISTS",
            message: "this agent is in an ISE session already; exit it first".into(),
        });
    }
    // The stay as it was entered, not read back: an exit sent at the same
    // moment may have closed it already (a free stay closes at once).
    let record = IseRecord {
        session_id,
        agent_id: agent.agent_id,
        mode,
        entered_at: now,
        exited_at: None,
        charged: MilliDac::ZERO,
        source: None,
        payment_id: None,
        closed_by: None,
        unpaid: false,
    };
    Ok(Stay::of(record, terms, now))
}

/// GET /v1/ise/status: the open stay, if there is one.
pub async fn status(services: &Services, agent: &AgentRecord) -> AppResult<Option<Stay>> {
    let terms = terms(services)?;
    let open = services.store.open_ise(agent.agent_id).await?;
    Ok(open.map(|record| Stay::of(record, terms, services.clock.now())))
}

/// Closes the stay for the pipeline's funding.
struct CloseStay<'a> {
    services: &'a Services,
    stay: &'a IseRecord,
    exited_at: DateTime<Utc>,
    charged: MilliDac,
    /// `agent` (its exit) or `service` (the job, at the stay's limit).
    closed_by: &'static str,
}

impl CloseStay<'_> {
    /// The order that pays the stay: Earned DAC whole for an `earned_only`
    /// stay; else Trial whole, then x402 where someone can pay (`offered`).
    fn order(&self, offered: Offered) -> Order {
        let earned_only = self.stay.mode == IseMode::EarnedOnly;
        Order {
            agent_id: self.stay.agent_id,
            route: EXIT,
            path: None,
            total: self.charged,
            description: format!("ISE stay of {} s ({} DAC)", (self.exited_at - self.stay.entered_at).num_seconds(), self.charged),
            trial: if earned_only { TrialUse::None } else { TrialUse::Whole },
            earned: if earned_only { self.charged } else { MilliDac::ZERO },
            offered,
            settle: Settle::Inline(Subject { domain: SubjectDomain::IseSession, id: self.stay.session_id }),
            pending: None,
        }
    }
}

#[async_trait]
impl Commit for CloseStay<'_> {
    type Output = (IseRecord, Option<crate::charge::Settlement>);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let (funding, settlement) = match funding {
            Funding::Trial => (IseFunding::Trial, None),
            Funding::Earned(part) => (IseFunding::Earned { threshold: part.threshold }, None),
            Funding::Settled { payment_id, settlement } => (IseFunding::External { payment_id }, Some(settlement)),
            Funding::External { .. } => return Err(AppError::Internal(anyhow::anyhow!("an ISE stay settles inline"))),
        };
        let close = IseClose {
            session_id: self.stay.session_id,
            agent_id: self.stay.agent_id,
            exited_at: self.exited_at,
            charged: self.charged,
            funding,
            closed_by: self.closed_by,
            now: self.services.clock.now(),
            priced_by: self.services.priced_by(),
        };
        match self.services.store.close_ise(&close).await? {
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

/// Closes a stay charging nothing: free, or (the job) unpaid.
async fn close_unpaid(
    services: &Services,
    stay: &IseRecord,
    exited_at: DateTime<Utc>,
    unpaid: bool,
    closed_by: &'static str,
) -> AppResult<IseClosed> {
    let stay = IseUnpaid {
        session_id: stay.session_id,
        agent_id: stay.agent_id,
        exited_at,
        unpaid,
        closed_by,
        now: services.clock.now(),
        priced_by: services.priced_by(),
    };
    Ok(services.store.close_ise_unpaid(&stay).await?)
}

/// POST /v1/ise/exit: the stay and, when it was paid over x402, the settlement.
pub async fn exit(services: &Services, agent: &AgentRecord, offered: Offered) -> AppResult<(IseRecord, Option<crate::charge::Settlement>)> {
    let stay = services.store.open_ise(agent.agent_id).await?.ok_or_else(no_session)?;
    let terms = terms(services)?;
    let now = services.clock.now();
    // A stay past its limit ends at its limit (the job may not have closed it yet).
    let exited_at = now.min(terms.limit(stay.mode, stay.entered_at));
    let charged = terms.price(stay.mode);
    if charged == MilliDac::ZERO {
        return match close_unpaid(services, &stay, exited_at, false, "agent").await? {
            IseClosed::Closed(record) => Ok((record, None)),
            _ => Err(no_session()),
        };
    }
    let stay = CloseStay { services, stay: &stay, exited_at, charged, closed_by: "agent" };
    charge::charge(services, stay.order(offered), &stay).await
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
        let charged = terms.price(stay.mode);
        let closing = CloseStay { services, stay: &stay, exited_at, charged, closed_by: "service" };
        let paid = if charged == MilliDac::ZERO {
            close_unpaid(services, &stay, exited_at, false, "service").await.map(Some)
        } else {
            charge::charge(services, closing.order(Offered::Unavailable), &closing).await.map(|(record, _)| Some(IseClosed::Closed(record)))
        };
        let outcome = match paid {
            Ok(outcome) => outcome,
            // Neither balance can pay, and nobody is there to pay otherwise: closed unpaid, nothing moves.
            Err(refused) if matches!(refused, AppError::PaymentRequired(_)) || refused.code() == "INSUFFICIENT_DAC" => {
                Some(close_unpaid(services, &stay, exited_at, true, "service").await.map_err(|e| anyhow::anyhow!("{e}"))?)
            }
            // The agent closed it meanwhile.
            Err(gone) if gone.code() == "NO_ACTIVE_SESSION" => None,
            Err(other) => return Err(anyhow::anyhow!("{other}")),
        };
        if matches!(outcome, Some(IseClosed::Closed(_))) {
            closed += 1;
        }
    }
    Ok(closed)
}
