//! ARA: what a confirmed declaration contributes to the statistics of
//! recorded history, the fixed windows statistics cover, where a decision sits
//! in its agent's own pattern, and how far an agent lets others look.
//!
//! Statistics never read declarations: each confirmed declaration is folded
//! once into per-agent, per-day counts keyed by a [`Dimension`] and a value
//! ([`contributions`]), and every view reads those counts.

use chrono::{DateTime, Duration, TimeZone, Timelike, Utc};

use crate::MilliDac;
use crate::agents::DisclosureLevel;
use crate::declarations::{Declaration, ee, wire_enum};

wire_enum!(
    /// What a count is about. `band_*` dimensions hold where a branch-1
    /// decision sat in its agent's own recent pattern (`within_band`,
    /// `outlier`), computed when it is folded.
    Dimension {
        All = "all",
        ActionType = "action_type",
        SelectionState = "selection_state",
        DecisionType = "decision_type",
        OriginContext = "origin_context",
        UnitType = "unit_type",
        Retention = "retention",
        Integrity = "integrity",
        Disclosure = "disclosure",
        Responsibility = "responsibility",
        ContentScope = "content_scope",
        Delegation = "delegation",
        AccessClass = "access_class",
        Preset = "preset",
        EeCombination = "ee_combination",
        TimeZone = "time_zone",
        ContentInclusion = "content_inclusion",
        DecisionClass = "decision_class",
        TargetClass = "target_class",
        Trigger = "decision_trigger",
        HumanInvolvement = "human_involvement",
        BandDecisionScale = "band_decision_scale",
        BandDecisionClass = "band_decision_class",
        BandTargetClass = "band_target_class",
        BandTimeZone = "band_time_zone",
        BandEeResolution = "band_ee_resolution",
    }
);

/// Who may see a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Visibility {
    /// Cross-agent views may count it.
    Shared = 0,
    /// Only the agent's own views count it.
    Own = 1,
}

impl Visibility {
    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<Visibility> {
        match code {
            0 => Some(Visibility::Shared),
            1 => Some(Visibility::Own),
            _ => None,
        }
    }
}

/// One count a declaration adds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Contribution {
    pub dimension: Dimension,
    pub value: String,
    pub visibility: Visibility,
}

/// UTC day number since 1970-01-01.
pub fn day_of(t: DateTime<Utc>) -> i32 {
    t.date_naive().signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")).num_days() as i32
}

/// The start (00:00 UTC) of a day number.
pub fn day_start(day: i32) -> DateTime<Utc> {
    Utc.timestamp_opt(0, 0).single().expect("epoch") + Duration::days(i64::from(day))
}

/// The start (00:00 UTC) of the day `t` falls in.
pub fn day_start_of(t: DateTime<Utc>) -> DateTime<Utc> {
    day_start(day_of(t))
}

/// The 6-hour UTC bucket (`00-06`, `06-12`, `12-18`, `18-24`) of a time.
pub fn time_zone(t: DateTime<Utc>) -> &'static str {
    ["00-06", "06-12", "12-18", "18-24"][(t.hour() / 6) as usize]
}

/// The counts a confirmed declaration adds. `access_class` `internal_only` keeps every count to the
/// agent's own views; template dimensions reach cross-agent views only when
/// `content_disclosure_scope` is not `owner`.
pub fn contributions(d: &Declaration) -> Vec<Contribution> {
    let internal = d.ee.access_class == ee::AccessClass::InternalOnly;
    let shared = if internal { Visibility::Own } else { Visibility::Shared };
    let template_shared =
        if internal || d.ee.scope.content_scope == ee::ContentScope::Owner { Visibility::Own } else { Visibility::Shared };
    let scope = &d.ee.scope;
    let mut out = Vec::with_capacity(24);
    let mut add = |dimension: Dimension, value: &str, visibility: Visibility| {
        out.push(Contribution { dimension, value: value.to_string(), visibility });
    };
    add(Dimension::All, "all", shared);
    add(Dimension::ActionType, d.dd.action_type.as_str(), shared);
    add(Dimension::SelectionState, d.dd.selection_state.as_str(), shared);
    add(Dimension::DecisionType, d.dd.decision_type.as_str(), shared);
    add(Dimension::OriginContext, d.dd.origin_context.as_str(), shared);
    add(Dimension::UnitType, d.dd.unit_type.as_str(), shared);
    add(Dimension::Retention, scope.retention.as_str(), shared);
    add(Dimension::Integrity, scope.integrity.as_str(), shared);
    add(Dimension::Disclosure, scope.disclosure.as_str(), shared);
    add(Dimension::Responsibility, scope.responsibility.as_str(), shared);
    add(Dimension::ContentScope, scope.content_scope.as_str(), shared);
    add(Dimension::Delegation, scope.delegation.as_str(), shared);
    add(Dimension::AccessClass, d.ee.access_class.as_str(), shared);
    add(Dimension::Preset, d.ee.preset.as_deref().unwrap_or("none"), shared);
    let combination = format!("{}|{}|{}|{}", scope.retention, scope.integrity, scope.disclosure, scope.responsibility);
    add(Dimension::EeCombination, &combination, shared);
    add(Dimension::TimeZone, time_zone(d.dd.decision_at.unwrap_or(d.anchored_at)), shared);
    add(Dimension::ContentInclusion, if d.content_inclusion { "1" } else { "0" }, shared);
    if let Some(t) = &d.template {
        if let Some(v) = t.decision_class {
            add(Dimension::DecisionClass, v.as_str(), template_shared);
        }
        if let Some(v) = t.target_class {
            add(Dimension::TargetClass, v.as_str(), template_shared);
        }
        if let Some(v) = t.decision_trigger {
            add(Dimension::Trigger, v.as_str(), template_shared);
        }
        if let Some(v) = t.human_involvement {
            add(Dimension::HumanInvolvement, v.as_str(), template_shared);
        }
    }
    out
}

