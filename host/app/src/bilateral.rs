//! Bilateral declarations: propose (priced like DD create, paid over x402
//! alone: reserved with the proposer's record, settled when the proposer
//! confirms after acceptance), respond (accepting creates the
//! counterparty's own record of the same decision, free; rejecting releases
//! the reservation), the job that expires unanswered proposals (released
//! likewise), and the lists. Each side confirms its own record, which anchors
//! it in the log, so each side holds a receipt.

use chrono::Duration;
use rand::RngCore;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::bilateral::{Agreement, AgreementStatus};
use anchor_domain::declarations::Declaration;
use anchor_domain::declarations::ee::Retention;
use anchor_domain::records::{AgentRecord, AgreementListing, StoredDeclaration};
use anchor_ports::{NewAgreement, NewDeclaration, Responded};

use crate::agreements::{not_found, release};
use crate::charge::{Offered, PAYMENT_WINDOW_SECS};
use crate::requests::ProposeRequest;
use crate::{AppError, AppResult, Services};

pub use crate::agreements::PROPOSE;

/// Agreements per list.
const LIST_LIMIT: i64 = 200;

/// POST /v1/dd/bilateral/propose: the proposer's record and its agreement.
/// A request_id used before answers the earlier proposal.
pub async fn propose(
    services: &Services,
    agent: &AgentRecord,
    request: ProposeRequest,
    offered: Offered,
) -> AppResult<(StoredDeclaration, Agreement)> {
    let counterparty = request.counterparty_agent_id;
    let input = request.into_input(services.clock.now())?;
    if counterparty == agent.agent_id {
        return Err(AppError::invalid("INVALID_VALUE", "counterparty_agent_id names the proposing agent itself"));
    }
    if services.store.agent(counterparty).await?.is_none() {
        return Err(AppError::not_found("AGENT_NOT_FOUND", format!("no agent {counterparty}")));
    }
    if input.ee.retention == Some(Retention::Indefinite) {
        crate::retention::require_active(services, counterparty).await.map_err(|_| {
            AppError::forbidden(
                "INDEFINITE_SUBSCRIPTION_REQUIRED",
                "ee_retention_period indefinite needs an active indefinite-retention subscription on both sides; the counterparty has none",
            )
        })?;
    }
    // A request_id used before answers its proposal, with no payment asked again.
    // (Only when it proposes the same thing: REQUEST_ID_USED otherwise.)
    let stored = match services.store.declaration_by_request(agent.agent_id, input.request_id).await? {
        Some(earlier) => {
            crate::declarations::same_input(services, &earlier, &input)?;
            earlier
        }
        None => {
            let agreement =
                NewAgreement { agreement_id: Uuid::new_v4(), counterparty_agent_id: counterparty, expires_at: window_end(services) };
            crate::declarations::record(services, agent, input, offered, Some(agreement)).await?
        }
    };
    let agreement_id = stored.agreement_id.ok_or_else(|| {
        AppError::invalid(
            "REQUEST_ID_USED",
            "this request_id was used for a declaration that is no bilateral proposal; send a new request_id",
        )
    })?;
    let agreement =
        services.store.agreement(agreement_id).await?.ok_or_else(|| AppError::Internal(anyhow::anyhow!("agreement vanished")))?;
    if agreement.counterparty_agent_id != counterparty {
        return Err(AppError::invalid(
            "REQUEST_ID_USED",
            "this request_id was used for a proposal to another agent; send a new request_id",
        ));
    }
    Ok((stored, agreement))
}

fn window_end(services: &Services) -> chrono::DateTime<chrono::Utc> {
    services.clock.now() + Duration::seconds(PAYMENT_WINDOW_SECS as i64)
}

