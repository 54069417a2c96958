//! ARA: observation of recorded history, at three tiers.
//!
//! - environment and pattern level (`releases`): de-identified statistics of
//!   every agent, over fixed windows, k-anonymous and differentially private
//!   (`privacy`), computed once per window and stored;
//! - agent level (`agents`): one agent's profile, timeline and EE pattern,
//!   as far as its disclosure level lets others look (free for the agent
//!   itself), and comparisons of several agents;
//! - meta-observation (`meta`): where one of the agent's decisions sits in
//!   its own pattern, and the evidence report of a decision.
//!
//! Nothing here reads declarations one by one: `fold` (a job on the lease)
//! folds each confirmed declaration once into the aggregate model, and every
//! view reads that, so an observation's cost does not grow with the number of
//! stored declarations.
//!
//! Every check that can refuse runs before payment, in this order: 400
//! (validation), 404 `DD_NOT_FOUND`/`AGENT_NOT_FOUND`, 403 (not the agent's
//! own decision; the target's disclosure cap), 404 `DATA_UNAVAILABLE`, 400
//! `INSUFFICIENT_DAC` (an Earned surcharge), then the pipeline's 403 DAB and
//! 402. Paid observations settle over x402 before the answer; Trial never pays
//! them.

pub mod agents;
pub mod fold;
pub mod for_tools;
pub mod meta;
pub mod privacy;
pub mod releases;

use async_trait::async_trait;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::payments::{PaymentSource, Subject, SubjectDomain};
use anchor_domain::pricing::ObservationTier;
use anchor_ports::NewObservation;

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const ENVIRONMENT: Route = Route { method: "GET", path: "/v1/ara/environment" };
pub const ENVIRONMENT_SUMMARY: Route = Route { method: "GET", path: "/v1/ara/environment/summary" };
pub const DENSITY: Route = Route { method: "GET", path: "/v1/ara/environment/density" };
pub const TSL: Route = Route { method: "GET", path: "/v1/ara/environment/tsl" };
pub const EE_DISTRIBUTION: Route = Route { method: "GET", path: "/v1/ara/pattern/ee-distribution" };
pub const ACTION_TYPE: Route = Route { method: "GET", path: "/v1/ara/pattern/action-type" };
pub const COMPARE: Route = Route { method: "GET", path: "/v1/ara/pattern/compare" };
pub const PROFILE: Route = Route { method: "GET", path: "/v1/ara/agent/{agent_id}/profile" };
pub const TIMELINE: Route = Route { method: "GET", path: "/v1/ara/agent/{agent_id}/timeline" };
pub const EE_PATTERN: Route = Route { method: "GET", path: "/v1/ara/agent/{agent_id}/ee-pattern" };
pub const ANOMALY_COMPARE: Route = Route { method: "GET", path: "/v1/ara/anomaly-compare" };
pub const EVIDENCE_REPORT: Route = Route { method: "GET", path: "/v1/ara/evidence-report" };
pub const ENVIRONMENT_ANOMALY: Route = Route { method: "GET", path: "/v1/ara/environment-anomaly" };
pub const QUERY: Route = Route { method: "POST", path: "/v1/ara/query" };

/// Who pays an agent-level observation's resolution surcharge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PremiumSource {
    #[default]
    External,
    Earned,
}

/// An observation's result and what it cost.
#[derive(Clone, Debug)]
pub struct Observed<T> {
    pub result: T,
    pub charged: MilliDac,
    /// The settlement reference and the payer, when it was paid externally.
    pub settlement: Option<crate::charge::Settlement>,
}

impl<T> Observed<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Observed<U> {
        Observed { result: f(self.result), charged: self.charged, settlement: self.settlement }
    }
}

/// What an observation costs and for what.
#[derive(Clone, Debug)]
pub(crate) struct Purchase {
    pub route: Route,
    /// The request's path, where the route has parameters.
    pub path: Option<String>,
    pub tier: ObservationTier,
    /// 0 where the tier has no levels.
    pub level: u8,
    pub target: Option<Uuid>,
    pub premium_source: PremiumSource,
    pub description: String,
    /// What was asked that the fields above leave out (a dimension, the
    /// agents compared): with them, it tells one request from another, so
    /// that a payment sent again resumes only for the request it paid.
    pub asked: String,
}

impl Purchase {
    /// A tier without levels or surcharge, paid at its route's own path.
    fn flat(route: Route, tier: ObservationTier, target: Option<Uuid>, description: String) -> Purchase {
        Purchase { route, path: None, tier, level: 0, target, premium_source: PremiumSource::External, description, asked: String::new() }
    }

