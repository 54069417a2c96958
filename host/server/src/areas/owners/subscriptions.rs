//! A managed agent's subscriptions for its owner (`anchor_app::owners::agents::subscriptions`):
//! indefinite retention and ASA, what they charge next and what a lapsed
//! retention subscription will demote.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use anchor_domain::asa::AsaStatus;
use anchor_domain::retention::RetentionStatus;

use crate::error::ApiResult;
use crate::extract::ApiPath;
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/dap/agent/{agent_id}/subscriptions", get(subscriptions))
            .tag("DAP ASA")
            .summary("A managed agent's subscriptions: indefinite retention and ASA, upcoming charges and demotions")
            .describe("For the portal; free. Upcoming events are listed soonest first.")
            .extension()
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .returns::<SubscriptionsView>(200, "The agent's subscriptions")
            .error(400, "agent_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Not an agent of yours.", &["NOT_LINKED"]),
    ]
}

#[derive(Serialize, JsonSchema)]
struct RetentionView {
    status: Named<RetentionStatus>,
    monthly_dac: Dac,
    next_billing_at: Option<Time>,
    grace_ends_at: Option<Time>,
    indefinite_dd_count: i64,
    demoted_dd_count: i64,
}

#[derive(Serialize, JsonSchema)]
struct AsaView {
    status: Named<AsaStatus>,
    expires_at: Time,
    grace_ends_at: Time,
    days_remaining: i64,
    periods: i64,
}

/// Something that will happen by itself.
#[derive(Serialize, JsonSchema)]
struct Upcoming {
    at: Time,
    /// retention_charge (debited from Earned DAC), retention_demotion
    /// (indefinite records become short ones), asa_period_end, asa_grace_end.
    event: &'static str,
    /// What it charges, if anything.
    dac: Option<Dac>,
    /// How many records it concerns, for a demotion.
    records: Option<i64>,
}

#[derive(Serialize, JsonSchema)]
struct SubscriptionsView {
    agent_id: Id,
    /// Null when indefinite retention is switched off.
    retention: Option<RetentionView>,
    /// The latest ASA subscription, if any.
    asa: Option<AsaView>,
    upcoming: Vec<Upcoming>,
}

async fn subscriptions(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Json<SubscriptionsView>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    let (retention, asa) = anchor_app::owners::agents::subscriptions(&state.app, &owner.owner, agent_id).await?;
    let now = state.app.clock.now();
    let mut upcoming: Vec<(DateTime<Utc>, Upcoming)> = Vec::new();
    let retention = retention.map(|view| {
        let s = view.subscription.as_ref();
        let live = matches!(view.status, RetentionStatus::Active | RetentionStatus::Grace);
        let grace_ends = s.and_then(|s| s.grace_ends_at).filter(|_| view.status == RetentionStatus::Grace);
        if view.status == RetentionStatus::Active
            && let Some(s) = s
        {
            upcoming.push((
                s.next_billing_at,
                Upcoming { at: s.next_billing_at.into(), event: "retention_charge", dac: Some(view.terms.monthly.into()), records: None },
            ));
        }
        if let Some(end) = grace_ends {
            upcoming
                .push((end, Upcoming { at: end.into(), event: "retention_demotion", dac: None, records: Some(view.indefinite_records) }));
        }
        RetentionView {
            status: Named(view.status),
            monthly_dac: view.terms.monthly.into(),
            next_billing_at: s.filter(|_| live).map(|s| s.next_billing_at.into()),
            grace_ends_at: grace_ends.map(Time),
            indefinite_dd_count: view.indefinite_records,
            demoted_dd_count: s.map_or(0, |s| s.demoted_count),
        }
    });
    let asa = asa.map(|s| {
        let status = s.status(now);
        if status == AsaStatus::Active {
            upcoming.push((s.expires_at, Upcoming { at: s.expires_at.into(), event: "asa_period_end", dac: None, records: None }));
        }
        if s.is_live(now) {
            let end = s.grace_ends_at();
            upcoming.push((end, Upcoming { at: end.into(), event: "asa_grace_end", dac: None, records: None }));
        }
        AsaView {
            status: Named(status),
            expires_at: s.expires_at.into(),
            grace_ends_at: s.grace_ends_at().into(),
            days_remaining: s.days_remaining(now),
            periods: s.periods,
        }
    });
    upcoming.sort_by_key(|(at, _)| *at);
    Ok(Json(SubscriptionsView { agent_id: Id(agent_id), retention, asa, upcoming: upcoming.into_iter().map(|(_, u)| u).collect() }))
}
