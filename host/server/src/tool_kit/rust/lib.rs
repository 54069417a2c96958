//! {{name}}: an interpretation tool (anchor:tool@1.0.0, world `tool`).

wit_bindgen::generate!({
    path: "wit",
    world: "tool",
});

use std::collections::BTreeMap;

use anchor::tool::types::{Metric, Row};

/// Each cell's count and its share of its dimension, in parts per million.
pub fn interpret(input: &Input) -> Result<Report, String> {
    if input.observations.is_empty() {
        return Err("no observations".into());
    }
    let mut rows = Vec::new();
    for observation in &input.observations {
        let mut totals: BTreeMap<&str, u128> = BTreeMap::new();
        for cell in &observation.cells {
            *totals.entry(cell.dimension.as_str()).or_default() += u128::from(cell.count);
        }
        for cell in &observation.cells {
            let share = (u128::from(cell.count) * 1_000_000).checked_div(totals[cell.dimension.as_str()]).unwrap_or(0);
            rows.push(Row {
                label: format!("{}={}", cell.dimension, cell.value),
                values: vec![i64::try_from(cell.count).unwrap_or(i64::MAX), i64::try_from(share).unwrap_or(i64::MAX)],
            });
        }
    }
    Ok(Report {
        metrics: vec![Metric { name: "observations".into(), value: input.observations.len() as i64, scale: 0 }],
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
    use anchor::tool::types::{Cell, Observation, ObservationKind};

    #[test]
    fn shares_of_the_sample_observation() {
        // The observation of observations.json.
        let cell = |value: &str, count| Cell { dimension: "action_type".into(), value: value.into(), count };
        let input = Input {
            today: 20_500,
            observations: vec![Observation {
                kind: ObservationKind::EnvironmentSummary,
                resolution_level: 1,
                subject_agent: None,
                first_day: 20_470,
                last_day: 20_499,
                agents: Some(12),
                declarations: Some(40),
                cells: vec![cell("execute", 30), cell("hold", 10)],
                series: vec![],
            }],
        };
        let report = interpret(&input).unwrap();
        assert_eq!(report.rows[0].label, "action_type=execute");
        assert_eq!(report.rows[0].values, vec![30, 750_000]);
        assert_eq!(report.rows[1].values, vec![10, 250_000]);
        assert_eq!(report.metrics[0].value, 1);
        assert_eq!(interpret(&Input { today: 0, observations: vec![] }).unwrap_err(), "no observations");
    }
}
