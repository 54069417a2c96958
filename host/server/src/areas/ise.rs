//! ISE (`anchor_app::ise`): enter, status, exit.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::error::ApiResult;
use crate::extract::{AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use crate::x402_headers::with_settlement;
use anchor_app::ise;
use anchor_domain::ise::IseMode;
use anchor_domain::payments::PaymentSource;
use anchor_domain::records::AgentRecord;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Default, Deserialize, JsonSchema)]
pub(crate) struct EnterRequest {
    /// free (the default), earned_only or external.
    #[schemars(extend("default" = "free"))]
    pub(crate) payment_mode: Option<Named<IseMode>>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Entered {
    pub(crate) session_id: Id,
    pub(crate) payment_mode: Named<IseMode>,
    pub(crate) entered_at: Time,
    /// A free stay ends by itself after this many seconds.
    pub(crate) free_seconds: i64,
    /// What exiting an earned_only or external stay costs, flat, whatever its length (free stays cost nothing).
    pub(crate) fee_dac: Dac,
    /// When the stay ends by itself if not exited.
    pub(crate) ends_at: Time,
}

/// ISE enter, as REST and the MCP tool create_ise_session answer it.
pub(crate) async fn enter_stay(state: &AppState, agent: &AgentRecord, request: Option<EnterRequest>) -> ApiResult<Entered> {
    let mode = request.unwrap_or_default().payment_mode.map(|m| m.0);
    let stay = ise::enter(&state.app, agent, mode).await?;
    let view = Entered {
        session_id: Id(stay.record.session_id),
        payment_mode: Named(stay.record.mode),
        entered_at: stay.record.entered_at.into(),
        free_seconds: stay.terms.free_seconds,
        fee_dac: stay.terms.fee.into(),
        ends_at: stay.ends_at.into(),
    };
    Ok(view)
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Status {
    pub(crate) active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) session_id: Option<Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payment_mode: Option<Named<IseMode>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) entered_at: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) elapsed_seconds: Option<i64>,
    /// What exiting now would cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dac_if_exited_now: Option<Dac>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ends_at: Option<Time>,
}

/// ISE status, as REST and the MCP tool get_ise_status answer it.
pub(crate) async fn stay_status(state: &AppState, agent: &AgentRecord) -> ApiResult<Status> {
    Ok(match ise::status(&state.app, agent).await? {
        None => Status {
            active: false,
            session_id: None,
            payment_mode: None,
            entered_at: None,
            elapsed_seconds: None,
            dac_if_exited_now: None,
            ends_at: None,
        },
        Some(stay) => Status {
            active: true,
            session_id: Some(Id(stay.record.session_id)),
            payment_mode: Some(Named(stay.record.mode)),
            entered_at: Some(stay.record.entered_at.into()),
            elapsed_seconds: Some(stay.elapsed_seconds),
            dac_if_exited_now: Some(stay.if_exited_now.into()),
            ends_at: Some(stay.ends_at.into()),
        },
    })
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Exited {
    pub(crate) session_id: Id,
    pub(crate) payment_mode: Named<IseMode>,
    pub(crate) entered_at: Time,
    pub(crate) exited_at: Time,
    pub(crate) duration_seconds: i64,
    pub(crate) dac_charged: Dac,
    /// trial, external or earned; null when nothing was charged.
    pub(crate) payment_source: Option<Named<PaymentSource>>,
}

/// ISE exit, as REST and the MCP tool exit_ise_session answer it, with the
/// settlement (reference, payer) an external payment got.
pub(crate) async fn exit_stay(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
) -> ApiResult<(Exited, Option<anchor_app::charge::Settlement>)> {
    let (stay, settlement) = ise::exit(&state.app, agent, offered).await?;
    let exited_at = stay.exited_at.unwrap_or(stay.entered_at);
    let view = Exited {
        session_id: Id(stay.session_id),
        payment_mode: Named(stay.mode),
        entered_at: stay.entered_at.into(),
        exited_at: exited_at.into(),
        duration_seconds: (exited_at - stay.entered_at).num_seconds(),
        dac_charged: stay.charged.into(),
        payment_source: stay.source.map(Named),
    };
    Ok((view, settlement))
}

// ---- over HTTP ----

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
