//! Owner reports over HTTP: the dashboard, a per-agent report, the weekly
//! comparison, a CSV export, the evidence report for one decision, and daily
//! usage for the portal's chart (`anchor_app::owners::reports`).
//!
//! A declaration has one payment row per cost component (base fee, and
//! premium when there is one), and `settlement_statuses` lists those rows'
//! statuses. This service has no daily DD limit and never suspends an agent,
//! so `rate_limit.daily_dd_limit` is null and `is_suspended` is false;
//! `monthly_dac_limit` is the agent's DAB.

use crate::areas::reports::EvidenceReport;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Datelike;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use anchor_app::owners::reports;
use anchor_domain::MilliDac;
use anchor_domain::agents::AuthStatus;
use anchor_domain::declarations::{dd, ee};
use anchor_domain::payments::SettlementStatus;
use anchor_domain::records::Totals;

use crate::areas::declarations::Axes;
use crate::areas::payment_status::{BudgetPeriod, LimitSource};
use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, SignedDac, Time, TimeSecs};

/// The CSV export's header, as the reference clients read it.
pub const CSV_HEADER: &str =
    "dd_id,anchored_at,action_type,selection_state,retention,integrity,disclosure,responsibility,dac_amount,settlement_statuses";

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/dap/dashboard", get(dashboard))
            .tag("DAP Dashboard")
            .summary("Every managed agent with its declarations on record and their DAC, and the totals")
            .owner()
            .returns::<Dashboard>(200, "Dashboard"),
        op(Method::GET, "/dap/agent/{agent_id}/report", get(report))
            .tag("DAP Dashboard")
            .summary("One agent: totals, DAB, limits and its latest declarations")
            .owner()
            .path::<Uuid>("agent_id")
            .returns::<AgentReport>(200, "Agent report; each declaration once, its payment rows' statuses in settlement_statuses")
            .error(400, "agent_id is not a UUID", &["INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/agent/{agent_id}/report/weekly", get(weekly))
            .tag("DAP Dashboard")
            .summary("The last seven days against the seven before")
            .owner()
            .path::<Uuid>("agent_id")
            .returns::<Weekly>(200, "Weekly comparison")
            .error(400, "agent_id is not a UUID", &["INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/agent/{agent_id}/report/export", get(export))
            .tag("DAP Dashboard")
            .summary("The agent's declarations as CSV, one row per declaration")
            .describe("Header: dd_id,anchored_at,action_type,selection_state,retention,integrity,disclosure,responsibility,dac_amount,settlement_statuses. Statuses of several payment rows are joined with +; no field needs quoting.")
            .owner()
            .path::<Uuid>("agent_id")
            .query::<RangeQuery>()
            .ok_media(200, "The report as CSV", "text/csv")
            .error(400, "A malformed date-time", &["INVALID_VALUE", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/evidence-report", get(evidence_report))
            .tag("ARA")
            .summary("Evidence report for one decision of a managed agent (free for its owner)")
            .owner()
            .query::<DdQuery>()
            .returns::<EvidenceReport>(200, "Sections: report, decision, ee_resolution, responsibility, accountability_record, transparency_log")
            .error(400, "dd_id missing or not a UUID", &["MISSING_FIELD", "INVALID_UUID"])
            .error(403, "The decision's agent is not managed by this owner", &["NOT_LINKED"])
            .error(404, "No such decision", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/dap/dd/{dd_id}/receipt", get(receipt))
            .tag("DAP Dashboard")
            .summary("The receipt of a managed agent's confirmed decision, for its owner to keep or hand to an auditor")
            .describe("The same receipt as GET /v1/dd/{dd_id}/receipt gives the agent (the record's salt included); `anchor verify` checks it offline.")
            .extension()
            .owner()
            .path::<Uuid>("dd_id")
            .returns::<anchor_verify::Receipt>(200, "Receipt")
            .error(400, "dd_id is not a UUID", &["INVALID_UUID"])
            .error(403, "The decision's agent is not managed by this owner", &["NOT_LINKED"])
            .error(404, "No such decision", &["DD_NOT_FOUND"])
            .error(409, "Not confirmed, or not yet in a signed checkpoint (retry shortly).", &["NOT_CONFIRMED", "NOT_YET_IN_LOG"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/dap/usage/daily", get(usage_daily))
            .tag("DAP Dashboard")
            .summary("Declarations and DAC per UTC day, for the portal's chart")
            .extension()
            .owner()
            .query::<UsageQuery>()
            .returns::<Usage>(200, "One entry per day, oldest first, days without declarations included")
            .error(400, "days out of range or agent_id malformed", &["INVALID_VALUE", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
    ]
}

#[derive(Serialize, JsonSchema)]
struct Dashboard {
    agents: Vec<DashboardAgent>,
    total_dd_count: i64,
    total_dac_amount: Dac,
}

#[derive(Serialize, JsonSchema)]
struct DashboardAgent {
    agent_id: Uuid,
    linked_at: Option<Time>,
    /// active, or recovery_locked while wrong recovery keys have spent its recovery window.
    auth_status: Named<AuthStatus>,
    dd_count: i64,
    dac_total: Dac,
}

async fn dashboard(State(state): State<AppState>, owner: AuthOwner) -> ApiResult<Json<Dashboard>> {
    let rows = reports::dashboard(&state.app, &owner.owner).await?;
    let (mut count, mut dac) = (0, MilliDac::ZERO);
    let agents = rows
        .into_iter()
        .map(|row| {
            count += row.totals.count;
            dac = dac + row.totals.dac;
            DashboardAgent {
                agent_id: row.agent.linked.agent.agent_id,
                linked_at: row.agent.linked.linked_at.map(Time),
                auth_status: Named(row.agent.auth_status),
                dd_count: row.totals.count,
                dac_total: row.totals.dac.into(),
            }
        })
        .collect();
    Ok(Json(Dashboard { agents, total_dd_count: count, total_dac_amount: dac.into() }))
}

#[derive(Serialize, JsonSchema)]
struct AgentReport {
    agent_id: Uuid,
    linked_at: Option<Time>,
    summary: ReportSummary,
    dab: ReportDab,
    rate_limit: ReportLimits,
    recent_dds: Vec<RecentDd>,
}

#[derive(Serialize, JsonSchema)]
struct ReportSummary {
    total_dd: i64,
    total_dac: Dac,
    settled_payment_rows: i64,
}

#[derive(Serialize, JsonSchema)]
struct ReportDab {
    budget_limit_dac: Dac,
    budget_used_dac: Dac,
    budget_period: BudgetPeriod,
    period_start: TimeSecs,
    limit_source: LimitSource,
}

#[derive(Serialize, JsonSchema)]
struct ReportLimits {
    daily_dd_count: i64,
    /// This service has no daily limit.
    daily_dd_limit: Option<i64>,
    monthly_dac_total: Dac,
    /// The agent's DAB.
    monthly_dac_limit: Dac,
    is_suspended: bool,
}

#[derive(Serialize, JsonSchema)]
struct RecentDd {
    dd_id: Uuid,
    anchored_at: Time,
    selection_state: Named<dd::SelectionState>,
    decision_action_type: Named<dd::ActionType>,
    dac_amount: Dac,
    settlement_statuses: Vec<Named<SettlementStatus>>,
    /// Where the record's proof stands (an extension of this service).
    proof: RecordProof,
}

/// How far a record's receipt reaches now.
#[derive(Serialize, JsonSchema)]
struct RecordProof {
    /// The ee_integrity_verification_level it declared.
    integrity_declared: Named<ee::Integrity>,
    /// The level its receipt reaches now: basic (the log's signature),
    /// enhanced (a witness quorum), certifiable (a quorum and a time stamp).
    integrity_reached: Named<ee::Integrity>,
    /// In a checkpoint the log signed (false: confirmed and waiting, or not confirmed).
    in_log: bool,
    /// In a checkpoint the witness quorum cosigned.
    witnessed: bool,
    /// The witnesses that cosigned it.
    cosigned_by: Vec<String>,
    /// The time a time-stamping authority put on the covering checkpoint.
    timestamped_at: Option<Time>,
    /// That authority's URL.
    timestamped_by: Option<String>,
}

async fn report(State(state): State<AppState>, owner: AuthOwner, ApiPath(agent_id): ApiPath<String>) -> ApiResult<Json<AgentReport>> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let r = reports::agent_report(&state.app, &owner.owner, agent_id).await?;
    Ok(Json(AgentReport {
        agent_id,
        linked_at: r.linked.linked_at.map(Time),
        summary: ReportSummary { total_dd: r.totals.count, total_dac: r.totals.dac.into(), settled_payment_rows: r.totals.settled_rows },
        dab: ReportDab {
            budget_limit_dac: r.dab.limit.into(),
            budget_used_dac: r.dab.spent.into(),
            budget_period: BudgetPeriod::Monthly,
            period_start: r.dab.period_start.into(),
            limit_source: LimitSource::of(r.dab.owner_set),
        },
        rate_limit: ReportLimits {
            daily_dd_count: r.today.count,
            daily_dd_limit: None,
            monthly_dac_total: r.month.dac.into(),
            monthly_dac_limit: r.dab.limit.into(),
            is_suspended: false,
        },
        recent_dds: r
            .recent
            .iter()
            .map(|(s, statuses)| RecentDd {
                dd_id: s.declaration.dd_id,
                anchored_at: s.declaration.anchored_at.into(),
                selection_state: Named(s.declaration.dd.selection_state),
                decision_action_type: Named(s.declaration.dd.action_type),
                dac_amount: s.declaration.dac_amount.into(),
                settlement_statuses: statuses.iter().copied().map(Named).collect(),
                proof: {
                    let standing = r.proofs.get(&s.declaration.dd_id);
                    RecordProof {
                        integrity_declared: Named(s.declaration.ee.scope.integrity),
                        integrity_reached: Named(standing.map_or(ee::Integrity::Basic, |p| p.reached)),
                        in_log: standing.is_some_and(|p| p.in_log),
                        witnessed: standing.is_some_and(|p| p.witnessed),
                        cosigned_by: standing.map(|p| p.cosigned_by.clone()).unwrap_or_default(),
                        timestamped_at: standing.and_then(|p| p.timestamped.as_ref()).map(|(at, _)| Time(*at)),
                        timestamped_by: standing.and_then(|p| p.timestamped.as_ref()).map(|(_, tsa)| tsa.clone()),
                    }
                },
            })
            .collect(),
    }))
}

#[derive(Serialize, JsonSchema)]
struct Weekly {
    agent_id: Uuid,
    period: WeekPeriod,
    this_week: WeekTotals,
    prev_week: WeekTotals,
    change: Change,
    ee_distribution: Vec<ScopeCount>,
}

#[derive(Serialize, JsonSchema)]
struct WeekPeriod {
    start: Time,
    end: Time,
}

#[derive(Serialize, JsonSchema)]
struct WeekTotals {
    dd_count: i64,
    dac_total: Dac,
}

impl From<Totals> for WeekTotals {
    fn from(t: Totals) -> WeekTotals {
        WeekTotals { dd_count: t.count, dac_total: t.dac.into() }
    }
}

#[derive(Serialize, JsonSchema)]
struct Change {
    dd_count: i64,
    /// Percent, one decimal; null when the previous week had none.
    dd_pct: Option<f64>,
    dac_total: SignedDac,
    dac_pct: Option<f64>,
}

#[derive(Serialize, JsonSchema)]
struct ScopeCount {
    #[serde(flatten)]
    axes: Axes,
    dd_count: i64,
}

impl Change {
    /// Percent with one decimal, from the use case's per mille.
    fn of(c: reports::Change) -> Change {
        let percent = |per_mille: Option<i64>| per_mille.map(|p| p as f64 / 10.0);
        Change { dd_count: c.dd_count, dd_pct: percent(c.dd_per_mille), dac_total: SignedDac(c.dac), dac_pct: percent(c.dac_per_mille) }
    }
}

async fn weekly(State(state): State<AppState>, owner: AuthOwner, ApiPath(agent_id): ApiPath<String>) -> ApiResult<Json<Weekly>> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let w = reports::weekly(&state.app, &owner.owner, agent_id).await?;
    Ok(Json(Weekly {
        agent_id,
        period: WeekPeriod { start: w.start.into(), end: w.end.into() },
        change: Change::of(w.change()),
        this_week: w.this_week.into(),
        prev_week: w.prev_week.into(),
        ee_distribution: w
            .distribution
            .into_iter()
            .map(|((retention, integrity, disclosure, responsibility), dd_count)| ScopeCount {
                axes: Axes::new(retention, integrity, disclosure, responsibility),
                dd_count,
            })
            .collect(),
    }))
}

#[derive(Deserialize, JsonSchema)]
struct RangeQuery {
    from: Option<Time>,
    to: Option<Time>,
}

async fn export(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<RangeQuery>,
) -> ApiResult<Response> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let rows = reports::export(&state.app, &owner.owner, agent_id, query.from.map(|t| t.0), query.to.map(|t| t.0)).await?;
    let mut csv = String::with_capacity(64 + rows.len() * 200);
    csv.push_str(CSV_HEADER);
    csv.push('\n');
    // Every value is a UUID, a timestamp, an enum name or a number.
    for (s, statuses) in &rows {
        let d = &s.declaration;
        let scope = &d.ee.scope;
        let statuses: Vec<&str> = statuses.iter().map(|n| n.as_str()).collect();
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            d.dd_id,
            Time(d.anchored_at).text(),
            d.dd.action_type.as_str(),
            d.dd.selection_state.as_str(),
            scope.retention.as_str(),
            scope.integrity.as_str(),
            scope.disclosure.as_str(),
            scope.responsibility.as_str(),
            d.dac_amount,
            statuses.join("+"),
        ));
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"agent-{agent_id}-report.csv\"")),
        ],
        csv,
    )
        .into_response())
}

