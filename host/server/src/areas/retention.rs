//! Indefinite retention over HTTP (`anchor_app::retention`): subscribe,
//! status, cancel.

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::Serialize;

use anchor_app::retention::{self, View};
use anchor_domain::retention::{RetentionStatus, Subscription};

use crate::error::ApiResult;
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Named, Time};

const SWITCHED_OFF: &str = "Indefinite retention is switched off on this service (the operator's --features-off retention).";

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/retention/indefinite/subscribe", post(subscribe))
            .tag("Retention")
            .summary("Subscribe to indefinite retention: the month is debited from Earned DAC")
            .describe(
                "Starts (or, within its grace period, reactivates) the agent's indefinite-retention subscription. The month \
                 (monthly_dac) is debited from Earned DAC now; a reactivation charges only if a month fell due during the grace. \
                 Then POST /v1/dd/create accepts ee_retention_period indefinite. Takes no body.",
            )
            .agent()
            .returns::<Subscribed>(200, "Subscription active")
            .error(402, "Earned DAC cannot pay the month (a plain error: this route has no x402 challenge).", &["INSUFFICIENT_DAC"])
            .error(409, "The subscription is active already.", &["ALREADY_SUBSCRIBED"])
            .error(503, SWITCHED_OFF, &["FEATURE_NOT_AVAILABLE"]),
        op(Method::GET, "/v1/retention/indefinite/status", get(status))
            .tag("Retention")
            .summary("The agent's indefinite-retention subscription: none, active, grace or expired")
            .agent()
            .returns::<Status>(200, "Subscription status")
            .error(503, SWITCHED_OFF, &["FEATURE_NOT_AVAILABLE"]),
        op(Method::POST, "/v1/retention/indefinite/cancel", post(cancel))
            .tag("Retention")
            .summary("Cancel indefinite retention: a grace period starts, after which indefinite records are demoted to short")
            .describe(
                "An active subscription enters its grace period. Subscribing again before it ends reactivates it; when it ends, \
                 every indefinite record of the agent is kept as a short one from then on (90 days), and subscribing later does \
                 not undo that.",
            )
            .agent()
            .returns::<Cancelled>(200, "Grace period started")
            .error(404, "The agent has no active subscription.", &["NO_ACTIVE_SUBSCRIPTION"])
            .error(503, SWITCHED_OFF, &["FEATURE_NOT_AVAILABLE"]),
    ]
}

#[derive(Serialize, JsonSchema)]
struct Subscribed {
    status: Named<RetentionStatus>,
    monthly_dac: Dac,
    /// It was in its grace period and is active again.
    reactivated: bool,
    /// What was debited from Earned DAC now.
    charged_dac: Dac,
    next_billing_at: Time,
    subscribed_at: Time,
}

async fn subscribe(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Subscribed>> {
    let (subscription, reactivated, charged, terms) = retention::subscribe(&state.app, &agent).await?;
    Ok(Json(Subscribed {
        status: Named(RetentionStatus::Active),
        monthly_dac: terms.monthly.into(),
        reactivated,
        charged_dac: charged.into(),
        next_billing_at: subscription.next_billing_at.into(),
        subscribed_at: subscription.subscribed_at.into(),
    }))
}

#[derive(Serialize, JsonSchema)]
struct Status {
    status: Named<RetentionStatus>,
    monthly_dac: Dac,
    grace_days: i64,
    /// While active or in grace: when the next month is due.
    next_billing_at: Option<Time>,
    grace_started_at: Option<Time>,
    grace_ends_at: Option<Time>,
    subscribed_at: Option<Time>,
    cancelled_at: Option<Time>,
    expired_at: Option<Time>,
    /// Records kept indefinitely now.
    indefinite_dd_count: i64,
    /// Records demoted to short when the subscription expired.
    demoted_dd_count: i64,
}

fn status_view(view: View) -> Status {
    let View { status, subscription, terms, indefinite_records } = view;
    let s = subscription.as_ref();
    let live = matches!(status, RetentionStatus::Active | RetentionStatus::Grace);
    let in_grace = status != RetentionStatus::Active;
    Status {
        status: Named(status),
        monthly_dac: terms.monthly.into(),
        grace_days: terms.grace.num_days(),
        next_billing_at: s.filter(|_| live).map(|s| Time(s.next_billing_at)),
        grace_started_at: s.filter(|_| in_grace).and_then(|s| s.grace_started_at).map(Time),
        grace_ends_at: s.filter(|_| in_grace).and_then(|s| s.grace_ends_at).map(Time),
        subscribed_at: s.map(|s| Time(s.subscribed_at)),
        cancelled_at: s.and_then(|s| s.cancelled_at).map(Time),
        // An ended grace period is expired at its end, whether or not the job has run.
        expired_at: s.filter(|_| status == RetentionStatus::Expired).and_then(|s| s.expired_at.or(s.grace_ends_at)).map(Time),
        indefinite_dd_count: indefinite_records,
        demoted_dd_count: s.map_or(0, |s| s.demoted_count),
    }
}

async fn status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Status>> {
    Ok(Json(status_view(retention::status(&state.app, &agent).await?)))
}

#[derive(Serialize, JsonSchema)]
struct Cancelled {
    status: Named<RetentionStatus>,
    grace_started_at: Option<Time>,
    grace_ends_at: Option<Time>,
    /// Subscribing again before this keeps the indefinite records.
    next_billing_at: Time,
}

fn cancelled(subscription: &Subscription) -> Cancelled {
    Cancelled {
        status: Named(RetentionStatus::Grace),
        grace_started_at: subscription.grace_started_at.map(Time),
        grace_ends_at: subscription.grace_ends_at.map(Time),
        next_billing_at: subscription.next_billing_at.into(),
    }
}

async fn cancel(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Cancelled>> {
    Ok(Json(cancelled(&retention::cancel(&state.app, &agent).await?)))
}
