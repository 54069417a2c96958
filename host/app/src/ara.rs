//! ARA observation: statistics of recorded history, paid per call over x402
//! and settled before the answer (Trial never pays an observation).
//!
//! Every check that can refuse runs before the payment is asked for: the
//! statistics are computed first, and too few agents to de-identify them is a
//! 404 `DATA_UNAVAILABLE` that costs nothing.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::pricing::ObservationTier;
use anchor_store::{EnvironmentStats, NewObservation};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const ENVIRONMENT: Route = Route { method: "GET", path: "/v1/ara/environment" };

/// Cross-agent statistics are shown only when at least this many distinct
/// agents contribute to them.
pub const MIN_AGENTS: i64 = 10;

/// The window environment statistics cover, ending now.
pub const ENVIRONMENT_DAYS: i64 = 30;

/// An observation's result and what it cost.
#[derive(Clone, Debug)]
pub struct Observed<T> {
    pub result: T,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub charged: MilliDac,
    /// The settlement reference and the payer, when it was paid externally.
    pub settlement: Option<(String, String)>,
}

/// Records the observation once its payment has settled.
struct RecordObservation<'a> {
    services: &'a Services,
    observation: NewObservation,
}

#[async_trait]
impl Commit for RecordObservation<'_> {
    type Output = (String, String);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<(String, String)>> {
        let Funding::Settled { payment_id, reference, payer } = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("an observation is paid over x402 and settled inline only")));
        };
        let observation = NewObservation { payment_id: Some(payment_id), ..self.observation.clone() };
        self.services.store.record_observation(&observation).await?;
        Ok(Committed::Done((reference, payer)))
    }
}

/// GET /v1/ara/environment: every agent's anchored declarations of the last
/// 30 days, counted by action type and retention, de-identified.
pub async fn environment(services: &Services, agent_id: Uuid, offered: Offered) -> AppResult<Observed<EnvironmentStats>> {
    let to = services.clock.now();
    let from = to - Duration::days(ENVIRONMENT_DAYS);
    let stats = services.store.environment(from, to).await?;
    if stats.agents < MIN_AGENTS {
        return Err(AppError::not_found(
            "DATA_UNAVAILABLE",
            format!(
                "fewer than {MIN_AGENTS} agents anchored declarations in the last {ENVIRONMENT_DAYS} days, too few to show statistics \
                 that identify none of them; nothing was charged"
            ),
        ));
    }
    let price = services.pricing.services()?.and_then(|s| s.lowest(ObservationTier::Environment)).ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price observations".into(),
    })?;
    let observation = NewObservation {
        observation_id: Uuid::new_v4(),
        observer_agent_id: agent_id,
        target_agent_id: None,
        kind: ObservationTier::Environment.as_str(),
        resolution_level: i32::from(price.resolution),
        base: price.base,
        premium: MilliDac::ZERO,
        premium_source: None,
        payment_id: None,
        observed_at: to,
    };
    let observed = |charged, settlement| Observed { result: stats.clone(), from, to, charged, settlement };
    if price.base == MilliDac::ZERO {
        services.store.record_observation(&observation).await?;
        return Ok(observed(MilliDac::ZERO, None));
    }
    let order = Order {
        agent_id,
        route: ENVIRONMENT,
        total: price.base,
        description: format!("Environment observation ({} DAC)", price.base),
        trial: TrialUse::None,
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::AraObservation, id: observation.observation_id }),
    };
    let settlement = charge::charge(services, order, &RecordObservation { services, observation }).await?;
    Ok(observed(price.base, Some(settlement)))
}
