//! Every paid route of the interface, as it behaves or will behave: what
//! prices it, whether Trial pays it, what Earned DAC may pay. Discovery
//! documents (`/.well-known/x402.json`, `/v1/pricing/current`,
//! `/v1/trial/status`, the agent card) are built from this list, the prices of
//! the loaded pricing component and the route table, so none of them keeps a
//! list of its own.

use anchor_domain::MilliDac;
use anchor_domain::pricing::{ObservationTier, Policy, ServicePrices};

/// Where a paid route's price comes from in the pricing component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceSource {
    /// The EE quote of the request (base fee plus axis adds, times the multiplier).
    DeclarationQuote,
    /// An ARA observation price (its lowest level when the tier has levels).
    Observation(ObservationTier),
    /// The TSL purchase fee (plus the tool's own price).
    TslPurchase,
    /// One ASA period (times the periods bought).
    AsaPeriod,
    /// The sDAC session base fee (plus its share of the simulated totals).
    SdacSession,
    /// A charged ISE stay.
    IseStay,
}

/// What Earned DAC may pay of a route's price. The charge pipeline refuses
/// an order that would take Earned DAC where this says `Never`
/// (`charge::charge`), so the discovery documents built from it
/// cannot promise what the routes do not do, nor hide what they do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarnedUse {
    Never,
    /// Only the resolution surcharge (cross-agent observations).
    Surcharge,
    /// Only a declaration's premium (`premium_payment_source: earned`).
    Premium,
    /// The whole price of a stay entered `earned_only`.
    EarnedOnlyStay,
    /// The whole price.
    Whole,
}

impl EarnedUse {
    /// What Earned DAC pays, said for a discovery document.
    pub fn pays(self) -> Option<&'static str> {
        match self {
            EarnedUse::Never => None,
            EarnedUse::Surcharge => Some("the resolution surcharge only"),
            EarnedUse::Premium => Some("the premium only, with premium_payment_source: earned"),
            EarnedUse::EarnedOnlyStay => Some("the whole fee of a stay entered with payment_mode earned_only"),
            EarnedUse::Whole => Some("the whole price"),
        }
    }
}

/// One paid route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaidRoute {
    pub route: Route,
    pub price: PriceSource,
    /// Trial pays it (whole price or nothing).
    pub trial: bool,
    pub earned: EarnedUse,
    /// The area an operator can switch off that the route belongs to
    /// (a name of [`crate::Features::NAMES`]), if any. None of the paid
    /// routes of 1.3.42 is in one: the switchable areas' routes (indefinite
    /// retention, paid from Earned DAC; owners cancelling ASA; agent-type
    /// owners) take no x402 payment. A switchable route added here names its area.
    pub feature: Option<&'static str>,
}

const fn paid(method: &'static str, path: &'static str, price: PriceSource, trial: bool, earned: EarnedUse) -> PaidRoute {
    PaidRoute { route: Route { method, path }, price, trial, earned, feature: None }
}

use EarnedUse::{EarnedOnlyStay, Never, Premium, Surcharge, Whole};
use ObservationTier as Tier;
use PriceSource::*;

/// A route, as payments and usage records name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// The paid routes of interface 1.3.42, in the reference's order.
pub const PAID_ROUTES: &[PaidRoute] = &[
    paid("POST", "/v1/dd/create", DeclarationQuote, true, Premium),
    paid("POST", "/v1/dd/bilateral/propose", DeclarationQuote, false, Never),
    paid("POST", "/v1/tsl/purchase", TslPurchase, false, Never),
    paid("POST", "/v1/tsl/purchase/layer2", TslPurchase, false, Never),
    paid("POST", "/v1/asa/subscribe", AsaPeriod, false, Whole),
    paid("POST", "/v1/asa/extend", AsaPeriod, false, Whole),
    paid("POST", "/v1/sdac/session/end", SdacSession, true, Never),
    paid("POST", "/v1/ise/exit", IseStay, true, EarnedOnlyStay),
    paid("GET", "/v1/ara/environment", Observation(Tier::Environment), false, Never),
    paid("GET", "/v1/ara/environment/density", Observation(Tier::Environment), false, Never),
    paid("GET", "/v1/ara/environment/tsl", Observation(Tier::Environment), false, Never),
    paid("GET", "/v1/ara/pattern/ee-distribution", Observation(Tier::Pattern), false, Never),
    paid("GET", "/v1/ara/pattern/action-type", Observation(Tier::Pattern), false, Never),
    paid("GET", "/v1/ara/pattern/compare", Observation(Tier::PatternCompare), false, Never),
    paid("GET", "/v1/ara/agent/{agent_id}/profile", Observation(Tier::AgentOther), false, Surcharge),
    paid("GET", "/v1/ara/agent/{agent_id}/timeline", Observation(Tier::AgentOther), false, Surcharge),
    paid("GET", "/v1/ara/agent/{agent_id}/ee-pattern", Observation(Tier::AgentOther), false, Surcharge),
    paid("GET", "/v1/ara/anomaly-compare", Observation(Tier::AnomalyCompare), false, Never),
    paid("GET", "/v1/ara/environment-anomaly", Observation(Tier::EnvironmentAnomaly), false, Never),
    paid("GET", "/v1/ara/evidence-report", Observation(Tier::EvidenceReport), false, Never),
];

