//! An example interpretation tool for the anchoring service's market, in Rust.
//!
//! For every cell of every observation it reports the count and the cell's
//! share of its dimension in parts per million (rounded down), with a few
//! totals. `plugins/tools/example-js` is the same tool in JavaScript; both
//! give the same report for the same input.
//!
//! Build: `cargo build --release --target wasm32-wasip2` (in `plugins/`);
//! run locally: `anchor tool run target/wasm32-wasip2/release/tool_example.wasm --input observations.json`.

wit_bindgen::generate!({
    path: "../../../wit/tool@1.0.0",
    world: "tool",
});

use std::collections::{BTreeMap, BTreeSet};

use anchor::tool::types::{Metric, ObservationKind, Row};

/// The observation kind's name as the WIT spells it.
fn kind_name(kind: ObservationKind) -> &'static str {
    match kind {
        ObservationKind::AgentEePattern => "agent-ee-pattern",
        ObservationKind::AgentProfile => "agent-profile",
        ObservationKind::AgentTimeline => "agent-timeline",
        ObservationKind::AnomalyCompare => "anomaly-compare",
        ObservationKind::DecisionMetadata => "decision-metadata",
        ObservationKind::EnvironmentAnomaly => "environment-anomaly",
        ObservationKind::EnvironmentDensity => "environment-density",
        ObservationKind::EnvironmentSummary => "environment-summary",
        ObservationKind::EnvironmentTsl => "environment-tsl",
        ObservationKind::EvidenceReport => "evidence-report",
        ObservationKind::PatternActionType => "pattern-action-type",
        ObservationKind::PatternCompare => "pattern-compare",
        ObservationKind::PatternEeDistribution => "pattern-ee-distribution",
    }
}

/// A count as a report value (counts never reach i64::MAX in practice).
fn value(n: u128) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The tool's function, callable natively for tests.
pub fn interpret(input: &Input) -> Result<Report, String> {
    if input.observations.is_empty() {
        return Err("no observations".into());
    }
    let mut rows = Vec::new();
    let mut cells = 0u64;
    let mut agents = 0u64;
    let mut series_total = 0u64;
    let mut days = BTreeSet::new();
    for observation in &input.observations {
        let mut totals: BTreeMap<&str, u128> = BTreeMap::new();
        for cell in &observation.cells {
            *totals.entry(cell.dimension.as_str()).or_default() += u128::from(cell.count);
        }
        for cell in &observation.cells {
            let total = totals[cell.dimension.as_str()];
            let share = (u128::from(cell.count) * 1_000_000).checked_div(total).unwrap_or(0);
            rows.push(Row {
                label: format!("{}:{}={}", kind_name(observation.kind), cell.dimension, cell.value),
                values: vec![value(u128::from(cell.count)), value(share)],
            });
        }
        cells += observation.cells.len() as u64;
        agents = agents.wrapping_add(observation.agents.unwrap_or(0));
        for point in &observation.series {
            series_total = series_total.wrapping_add(point.count);
            days.insert(point.day);
        }
    }
    let metric = |name: &str, value: i64| Metric { name: name.into(), value, scale: 0 };
    Ok(Report {
        metrics: vec![
            metric("observations", input.observations.len() as i64),
            metric("cells", cells as i64),
            metric("agents", agents as i64),
            metric("series_total", series_total as i64),
            metric("days", days.len() as i64),
        ],
        columns: vec!["count".into(), "share_ppm".into()],
        rows,
    })
}

struct Tool;

impl Guest for Tool {
    fn run(input: Input) -> Result<Report, String> {
        interpret(&input)
    }
}

export!(Tool);

#[cfg(test)]
mod tests {
    use super::*;
    use anchor::tool::types::{Cell, DayCount, Observation};

    fn cell(dimension: &str, value: &str, count: u64) -> Cell {
        Cell { dimension: dimension.into(), value: value.into(), count }
    }

    #[test]
    fn shares_are_per_dimension_and_rounded_down() {
        let input = Input {
            today: 20_000,
            observations: vec![Observation {
                kind: ObservationKind::EnvironmentSummary,
                resolution_level: 1,
                subject_agent: None,
                first_day: 19_970,
                last_day: 19_999,
                agents: Some(12),
                declarations: Some(40),
                cells: vec![cell("action_type", "execute", 2), cell("action_type", "hold", 1), cell("retention", "short", 0)],
                series: vec![DayCount { day: 19_990, dimension: "d".into(), value: "v".into(), count: 3 }],
            }],
        };
        let report = interpret(&input).unwrap();
        assert_eq!(report.rows[0].label, "environment-summary:action_type=execute");
        assert_eq!(report.rows[0].values, vec![2, 666_666]);
        assert_eq!(report.rows[1].values, vec![1, 333_333]);
        assert_eq!(report.rows[2].values, vec![0, 0]);
        let metrics: Vec<(&str, i64)> = report.metrics.iter().map(|m| (m.name.as_str(), m.value)).collect();
        assert_eq!(metrics, [("observations", 1), ("cells", 3), ("agents", 12), ("series_total", 3), ("days", 1)]);
        assert_eq!(interpret(&Input { today: 0, observations: vec![] }).unwrap_err(), "no observations");
    }
}
