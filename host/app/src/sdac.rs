//! sDAC: pricing EE combinations with accountability removed. A trial is the
//! loaded generation's real quote, and nothing else: no declaration, no log
//! leaf, no payment. Ending a session costs the generation's sDAC base fee
//! plus its ratio of the simulated totals (rounded half up to a milli-DAC),
//! the base fee alone when no trial was run (decision 0062); Trial pays it first, else x402 (the
//! DAB applies), settled before the answer. Earned DAC never pays sDAC.

use async_trait::async_trait;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::pricing::Quote;
use anchor_domain::records::{AgentRecord, SdacRecord, SdacTrial};
use anchor_ports::{SdacEnded, SdacFunding};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::declarations::{EeRequest, resolve_scope};
use crate::{AppError, AppResult, Services};

pub const END: Route = Route { method: "POST", path: "/v1/sdac/session/end" };

fn no_session(session_id: Uuid) -> AppError {
    AppError::not_found("SESSION_NOT_FOUND", format!("no open sDAC session {session_id} of this agent"))
}

/// POST /v1/sdac/session/start: 409 `SESSION_EXISTS` while one is open.
pub async fn start(services: &Services, agent: &AgentRecord) -> AppResult<SdacRecord> {
    let session_id = Uuid::new_v4();
    if !services.store.start_sdac(session_id, agent.agent_id, services.clock.now()).await? {
        return Err(AppError::Conflict { code: "SESSION_EXISTS", message: "this agent has an open sDAC session; end it first".into() });
    }
    services.store.sdac_session(session_id).await?.ok_or_else(|| AppError::Internal(anyhow::anyhow!("sDAC session vanished")))
}

/// POST /v1/sdac/trial: the real quote of the combination, counted in the session.
pub async fn trial(services: &Services, agent: &AgentRecord, session_id: Uuid, ee: EeRequest) -> AppResult<(Quote, SdacRecord)> {
    if ee.preset.is_some() {
        return Err(AppError::invalid("UNKNOWN_FIELD", "ee.ee_preset is accepted on DD creation only; send the four axes"));
    }
    let scope = resolve_scope(services, &ee.into_input(crate::requests::Form::Nested)?)?;
    let quote = services.pricing.quote(scope)?;
    let counted =
        services.store.add_sdac_trial(session_id, agent.agent_id, scope, quote.total, TRIALS_PER_SESSION, services.clock.now()).await?;
    let Some(session) = counted else {
        // Not counted: the session is not this agent's open one, or it is full.
        let full = services
            .store
            .sdac_session(session_id)
            .await?
            .is_some_and(|s| s.agent_id == agent.agent_id && s.ended_at.is_none() && s.trials >= TRIALS_PER_SESSION);
        if full {
            return Err(AppError::Conflict {
                code: "SDAC_TRIAL_LIMIT_REACHED",
                message: format!("a session holds at most {TRIALS_PER_SESSION} trials; end it and start another"),
            });
        }
        return Err(no_session(session_id));
    };
    Ok((quote, session))
}

/// The most trials one session counts (each is kept, and its history is
/// answered whole).
pub const TRIALS_PER_SESSION: i32 = 1000;

/// GET /v1/sdac/session/{session_id}: the agent's own session and its trials.
pub async fn history(services: &Services, agent: &AgentRecord, session_id: Uuid) -> AppResult<(SdacRecord, Vec<SdacTrial>)> {
    let session = services
        .store
        .sdac_session(session_id)
        .await?
        .filter(|s| s.agent_id == agent.agent_id)
        .ok_or_else(|| AppError::not_found("SESSION_NOT_FOUND", format!("no sDAC session {session_id} of this agent")))?;
    let trials = services.store.sdac_trials(session_id).await?;
    Ok((session, trials))
}

/// What ending a session with these trials costs.
pub fn price(services: &Services, session: &SdacRecord) -> AppResult<MilliDac> {
    let prices = services.pricing.services()?.ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price sDAC sessions".into(),
    })?;
    let share = (i128::from(session.simulated.milli()) * i128::from(prices.sdac_ratio_permille) + 500) / 1000;
    Ok(prices.sdac_base_fee + MilliDac(share as i64))
}