/// The counterparty's own record of the proposed decision: the same declared
/// fields, its own ids, salt and anchoring time, at no charge.
fn mirror(proposal: &StoredDeclaration, counterparty: Uuid, services: &Services) -> NewDeclaration {
    let now = services.clock.now();
    let p = &proposal.declaration;
    let mut salt = [0u8; 32];
    rand::rng().fill_bytes(&mut salt);
    let dd_id = anchor_domain::record_id();
    let mut dd = p.dd.clone();
    dd.parent_dd_id = None;
    let declaration = Declaration {
        dd_id,
        ee_id: anchor_domain::record_id(),
        agent_id: counterparty,
        dd,
        ee: p.ee.clone(),
        content_inclusion: false,
        template: None,
        anchored_at: now,
        lineage_group_id: dd_id,
        pricing_version: p.pricing_version.clone(),
        pricing_sha256: p.pricing_sha256.clone(),
        dac_amount: MilliDac::ZERO,
        salt,
        trace_key: None,
    };
    NewDeclaration {
        direct_access_expires_at: declaration.ee.direct_access_period.end_from(now),
        declaration,
        request_id: Uuid::new_v4(),
        subtotal: MilliDac::ZERO,
        base_fee: MilliDac::ZERO,
        multiplier_permille: proposal.multiplier_permille,
        monthly: MilliDac::ZERO,
        external: None,
        base_from_trial: false,
        earned_premium: None,
        agreement: None,
        token_check: None,
    }
}

/// POST /v1/dd/bilateral/{agreement_id}/respond.
pub async fn respond(services: &Services, agent: &AgentRecord, agreement_id: Uuid, accept: bool) -> AppResult<Agreement> {
    let agreement = services.store.agreement(agreement_id).await?.ok_or_else(|| not_found(agreement_id))?;
    if agreement.counterparty_agent_id != agent.agent_id {
        // The proposer and strangers may not answer; a stranger learns nothing more than that.
        return Err(AppError::forbidden("FORBIDDEN", "only the counterparty of a proposal answers it"));
    }
    let proposal = services.store.declaration(agreement.proposer_dd_id).await?.ok_or_else(|| not_found(agreement_id))?;
    let record = match accept {
        true => {
            if proposal.declaration.ee.scope.retention == Retention::Indefinite {
                crate::retention::require_active(services, agent.agent_id).await?;
            }
            let record = mirror(&proposal, agent.agent_id, services);
            // The counterparty's record is its own declaration, under its owner's policy.
            crate::declarations::enforce_policy(agent, record.declaration.content_inclusion)?;
            Some(record)
        }
        false => None,
    };
    match services.store.respond_agreement(agreement_id, agent.agent_id, record.as_ref(), services.clock.now()).await? {
        Responded::Done(done) => {
            if done.status == AgreementStatus::Rejected {
                release(services, &done, "bilateral proposal rejected").await?;
            }
            Ok(done)
        }
        Responded::NotFound => Err(not_found(agreement_id)),
        Responded::NotCounterparty => Err(AppError::forbidden("FORBIDDEN", "only the counterparty of a proposal answers it")),
        Responded::NotPending(current) => {
            if current.status == AgreementStatus::Expired {
                release(services, &current, "bilateral proposal expired").await?;
            }
            Err(AppError::Conflict {
                code: "AGREEMENT_NOT_PENDING",
                message: format!("this proposal is {} already; it is answered once, within its payment window", current.status),
            })
        }
    }
}

/// GET /v1/dd/bilateral/received (`all`: answered ones too) and /sent.
pub async fn list(services: &Services, agent: &AgentRecord, sent: bool, all: bool) -> AppResult<Vec<AgreementListing>> {
    let now = services.clock.now();
    let mut found = services.store.agreements(agent.agent_id, sent, !all && !sent, now, LIST_LIMIT).await?;
    for listing in &mut found {
        listing.agreement.status = listing.agreement.status_at(now);
    }
    Ok(found)
}

/// The job: proposals unanswered at their window's end expire and their
/// reservations are released. Returns how many.
pub async fn expire_due(services: &Services) -> anyhow::Result<usize> {
    let expired = services.store.expire_agreements(services.clock.now(), 100).await?;
    for agreement in &expired {
        // A release that fails here is made again by the proposer's confirm (past its window).
        if let Err(error) = release(services, agreement, "bilateral proposal expired").await {
            tracing::warn!(agreement_id = %agreement.agreement_id, error = %error, "releasing an expired proposal failed");
        }
    }
    Ok(expired.len())
}
