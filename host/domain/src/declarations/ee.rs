//! EE: the accountability scope, its priced axes, presets and direct access.

use chrono::{DateTime, Months, TimeDelta, Utc};

use super::wire_enum;
use crate::Invalid;

wire_enum!(
    Retention {
        Short = "short",
        Medium = "medium",
        Long = "long",
        ExtremeLong = "extreme_long",
        Indefinite = "indefinite",
    }
);
wire_enum!(Integrity { Basic = "basic", Enhanced = "enhanced", Certifiable = "certifiable" });

impl Integrity {
    /// The levels in order: basic < enhanced < certifiable.
    pub fn rank(self) -> u8 {
        match self {
            Integrity::Basic => 0,
            Integrity::Enhanced => 1,
            Integrity::Certifiable => 2,
        }
    }

    /// Whether this declared level asks for more than `reachable` gives.
    pub fn beyond(self, reachable: Integrity) -> bool {
        self.rank() > reachable.rank()
    }
}
wire_enum!(Disclosure { Internal = "internal", Shareable = "shareable", Exportable = "exportable" });
wire_enum!(Responsibility { Minimal = "minimal", Standard = "standard", Extended = "extended" });
wire_enum!(ContentScope { Owner = "owner", External = "external", Public = "public" });
wire_enum!(Delegation { None = "none", Partial = "partial", Full = "full" });
wire_enum!(AccessClass { SelfDirect = "self_direct", AraOnly = "ara_only", InternalOnly = "internal_only" });

impl Retention {
    /// How long a record with this retention is kept; `None` for indefinite.
    pub fn days(self) -> Option<i64> {
        match self {
            Retention::Short => Some(90),
            Retention::Medium => Some(365),
            Retention::Long => Some(1_825),
            Retention::ExtremeLong => Some(3_650),
            Retention::Indefinite => None,
        }
    }
}

/// The six priced axes of a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Scope {
    pub retention: Retention,
    pub integrity: Integrity,
    pub disclosure: Disclosure,
    pub responsibility: Responsibility,
    pub content_scope: ContentScope,
    pub delegation: Delegation,
}

/// The validated `ee` object of a create request, after preset expansion.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EeFields {
    pub preset: Option<String>,
    pub scope: Scope,
    pub direct_access_period: AccessPeriod,
    pub direct_access_quota: i64,
    pub access_class: AccessClass,
}

impl Scope {
    /// The least the service anchors (the `EE_basic` axes): short retention,
    /// basic integrity, internal disclosure, minimal responsibility, content
    /// for the owner, nothing delegated.
    pub const BASIC: Scope = Scope {
        retention: Retention::Short,
        integrity: Integrity::Basic,
        disclosure: Disclosure::Internal,
        responsibility: Responsibility::Minimal,
        content_scope: ContentScope::Owner,
        delegation: Delegation::None,
    };
}

impl EeFields {
    /// [`Scope::BASIC`] with the default direct access and no preset named.
    pub fn basic() -> EeFields {
        EeFields {
            preset: None,
            scope: Scope::BASIC,
            direct_access_period: DEFAULT_ACCESS_PERIOD,
            direct_access_quota: DEFAULT_ACCESS_QUOTA,
            access_class: AccessClass::SelfDirect,
        }
    }
}

/// Applied when `ee_direct_access_period` is omitted.
pub const DEFAULT_ACCESS_PERIOD: AccessPeriod = AccessPeriod { count: 30, unit: PeriodUnit::Days };
/// Applied when `ee_direct_access_quota` is omitted: ten reads of the original.
pub const DEFAULT_ACCESS_QUOTA: i64 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PeriodUnit {
    Days,
    Months,
    Years,
}

/// A period such as `30d`, `12m` or `1y` (pattern `^[1-9]\d*[dmy]$`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AccessPeriod {
    pub count: u32,
    pub unit: PeriodUnit,
}

impl AccessPeriod {
    /// Longest accepted period: a hundred years, written as `100y`, `1200m` or `36500d`.
    const MAX_YEARS: u32 = 100;

    pub fn parse(text: &str) -> Result<AccessPeriod, Invalid> {
        let bad = || {
            Invalid::new(
                "INVALID_VALUE",
                format!(
                    "ee_direct_access_period must look like 30d, 12m or 1y (a positive whole number then d, m or y, \
                     at most 36500d, 1200m or 100y); got {}",
                    crate::brief(text)
                ),
            )
        };
        // The unit is the last character, which may be any character: split on
        // a character boundary, never on a byte index.
        let mut chars = text.chars();
        let unit = match chars.next_back() {
            Some('d') => PeriodUnit::Days,
            Some('m') => PeriodUnit::Months,
            Some('y') => PeriodUnit::Years,
            _ => return Err(bad()),
        };
        let digits = chars.as_str();
        if digits.is_empty() || digits.len() > 5 || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let count: u32 = digits.parse().map_err(|_| bad())?;
        let max = match unit {
            PeriodUnit::Days => Self::MAX_YEARS * 365,
            PeriodUnit::Months => Self::MAX_YEARS * 12,
            PeriodUnit::Years => Self::MAX_YEARS,
        };
        if count > max {
            return Err(bad());
        }
        Ok(AccessPeriod { count, unit })
    }

    /// The end of a period that starts at `start` (calendar months and years).
    pub fn end_from(self, start: DateTime<Utc>) -> DateTime<Utc> {
        match self.unit {
            PeriodUnit::Days => start + TimeDelta::days(self.count as i64),
            PeriodUnit::Months => start.checked_add_months(Months::new(self.count)).unwrap_or(start),
            PeriodUnit::Years => start.checked_add_months(Months::new(self.count * 12)).unwrap_or(start),
        }
    }
}

impl std::fmt::Display for AccessPeriod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.unit {
            PeriodUnit::Days => 'd',
            PeriodUnit::Months => 'm',
            PeriodUnit::Years => 'y',
        };
        write!(f, "{}{unit}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_follow_the_pattern() {
        assert_eq!(AccessPeriod::parse("30d").unwrap().to_string(), "30d");
        assert_eq!(AccessPeriod::parse("12m").unwrap().unit, PeriodUnit::Months);
        for bad in ["", "d", "0d", "01d", "30", "30w", "-1d", "1.5y", "101y", "1201m", "36501d", " 1d", "99999999999d"] {
            assert!(AccessPeriod::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_longest_period_is_a_hundred_years_in_any_unit() {
        for ok in ["100y", "1200m", "36500d", "1d", "1m", "1y"] {
            assert_eq!(AccessPeriod::parse(ok).unwrap().to_string(), ok);
        }
    }

    #[test]
    fn multibyte_and_nul_characters_are_refused_not_split() {
        for bad in ["30é", "é", "3é0d", "30\u{0}", "\u{0}d", "30日", "1🦀y", "ÿ"] {
            let error = AccessPeriod::parse(bad).expect_err(bad);
            assert_eq!(error.code, "INVALID_VALUE");
        }
    }
}
