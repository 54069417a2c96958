//! An example pricing generation, `v1.4.0-example`, written as an operator
//! would write the next one (PRICING.md in this folder walks through it):
//! the v1.3.0 table with a lower base fee and the enhanced and certifiable
//! integrity levels priced, and other service prices (observations, the tool
//! market's fee, the state archive). It implements `anchor:pricing@1.1.0`,
//! so it prices services as well as declarations.
//!
//! The prices are plain data ([`TABLE`], [`SERVICES`]): the host calls the
//! component, and `anchor pricing inspect` / `diff` show what it does before
//! it is published.

#![cfg_attr(target_arch = "wasm32", no_std)]

use anchor_pricing_core::{AxisPrice, ObservationPrice, ObservationTier, Services, Table, V1_3_0, V1_3_0_SERVICES};

/// The declaration prices: v1.3.0's, with these changes.
pub const TABLE: Table = Table {
    version: "v1.4.0-example",
    effective_from: "2027-01-01",
    // 8 DAC instead of 10.
    base_fee: 8_000,
    integrity: [
        AxisPrice { value: "basic", add: 0, monthly: 0, available: true, note: None },
        AxisPrice { value: "enhanced", add: 15_000, monthly: 0, available: true, note: Some("inclusion in a witnessed checkpoint") },
        AxisPrice {
            value: "certifiable",
            add: 40_000,
            monthly: 0,
            available: true,
            note: Some("a witnessed checkpoint with an RFC 3161 timestamp"),
        },
    ],
    ..V1_3_0
};

const fn observation(tier: ObservationTier, resolution: u8, base: u64, surcharge: u64) -> ObservationPrice {
    ObservationPrice { tier, resolution, base, surcharge }
}

/// The service prices: v1.3.0's, with dearer environment statistics, a
/// cheaper tool-market fee and a cheaper archive period.
pub const SERVICES: Services = Services {
    observations: &[
        observation(ObservationTier::Environment, 0, 2_000, 0),
        observation(ObservationTier::Pattern, 0, 2_000, 0),
        observation(ObservationTier::PatternCompare, 1, 1_000, 0),
        observation(ObservationTier::PatternCompare, 2, 2_000, 0),
        observation(ObservationTier::AgentOther, 1, 3_000, 0),
        observation(ObservationTier::AgentOther, 2, 3_000, 2_000),
        observation(ObservationTier::AgentOther, 3, 3_000, 4_000),
        observation(ObservationTier::AgentSelf, 1, 0, 0),
        observation(ObservationTier::AgentSelf, 2, 0, 0),
        observation(ObservationTier::AgentSelf, 3, 0, 0),
        observation(ObservationTier::AnomalyCompare, 0, 5_000, 0),
        observation(ObservationTier::EvidenceReport, 0, 10_000, 0),
        observation(ObservationTier::EnvironmentAnomaly, 0, 2_000, 0),
    ],
    tsl_base_fee: 5_000,
    asa_period: 80_000,
    ..V1_3_0_SERVICES
};

/// The component: the tables above behind `anchor:pricing@1.1.0`'s exports
/// (built for `wasm32-wasip2` only; the tables are tested natively).
#[cfg(target_arch = "wasm32")]
mod component {
    use anchor_pricing_core::guest::{Generation, ServiceGeneration};
    use anchor_pricing_core::{Services, Table, export_service_generation};

    struct Example;

    impl Generation for Example {
        const TABLE: Table = super::TABLE;
    }

    impl ServiceGeneration for Example {
        const SERVICES: Services = super::SERVICES;
    }

    export_service_generation!(Example);
    anchor_pricing_core::bare_runtime!();
}

#[cfg(test)]
mod tests {
    use anchor_pricing_core::{ContentScope, Delegation, Disclosure, Integrity, Responsibility, Retention, Scope};

    use super::*;

    fn scope(integrity: Integrity) -> Scope {
        Scope {
            retention: Retention::Short,
            integrity,
            disclosure: Disclosure::Internal,
            responsibility: Responsibility::Minimal,
            content_scope: ContentScope::Owner,
            delegation: Delegation::None,
        }
    }

    /// What this generation means to change, checked natively before it is
    /// built: the base fee, priced integrity, and nothing else moved.
    #[test]
    fn the_changes_are_the_ones_meant() {
        assert_eq!(TABLE.quote(&scope(Integrity::Basic)).unwrap().total, 8_000);
        assert_eq!(TABLE.quote(&scope(Integrity::Enhanced)).unwrap().total, 23_000);
        assert_eq!(TABLE.quote(&scope(Integrity::Certifiable)).unwrap().total, 48_000);
        assert_eq!(V1_3_0.quote(&scope(Integrity::Certifiable)).unwrap().total, 10_000, "v1.3.0 does not price it");
        assert_eq!((SERVICES.tsl_base_fee, SERVICES.asa_period, SERVICES.ise_fee), (5_000, 80_000, V1_3_0_SERVICES.ise_fee));
    }
}
