//! Bindings for `anchor:pricing@1.1.0`. Its world uses the 1.0.0 `types`
//! interface, so those generated types are shared with [`super::v1_0_0`] and
//! so are their conversions; only the `services` export is new.

use anchor_domain::MilliDac;
use anchor_domain::pricing::{ObservationPrice, ObservationTier, ServicePrices};

pub mod bindings {
    wasmtime::component::bindgen!({
        world: "anchor:pricing/generation@1.1.0",
        path: ["../../wit/pricing@1.0.0", "../../wit/pricing@1.1.0"],
        with: {
            "anchor:pricing/types@1.0.0": super::super::v1_0_0::bindings::anchor::pricing::types,
        },
    });
}

use bindings::anchor::pricing1_1_0::services as wit;

fn milli(value: u64) -> MilliDac {
    MilliDac(i64::try_from(value).unwrap_or(i64::MAX))
}

pub fn services(s: wit::ServicePrices) -> ServicePrices {
    ServicePrices {
        observations: s
            .observations
            .into_iter()
            .map(|o| ObservationPrice {
                tier: match o.tier {
                    wit::ObservationTier::Environment => ObservationTier::Environment,
                    wit::ObservationTier::Pattern => ObservationTier::Pattern,
                    wit::ObservationTier::PatternCompare => ObservationTier::PatternCompare,
                    wit::ObservationTier::AgentOther => ObservationTier::AgentOther,
                    wit::ObservationTier::AgentSelf => ObservationTier::AgentSelf,
                    wit::ObservationTier::AnomalyCompare => ObservationTier::AnomalyCompare,
                    wit::ObservationTier::EvidenceReport => ObservationTier::EvidenceReport,
                    wit::ObservationTier::EnvironmentAnomaly => ObservationTier::EnvironmentAnomaly,
                },
                resolution: o.resolution,
                base: milli(o.base_milli),
                surcharge: milli(o.surcharge_milli),
            })
            .collect(),
        ise_fee: milli(s.ise_fee_milli),
        ise_free_seconds: s.ise_free_seconds,
        ise_max_minutes: s.ise_max_minutes,
        sdac_base_fee: milli(s.sdac_base_fee_milli),
        sdac_ratio_permille: s.sdac_ratio_permille,
        asa_period: milli(s.asa_period_milli),
        asa_period_days: s.asa_period_days,
        asa_grace_days: s.asa_grace_days,
        asa_max_periods: s.asa_max_periods,
        retention_monthly: milli(s.retention_monthly_milli),
        retention_grace_days: s.retention_grace_days,
        earned_threshold: milli(s.earned_threshold_milli),
        earned_expiry_days: s.earned_expiry_days,
        tsl_base_fee: milli(s.tsl_base_fee_milli),
    }
}
