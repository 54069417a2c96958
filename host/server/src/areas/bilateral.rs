//! Bilateral declarations (`anchor_app::bilateral`): propose,
//! respond, and the received and sent lists.
//!
//! Its wire shapes and the function each operation runs are one set, served
//! by the route table here and by the MCP tools (`mcp/`) alike.

use crate::areas::declarations::{Continuity, DdInput, EeRequest};
use crate::body::path_uuid;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::bilateral;
use anchor_domain::bilateral::{Agreement, AgreementStatus};
use anchor_domain::payments::SettlementStatus;
use anchor_domain::records::{AgentRecord, AgreementListing, StoredDeclaration};
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ProposeRequest {
    pub(crate) counterparty_agent_id: Id,
    pub(crate) dd: DdInput,
    /// The four axes (ee_preset is refused here).
    pub(crate) ee: EeRequest,
    pub(crate) continuity: Option<Continuity>,
    /// Idempotency key, scoped to the agent.
    pub(crate) request_id: Option<Id>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Proposed {
    pub(crate) agreement_id: Id,
    pub(crate) status: Named<AgreementStatus>,
    pub(crate) dd_id: Id,
    pub(crate) counterparty_agent_id: Id,
    pub(crate) dac_amount: Dac,
    pub(crate) settlement_status: Named<SettlementStatus>,
    /// Confirm your record after acceptance and before this; unanswered by then, the proposal expires.
    pub(crate) expires_at: Time,
    pub(crate) pricing_version: String,
}

/// A bilateral proposal, as REST and the MCP tool propose_bilateral answer it.
pub(crate) async fn propose_agreement(
    state: &AppState,
    agent: &AgentRecord,
    offered: anchor_app::charge::Offered,
    request: ProposeRequest,
    form: anchor_app::declarations::Form,
) -> ApiResult<Proposed> {
    let request = anchor_app::requests::ProposeRequest {
        request_id: request.request_id.map(|r| r.0),
        counterparty_agent_id: request.counterparty_agent_id.0,
        dd: request.dd.into_request(),
        ee: request.ee.into_request(),
        continuity_parent: request.continuity.and_then(|c| c.parent_dd_id).map(|p| p.0),
        form,
    };
    let (stored, agreement) = bilateral::propose(&state.app, agent, request, offered).await?;
    Ok(proposed(&stored, &agreement))
}

pub(crate) fn proposed(stored: &StoredDeclaration, agreement: &Agreement) -> Proposed {
    Proposed {
        agreement_id: Id(agreement.agreement_id),
        status: Named(agreement.status),
        dd_id: Id(stored.declaration.dd_id),
        counterparty_agent_id: Id(agreement.counterparty_agent_id),
        dac_amount: stored.declaration.dac_amount.into(),
        settlement_status: Named(stored.settlement_status),
        expires_at: agreement.expires_at.into(),
        pricing_version: stored.declaration.pricing_version.clone(),
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct RespondRequest {
    pub(crate) accept: bool,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct AgreementView {
    pub(crate) agreement_id: Id,
    pub(crate) status: Named<AgreementStatus>,
    pub(crate) proposer_agent_id: Id,
    pub(crate) counterparty_agent_id: Id,
    pub(crate) proposer_dd_id: Id,
    /// Your record of the decision, once accepted: confirm it to anchor it.
    pub(crate) counterparty_dd_id: Option<Id>,
    pub(crate) proposed_at: Time,
    pub(crate) expires_at: Time,
    pub(crate) responded_at: Option<Time>,
}

pub(crate) fn agreement_view(a: &Agreement) -> AgreementView {
    AgreementView {
        agreement_id: Id(a.agreement_id),
        status: Named(a.status),
        proposer_agent_id: Id(a.proposer_agent_id),
        counterparty_agent_id: Id(a.counterparty_agent_id),
        proposer_dd_id: Id(a.proposer_dd_id),
        counterparty_dd_id: a.counterparty_dd_id.map(Id),
        proposed_at: a.proposed_at.into(),
        expires_at: a.expires_at.into(),
        responded_at: a.responded_at.map(Time),
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ReceivedQuery {
    /// true: answered and expired proposals too; false (the default): pending ones.
    pub(crate) all: Option<TrueFalse>,
}

#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TrueFalse {
    True,
    False,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Listed {
    #[serde(flatten)]
    pub(crate) agreement: AgreementView,
    pub(crate) decision_type: String,
    pub(crate) decision_action_type: String,
    pub(crate) ee_retention_period: String,
    pub(crate) dac_amount: Dac,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct AgreementList {
    pub(crate) agreements: Vec<Listed>,
    pub(crate) count: usize,
}

pub(crate) fn list_view(found: Vec<AgreementListing>) -> AgreementList {
    let agreements: Vec<Listed> = found
        .into_iter()
        .map(|l| Listed {
            agreement: agreement_view(&l.agreement),
            decision_type: l.decision_type,
            decision_action_type: l.decision_action_type,
            ee_retention_period: l.ee_retention_period,
            dac_amount: l.dac_amount.into(),
        })
        .collect();
    AgreementList { count: agreements.len(), agreements }
}

// ---- over HTTP ----

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
                "You are not the counterparty; indefinite retention without a subscription; accepting would record a declaration \
                 without content (a counterparty's record carries none) while your owner requires content_inclusion_flag 1.",
                &["FORBIDDEN", "INDEFINITE_SUBSCRIPTION_REQUIRED", "CONTENT_INCLUSION_POLICY"],
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
