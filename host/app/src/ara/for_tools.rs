//! ARA observations made for a tool's run, on behalf of the agent running
//! it: the same figures, gates and prices as if that agent had asked ARA
//! itself, turned into the typed records tools receive. Nothing is charged
//! or recorded here; the run does both, once the tool has succeeded.

use uuid::Uuid;

use anchor_domain::ara::{Dimension, Window, day_of};
use anchor_domain::pricing::ObservationTier;
use anchor_domain::records::AgentRecord;
use anchor_domain::tools::{Cell, DayCount, Observation};
use anchor_domain::tsl::ObservationType;

use super::agents::{self, Target};
use super::releases::{self, Kind, Release};
use super::{price, unavailable};
use crate::{AppError, AppResult, Services};

/// The observation kinds a tool can receive today.
pub const SUPPORTED: [ObservationType; 9] = [
    ObservationType::EnvironmentSummary,
    ObservationType::EnvironmentDensity,
    ObservationType::EnvironmentTsl,
    ObservationType::EnvironmentAnomaly,
    ObservationType::PatternEeDistribution,
    ObservationType::PatternActionType,
    ObservationType::AgentProfile,
    ObservationType::AgentTimeline,
    ObservationType::AgentEePattern,
];

/// One observation ready for a tool, with what it costs and how to log it.
#[derive(Clone, Debug)]
pub struct Gathered {
    pub observation: Observation,
    pub tier: ObservationTier,
    /// 0 where the tier has no levels.
    pub level: u8,
    pub target: Option<Uuid>,
    pub base: anchor_domain::MilliDac,
    pub surcharge: anchor_domain::MilliDac,
}

fn cells(distributions: impl IntoIterator<Item = (String, Vec<(String, i64)>)>) -> Vec<Cell> {
    distributions
        .into_iter()
        .flat_map(|(dimension, values)| {
            values.into_iter().map(move |(value, n)| Cell { dimension: dimension.clone(), value, count: n.max(0) as u64 })
        })
        .collect()
}

fn release_observation(kind: ObservationType, release: &Release) -> Observation {
    let window = release.window();
    let activity = std::iter::once(("activity".to_string(), release.activity.clone()));
    let cells = cells(release.distributions.iter().map(|(d, v)| (d.clone(), v.clone())).chain(activity));
    Observation {
        kind,
        resolution_level: 1,
        subject_agent: None,
        first_day: window.start(),
        last_day: window.end - 1,
        agents: release.agents.map(|n| n.max(0) as u64),
        declarations: release.declarations.map(|n| n.max(0) as u64),
        cells,
        series: Vec::new(),
    }
}

fn named(distributions: &[(Dimension, Vec<(String, i64)>)]) -> Vec<(String, Vec<(String, i64)>)> {
    distributions.iter().map(|(d, v)| (d.as_str().to_string(), v.clone())).collect()
}

/// Makes one observation for `observer` (the agent running the tool).
/// `subject` is the agent observed by agent-level kinds (the observer
/// itself when not given). Refusals are ARA's own: 403 past a disclosure cap,
/// 404 where there is nothing to show.
pub async fn gather(
    services: &Services,
    observer: &AgentRecord,
    kind: ObservationType,
    level: u8,
    subject: Option<Uuid>,
) -> AppResult<Gathered> {
    let release_kind = match kind {
        ObservationType::EnvironmentSummary => Some((Kind::Environment, ObservationTier::Environment)),
        ObservationType::EnvironmentDensity => Some((Kind::Density, ObservationTier::Environment)),
        ObservationType::EnvironmentTsl => Some((Kind::Tsl, ObservationTier::Environment)),
        ObservationType::PatternEeDistribution => Some((Kind::EeDistribution, ObservationTier::Pattern)),
        ObservationType::PatternActionType => Some((Kind::ActionType, ObservationTier::Pattern)),
        ObservationType::EnvironmentAnomaly => Some((Kind::EnvironmentAnomaly, ObservationTier::EnvironmentAnomaly)),
        _ => None,
    };
    if let Some((release_kind, tier)) = release_kind {
        let window = Window::ending_today(services.clock.now(), 30);
        let release = releases::release(services, release_kind, window).await?;
        if !release.shows_anything() {
            let why = releases::nothing_shown(&release, services.config.privacy, "the 30 full days before today");
            return Err(unavailable(format!("{kind}: {why}")));
        }
        let price = price(services, tier, 0)?;
        return Ok(Gathered {
            observation: release_observation(kind, &release),
            tier,
            level: 0,
            target: None,
            base: price.base,
            surcharge: price.surcharge,
        });
    }
    if !matches!(kind, ObservationType::AgentProfile | ObservationType::AgentTimeline | ObservationType::AgentEePattern) {
        return Err(AppError::Conflict {
            code: "TOOL_INPUT_UNSUPPORTED",
            message: format!("{kind} cannot be given to a tool yet; tools receive {}", supported_list()),
        });
    }
    let target: Target = agents::target(services, observer, subject.unwrap_or(observer.agent_id), level).await?;
    let tier = if target.own { ObservationTier::AgentSelf } else { ObservationTier::AgentOther };
    let price = price(services, tier, level)?;
    let today = day_of(services.clock.now());
    let subject_agent = Some(target.agent_id.to_string());
    let target_id = target.agent_id;
    let declarations = Some(target.declarations().max(0) as u64);
    let observation = match kind {
        ObservationType::AgentProfile => {
            let profile = agents::profile_of(services, target).await?;
            Observation {
                kind,
                resolution_level: level,
                subject_agent,
                first_day: profile.first_day.unwrap_or(today),
                last_day: profile.last_day.unwrap_or(today),
                agents: None,
                declarations,
                cells: cells(named(&profile.distributions)),
                series: Vec::new(),
            }
        }
        ObservationType::AgentTimeline => {
            let timeline = agents::timeline_of(services, target).await?;
            let mut series = Vec::new();
            for bucket in &timeline.buckets {
                series.push(DayCount {
                    day: bucket.start_day,
                    dimension: "all".into(),
                    value: "declarations".into(),
                    count: bucket.declarations.max(0) as u64,
                });
                for (dimension, values) in &bucket.breakdown {
                    for (value, n) in values {
                        series.push(DayCount {
                            day: bucket.start_day,
                            dimension: dimension.as_str().into(),
                            value: value.clone(),
                            count: (*n).max(0) as u64,
                        });
                    }
                }
            }
            Observation {
                kind,
                resolution_level: level,
                subject_agent,
                first_day: timeline.buckets.first().map_or(today, |b| b.start_day),
                last_day: today,
                agents: None,
                declarations,
                cells: Vec::new(),
                series,
            }
        }
        _ => {
            // A tool's observation carries no effective-retention figures.
            let pattern = agents::ee_pattern_of(target, 0);
            let combinations = std::iter::once(("ee_combination".to_string(), pattern.combinations.clone()));
            let cells = cells(named(&pattern.distributions).into_iter().chain(combinations));
            Observation {
                kind,
                resolution_level: level,
                subject_agent,
                first_day: 0,
                last_day: today,
                agents: None,
                declarations,
                cells,
                series: Vec::new(),
            }
        }
    };
    Ok(Gathered { observation, tier, level, target: Some(target_id), base: price.base, surcharge: price.surcharge })
}

fn supported_list() -> String {
    SUPPORTED.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
}
