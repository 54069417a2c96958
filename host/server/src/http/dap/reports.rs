//! Owner reports: the dashboard, a per-agent report, the weekly comparison, a
//! CSV export, the evidence report for one decision, and daily usage for the
//! portal's chart. Metadata only: nothing here carries a decision's content.
//!
//! What counts: a declaration is "on record" unless its external payment was
//! released or failed (it was then never anchored). Amounts are the DAC the
//! declaration was priced at, whoever paid. A declaration has one payment row
//! per cost component (base fee, and premium when there is one), and
//! `settlement_statuses` lists those rows' statuses. This service has no daily
//! DD limit and never suspends an agent, so `rate_limit.daily_dd_limit` is null
//! and `is_suspended` is false; `monthly_dac_limit` is the agent's DAB.

use std::collections::BTreeMap;

use crate::extract::{ApiPath, ApiQuery};
use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_store::{ListFilter, StoredDeclaration};

use super::{managed, time};
use crate::error::{ApiError, ApiResult};
use crate::http::input::{path_uuid, query_datetime};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;

/// The CSV export's header, as the reference clients read it.
pub const CSV_HEADER: &str =
    "dd_id,anchored_at,action_type,selection_state,retention,integrity,disclosure,responsibility,dac_amount,settlement_statuses";
/// How many declarations the per-agent report lists.
const RECENT: i64 = 20;
/// The longest range the usage chart covers.
const USAGE_MAX_DAYS: i64 = 366;

