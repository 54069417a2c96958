//! Bilateral declarations over HTTP (`anchor_app::bilateral`): propose,
//! respond, and the received and sent lists.

use crate::api::bilateral::*;
use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use anchor_app::bilateral;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, post};
use serde_json::json;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, bilateral::PROPOSE.path, post(propose))
            .tag("Bilateral")
            .summary("Propose a decision you and another agent took part in; it is recorded for both once accepted")
            .describe(
                "Priced like DD create (the EE quote) and paid over x402 alone (no Trial, no Earned DAC; the DAB applies): the \
                 authorization is reserved with your record and settled when you confirm it, after the counterparty accepts, within \
                 the payment window. Accepting creates the counterparty's own record of the decision at no charge; rejecting, or no \
                 answer within the window, releases the reservation. ee_preset is not accepted here: send the four axes.",
            )
            .agent()
            .takes::<ProposeRequest>(json!({
                "counterparty_agent_id": "00000000-0000-4000-8000-000000000001",
                "dd": {
                    "dd_unit_type": "single", "dd_declaration_mode": "bilateral",
                    "decision_type": "external_interaction", "decision_action_type": "approve",
                    "origin_context_type": "external", "selection_state": "SELECTED",
                },
                "ee": {
                    "ee_retention_period": "short", "ee_integrity_verification_level": "basic",
                    "ee_disclosure_format_policy": "internal", "ee_responsibility_scope": "minimal",
                },
            }))
            .returns::<Proposed>(201, "Proposal created")
            .error(
                400,
                "Validation failed: a mode other than bilateral, ee_preset sent, the counterparty is yourself, a malformed payment header.",
                &[
                    "MISSING_FIELD",
                    "INVALID_ENUM",
                    "UNKNOWN_FIELD",
                    "INVALID_UUID",
                    "INVALID_VALUE",
                    "DECLARATION_MODE_MISMATCH",
                    "DECISION_AT_IN_FUTURE",
                    "INVALID_PAYLOAD",
                ],
            )
            .error(
                403,
                "Another agent's parent, a content-inclusion policy, indefinite retention without subscriptions on both sides, the DAB.",
                &["FORBIDDEN", "CONTENT_INCLUSION_POLICY", "INDEFINITE_SUBSCRIPTION_REQUIRED", "DAB_LIMIT_REACHED"],
            )
            .error(404, "No such counterparty or parent.", &["AGENT_NOT_FOUND", "DD_NOT_FOUND"])
            .error(400, "The request_id was used for another declaration or proposal.", &["REQUEST_ID_USED"])
            .payment_required("No payment came with the proposal, or it was refused.")
            .error(503, "The pricing generation could not price the request.", &["PRICING_UNAVAILABLE"]),
        op(Method::POST, "/v1/dd/bilateral/{agreement_id}/respond", post(respond))
            .tag("Bilateral")
            .summary("Accept or reject a proposal you received (free)")
            .agent()
            .path::<uuid::Uuid>("agreement_id")
            .takes::<RespondRequest>(json!({ "accept": true }))
            .returns::<AgreementView>(200, "Response recorded")
            .error(
                400,
                "agreement_id is not a UUID; accept is missing or not a boolean.",
                &["INVALID_UUID", "MISSING_FIELD", "INVALID_VALUE", "UNKNOWN_FIELD"],
            )
            .error(
                403,
                "You are not the counterparty; indefinite retention without a subscription.",
                &["FORBIDDEN", "INDEFINITE_SUBSCRIPTION_REQUIRED"],
            )
            .error(404, "No such agreement.", &["AGREEMENT_NOT_FOUND"])
            .error(409, "Answered already, or its window ended.", &["AGREEMENT_NOT_PENDING"]),
        op(Method::GET, "/v1/dd/bilateral/received", get(received))
            .tag("Bilateral")
            .summary("Proposals sent to you: pending ones, or all with all=true")
            .agent()
            .query::<ReceivedQuery>()
            .returns::<AgreementList>(200, "Proposal list")
            .error(400, "all is neither true nor false.", &["INVALID_ENUM", "INVALID_VALUE"]),
        op(Method::GET, "/v1/dd/bilateral/sent", get(sent))
            .tag("Bilateral")
            .summary("Proposals you sent, with their state")
            .agent()
            .returns::<AgreementList>(200, "Proposal list"),
    ]
}

async fn propose(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<ProposeRequest>,
) -> ApiResult<(StatusCode, Json<Proposed>)> {
    Ok((StatusCode::CREATED, Json(propose_agreement(&state, &agent, offered, request, anchor_app::declarations::Form::Nested).await?)))
}

async fn respond(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(agreement_id): ApiPath<String>,
    Body(request): Body<RespondRequest>,
) -> ApiResult<Json<AgreementView>> {
    let agreement_id = path_uuid("agreement_id", &agreement_id)?;
    let agreement = bilateral::respond(&state.app, &agent, agreement_id, request.accept).await?;
    Ok(Json(agreement_view(&agreement)))
}

async fn received(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<ReceivedQuery>,
) -> ApiResult<Json<AgreementList>> {
    let all = matches!(query.all, Some(TrueFalse::True));
    Ok(Json(list_view(bilateral::list(&state.app, &agent, false, all).await?)))
}

async fn sent(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<AgreementList>> {
    Ok(Json(list_view(bilateral::list(&state.app, &agent, true, true).await?)))
}