#[derive(Deserialize, JsonSchema)]
struct DdQuery {
    dd_id: Id,
}

async fn evidence_report(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiQuery(query): ApiQuery<DdQuery>,
) -> ApiResult<Json<EvidenceReport>> {
    let evidence = reports::evidence(&state.app, &owner.owner, query.dd_id.0).await?;
    Ok(Json(EvidenceReport::of(&evidence, "owner", MilliDac::ZERO, &state.settings.config.public_url)))
}

async fn receipt(State(state): State<AppState>, owner: AuthOwner, ApiPath(dd_id): ApiPath<String>) -> ApiResult<Response> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let receipt = reports::receipt(&state.app, &owner.owner, dd_id).await?;
    // Saved as a file by a browser's download link.
    let mut response = Json(receipt).into_response();
    if let Ok(value) = axum::http::HeaderValue::from_str(&format!("attachment; filename=\"receipt-{dd_id}.json\"")) {
        response.headers_mut().insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

#[derive(Deserialize, JsonSchema)]
struct UsageQuery {
    #[schemars(range(min = 1, max = reports::USAGE_MAX_DAYS), extend("default" = 30))]
    days: Option<i64>,
    agent_id: Option<Id>,
}

#[derive(Serialize, JsonSchema)]
struct Usage {
    from: Time,
    to: Time,
    days: Vec<UsageDay>,
    total_dac: Dac,
}

#[derive(Serialize, JsonSchema)]
struct UsageDay {
    /// YYYY-MM-DD (UTC).
    #[schemars(extend("format" = "date"))]
    date: String,
    dd_count: i64,
    dac_total: Dac,
}

async fn usage_daily(State(state): State<AppState>, owner: AuthOwner, ApiQuery(query): ApiQuery<UsageQuery>) -> ApiResult<Json<Usage>> {
    let usage = reports::usage_daily(&state.app, &owner.owner, query.days, query.agent_id.map(|a| a.0)).await?;
    Ok(Json(Usage {
        from: usage.from.into(),
        to: usage.to.into(),
        days: usage
            .days
            .into_iter()
            .map(|(date, dd_count, dac)| UsageDay {
                date: format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day()),
                dd_count,
                dac_total: dac.into(),
            })
            .collect(),
        total_dac: usage.total.into(),
    }))
}
