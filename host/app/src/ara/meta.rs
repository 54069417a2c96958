//! Meta-observation of an agent's own decisions: where one decision sits in
//! the agent's own recent pattern (anomaly compare), and the evidence report
//! of a decision for an external audience.

use chrono::Duration;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::ara::{MIN_SAMPLE, Point, Positions, positions, time_zone};
use anchor_domain::pricing::ObservationTier;
use anchor_domain::records::{AgentRecord, SampleRow, StoredDeclaration};

use super::{Observed, Purchase, pay, unavailable};
use crate::charge::Offered;
use crate::declarations::Evidence;
use crate::{AppError, AppResult, Services};

/// The most recent branch-1 decisions a comparison samples.
pub const SAMPLE_LIMIT: i64 = 1_000;

/// A decision against the agent's own recent branch-1 decisions.
#[derive(Clone, Debug)]
pub struct AnomalyComparison {
    pub dd_id: Uuid,
    pub period_days: i32,
    pub sample_size: usize,
    pub positions: Positions,
    /// The sample's decision scale band in the decision's unit: (min, max, unit).
    pub scale_band: Option<(f64, f64, String)>,
    /// The sample's premium band.
    pub resolution_band: Option<(MilliDac, MilliDac)>,
}

/// A sampled decision as a point of the five dimensions.
pub fn point(row: &SampleRow) -> Point {
    Point {
        scale: row.scale_value.as_deref().and_then(|v| v.parse::<f64>().ok()).zip(row.scale_unit.clone()),
        decision_class: row.decision_class.clone(),
        target_class: row.target_class.clone(),
        time_zone: Some(time_zone(row.decision_at.unwrap_or(row.anchored_at))),
        ee_resolution: row.premium,
    }
}

/// A stored declaration as a point of the five dimensions.
pub fn point_of(stored: &StoredDeclaration) -> Point {
    let d = &stored.declaration;
    let t = d.template.as_ref();
    Point {
        scale: t
            .and_then(|t| t.decision_scale_value.as_deref().and_then(|v| v.parse::<f64>().ok()))
            .zip(t.and_then(|t| t.decision_scale_unit.clone())),
        decision_class: t.and_then(|t| t.decision_class).map(|c| c.as_str().to_string()),
        target_class: t.and_then(|t| t.target_class).map(|c| c.as_str().to_string()),
        time_zone: Some(time_zone(d.dd.decision_at.unwrap_or(d.anchored_at))),
        ee_resolution: stored.premium(),
    }
}

/// The declaration, if it exists and is the agent's own.
async fn own(services: &Services, agent: &AgentRecord, dd_id: Uuid) -> AppResult<StoredDeclaration> {
    let stored = crate::declarations::stored(services, dd_id).await?;
    if stored.declaration.agent_id != agent.agent_id {
        return Err(AppError::forbidden("FORBIDDEN", "meta-observation covers your own decisions only; this one is another agent's"));
    }
    Ok(stored)
}

/// GET /v1/ara/anomaly-compare: the decision against the agent's branch-1
/// decisions of the last `period_days` (the decision itself left out); at
/// least two are needed, else 404 `DATA_UNAVAILABLE` and nothing is charged.
pub async fn anomaly_compare(
    services: &Services,
    agent: &AgentRecord,
    dd_id: Uuid,
    period_days: Option<i32>,
    offered: Offered,
) -> AppResult<Observed<AnomalyComparison>> {
    // 90 days unless asked, as the interface says.
    let period_days = period_days.unwrap_or(90);
    if !(1..=365).contains(&period_days) {
        return Err(AppError::invalid("INVALID_VALUE", format!("period_days must be from 1 to 365; got {period_days}")));
    }
    let stored = own(services, agent, dd_id).await?;
    // The window runs up to now, included.
    let now = services.clock.now();
    let to = now + Duration::microseconds(1);
    let rows = services
        .store
        .branch_one_sample(agent.agent_id, now - Duration::days(i64::from(period_days)), to, Some(dd_id), SAMPLE_LIMIT)
        .await?;
    if rows.len() < MIN_SAMPLE {
        return Err(unavailable(format!(
            "at least {MIN_SAMPLE} of your branch-1 decisions (with a template) in the last {period_days} days are needed; there are {}",
            rows.len()
        )));
    }
    let sample: Vec<Point> = rows.iter().map(point).collect();
    let target = point_of(&stored);
    let scale_band = target.scale.as_ref().and_then(|(_, unit)| {
        let values: Vec<f64> = sample.iter().filter_map(|p| p.scale.as_ref()).filter(|(_, u)| u == unit).map(|(v, _)| *v).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (!values.is_empty()).then(|| (min, max, unit.clone()))
    });
    let resolutions = sample.iter().map(|p| p.ee_resolution);
    let resolution_band = resolutions.clone().min().zip(resolutions.max());
    let comparison = AnomalyComparison {
        dd_id,
        period_days,
        sample_size: sample.len(),
        positions: positions(&target, &sample),
        scale_band,
        resolution_band,
    };
    let purchase = Purchase::flat(
        super::ANOMALY_COMPARE,
        ObservationTier::AnomalyCompare,
        Some(agent.agent_id),
        format!("Anomaly comparison of decision {dd_id} over {period_days} days"),
    );
    pay(services, agent.agent_id, purchase, offered, comparison).await
}

/// GET /v1/ara/evidence-report: the evidence report of one of the agent's own
/// decisions, for an external audience (the owner's is free, under /dap).
pub async fn evidence_report(services: &Services, agent: &AgentRecord, dd_id: Uuid, offered: Offered) -> AppResult<Observed<Evidence>> {
    let stored = own(services, agent, dd_id).await?;
    let evidence = crate::declarations::evidence(services, stored).await?;
    let purchase = Purchase::flat(
        super::EVIDENCE_REPORT,
        ObservationTier::EvidenceReport,
        Some(agent.agent_id),
        format!("Evidence report of decision {dd_id}"),
    );
    pay(services, agent.agent_id, purchase, offered, evidence).await
}
