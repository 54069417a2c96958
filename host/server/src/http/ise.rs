//! ISE over HTTP (`anchor_app::ise`): enter, status, exit.

use crate::api::ise::*;
use crate::error::ApiResult;
use crate::extract::{AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::payment::with_settlement;
use crate::state::AppState;
use anchor_app::ise::{self};
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/ise/enter", post(enter))
            .tag("ISE")
            .summary("Enter the idle state: declare nothing until you exit (free)")
            .describe(
                "payment_mode chooses how the stay is paid, if it costs anything: free (never charged; the stay ends by itself \
                 after the free seconds), earned_only (from Earned DAC only) or external (Trial first, then x402). Exiting an \
                 earned_only or external stay costs the flat fee, the base fee of the interface, whatever its length. Only entry, \
                 exit and duration are kept.",
            )
            .agent()
            .takes::<EnterRequest>(json!({ "payment_mode": "external" }))
            .returns::<Entered>(201, "ISE session started")
            .error(400, "A payment_mode outside free, earned_only, external.", &["INVALID_ENUM", "UNKNOWN_FIELD"])
            .error(409, "The agent is in an ISE session already.", &["SESSION_EXISTS"]),
        op(Method::GET, "/v1/ise/status", get(status))
            .tag("ISE")
            .summary("The agent's open ISE session, if any, and what exiting now would cost (free)")
            .agent()
            .returns::<Status>(200, "Session status"),
        op(Method::POST, ise::EXIT.path, post(exit))
            .tag("ISE")
            .summary("Exit the idle state; an earned_only or external stay costs the flat fee")
            .describe(
                "earned_only stays are paid from Earned DAC (400 INSUFFICIENT_DAC keeps the session open); external ones from \
                 Trial, else over x402 (the DAB applies), settled before the answer. A stay past its limit ends at its limit.",
            )
            .agent()
            .returns::<Exited>(200, "Session ended with DAC charge info")
            .error(400, "Earned DAC cannot pay an earned_only stay; a malformed payment header.", &["INSUFFICIENT_DAC", "INVALID_PAYLOAD"])
            .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
            .error(404, "The agent is not in an ISE session (or its stay's exit is being paid).", &["NO_ACTIVE_SESSION"])
            .error(409, "Another exit of the same stay is being paid; it is paid once.", &["DUPLICATE_REQUEST"])
            .paid_inline("Trial cannot pay the stay and no payment came, or it was refused (the reason is in `error`).")
            .error(
                503,
                "The settlement's outcome is unknown; it is settled in the background and charged at most once.",
                &["SETTLEMENT_PENDING"],
            ),
    ]
}

async fn enter(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<Option<EnterRequest>>,
) -> ApiResult<Response> {
    Ok((StatusCode::CREATED, Json(enter_stay(&state, &agent, request).await?)).into_response())
}

async fn status(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Status>> {
    Ok(Json(stay_status(&state, &agent).await?))
}

async fn exit(State(state): State<AppState>, AuthAgent(agent): AuthAgent, PaymentOffer(offered): PaymentOffer) -> ApiResult<Response> {
    let (view, settlement) = exit_stay(&state, &agent, offered).await?;
    Ok(with_settlement(Json(view).into_response(), settlement.as_ref()))
}
