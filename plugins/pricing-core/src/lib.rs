//! The pricing function every generation shares, and the table of generation v1.3.0.
//!
//! The function is plain Rust with no dependencies, so the same source is
//! compiled natively (to compare costs) and into components (feature `guest`).
//! Every amount is an integer of milli-DAC.

#![cfg_attr(not(test), no_std)]
extern crate alloc;

// Lets generated code name this crate the same way from inside and outside it.
extern crate self as anchor_pricing_core;

#[cfg(feature = "guest")]
pub mod guest;

use alloc::string::String;
use alloc::vec::Vec;

/// The priced axes, in the order the HTTP API names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub retention: Retention,
    pub integrity: Integrity,
    pub disclosure: Disclosure,
    pub responsibility: Responsibility,
    pub content_scope: ContentScope,
    pub delegation: Delegation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    Short,
    Medium,
    Long,
    ExtremeLong,
    Indefinite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Integrity {
    Basic,
    Enhanced,
    Certifiable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disclosure {
    Internal,
    Shareable,
    Exportable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Responsibility {
    Minimal,
    Standard,
    Extended,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentScope {
    Owner,
    External,
    Public,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delegation {
    None,
    Partial,
    Full,
}

/// One axis value and its price.
#[derive(Clone, Copy, Debug)]
pub struct AxisPrice {
    pub value: &'static str,
    pub add: u64,
    pub monthly: u64,
    pub available: bool,
    pub note: Option<&'static str>,
}

const fn price(value: &'static str, add: u64) -> AxisPrice {
    AxisPrice { value, add, monthly: 0, available: true, note: None }
}

/// One preset: a name and the four axes it stands for.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub label: &'static str,
    pub enabled: bool,
    pub retention: Retention,
    pub integrity: Integrity,
    pub disclosure: Disclosure,
    pub responsibility: Responsibility,
}

/// Everything that distinguishes one generation from another.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    pub version: &'static str,
    pub effective_from: &'static str,
    pub base_fee: u64,
    pub retention: [AxisPrice; 5],
    pub integrity: [AxisPrice; 3],
    pub disclosure: [AxisPrice; 3],
    pub responsibility: [AxisPrice; 3],
    pub content_scope: [AxisPrice; 3],
    pub delegation: [AxisPrice; 3],
    /// The multiplier applies when at least this many of its conditions hold.
    pub multiplier_min_matches: u32,
    pub multiplier_permille: u32,
    pub presets: [Preset; 3],
}

/// Generation v1.3.0, effective 2026-05-30.
pub const V1_3_0: Table = Table {
    version: "v1.3.0",
    effective_from: "2026-05-30",
    base_fee: 10_000,
    retention: [
        price("short", 0),
        price("medium", 20_000),
        price("long", 50_000),
        AxisPrice {
            value: "extreme_long",
            add: 100_000,
            monthly: 0,
            available: true,
            note: Some("one-time overlay of 3650 days; not the long axis value"),
        },
        AxisPrice {
            value: "indefinite",
            add: 0,
            monthly: 50_000,
            available: true,
            note: Some("overlay billed monthly; requires an active indefinite-retention subscription"),
        },
    ],
    integrity: [
        AxisPrice { value: "basic", add: 0, monthly: 0, available: true, note: None },
        AxisPrice {
            value: "enhanced",
            add: 0,
            monthly: 0,
            available: true,
            note: Some("declared at 15 DAC but inactive in this generation"),
        },
        AxisPrice {
            value: "certifiable",
            add: 0,
            monthly: 0,
            available: true,
            note: Some("declared at 40 DAC but inactive in this generation"),
        },
    ],
    disclosure: [price("internal", 0), price("shareable", 10_000), price("exportable", 30_000)],
    responsibility: [price("minimal", 0), price("standard", 15_000), price("extended", 35_000)],
    content_scope: [price("owner", 0), price("external", 15_000), price("public", 40_000)],
    delegation: [price("none", 0), price("partial", 10_000), price("full", 30_000)],
    multiplier_min_matches: 2,
    multiplier_permille: 1_500,
    presets: [
        Preset {
            name: "EE_basic",
            label: "Basic",
            enabled: true,
            retention: Retention::Short,
            integrity: Integrity::Basic,
            disclosure: Disclosure::Internal,
            responsibility: Responsibility::Minimal,
        },
        Preset {
            name: "EE_standard",
            label: "Standard",
            enabled: true,
            retention: Retention::Medium,
            integrity: Integrity::Basic,
            disclosure: Disclosure::Internal,
            responsibility: Responsibility::Standard,
        },
        Preset {
            name: "EE_high",
            label: "High responsibility",
            enabled: true,
            retention: Retention::Long,
            integrity: Integrity::Enhanced,
            disclosure: Disclosure::Shareable,
            responsibility: Responsibility::Extended,
        },
    ],
};

/// The conditions of the multiplier, as (axis, value) pairs.
pub const MULTIPLIER_CONDITIONS: [(&str, &str); 3] =
    [("ee_retention_period", "long"), ("ee_disclosure_format_policy", "exportable"), ("ee_responsibility_scope", "extended")];

/// A priced scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    pub base_fee: u64,
    /// (axis, value, add), one per axis in a fixed order.
    pub charges: Vec<(&'static str, &'static str, u64)>,
    pub subtotal: u64,
    pub multiplier_permille: u32,
    pub total: u64,
    pub monthly: u64,
}

impl Table {
    /// Prices one scope.
    ///
    /// The total is `subtotal * multiplier`, rounded half up to a whole milli-DAC;
    /// with the v1.3.0 numbers the product is always exact.
    pub fn quote(&self, scope: &Scope) -> Result<Quote, String> {
        let picks: [(&'static str, &AxisPrice); 6] = [
            ("ee_retention_period", &self.retention[scope.retention as usize]),
            ("ee_integrity_verification_level", &self.integrity[scope.integrity as usize]),
            ("ee_disclosure_format_policy", &self.disclosure[scope.disclosure as usize]),
            ("ee_responsibility_scope", &self.responsibility[scope.responsibility as usize]),
            ("content_disclosure_scope", &self.content_scope[scope.content_scope as usize]),
            ("delegation_state", &self.delegation[scope.delegation as usize]),
        ];
        let mut subtotal = self.base_fee;
        let mut monthly = 0u64;
        let mut charges = Vec::with_capacity(picks.len());
        for (axis, pick) in picks {
            if !pick.available {
                return Err(alloc::format!("{axis}={} is not available in {}", pick.value, self.version));
            }
            subtotal = subtotal.checked_add(pick.add).ok_or_else(|| String::from("price overflow"))?;
            monthly = monthly.checked_add(pick.monthly).ok_or_else(|| String::from("price overflow"))?;
            charges.push((axis, pick.value, pick.add));
        }
        let matches = [
            scope.retention == Retention::Long,
            scope.disclosure == Disclosure::Exportable,
            scope.responsibility == Responsibility::Extended,
        ]
        .iter()
        .filter(|held| **held)
        .count() as u32;
        let multiplier_permille = if matches >= self.multiplier_min_matches { self.multiplier_permille } else { 1_000 };
        let scaled = (subtotal as u128) * (multiplier_permille as u128);
        let total = u64::try_from((scaled + 500) / 1_000).map_err(|_| String::from("price overflow"))?;
        Ok(Quote { base_fee: self.base_fee, charges, subtotal, multiplier_permille, total, monthly })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(preset: &Preset) -> Scope {
        Scope {
            retention: preset.retention,
            integrity: preset.integrity,
            disclosure: preset.disclosure,
            responsibility: preset.responsibility,
            content_scope: ContentScope::Owner,
            delegation: Delegation::None,
        }
    }

    #[test]
    fn presets_cost_what_the_published_prices_say() {
        let totals: Vec<u64> = V1_3_0.presets.iter().map(|p| V1_3_0.quote(&scope(p)).unwrap().total).collect();
        assert_eq!(totals, [10_000, 45_000, 157_500]);
    }

    #[test]
    fn extreme_long_is_not_long_for_the_multiplier() {
        let mut s = scope(&V1_3_0.presets[2]);
        s.retention = Retention::ExtremeLong;
        let q = V1_3_0.quote(&s).unwrap();
        assert_eq!(q.multiplier_permille, 1_000);
        assert_eq!(q.total, 10_000 + 100_000 + 10_000 + 35_000);
    }
}

/// Which kind of ARA observation a price is for (the WIT `observation-tier`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservationTier {
    Environment,
    Pattern,
    PatternCompare,
    AgentOther,
    AgentSelf,
    AnomalyCompare,
    EvidenceReport,
    EnvironmentAnomaly,
}

/// The price of one observation tier at one resolution level (0: no levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObservationPrice {
    pub tier: ObservationTier,
    pub resolution: u8,
    pub base: u64,
    pub surcharge: u64,
}

const fn observation(tier: ObservationTier, resolution: u8, base: u64, surcharge: u64) -> ObservationPrice {
    ObservationPrice { tier, resolution, base, surcharge }
}

/// Everything a generation prices outside a declaration's EE (WIT 1.1.0 `service-prices`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Services {
    pub observations: &'static [ObservationPrice],
    pub ise_fee: u64,
    pub ise_free_seconds: u32,
    pub ise_max_minutes: u32,
    pub sdac_base_fee: u64,
    pub sdac_ratio_permille: u32,
    pub asa_period: u64,
    pub asa_period_days: u32,
    pub asa_grace_days: u32,
    pub asa_max_periods: u32,
    pub retention_monthly: u64,
    pub retention_grace_days: u32,
    pub earned_threshold: u64,
    pub earned_expiry_days: u32,
    pub tsl_base_fee: u64,
}