pub fn operations() -> Vec<Operation> {
    let recent = object(
        &[],
        vec![
            ("dd_id", uuid()),
            ("anchored_at", datetime()),
            ("selection_state", string()),
            ("decision_action_type", string()),
            ("dac_amount", nullable(number())),
            ("settlement_statuses", array(string())),
        ],
    );
    let counts = || object(&[], vec![("dd_count", integer()), ("dac_total", number())]);
    vec![
        op(Method::GET, "/dap/dashboard", get(dashboard))
            .tag("DAP Dashboard")
            .summary("Every managed agent with its declarations on record and their DAC, and the totals")
            .owner()
            .ok(200, "Dashboard", object(&[], vec![
                ("agents", array(object(&[], vec![
                    ("agent_id", uuid()),
                    ("linked_at", datetime()),
                    ("auth_status", string()),
                    ("dd_count", integer()),
                    ("dac_total", number()),
                ]))),
                ("total_dd_count", integer()),
                ("total_dac_amount", number()),
            ])),
        op(Method::GET, "/dap/agent/{agent_id}/report", get(report))
            .tag("DAP Dashboard")
            .summary("One agent: totals, DAB, limits and its latest declarations")
            .owner()
            .path_param("agent_id", uuid())
            .ok(200, "Agent report; each declaration once, its payment rows' statuses in settlement_statuses", object(&[], vec![
                ("agent_id", uuid()),
                ("linked_at", datetime()),
                ("summary", object(&[], vec![("total_dd", integer()), ("total_dac", number()), ("settled_payment_rows", integer())])),
                ("dab", nullable(object(&[], vec![
                    ("budget_limit_dac", number()),
                    ("budget_used_dac", number()),
                    ("budget_period", string()),
                    ("period_start", datetime()),
                ]))),
                ("rate_limit", object(&[], vec![
                    ("daily_dd_count", integer()),
                    ("daily_dd_limit", nullable(integer())),
                    ("monthly_dac_total", number()),
                    ("monthly_dac_limit", number()),
                    ("is_suspended", boolean()),
                ])),
                ("recent_dds", array(recent)),
            ]))
            .error(400, "agent_id is not a UUID", &["INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/agent/{agent_id}/report/weekly", get(weekly))
            .tag("DAP Dashboard")
            .summary("The last seven days against the seven before")
            .owner()
            .path_param("agent_id", uuid())
            .ok(200, "Weekly comparison", object(&[], vec![
                ("agent_id", uuid()),
                ("period", object(&[], vec![("start", datetime()), ("end", datetime())])),
                ("this_week", counts()),
                ("prev_week", counts()),
                ("change", object(&[], vec![
                    ("dd_count", integer()),
                    ("dd_pct", nullable(number())),
                    ("dac_total", number()),
                    ("dac_pct", nullable(number())),
                ])),
                ("ee_distribution", array(object(&[], vec![
                    ("ee_retention_period", string()),
                    ("ee_integrity_verification_level", string()),
                    ("ee_disclosure_format_policy", string()),
                    ("ee_responsibility_scope", string()),
                    ("dd_count", integer()),
                ]))),
            ]))
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/agent/{agent_id}/report/export", get(export))
            .tag("DAP Dashboard")
            .summary("The agent's declarations as CSV, one row per declaration")
            .describe("Header: dd_id,anchored_at,action_type,selection_state,retention,integrity,disclosure,responsibility,dac_amount,settlement_statuses. Statuses of several payment rows are joined with +; no field needs quoting.")
            .owner()
            .path_param("agent_id", uuid())
            .query_param("from", datetime())
            .query_param("to", datetime())
            .ok_media(200, "The report as CSV", "text/csv")
            .error(400, "A malformed date-time", &["INVALID_VALUE", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
        op(Method::GET, "/dap/evidence-report", get(evidence_report))
            .tag("ARA")
            .summary("Evidence report for one decision of a managed agent (free for its owner)")
            .owner()
            .required_query("dd_id", uuid())
            .ok(200, "Sections: report, decision, ee_resolution, responsibility, accountability_record, transparency_log", json!({ "type": "object" }))
            .error(400, "dd_id missing or not a UUID", &["MISSING_FIELD", "INVALID_UUID"])
            .error(403, "The decision's agent is not managed by this owner", &["NOT_LINKED"])
            .error(404, "No such decision", &["DD_NOT_FOUND"]),
        op(Method::GET, "/dap/usage/daily", get(usage_daily))
            .tag("DAP Dashboard")
            .summary("Declarations and DAC per UTC day, for the portal's chart")
            .extension()
            .owner()
            .query_param("days", json!({ "type": "integer", "minimum": 1, "maximum": USAGE_MAX_DAYS, "default": 30 }))
            .query_param("agent_id", uuid())
            .ok(200, "One entry per day, oldest first, days without declarations included", object(&[], vec![
                ("from", datetime()),
                ("to", datetime()),
                ("days", array(object(&[], vec![("date", string()), ("dd_count", integer()), ("dac_total", number())]))),
                ("total_dac", number()),
            ]))
            .error(400, "days out of range or agent_id malformed", &["INVALID_VALUE", "INVALID_UUID"])
            .error(403, "Not managed by this owner", &["NOT_LINKED"]),
    ]
}

fn on_record(s: &StoredDeclaration) -> bool {
    !matches!(s.settlement_status.as_str(), "released" | "failed")
}

/// One status per payment row: the base fee, and the premium when there is one.
fn settlement_statuses(s: &StoredDeclaration) -> Vec<&str> {
    let rows = if s.premium() > MilliDac::ZERO { 2 } else { 1 };
    vec![s.settlement_status.as_str(); rows]
}

/// Every declaration of the agent anchored in `[from, to)`, newest first.
async fn all_declarations(
    state: &AppState,
    agent_id: Uuid,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> ApiResult<Vec<StoredDeclaration>> {
    const PAGE: i64 = 500;
    let mut out = Vec::new();
    loop {
        let filter = ListFilter { from, to, limit: PAGE, offset: out.len() as i64 };
        let (page, _) = state.store.list_declarations(agent_id, filter).await?;
        let done = (page.len() as i64) < PAGE;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

async fn dashboard(State(state): State<AppState>, auth: AuthOwner) -> ApiResult<axum::Json<Value>> {
    let agents = state.store.owner_agents(auth.owner.owner_id).await?;
    let (mut count, mut dac) = (0, MilliDac::ZERO);
    let mut rows = Vec::new();
    for a in &agents {
        let totals = state.store.declaration_totals(a.agent.agent_id, None, None).await?;
        count += totals.count;
        dac = dac + totals.dac;
        rows.push(json!({
            "agent_id": a.agent.agent_id,
            "linked_at": a.linked_at.map(time),
            "auth_status": "active",
            "dd_count": totals.count,
            "dac_total": totals.dac.to_json_number(),
        }));
    }
    Ok(axum::Json(json!({ "agents": rows, "total_dd_count": count, "total_dac_amount": dac.to_json_number() })))
}

fn day_start(t: DateTime<Utc>) -> DateTime<Utc> {
    Utc.from_utc_datetime(&t.date_naive().and_hms_opt(0, 0, 0).expect("midnight"))
}

async fn report(State(state): State<AppState>, auth: AuthOwner, ApiPath(agent_id): ApiPath<String>) -> ApiResult<axum::Json<Value>> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let linked = managed(&state, &auth.owner, agent_id).await?;
    let now = state.clock.now();
    let totals = state.store.declaration_totals(agent_id, None, None).await?;
    let today = state.store.declaration_totals(agent_id, Some(day_start(now)), None).await?;
    let (month_start, _) = anchor_domain::dab::period(now);
    let month = state.store.declaration_totals(agent_id, Some(month_start), None).await?;
    let dab = crate::http::payments::dab_view(&state, agent_id).await?;
    let (recent, _) = state.store.list_declarations(agent_id, ListFilter { limit: RECENT, ..Default::default() }).await?;
    Ok(axum::Json(json!({
        "agent_id": agent_id,
        "linked_at": linked.linked_at.map(time),
        "summary": {
            "total_dd": totals.count,
            "total_dac": totals.dac.to_json_number(),
            "settled_payment_rows": totals.settled_rows,
        },
        "dab": {
            "budget_limit_dac": dab["budget_limit_dac"],
            "budget_used_dac": dab["budget_used_dac"],
            "budget_period": "monthly",
            "period_start": dab["period_start"],
            "limit_source": dab["limit_source"],
        },
        "rate_limit": {
            "daily_dd_count": today.count,
            "daily_dd_limit": Value::Null,
            "monthly_dac_total": month.dac.to_json_number(),
            "monthly_dac_limit": dab["budget_limit_dac"],
            "is_suspended": false,
        },
        "recent_dds": recent.iter().map(|s| json!({
            "dd_id": s.declaration.dd_id,
            "anchored_at": time(s.declaration.anchored_at),
            "selection_state": s.declaration.dd.selection_state.as_str(),
            "decision_action_type": s.declaration.dd.action_type.as_str(),
            "dac_amount": s.declaration.dac_amount.to_json_number(),
            "settlement_statuses": settlement_statuses(s),
        })).collect::<Vec<_>>(),
    })))
}

/// `(this - prev) / prev` in percent, one decimal; null when prev is zero.
fn percent(this: i64, prev: i64) -> Value {
    if prev == 0 {
        return Value::Null;
    }
    let tenths = ((this - prev) * 1000) / prev;
    json!(tenths as f64 / 10.0)
}

async fn weekly(State(state): State<AppState>, auth: AuthOwner, ApiPath(agent_id): ApiPath<String>) -> ApiResult<axum::Json<Value>> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    managed(&state, &auth.owner, agent_id).await?;
    let now = state.clock.now();
    let start = now - Duration::days(7);
    let prev_start = start - Duration::days(7);
    let this = state.store.declaration_totals(agent_id, Some(start), None).await?;
    let prev = state.store.declaration_totals(agent_id, Some(prev_start), Some(start)).await?;
    let mut distribution: BTreeMap<[&str; 4], i64> = BTreeMap::new();
    let week = all_declarations(&state, agent_id, Some(start), None).await?;
    for s in week.iter().filter(|s| on_record(s)) {
        let scope = &s.declaration.ee.scope;
        *distribution
            .entry([scope.retention.as_str(), scope.integrity.as_str(), scope.disclosure.as_str(), scope.responsibility.as_str()])
            .or_default() += 1;
    }
    Ok(axum::Json(json!({
        "agent_id": agent_id,
        "period": { "start": time(start), "end": time(now) },
        "this_week": { "dd_count": this.count, "dac_total": this.dac.to_json_number() },
        "prev_week": { "dd_count": prev.count, "dac_total": prev.dac.to_json_number() },
        "change": {
            "dd_count": this.count - prev.count,
            "dd_pct": percent(this.count, prev.count),
            "dac_total": (this.dac - prev.dac).to_json_number(),
            "dac_pct": percent(this.dac.milli(), prev.dac.milli()),
        },
        "ee_distribution": distribution.iter().map(|(axes, count)| json!({
            "ee_retention_period": axes[0],
            "ee_integrity_verification_level": axes[1],
            "ee_disclosure_format_policy": axes[2],
            "ee_responsibility_scope": axes[3],
            "dd_count": count,
        })).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
}

async fn export(
    State(state): State<AppState>,
    auth: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<RangeQuery>,
) -> ApiResult<Response> {
    let agent_id = path_uuid("agent_id", &agent_id)?;
    let from = query_datetime("from", q.from.as_deref())?;
    let to = query_datetime("to", q.to.as_deref())?;
    managed(&state, &auth.owner, agent_id).await?;
    let all = all_declarations(&state, agent_id, from, to).await?;
    let mut csv = String::with_capacity(64 + all.len() * 200);
    csv.push_str(CSV_HEADER);
    csv.push('\n');
    // Oldest first; every value is a UUID, a timestamp, an enum name or a number.
    for s in all.iter().rev() {
        let d = &s.declaration;
        let scope = &d.ee.scope;
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            d.dd_id,
            time(d.anchored_at),
            d.dd.action_type.as_str(),
            d.dd.selection_state.as_str(),
            scope.retention.as_str(),
            scope.integrity.as_str(),
            scope.disclosure.as_str(),
            scope.responsibility.as_str(),
            d.dac_amount,
            settlement_statuses(s).join("+"),
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

#[derive(Deserialize)]
struct DdQuery {
    dd_id: Option<String>,
}

async fn evidence_report(State(state): State<AppState>, auth: AuthOwner, ApiQuery(q): ApiQuery<DdQuery>) -> ApiResult<axum::Json<Value>> {
    let dd_id = q.dd_id.as_deref().ok_or_else(|| ApiError::bad("MISSING_FIELD", "the dd_id query parameter is required"))?;
    let dd_id = path_uuid("dd_id", dd_id)?;
    let stored =
        state.store.declaration(dd_id).await?.ok_or_else(|| ApiError::not_found("DD_NOT_FOUND", format!("no declaration {dd_id}")))?;
    let d = &stored.declaration;
    managed(&state, &auth.owner, d.agent_id).await?;
    let log_entry = state.store.log_entry_for(dd_id).await?;
    let checkpoint = state.store.latest_checkpoint().await?;
    let scope = &d.ee.scope;
    let t = d.template.as_ref();
    Ok(axum::Json(json!({
        "report": {
            "report_type": "evidence",
            "audience": "owner",
            "generated_at": time(state.clock.now()),
            "dd_id": dd_id,
            "dac_charged": 0,
            "content_included": false,
        },
        "decision": {
            "dd_id": dd_id,
            "agent_id": d.agent_id,
            "dd_unit_type": d.dd.unit_type.as_str(),
            "dd_declaration_mode": d.dd.declaration_mode.as_str(),
            "decision_type": d.dd.decision_type.as_str(),
            "decision_action_type": d.dd.action_type.as_str(),
            "origin_context_type": d.dd.origin_context.as_str(),
            "selection_state": d.dd.selection_state.as_str(),
            "selection_scope": d.dd.selection_scope.map(|v| v.as_str()),
            "decision_at": d.dd.decision_at.map(time),
            "anchored_at": time(d.anchored_at),
            "lineage_group_id": d.lineage_group_id,
            "parent_dd_id": d.dd.parent_dd_id,
            "content_inclusion_flag": i32::from(d.content_inclusion),
            "self_classification": t.and_then(|t| t.self_classification.clone()),
            "decision_class": t.and_then(|t| t.decision_class.map(|v| v.as_str())),
            "target_class": t.and_then(|t| t.target_class.map(|v| v.as_str())),
        },
        "ee_resolution": {
            "ee_id": d.ee_id,
            "ee_preset": d.ee.preset,
            "ee_retention_period": scope.retention.as_str(),
            "ee_integrity_verification_level": scope.integrity.as_str(),
            "ee_disclosure_format_policy": scope.disclosure.as_str(),
            "access_class": d.ee.access_class.as_str(),
            "ee_direct_access_period": d.ee.direct_access_period.to_string(),
        },
        "responsibility": {
            "ee_responsibility_scope": scope.responsibility.as_str(),
            "delegation_state": scope.delegation.as_str(),
            "content_disclosure_scope": scope.content_scope.as_str(),
            "declared_by": d.agent_id,
        },
        "accountability_record": {
            "integrity_hash": stored.integrity_hash,
            "confirmed_at": stored.confirmed_at.map(time),
            "settlement_status": stored.settlement_status,
            "dac_amount": d.dac_amount.to_json_number(),
            "pricing_version": d.pricing_version,
        },
        "transparency_log": {
            "included": log_entry.is_some(),
            "leaf_index": log_entry.as_ref().map(|(index, _)| *index),
            "checkpoint_size": checkpoint.as_ref().map(|c| c.size),
            "covered_by_checkpoint": match (&log_entry, &checkpoint) {
                (Some((index, _)), Some(c)) => *index < c.size,
                _ => false,
            },
            "receipt": format!("{}/v1/dd/{dd_id}/receipt", state.settings.public_url),
            "log_key": format!("{}/v1/log/key", state.settings.public_url),
        },
    })))
}

#[derive(Deserialize)]
struct UsageQuery {
    days: Option<String>,
    agent_id: Option<String>,
}

async fn usage_daily(State(state): State<AppState>, auth: AuthOwner, ApiQuery(q): ApiQuery<UsageQuery>) -> ApiResult<axum::Json<Value>> {
    let days = match q.days.as_deref() {
        None => 30,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|d| (1..=USAGE_MAX_DAYS).contains(d))
            .ok_or_else(|| ApiError::bad("INVALID_VALUE", format!("days must be an integer from 1 to {USAGE_MAX_DAYS}")))?,
    };
    let agents: Vec<Uuid> = match q.agent_id.as_deref() {
        Some(id) => {
            let id = path_uuid("agent_id", id)?;
            managed(&state, &auth.owner, id).await?;
            vec![id]
        }
        None => state.store.owner_agents(auth.owner.owner_id).await?.iter().map(|a| a.agent.agent_id).collect(),
    };
    let now = state.clock.now();
    let first: NaiveDate = now.date_naive() - Duration::days(days - 1);
    let from = Utc.from_utc_datetime(&first.and_hms_opt(0, 0, 0).expect("midnight"));
    let mut buckets: BTreeMap<NaiveDate, (i64, MilliDac)> = (0..days).map(|i| (first + Duration::days(i), (0, MilliDac::ZERO))).collect();
    let mut total = MilliDac::ZERO;
    for agent_id in agents {
        for s in all_declarations(&state, agent_id, Some(from), None).await?.iter().filter(|s| on_record(s)) {
            if let Some(bucket) = buckets.get_mut(&s.declaration.anchored_at.date_naive()) {
                bucket.0 += 1;
                bucket.1 = bucket.1 + s.declaration.dac_amount;
                total = total + s.declaration.dac_amount;
            }
        }
    }
    Ok(axum::Json(json!({
        "from": time(from),
        "to": time(now),
        "days": buckets.iter().map(|(date, (count, dac))| json!({
            "date": format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day()),
            "dd_count": count,
            "dac_total": dac.to_json_number(),
        })).collect::<Vec<_>>(),
        "total_dac": total.to_json_number(),
    })))
}
