//! What a declaration costs. The domain knows a [`Pricing`] trait; the plugin
//! host implements it with a WebAssembly component.

use crate::MilliDac;
use crate::declarations::ee::{ContentScope, Delegation, Disclosure, Integrity, Responsibility, Retention, Scope};

/// One axis's contribution to a quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisCharge {
    pub axis: String,
    pub value: String,
    pub add: MilliDac,
}

/// A priced scope, as the generation computed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    pub base_fee: MilliDac,
    pub charges: Vec<AxisCharge>,
    pub subtotal: MilliDac,
    /// Thousandths: 1500 is 1.5.
    pub multiplier_permille: u32,
    pub total: MilliDac,
    /// Due every month on top of the total (indefinite retention).
    pub monthly: MilliDac,
}

impl Quote {
    /// Everything above the base fee: `total - base_fee`.
    pub fn premium(&self) -> MilliDac {
        self.total - self.base_fee
    }
}

/// A named scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: String,
    pub label: String,
    pub enabled: bool,
    pub retention: Retention,
    pub integrity: Integrity,
    pub disclosure: Disclosure,
    pub responsibility: Responsibility,
}

impl Preset {
    /// The scope the preset stands for; content scope and delegation take their defaults.
    pub fn scope(&self) -> Scope {
        Scope {
            retention: self.retention,
            integrity: self.integrity,
            disclosure: self.disclosure,
            responsibility: self.responsibility,
            content_scope: ContentScope::Owner,
            delegation: Delegation::None,
        }
    }
}

/// One published axis price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisPrice {
    pub axis: String,
    pub value: String,
    pub add: MilliDac,
    pub monthly: MilliDac,
    pub available: bool,
    pub note: Option<String>,
}

/// The published policy of a generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub version: String,
    pub effective_from: String,
    pub base_fee: MilliDac,
    pub axes: Vec<AxisPrice>,
    pub multiplier_conditions: Vec<(String, String)>,
    pub multiplier_min_matches: u32,
    pub multiplier_permille: u32,
}

crate::declarations::wire_enum!(
    /// Which kind of ARA observation a price is for.
    ObservationTier {
        Environment = "environment",
        Pattern = "pattern",
        PatternCompare = "pattern_compare",
        AgentOther = "agent_other",
        AgentSelf = "agent_self",
        AnomalyCompare = "anomaly_compare",
        EvidenceReport = "evidence_report",
        EnvironmentAnomaly = "environment_anomaly",
    }
);

/// The price of one observation tier at one resolution level (0: no levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObservationPrice {
    pub tier: ObservationTier,
    pub resolution: u8,
    /// Paid externally, never by Trial.
    pub base: MilliDac,
    /// The resolution surcharge, which Earned DAC may pay where the tier allows it.
    pub surcharge: MilliDac,
}

/// Everything a generation prices outside a declaration's EE
/// (`anchor:pricing@1.1.0` and later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePrices {
    pub observations: Vec<ObservationPrice>,
    pub ise_fee: MilliDac,
    pub ise_free_seconds: u32,
    pub ise_max_minutes: u32,
    pub sdac_base_fee: MilliDac,
    pub sdac_ratio_permille: u32,
    pub asa_period: MilliDac,
    pub asa_period_days: u32,
    pub asa_grace_days: u32,
    pub asa_max_periods: u32,
    pub retention_monthly: MilliDac,
    pub retention_grace_days: u32,
    pub earned_threshold: MilliDac,
    pub earned_expiry_days: u32,
    pub tsl_base_fee: MilliDac,
}

impl ServicePrices {
    /// The price of `tier` at `resolution`, if the generation offers it.
    pub fn observation(&self, tier: ObservationTier, resolution: u8) -> Option<ObservationPrice> {
        self.observations.iter().copied().find(|p| p.tier == tier && p.resolution == resolution)
    }

    /// The price of `tier` at its lowest resolution (the only one where the tier has no levels).
    pub fn lowest(&self, tier: ObservationTier) -> Option<ObservationPrice> {
        self.observations.iter().copied().filter(|p| p.tier == tier).min_by_key(|p| p.resolution)
    }
}

/// Which generation priced something: its version and the sha256 of its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub version: String,
    pub sha256: String,
    /// The WIT package the component implements, e.g. `anchor:pricing@1.1.0`.
    pub interface: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    /// The generation answered, and refused the scope.
    #[error("pricing generation {version} refused the scope: {reason}")]
    Refused { version: String, reason: String },
    /// The generation failed: a trap, a CPU or memory bound, or a host fault.
    #[error("pricing generation {version} failed: {reason}")]
    Failed { version: String, reason: String },
}

/// A pricing generation, loaded and ready.
pub trait Pricing: Send + Sync + 'static {
    fn generation(&self) -> &Generation;
    fn quote(&self, scope: Scope) -> Result<Quote, PricingError>;
    fn presets(&self) -> Result<Vec<Preset>, PricingError>;
    fn policy(&self) -> Result<Policy, PricingError>;
    /// The prices of the service's other paid work; `None` for a generation
    /// built against `anchor:pricing@1.0.0`, which has no such export (the
    /// routes it would price answer that this generation does not price them).
    fn services(&self) -> Result<Option<ServicePrices>, PricingError>;
}
