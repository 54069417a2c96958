//! bilateral: the wire shapes of its operations (requests, answers) and the
//! function each runs, shared by REST (`http::bilateral`) and MCP.

use crate::api::declarations::{Continuity, DdInput, EeRequest};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use anchor_app::bilateral;
use anchor_domain::bilateral::{Agreement, AgreementStatus};
use anchor_domain::payments::SettlementStatus;
use anchor_domain::records::AgentRecord;
use anchor_domain::records::{AgreementListing, StoredDeclaration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