struct EndSession<'a> {
    services: &'a Services,
    session: &'a SdacRecord,
    charged: MilliDac,
}

#[async_trait]
impl Commit for EndSession<'_> {
    type Output = (SdacRecord, Option<crate::charge::Settlement>);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let (funding, settlement) = match funding {
            Funding::Trial => (SdacFunding::Trial, None),
            Funding::Settled { payment_id, settlement } => (SdacFunding::External { payment_id }, Some(settlement)),
            Funding::External { .. } | Funding::Earned(_) => {
                return Err(AppError::Internal(anyhow::anyhow!("an sDAC session is paid from Trial or settled inline")));
            }
        };
        let now = self.services.clock.now();
        match self.services.store.end_sdac(self.session, self.charged, funding, &self.services.priced_by(), now).await? {
            SdacEnded::Ended(record) => Ok(Committed::Done((record, settlement))),
            SdacEnded::TrialShort { balance, expired } => Ok(Committed::TrialShort { balance, expired }),
            SdacEnded::NotOpen => Err(no_session(self.session.session_id)),
            SdacEnded::Changed => Err(changed()),
        }
    }
}

/// A trial counted while the session was being ended: it is priced again.
fn changed() -> AppError {
    AppError::Conflict {
        code: "SESSION_CHANGED",
        message: "trials were counted in this session while it was being ended; end it again to pay for them".into(),
    }
}

/// How many times an end is priced: each time after the first follows a
/// trial counted meanwhile, so only a client adding trials all along
/// (against its own end) sees the conflict.
const END_ATTEMPTS: usize = 10;

/// POST /v1/sdac/session/end: priced from the session as read, and priced
/// again when a trial is counted before the end is written (a parallel
/// trial cannot slip past the price).
pub async fn end(
    services: &Services,
    agent: &AgentRecord,
    session_id: Uuid,
    offered: Offered,
) -> AppResult<(SdacRecord, Option<crate::charge::Settlement>)> {
    let mut attempt = 1;
    loop {
        match end_as_read(services, agent, session_id, offered.clone()).await {
            Err(AppError::Conflict { code: "SESSION_CHANGED", .. }) if attempt < END_ATTEMPTS => attempt += 1,
            outcome => return outcome,
        }
    }
}

async fn end_as_read(
    services: &Services,
    agent: &AgentRecord,
    session_id: Uuid,
    offered: Offered,
) -> AppResult<(SdacRecord, Option<crate::charge::Settlement>)> {
    let session = services
        .store
        .sdac_session(session_id)
        .await?
        .filter(|s| s.agent_id == agent.agent_id && s.ended_at.is_none())
        .ok_or_else(|| no_session(session_id))?;
    let charged = price(services, &session)?;
    if charged == MilliDac::ZERO {
        return match services.store.end_sdac_free(&session, &services.priced_by(), services.clock.now()).await? {
            SdacEnded::Ended(record) => Ok((record, None)),
            SdacEnded::Changed => Err(changed()),
            _ => Err(no_session(session_id)),
        };
    }
    let order = Order {
        agent_id: agent.agent_id,
        route: END,
        path: None,
        total: charged,
        description: format!("sDAC session of {} trial(s), {} DAC simulated ({charged} DAC)", session.trials, session.simulated),
        trial: TrialUse::Whole,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::SdacSession, id: session_id }),
        pending: None,
    };
    match charge::charge(services, order, &EndSession { services, session: &session, charged }).await {
        // A challenge for a session another end closed meanwhile (one that
        // Trial paid, leaving too little for this one) would ask for a
        // payment nothing could take: the session is gone.
        Err(AppError::PaymentRequired(challenge)) => match services.store.sdac_session(session_id).await? {
            Some(now) if now.ended_at.is_none() => Err(AppError::PaymentRequired(challenge)),
            _ => Err(no_session(session_id)),
        },
        outcome => outcome,
    }
}