/// Routes paid over x402 that the reference's list does not name: the
/// deprecated aliases of observations, and tool runs (whose observations
/// are paid). Each settles its payment within the request, as the
/// catalog's routes but a declaration's do.
pub const UNLISTED_PAID_ROUTES: &[Route] = &[
    Route { method: "GET", path: "/v1/ara/environment/summary" },
    Route { method: "POST", path: "/v1/ara/query" },
    Route { method: "POST", path: "/v1/tsl/tool/{tool_id}/run" },
];

/// Whether a payment on the route `method` `path` settles within its request (every paid
/// route but a declaration's, which settles with its confirmation): where
/// the same payment sent again by its agent is a 409 DUPLICATE_REQUEST.
/// The charge pipeline checks every inline settlement against this (in
/// debug builds), so the OpenAPI, which documents that 409 from it, cannot
/// leave a route out.
pub fn settles_inline(method: &str, path: &str) -> bool {
    let is = |route: &Route| route.method == method && route.path == path;
    UNLISTED_PAID_ROUTES.iter().any(is) || PAID_ROUTES.iter().any(|paid| is(&paid.route) && paid.price != DeclarationQuote)
}

/// The catalog's entry of `route`, if it is a paid route.
pub fn paid_route(route: Route) -> Option<&'static PaidRoute> {
    PAID_ROUTES.iter().find(|p| p.route.method == route.method && p.route.path == route.path)
}

/// The routes Trial pays for.
pub fn trial_routes() -> impl Iterator<Item = Route> {
    PAID_ROUTES.iter().filter(|p| p.trial).map(|p| p.route)
}

impl PaidRoute {
    /// Whether the route serves with these switches (its area, if it has one, is on).
    pub fn available(&self, features: &crate::Features) -> bool {
        self.feature.is_none_or(|area| features.is_on(area) != Some(false))
    }

    /// The route's starting price in the loaded generation: the base fee of a
    /// quoted declaration, the lowest level of an observation, one ASA period.
    /// `None` when the generation does not price it (a 1.0.0 component has no
    /// service prices).
    pub fn base_price(&self, policy: &Policy, services: Option<&ServicePrices>) -> Option<MilliDac> {
        match self.price {
            DeclarationQuote => Some(policy.base_fee),
            Observation(tier) => services?.observations.iter().filter(|o| o.tier == tier).map(|o| o.base).min(),
            TslPurchase => services.map(|s| s.tsl_base_fee),
            AsaPeriod => services.map(|s| s.asa_period),
            SdacSession => services.map(|s| s.sdac_base_fee),
            IseStay => services.map(|s| s.ise_fee),
        }
    }

    /// How the price is made, for people reading a discovery document.
    pub fn priced_by(&self) -> &'static str {
        match self.price {
            DeclarationQuote => "the EE axes of each request (GET /v1/pricing/current)",
            Observation(Tier::AgentOther) => {
                "3 DAC plus a resolution surcharge when observing another agent; observing your own agent is free"
            }
            Observation(Tier::PatternCompare) => "by resolution level (GET /v1/pricing/current observations)",
            Observation(_) => "a fixed price per call (GET /v1/pricing/current observations)",
            TslPurchase => "the service fee plus the tool's price",
            AsaPeriod => "per 90-day period bought",
            SdacSession => "a base fee plus a share of the simulated totals",
            IseStay => "free for a short stay, then a flat fee",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paid_route_in_a_switched_off_area_is_not_available() {
        let features = crate::Features::without(&["retention".to_string()]).unwrap();
        let plain = PAID_ROUTES[0];
        assert!(plain.available(&features), "a route in no switchable area serves");
        let switchable = PaidRoute { feature: Some("retention"), ..plain };
        assert!(!switchable.available(&features));
        assert!(switchable.available(&crate::Features::default()));
    }

    #[test]
    fn trial_pays_exactly_the_three_routes_the_interface_names() {
        let routes: Vec<String> = trial_routes().map(|r| r.to_string()).collect();
        assert_eq!(routes, ["POST /v1/dd/create", "POST /v1/sdac/session/end", "POST /v1/ise/exit"]);
        assert_eq!(PAID_ROUTES.len(), 20);
        assert!(PAID_ROUTES.iter().filter(|p| p.earned == Whole).all(|p| p.route.path.starts_with("/v1/asa/")));
    }
}