/// The lengths, in days, a cross-agent window may have.
pub const WINDOW_DAYS: [i32; 3] = [7, 30, 90];

/// A fixed, aligned window: `days` whole UTC days ending at `end` (exclusive),
/// the start of the current day. Everyone asking on the same day gets the
/// same window, whatever the hour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    pub days: i32,
    /// The first day after the window (today).
    pub end: i32,
}

impl Window {
    /// The window of `days` that ends where today starts.
    pub fn ending_today(now: DateTime<Utc>, days: i32) -> Window {
        Window { days, end: day_of(now) }
    }

    pub fn start(self) -> i32 {
        self.end - self.days
    }

    pub fn from(self) -> DateTime<Utc> {
        day_start(self.start())
    }

    pub fn to(self) -> DateTime<Utc> {
        day_start(self.end)
    }
}

/// Where a value sits in a sample of the agent's own decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    WithinBand,
    Outlier,
}

impl Position {
    pub fn as_str(self) -> &'static str {
        match self {
            Position::WithinBand => "within_band",
            Position::Outlier => "outlier",
        }
    }

    fn of(inside: bool) -> Position {
        if inside { Position::WithinBand } else { Position::Outlier }
    }
}

/// The five dimensions a branch-1 decision is compared on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
    /// The decision scale, as a number, with its unit.
    pub scale: Option<(f64, String)>,
    pub decision_class: Option<String>,
    pub target_class: Option<String>,
    pub time_zone: Option<&'static str>,
    /// The premium: the price above the base fee.
    pub ee_resolution: MilliDac,
}

/// Band positions of one decision against a sample of the same agent's
/// others: a numeric band is the sample's [min, max] (same unit), a
/// categorical one the values present in the sample; a dimension the decision
/// (or every sample) lacks has no position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    pub decision_scale: Option<Position>,
    pub decision_class: Option<Position>,
    pub target_class: Option<Position>,
    pub time_zone: Option<Position>,
    pub ee_resolution: Option<Position>,
}

/// The minimum sample an anomaly comparison needs.
pub const MIN_SAMPLE: usize = 2;

pub fn positions(target: &Point, sample: &[Point]) -> Positions {
    let categorical = |pick: fn(&Point) -> Option<&str>| -> Option<Position> {
        let value = pick(target)?;
        let values: Vec<&str> = sample.iter().filter_map(pick).collect();
        (!values.is_empty()).then(|| Position::of(values.contains(&value)))
    };
    let decision_scale = target.scale.as_ref().and_then(|(value, unit)| {
        let same: Vec<f64> = sample.iter().filter_map(|p| p.scale.as_ref()).filter(|(_, u)| u == unit).map(|(v, _)| *v).collect();
        let min = same.iter().copied().fold(f64::INFINITY, f64::min);
        let max = same.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (!same.is_empty()).then(|| Position::of(*value >= min && *value <= max))
    });
    let resolutions: Vec<MilliDac> = sample.iter().map(|p| p.ee_resolution).collect();
    let ee_resolution = match (resolutions.iter().min(), resolutions.iter().max()) {
        (Some(min), Some(max)) => Some(Position::of(target.ee_resolution >= *min && target.ee_resolution <= *max)),
        _ => None,
    };
    Positions {
        decision_scale,
        decision_class: categorical(|p| p.decision_class.as_deref()),
        target_class: categorical(|p| p.target_class.as_deref()),
        time_zone: categorical(|p| p.time_zone),
        ee_resolution,
    }
}

