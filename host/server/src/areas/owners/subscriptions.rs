//! A managed agent's subscriptions for its owner (`anchor_app::owners::agents::subscriptions`):
//! indefinite retention and ASA, what they charge next and what a lapsed
//! retention subscription will demote.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
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
    let found = anchor_app::owners::agents::subscriptions(&state.app, &owner.owner, agent_id).await?;
    Ok(Json(SubscriptionsView {
        agent_id: Id(agent_id),
        retention: found.retention.map(|r| RetentionView {
            status: Named(r.status),
            monthly_dac: r.monthly.into(),
            next_billing_at: r.next_billing_at.map(Time),
            grace_ends_at: r.grace_ends_at.map(Time),
            indefinite_dd_count: r.indefinite_records,
            demoted_dd_count: r.demoted_records,
        }),
        asa: found.asa.map(|a| AsaView {
            status: Named(a.status),
            expires_at: a.expires_at.into(),
            grace_ends_at: a.grace_ends_at.into(),
            days_remaining: a.days_remaining,
            periods: a.periods,
        }),
        upcoming: found
            .upcoming
            .into_iter()
            .map(|u| Upcoming { at: u.at.into(), event: u.event.name(), dac: u.charge.map(Dac::from), records: u.records })
            .collect(),
    }))
}
