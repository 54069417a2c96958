//! Agent-level observation: one agent's profile, timeline and EE pattern, and
//! comparisons of several agents.
//!
//! An agent observes itself for free at every resolution, and sees what only
//! it may see (its `internal_only` declarations, its owner-scoped template
//! dimensions, and how its retention was demoted). Others see an agent only as
//! far as its `disclosure_level` lets them (`none`: not at all; `summary`:
//! level 1; `detailed`: 2; `full`: 3) and pay for it: a base price over x402,
//! plus a resolution surcharge at levels 2 and 3, which Earned DAC may pay.

use std::collections::BTreeMap;

use chrono::{Datelike, NaiveDate};
use uuid::Uuid;

use anchor_domain::agents::DisclosureLevel;
use anchor_domain::ara::{Dimension, day_of, day_start};
use anchor_domain::pricing::ObservationTier;
use anchor_domain::records::{AgentRecord, OwnerRecord};
use anchor_ports::AgentCount;

use super::{Observed, PremiumSource, Purchase, pay, unavailable};
use crate::charge::{Offered, Route};
use crate::{AppError, AppResult, Services};

/// The agent observed, as far as the observer may look.
#[derive(Clone, Debug)]
pub struct Target {
    pub agent_id: Uuid,
    /// The observer observes itself.
    pub own: bool,
    pub level: u8,
    pub disclosure: DisclosureLevel,
    /// Its all-time counts the observer may see.
    totals: Vec<AgentCount>,
}

impl Target {
    /// All-time declarations the observer may see.
    pub fn declarations(&self) -> i64 {
        self.totals.iter().find(|c| c.dimension == Dimension::All).map_or(0, |c| c.n)
    }

    fn distribution(&self, dimension: Dimension) -> Vec<(String, i64)> {
        self.totals.iter().filter(|c| c.dimension == dimension).map(|c| (c.value.clone(), c.n)).collect()
    }

    fn distributions(&self, dimensions: &[Dimension]) -> Vec<(Dimension, Vec<(String, i64)>)> {
        dimensions.iter().map(|d| (*d, self.distribution(*d))).collect()
    }
}

/// How an agent's retention was demoted after an indefinite-retention
/// subscription ended (shown to the agent itself only): the records its
/// expiries demoted, and the day of the last one that demoted any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Demotion {
    pub demoted_declarations: i64,
    pub last_demoted_day: Option<i32>,
}

#[derive(Clone, Debug)]
pub struct Profile {
    pub target: Target,
    pub first_day: Option<i32>,
    pub last_day: Option<i32>,
    /// Distinct days with a declaration among the last 30 (today included).
    pub active_days_30: i64,
    pub distributions: Vec<(Dimension, Vec<(String, i64)>)>,
    /// The agent itself only.
    pub demotion: Option<Demotion>,
}

/// A timeline's bucket size, by resolution level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    Month,
    Week,
    Day,
}