impl Positions {
    /// The band contributions of a folded decision.
    pub fn contributions(&self, visibility: Visibility) -> Vec<Contribution> {
        [
            (Dimension::BandDecisionScale, self.decision_scale),
            (Dimension::BandDecisionClass, self.decision_class),
            (Dimension::BandTargetClass, self.target_class),
            (Dimension::BandTimeZone, self.time_zone),
            (Dimension::BandEeResolution, self.ee_resolution),
        ]
        .into_iter()
        .filter_map(|(dimension, position)| position.map(|p| Contribution { dimension, value: p.as_str().to_string(), visibility }))
        .collect()
    }
}

impl DisclosureLevel {
    /// The highest resolution others may observe this agent at; `None`: not at all.
    pub fn max_resolution(self) -> Option<u8> {
        match self {
            DisclosureLevel::None => None,
            DisclosureLevel::Summary => Some(1),
            DisclosureLevel::Detailed => Some(2),
            DisclosureLevel::Full => Some(3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declarations::dd::DdFields;
    use crate::declarations::template::{DecisionClass, Template};

    #[test]
    fn days_and_windows_are_utc_and_aligned() {
        let t = Utc.with_ymd_and_hms(2026, 11, 23, 17, 45, 0).unwrap();
        let day = day_of(t);
        assert_eq!(day_start(day), Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap());
        let morning = Window::ending_today(Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 1).unwrap(), 30);
        assert_eq!(morning, Window::ending_today(t, 30), "the same window all day");
        assert_eq!(morning.from(), Utc.with_ymd_and_hms(2026, 10, 24, 0, 0, 0).unwrap());
        assert_eq!(time_zone(t), "12-18");
    }

    fn sample() -> Declaration {
        let at = Utc.with_ymd_and_hms(2026, 11, 23, 7, 0, 0).unwrap();
        Declaration {
            dd_id: uuid::Uuid::nil(),
            ee_id: uuid::Uuid::nil(),
            agent_id: uuid::Uuid::nil(),
            dd: DdFields::BASIC,
            ee: ee::EeFields::basic(),
            content_inclusion: true,
            template: Some(Template { decision_class: Some(DecisionClass::Payment), ..Default::default() }),
            anchored_at: at,
            lineage_group_id: uuid::Uuid::nil(),
            pricing_version: "v1.3.0".into(),
            pricing_sha256: String::new(),
            dac_amount: MilliDac::from_dac(10),
            salt: [0; 32],
            trace_key: None,
        }
    }

    #[test]
    fn internal_only_and_owner_scoped_templates_stay_with_the_agent() {
        let mut d = sample();
        let counts = contributions(&d);
        let class = counts.iter().find(|c| c.dimension == Dimension::DecisionClass).unwrap();
        assert_eq!(class.visibility, Visibility::Own, "an owner-scoped template stays the agent's");
        assert!(counts.iter().filter(|c| c.dimension != Dimension::DecisionClass).all(|c| c.visibility == Visibility::Shared));
        assert_eq!(counts.iter().find(|c| c.dimension == Dimension::TimeZone).unwrap().value, "06-12");
        d.ee.scope.content_scope = ee::ContentScope::Public;
        assert!(contributions(&d).iter().all(|c| c.visibility == Visibility::Shared));
        d.ee.access_class = ee::AccessClass::InternalOnly;
        assert!(contributions(&d).iter().all(|c| c.visibility == Visibility::Own));
    }

    #[test]
    fn positions_are_bands_of_the_sample() {
        let point = |scale: f64, class: &str, premium: i64| Point {
            scale: Some((scale, "USDC".into())),
            decision_class: Some(class.into()),
            target_class: None,
            time_zone: Some("06-12"),
            ee_resolution: MilliDac(premium),
        };
        let sample = [point(10.0, "payment", 0), point(20.0, "payment", 5_000)];
        let inside = positions(&point(15.0, "payment", 1_000), &sample);
        assert_eq!(inside.decision_scale, Some(Position::WithinBand));
        assert_eq!(inside.decision_class, Some(Position::WithinBand));
        assert_eq!(inside.target_class, None);
        assert_eq!(inside.ee_resolution, Some(Position::WithinBand));
        let outside = positions(&point(25.0, "transfer", 6_000), &sample);
        assert_eq!(outside.decision_scale, Some(Position::Outlier));
        assert_eq!(outside.decision_class, Some(Position::Outlier));
        assert_eq!(outside.ee_resolution, Some(Position::Outlier));
    }
}
