//! DD and EE over HTTP: create (priced by the pricing component, paid from
//! Trial or over x402), confirm (fixes the integrity hash), list, detail,
//! lineage. The rules live in `anchor_app::declarations`, the request and
//! response bodies in `api::declarations`; here are their routes.
//!
//! # Direct access
//!
//! `GET /v1/dd/{dd_id}` returns the original: every declared field. Each such
//! read by the owning agent counts one against the EE's
//! `ee_direct_access_quota` and must fall within `ee_direct_access_period`,

use crate::api::declarations::*;
use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer, TraceParent};
use crate::openapi::*;
use crate::payment;
use crate::state::AppState;
use anchor_app::declarations::{self};
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::json;
use uuid::Uuid;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/v1/dd/create", post(create))
            .tag("DD")
            .summary("Declare a decision with its accountability scope")
            .describe("Records the declaration's metadata, prices its EE with the active pricing generation and pays it from Trial while Trial lasts. Trial pays a declaration whole or not at all: when what is left of it covers the base fee but not the premium, the answer is 402 for the whole price, unless premium_payment_source is external (Trial then pays the base fee and x402 the premium) or earned. Reusing a request_id returns the earlier result. When nothing can pay, answers 402 with an x402 challenge. A template is read only with content_inclusion_flag 1 (branch 1); with the flag 0 (branch 0, the decision fact only) a template sent is ignored and not stored. context (sent by the published SDK) is accepted and dropped: it may carry decision content, which this service never stores. A traceparent header (W3C trace context of the run that made the decision), sent once and well-formed, links the record: its salt commits to the trace id (the id itself is not stored), the answer carries trace_key, and the receipt lets whoever holds the trace id prove the link (anchor verify --trace-id); a missing or malformed one leaves the record unlinked.")
            .agent()
            .takes::<CreateRequest>(json!({
                "request_id": "00000000-0000-4000-8000-000000000000",
                "dd": {
                    "dd_unit_type": "single", "dd_declaration_mode": "self_declared",
                    "decision_type": "internal_service", "decision_action_type": "execute",
                    "origin_context_type": "internal", "selection_state": "SELECTED",
                },
                "ee": { "ee_preset": "EE_basic" },
            }))
            .returns::<CreateResponse>(201, "Created (or the earlier result of the same request_id)")
            .error(400, "Validation failed, premium_payment_source earned with an Earned balance that cannot pay the premium (below min_spend_threshold, or short), or a request_id used before for a declaration of another dd, ee or template (REQUEST_ID_USED; the same body gets the earlier answer). Keys the request does not define are left out and named in the Anchor-Ignored-Fields header.", &[
                "MISSING_FIELD", "INVALID_ENUM", "UNKNOWN_FIELD", "INVALID_UUID", "INVALID_VALUE", "INVALID_INPUT",
                "INVALID_EE_PRESET", "EE_PRESET_DISABLED", "DECLARATION_MODE_NOT_ALLOWED", "DECISION_AT_IN_FUTURE",
                "PII_DETECTED", "INSUFFICIENT_DAC", "REQUEST_ID_USED",
            ])
            .error(400, "A PAYMENT-SIGNATURE (or X-PAYMENT) header that is not base64 JSON, or both headers with different payments.", &["INVALID_PAYLOAD"])
            .error(403, "The parent belongs to another agent, the owner's content-inclusion policy forbids it, indefinite retention without a subscription, or the agent's DAB is reached.", &[
                "FORBIDDEN", "CONTENT_INCLUSION_POLICY", "INDEFINITE_SUBSCRIPTION_REQUIRED", "DAB_LIMIT_REACHED",
            ])
            .error(404, "parent_dd_id names no declaration.", &["DD_NOT_FOUND"])
            .error(410, "parent_dd_id names a record past its retention period, de-identified.", &["RECORD_DEIDENTIFIED"])
            .payment_required("Trial cannot pay (spent or expired) and no payment came with the request, or the payment was refused.")
            .error(503, "The pricing generation could not price the request; nothing was recorded or charged.", &["PRICING_UNAVAILABLE"]),
        op(Method::POST, "/v1/dd/confirm", post(confirm))
            .tag("DD")
            .summary("Confirm a declaration after its action")
            .describe("Settles the record once, writes its usage entries and fixes its integrity hash. transaction_id is accepted (the published SDK sends it) and not used: an external payment settles from the x402 payment signed at create, so confirm needs no transaction reference.")
            .agent()
            .takes::<ConfirmRequest>(json!({ "dd_id": "0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b" }))
            .returns::<ConfirmResponse>(200, "Confirmed")
            .error(400, "Invalid request.", &["MISSING_FIELD", "INVALID_UUID", "UNKNOWN_FIELD"])
            .error(403, "The record belongs to another agent.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(409, "Already confirmed, or the payment failed to settle earlier; a bilateral record before acceptance, after rejection, or (the counterparty's) before the proposer's is confirmed.", &[
                "ALREADY_CONFIRMED", "PAYMENT_FAILED", "AGREEMENT_PENDING", "AGREEMENT_REJECTED", "AGREEMENT_UNPAID",
            ])
            .error(410, "The external payment window closed, or the record is past its retention period and was de-identified.", &["PAYMENT_EXPIRED", "RECORD_DEIDENTIFIED"])
            .returns::<crate::error::ErrorBody>(402, "Settlement failed: nothing was charged or anchored; PAYMENT-RESPONSE says why. Code: SETTLEMENT_FAILED.")
            .error(503, "The settlement's outcome is unknown; confirm again to reconcile.", &["SETTLEMENT_PENDING"]),
        op(Method::GET, "/v1/dd/list", get(list))
            .tag("DD")
            .summary("List the agent's declarations, newest first")
            .agent()
            .query::<ListQuery>()
            .returns::<ListResponse>(200, "Summaries (no declared fields; these reads are free)")
            .error(400, "Invalid query.", &["INVALID_VALUE"]),
        op(Method::GET, "/v1/dd/{dd_id}", get(detail))
            .tag("DD")
            .summary("Read a declaration's original (counts against direct access)")
            .agent()
            .path::<Uuid>("dd_id")
            .returns::<Detail>(200, "The declaration")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record, or direct access spent, expired or not permitted.", &[
                "FORBIDDEN", "DIRECT_ACCESS_EXHAUSTED", "DIRECT_ACCESS_EXPIRED", "DIRECT_ACCESS_NOT_PERMITTED",
            ])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/v1/dd/{dd_id}/lineage", get(lineage))
            .tag("DD")
            .summary("The lineage tree a declaration belongs to")
            .agent()
            .path::<Uuid>("dd_id")
            .returns::<LineageView>(200, "Lineage tree")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"]),
        op(Method::GET, "/v1/dd/lineage-group/{group_id}", get(lineage_group))
            .tag("DD")
            .summary("Every declaration of one lineage group")
            .agent()
            .path::<Uuid>("group_id")
            .returns::<LineageGroup>(200, "Declarations in the group, oldest first")
            .error(400, "group_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "The agent has no declaration in this group.", &["NOT_FOUND"]),
    ]
}