#[derive(Clone, Debug)]
pub struct Bucket {
    pub start_day: i32,
    pub declarations: i64,
    pub breakdown: Vec<(Dimension, Vec<(String, i64)>)>,
    /// The agent itself only: declarations of the bucket demoted since.
    pub demoted: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct Timeline {
    pub target: Target,
    pub granularity: Granularity,
    pub buckets: Vec<Bucket>,
}

#[derive(Clone, Debug)]
pub struct EePattern {
    pub target: Target,
    pub distributions: Vec<(Dimension, Vec<(String, i64)>)>,
    /// Level 3: the most used combinations of the four priced axes.
    pub combinations: Vec<(String, i64)>,
    /// The agent itself only: retention as it stands after demotions.
    pub retention_effective: Option<Vec<(String, i64)>>,
}

const PROFILE_DIMENSIONS: [&[Dimension]; 3] = [
    &[Dimension::ActionType, Dimension::SelectionState],
    &[
        Dimension::Retention,
        Dimension::Integrity,
        Dimension::Disclosure,
        Dimension::Responsibility,
        Dimension::ContentScope,
        Dimension::Delegation,
        Dimension::DecisionType,
        Dimension::OriginContext,
    ],
    &[
        Dimension::UnitType,
        Dimension::TimeZone,
        Dimension::Preset,
        Dimension::ContentInclusion,
        Dimension::DecisionClass,
        Dimension::TargetClass,
        Dimension::Trigger,
        Dimension::HumanInvolvement,
    ],
];

const EE_DIMENSIONS: [&[Dimension]; 3] = [
    &[Dimension::Retention, Dimension::Preset],
    &[Dimension::Integrity, Dimension::Disclosure, Dimension::Responsibility, Dimension::ContentScope, Dimension::Delegation],
    &[Dimension::AccessClass],
];

fn up_to(levels: &[&'static [Dimension]; 3], level: u8) -> Vec<Dimension> {
    levels.iter().take(usize::from(level)).flat_map(|d| d.iter().copied()).collect()
}

/// The checks before an agent-level observation, in the documented order:
/// the level, the target's existence, its disclosure cap, its data.
pub async fn target(services: &Services, observer: &AgentRecord, target_id: Uuid, level: u8) -> AppResult<Target> {
    if !(1..=3).contains(&level) {
        return Err(AppError::invalid("INVALID_VALUE", format!("resolution_level must be 1, 2 or 3; got {level}")));
    }
    let own = observer.agent_id == target_id;
    let disclosure = if own {
        observer.disclosure_level
    } else {
        let target = services
            .store
            .agent(target_id)
            .await?
            .ok_or_else(|| AppError::not_found("AGENT_NOT_FOUND", format!("no agent {target_id}")))?;
        match target.disclosure_level.max_resolution() {
            None => {
                return Err(AppError::forbidden(
                    "DISCLOSURE_CAP_EXCEEDED",
                    format!("agent {target_id} discloses nothing to other agents (disclosure_level none)"),
                ));
            }
            Some(cap) if level > cap => {
                return Err(AppError::forbidden(
                    "DISCLOSURE_CAP_EXCEEDED",
                    format!(
                        "agent {target_id} discloses up to resolution level {cap} (disclosure_level {}); level {level} was asked",
                        target.disclosure_level
                    ),
                ));
            }
            Some(_) => target.disclosure_level,
        }
    };
    let totals = crate::observation_read!(services, |s| s.agent_totals(target_id, own))?;
    let target = Target { agent_id: target_id, own, level, disclosure, totals };
    if !own && target.declarations() == 0 {
        return Err(unavailable(format!("agent {target_id} has no anchored declaration others may observe")));
    }
    Ok(target)
}

/// How an agent-level observation was asked for: its own route, or the
/// deprecated query that maps to it.
#[derive(Clone, Copy, Debug)]
enum Via {
    Route(Route),
    Query,
}

fn purchase(via: Via, target: &Target, premium_source: PremiumSource, what: &str) -> Purchase {
    let (route, path) = match via {
        Via::Route(route) => (route, route.path.replace("{agent_id}", &target.agent_id.to_string())),
        Via::Query => (super::QUERY, super::QUERY.path.to_string()),
    };
    Purchase {
        route,
        path: Some(path),
        tier: if target.own { ObservationTier::AgentSelf } else { ObservationTier::AgentOther },
        level: target.level,
        target: Some(target.agent_id),
        premium_source: if target.own { PremiumSource::External } else { premium_source },
        description: format!("{what} of agent {} at resolution level {}", target.agent_id, target.level),
        asked: String::new(),
    }
}

/// An agent-level observation as asked for: of whom, at which resolution
/// level, who pays the surcharge, and the payment offered with the request.
#[derive(Clone, Debug)]
pub struct Ask {
    pub target_id: Uuid,
    pub level: u8,
    pub premium_source: PremiumSource,
    pub offered: Offered,
}

/// The resolution level an observation of an agent is made at unless asked.
pub const DEFAULT_LEVEL: u8 = 1;

impl Ask {
    /// An observation of `target_id` at the level asked, or [`DEFAULT_LEVEL`].
    pub fn new(target_id: Uuid, level: Option<u8>, premium_source: PremiumSource, offered: Offered) -> Ask {
        Ask { target_id, level: level.unwrap_or(DEFAULT_LEVEL), premium_source, offered }
    }
}

/// A comparison of agents, at the level it was made at.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub level: u8,
    pub agents: Vec<Compared>,
}

/// GET /v1/ara/agent/{agent_id}/profile.
pub async fn profile(services: &Services, observer: &AgentRecord, ask: Ask) -> AppResult<Observed<Profile>> {
    profile_via(services, observer, ask, Via::Route(super::PROFILE)).await
}

async fn profile_via(services: &Services, observer: &AgentRecord, ask: Ask, via: Via) -> AppResult<Observed<Profile>> {
    let target = target(services, observer, ask.target_id, ask.level).await?;
    let profile = profile_of(services, target).await?;
    let purchase = purchase(via, &profile.target, ask.premium_source, "Profile");
    pay(services, observer.agent_id, purchase, ask.offered, profile).await
}

/// The profile at the target's resolution level.
pub(crate) async fn profile_of(services: &Services, target: Target) -> AppResult<Profile> {
    let level = target.level;
    let today = day_of(services.clock.now());
    let recent =
        crate::observation_read!(services, |s| s.agent_days(target.agent_id, today - 29, today + 1, &[Dimension::All], target.own))?;
    let all = target.totals.iter().find(|c| c.dimension == Dimension::All);
    let demotion = match target.own {
        true => {
            let (demoted, last) = services.store.demotions(target.agent_id).await?;
            Some(Demotion { demoted_declarations: demoted, last_demoted_day: last.map(day_of) })
        }
        false => None,
    };
    Ok(Profile {
        first_day: all.map(|c| c.first_day),
        last_day: all.map(|c| c.last_day),
        active_days_30: recent.iter().filter(|c| c.n > 0).count() as i64,
        distributions: target.distributions(&up_to(&PROFILE_DIMENSIONS, level)),
        demotion,
        target,
    })
}

fn month_start(day: i32) -> i32 {
    let date = day_start(day).date_naive();
    day_of(NaiveDate::from_ymd_opt(date.year(), date.month(), 1).expect("first of month").and_hms_opt(0, 0, 0).expect("midnight").and_utc())
}

/// GET /v1/ara/agent/{agent_id}/timeline: 12 months (level 1), 12 weeks with
/// action types (2), or 30 days with action types and selection states (3),
/// oldest first, today included.
pub async fn timeline(services: &Services, observer: &AgentRecord, ask: Ask) -> AppResult<Observed<Timeline>> {
    timeline_via(services, observer, ask, Via::Route(super::TIMELINE)).await
}

async fn timeline_via(services: &Services, observer: &AgentRecord, ask: Ask, via: Via) -> AppResult<Observed<Timeline>> {
    let target = target(services, observer, ask.target_id, ask.level).await?;
    let timeline = timeline_of(services, target).await?;
    let purchase = purchase(via, &timeline.target, ask.premium_source, "Timeline");
    pay(services, observer.agent_id, purchase, ask.offered, timeline).await
}

/// The buckets of a timeline at the target's resolution level.
pub(crate) async fn timeline_of(services: &Services, target: Target) -> AppResult<Timeline> {
    let today = day_of(services.clock.now());
    let (granularity, starts): (Granularity, Vec<i32>) = match target.level {
        1 => {
            let mut starts = vec![month_start(today)];
            while starts.len() < 12 {
                let previous = month_start(starts[starts.len() - 1] - 1);
                starts.push(previous);
            }
            starts.reverse();
            (Granularity::Month, starts)
        }
        2 => (Granularity::Week, (0..12).rev().map(|w| today - 6 - 7 * w).collect()),
        _ => (Granularity::Day, (0..30).rev().map(|d| today - d).collect()),
    };
    let breakdown: &[Dimension] = match target.level {
        1 => &[],
        2 => &[Dimension::ActionType],
        _ => &[Dimension::ActionType, Dimension::SelectionState],
    };
    let mut dimensions = vec![Dimension::All];
    dimensions.extend_from_slice(breakdown);
    let rows = crate::observation_read!(services, |s| s.agent_days(target.agent_id, starts[0], today + 1, &dimensions, target.own))?;
    let bucket_of = |day: i32| starts.iter().rposition(|start| *start <= day);
    let mut buckets: Vec<Bucket> = starts
        .iter()
        .map(|start| Bucket {
            start_day: *start,
            declarations: 0,
            breakdown: breakdown.iter().map(|d| (*d, Vec::new())).collect(),
            demoted: target.own.then_some(0),
        })
        .collect();
    let mut sums: BTreeMap<(usize, &'static str, String), i64> = BTreeMap::new();
    for row in &rows {
        let Some(i) = bucket_of(row.first_day) else { continue };
        if row.dimension == Dimension::All {
            buckets[i].declarations += row.n;
        } else {
            *sums.entry((i, row.dimension.as_str(), row.value.clone())).or_default() += row.n;
        }
    }
    for ((i, dimension, value), n) in sums {
        if let Some((_, values)) = buckets[i].breakdown.iter_mut().find(|(d, _)| d.as_str() == dimension) {
            values.push((value, n));
        }
    }
    if target.own {
        // Each bucket's records that an ended indefinite-retention subscription demoted.
        let anchored = services.store.demoted_anchorings(target.agent_id, day_start(starts[0]), day_start(today + 1)).await?;
        for at in anchored {
            if let Some(i) = bucket_of(day_of(at)) {
                buckets[i].demoted = Some(buckets[i].demoted.unwrap_or(0) + 1);
            }
        }
    }
    Ok(Timeline { target, granularity, buckets })
}

/// GET /v1/ara/agent/{agent_id}/ee-pattern.
pub async fn ee_pattern(services: &Services, observer: &AgentRecord, ask: Ask) -> AppResult<Observed<EePattern>> {
    let target = target(services, observer, ask.target_id, ask.level).await?;
    let demoted = if target.own { services.store.demotions(target.agent_id).await?.0 } else { 0 };
    let pattern = ee_pattern_of(target, demoted);
    let purchase = purchase(Via::Route(super::EE_PATTERN), &pattern.target, ask.premium_source, "EE pattern");
    pay(services, observer.agent_id, purchase, ask.offered, pattern).await
}

/// The EE distributions at the target's resolution level; `demoted` of the
/// agent's indefinite records were demoted to short (its own view only).
pub(crate) fn ee_pattern_of(target: Target, demoted: i64) -> EePattern {
    let mut combinations = if target.level >= 3 { target.distribution(Dimension::EeCombination) } else { Vec::new() };
    combinations.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    combinations.truncate(20);
    EePattern {
        distributions: target.distributions(&up_to(&EE_DIMENSIONS, target.level)),
        combinations,
        retention_effective: target.own.then(|| effective_retention(target.distribution(Dimension::Retention), demoted)),
        target,
    }
}

/// The retention distribution as it stands: `demoted` records declared
/// indefinite are kept as short ones.
fn effective_retention(declared: Vec<(String, i64)>, demoted: i64) -> Vec<(String, i64)> {
    let mut counts: BTreeMap<String, i64> = declared.into_iter().collect();
    let moved = demoted.min(counts.get("indefinite").copied().unwrap_or(0)).max(0);
    if moved > 0 {
        *counts.entry("indefinite".into()).or_default() -= moved;
        *counts.entry("short".into()).or_default() += moved;
    }
    counts.into_iter().filter(|(_, n)| *n > 0).collect()
}

/// What ARA shows an agent about itself, as its owner sees it in the portal.
#[derive(Clone, Debug)]
pub struct OwnerView {
    pub timeline: Timeline,
    pub pattern: EePattern,
}

/// GET /dap/agent/{agent_id}/ara: a managed agent's own timeline at `level`
/// and its full EE pattern, free. It is the owner looking, not an agent
/// observing, so no observation is recorded.
pub async fn for_owner(services: &Services, owner: &OwnerRecord, agent_id: Uuid, level: Option<u8>) -> AppResult<OwnerView> {
    // The portal's view is at level 2 unless asked.
    let level = level.unwrap_or(2);
    // The level is checked before ownership, as on the agent routes (400 before 403).
    if !(1..=3).contains(&level) {
        return Err(AppError::invalid("INVALID_VALUE", format!("resolution_level must be 1, 2 or 3; got {level}")));
    }
    let agent = crate::owners::managed(services, owner, agent_id).await?.agent;
    // One read of the totals serves both parts: the pattern at full resolution,
    // the timeline at the level asked.
    let full = target(services, &agent, agent_id, 3).await?;
    let timeline = timeline_of(services, Target { level, ..full.clone() }).await?;
    let demoted = services.store.demotions(agent_id).await?.0;
    Ok(OwnerView { timeline, pattern: ee_pattern_of(full, demoted) })
}

/// One agent of a comparison.
#[derive(Clone, Debug)]
pub struct Compared {
    pub agent_id: Uuid,
    pub declarations: i64,
    pub distributions: Vec<(Dimension, Vec<(String, i64)>)>,
}

/// GET /v1/ara/pattern/compare: 2 to 10 agents side by side, at level 1 or 2;
/// every agent but the observer must disclose that level.
pub async fn compare(
    services: &Services,
    observer: &AgentRecord,
    agent_ids: &[Uuid],
    level: Option<u8>,
    premium_source: PremiumSource,
    offered: Offered,
) -> AppResult<Observed<Comparison>> {
    let level = level.unwrap_or(DEFAULT_LEVEL);
    if !(1..=2).contains(&level) {
        return Err(AppError::invalid("INVALID_VALUE", format!("pattern/compare offers resolution_level 1 or 2; got {level}")));
    }
    if premium_source == PremiumSource::Earned {
        return Err(AppError::invalid(
            "INVALID_VALUE",
            "pattern/compare has no resolution surcharge for Earned DAC to pay; leave premium_source out (external)",
        ));
    }
    let mut unique: Vec<Uuid> = Vec::new();
    for id in agent_ids {
        if !unique.contains(id) {
            unique.push(*id);
        }
    }
    if !(2..=10).contains(&unique.len()) {
        return Err(AppError::invalid("INVALID_VALUE", format!("agents must list 2 to 10 distinct agent ids; got {}", unique.len())));
    }
    let mut targets = Vec::new();
    for id in &unique {
        targets.push(target(services, observer, *id, level).await?);
    }
    let dimensions = up_to(&[PROFILE_DIMENSIONS[0], &PROFILE_DIMENSIONS[1][..4], &[]], level);
    let compared = targets
        .iter()
        .map(|t| Compared { agent_id: t.agent_id, declarations: t.declarations(), distributions: t.distributions(&dimensions) })
        .collect();
    let purchase = Purchase {
        route: super::COMPARE,
        path: None,
        tier: ObservationTier::PatternCompare,
        level,
        target: None,
        premium_source: PremiumSource::External,
        description: format!("Comparison of {} agents at resolution level {level}", unique.len()),
        asked: unique.iter().map(Uuid::to_string).collect::<Vec<_>>().join(","),
    };
    pay(services, observer.agent_id, purchase, offered, Comparison { level, agents: compared }).await
}

/// What the deprecated POST /v1/ara/query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryType {
    /// Profile at level 1.
    Summary,
    /// Profile at level 2.
    Period,
    /// Timeline at level 2.
    Detail,
}

/// The deprecated query's answer: the observation it maps to.
#[derive(Clone, Debug)]
pub enum Queried {
    Profile(Profile),
    Timeline(Timeline),
}

/// POST /v1/ara/query (deprecated): `summary` is a level-1 profile, `period`
/// a level-2 profile, `detail` a level-2 timeline; priced as those.
/// `ask.level` is set from the query type.
pub async fn query(services: &Services, observer: &AgentRecord, query_type: QueryType, ask: Ask) -> AppResult<Observed<Queried>> {
    let via = Via::Query;
    Ok(match query_type {
        QueryType::Summary => profile_via(services, observer, Ask { level: 1, ..ask }, via).await?.map(Queried::Profile),
        QueryType::Period => profile_via(services, observer, Ask { level: 2, ..ask }, via).await?.map(Queried::Profile),
        QueryType::Detail => timeline_via(services, observer, Ask { level: 2, ..ask }, via).await?.map(Queried::Timeline),
    })
}