    /// A digest of the request this purchase answers, at `total`.
    fn request(&self, total: MilliDac) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let target = self.target.map(|t| t.to_string()).unwrap_or_default();
        let parts = [
            self.route.method,
            self.route.path,
            self.path.as_deref().unwrap_or(""),
            self.tier.as_str(),
            &self.level.to_string(),
            &target,
            if self.premium_source == PremiumSource::Earned { "earned" } else { "external" },
            &self.description,
            &self.asked,
            &total.0.to_string(),
        ];
        // Each part after its length, so that no two requests write the same bytes.
        parts
            .iter()
            .fold(Sha256::new(), |hash, part| hash.chain_update((part.len() as u64).to_be_bytes()).chain_update(part))
            .finalize()
            .into()
    }
}

/// The price of a tier at a level, from the loaded pricing generation.
pub(crate) fn price(services: &Services, tier: ObservationTier, level: u8) -> AppResult<anchor_domain::pricing::ObservationPrice> {
    let unavailable = || AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price this observation".into(),
    };
    let prices = services.pricing.services()?.ok_or_else(unavailable)?;
    prices.observation(tier, level).ok_or_else(unavailable)
}

/// Records the observation once its payment has settled.
struct RecordObservation<'a> {
    services: &'a Services,
    observation: NewObservation,
}

#[async_trait]
impl Commit for RecordObservation<'_> {
    type Output = crate::charge::Settlement;

    async fn commit(&self, funding: Funding) -> AppResult<Committed<crate::charge::Settlement>> {
        let Funding::Settled { payment_id, settlement } = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("an observation is paid over x402 and settled inline only")));
        };
        let observation = NewObservation { payment_id: Some(payment_id), ..self.observation.clone() };
        self.services.store.record_observation(&observation).await?;
        Ok(Committed::Done(settlement))
    }

    /// An observation only reads: asked again with the payment that paid
    /// for it, it is answered again, with that payment's settlement.
    fn resumed(&self, settlement: crate::charge::Settlement) -> Option<crate::charge::Settlement> {
        Some(settlement)
    }
}

/// Takes payment for an observation whose checks have all passed, and logs
/// it. Free observations (the agent's own) are logged at no cost. With
/// `premium_source` earned, Earned DAC pays the surcharge (debited with the
/// reservation, refunded if the payment ends unsettled) and x402 the base.
pub(crate) async fn pay<T>(services: &Services, agent_id: Uuid, purchase: Purchase, offered: Offered, result: T) -> AppResult<Observed<T>> {
    let price = price(services, purchase.tier, purchase.level)?;
    // Earned DAC may pay the surcharge; the base is always paid over x402.
    let earned = match purchase.premium_source {
        PremiumSource::Earned => price.surcharge,
        PremiumSource::External => MilliDac::ZERO,
    };
    let total = price.base + price.surcharge;
    let observation = NewObservation {
        observation_id: Uuid::new_v4(),
        observer_agent_id: agent_id,
        target_agent_id: purchase.target,
        kind: purchase.tier.as_str(),
        resolution_level: i32::from(purchase.level),
        base: price.base,
        premium: price.surcharge,
        premium_source: (price.surcharge > MilliDac::ZERO).then_some(if earned > MilliDac::ZERO {
            PaymentSource::Earned
        } else {
            PaymentSource::External
        }),
        payment_id: None,
        observed_at: services.clock.now(),
        priced_by: services.priced_by(),
    };
    if total == MilliDac::ZERO {
        services.store.record_observation(&observation).await?;
        return Ok(Observed { result, charged: MilliDac::ZERO, settlement: None });
    }
    let request = purchase.request(total);
    let order = Order {
        agent_id,
        route: purchase.route,
        path: purchase.path,
        total,
        description: format!("{} ({total} DAC)", purchase.description),
        trial: TrialUse::None,
        earned,
        offered,
        settle: Settle::InlineRead { subject: Subject { domain: SubjectDomain::AraObservation, id: observation.observation_id }, request },
        pending: None,
    };
    let settlement = charge::charge(services, order, &RecordObservation { services, observation }).await?;
    Ok(Observed { result, charged: total, settlement: Some(settlement) })
}

/// 404 `DATA_UNAVAILABLE`, before any payment is asked for.
pub(crate) fn unavailable(why: impl std::fmt::Display) -> AppError {
    AppError::not_found("DATA_UNAVAILABLE", format!("{why}; nothing was charged"))
}