async fn create(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    TraceParent(trace): TraceParent,
    Body(request): Body<CreateRequest>,
) -> ApiResult<(StatusCode, Json<CreateResponse>)> {
    Ok((StatusCode::CREATED, Json(create_decision(&state, &agent, offered, request, anchor_app::declarations::Form::Nested, trace).await?)))
}

async fn confirm(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<ConfirmRequest>,
) -> ApiResult<axum::response::Response> {
    if request.transaction_id.as_ref().is_some_and(|t| t.chars().count() > 256) {
        return Err(ApiError::bad("INVALID_VALUE", "transaction_id is at most 256 characters (and not needed: see the OpenAPI)"));
    }
    let (body, settlement, settled_at) = confirm_decision(&state, &agent, request.dd_id.0).await?;
    let mut response = payment::with_settlement(Json(body).into_response(), settlement.as_ref());
    // It settled with the confirmation: its receipt says when.
    response.extensions_mut().insert(settled_at);
    Ok(response)
}

async fn list(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Json<ListResponse>> {
    Ok(Json(list_decisions(&state, &agent, query).await?))
}

async fn detail(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiPath(dd_id): ApiPath<String>) -> ApiResult<Json<Detail>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    Ok(Json(decision_detail(&state, &agent, dd_id).await?))
}

async fn lineage(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<Json<LineageView>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let lineage = declarations::lineage(&state.app, agent.agent_id, dd_id).await?;
    let root = lineage.root();
    Ok(Json(LineageView {
        dd_id,
        lineage_group_id: lineage.declaration.declaration.lineage_group_id,
        root_dd_id: root.declaration.dd_id,
        ancestors: lineage.ancestors.iter().map(Summary::from).collect(),
        tree: TreeNode::of(&lineage, root, 0),
    }))
}

async fn lineage_group(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(group_id): ApiPath<String>,
) -> ApiResult<Json<LineageGroup>> {
    let group_id = path_uuid("group_id", &group_id)?;
    let group = declarations::lineage_group(&state.app, agent.agent_id, group_id).await?;
    Ok(Json(LineageGroup { lineage_group_id: group_id, dds: group.iter().map(Summary::from).collect(), count: group.len() }))
}
