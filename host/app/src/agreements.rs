//! What a bilateral agreement decides of its records, below both the
//! declarations and the bilateral use cases (which record and answer
//! agreements): the route a proposal is paid on, when each side's record may
//! be confirmed, and the release of a proposal nobody will pay for.

use uuid::Uuid;

use anchor_domain::bilateral::{Agreement, AgreementStatus};
use anchor_domain::payments::{PaymentStatus, SettlementStatus};
use anchor_domain::records::StoredDeclaration;

use crate::charge::Route;
use crate::{AppError, AppResult, Services};

pub const PROPOSE: Route = Route { method: "POST", path: "/v1/dd/bilateral/propose" };

pub(crate) fn not_found(agreement_id: Uuid) -> AppError {
    AppError::not_found("AGREEMENT_NOT_FOUND", format!("no bilateral agreement {agreement_id}"))
}

/// Releases the proposer's reservation (rejected or expired): nothing is charged.
pub(crate) async fn release(services: &Services, agreement: &Agreement, why: &str) -> AppResult<()> {
    let now = services.clock.now();
    services.store.close_payment(agreement.proposer_dd_id, SettlementStatus::Released, PaymentStatus::Released, why, now).await?;
    Ok(())
}

/// Whether a record of an agreement may be confirmed now: the proposer's
/// only once accepted; the counterparty's once the proposer's is confirmed
/// (and so paid): a proposal nobody pays for anchors nothing.
pub(crate) async fn may_confirm(services: &Services, agreement_id: Uuid, stored: &StoredDeclaration) -> AppResult<()> {
    let agreement = services.store.agreement(agreement_id).await?.ok_or_else(|| not_found(agreement_id))?;
    if stored.declaration.dd_id != agreement.proposer_dd_id {
        let proposal = services.store.declaration(agreement.proposer_dd_id).await?;
        return match proposal {
            Some(p) if p.confirmed_at.is_some() => Ok(()),
            _ => Err(AppError::Conflict {
                code: "AGREEMENT_UNPAID",
                message: "the proposer has not confirmed (and paid for) its record of this agreement yet; confirm yours after it has"
                    .into(),
            }),
        };
    }
    match agreement.status_at(services.clock.now()) {
        AgreementStatus::Accepted => Ok(()),
        AgreementStatus::Proposed => Err(AppError::Conflict {
            code: "AGREEMENT_PENDING",
            message: "the counterparty has not accepted this proposal yet; confirm once it has (within the payment window)".into(),
        }),
        AgreementStatus::Rejected => {
            // Released when it was rejected; released again here if that failed.
            release(services, &agreement, "bilateral proposal rejected").await?;
            Err(AppError::Conflict {
                code: "AGREEMENT_REJECTED",
                message: "the counterparty rejected this proposal; its reservation was released and nothing was charged".into(),
            })
        }
        AgreementStatus::Expired => {
            release(services, &agreement, "bilateral proposal expired").await?;
            Err(AppError::Gone {
                code: "PAYMENT_EXPIRED",
                message: "the proposal was not answered within its payment window; the reservation was released and nothing was charged"
                    .into(),
            })
        }
    }
}