/// The service prices of generation v1.3.0.
///
/// Observations: environment and pattern statistics 1 DAC; comparing agents 1
/// DAC at level 1, 2 at level 2; another agent's profile, timeline or EE
/// pattern 3 DAC plus a surcharge of 0, 2 or 4 DAC by level (the surcharge is
/// what Earned DAC may pay); the observer's own free at every level;
/// anomaly-compare 5, evidence report 10, environment anomaly 2.
/// ISE: a stay over ten minutes 10 DAC, sessions close after a day. sDAC: a
/// 10 DAC base and a tenth of the simulated totals. ASA: 100 DAC per 90-day
/// period, at most 12 periods, 7 days of grace. Indefinite retention: 50 DAC a
/// month, 14 days of grace. Earned DAC: spendable from 30 DAC, each lot
/// expires after 365 days. TSL: a 10 DAC fee on each purchase.
pub const V1_3_0_SERVICES: Services = Services {
    observations: &[
        observation(ObservationTier::Environment, 0, 1_000, 0),
        observation(ObservationTier::Pattern, 0, 1_000, 0),
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
    ise_fee: 10_000,
    ise_free_seconds: 600,
    ise_max_minutes: 1_440,
    sdac_base_fee: 10_000,
    sdac_ratio_permille: 100,
    asa_period: 100_000,
    asa_period_days: 90,
    asa_grace_days: 7,
    asa_max_periods: 12,
    retention_monthly: 50_000,
    retention_grace_days: 14,
    earned_threshold: 30_000,
    earned_expiry_days: 365,
    tsl_base_fee: 10_000,
};
