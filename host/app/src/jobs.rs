//! Background work that one host does at a time: the host holding the log's
//! lease (elected through the database) runs each job every round.
//!
//! Jobs call use cases like any front end; a failed round is logged and the
//! next round tries again.

use std::time::Duration;

use uuid::Uuid;

use anchor_store::{SettlementStatus, SubjectDomain};

use crate::{AppError, Services, charge, declarations};

/// How long a lease taken for a round lasts.
const LEASE: chrono::TimeDelta = chrono::TimeDelta::seconds(3);

/// Runs every job each `every`, on this host only while it holds the lease.
pub async fn run(services: Services, host_id: Uuid, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        round(&services, host_id).await;
    }
}

/// One round of every job, if this host holds (or takes) the lease.
pub async fn round(services: &Services, host_id: Uuid) -> bool {
    let now = services.clock.now();
    if !services.store.acquire_log_lease(host_id, now, LEASE).await.unwrap_or(false) {
        return false;
    }
    match reconcile_unknown_settlements(services).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(payments = n, "reconciled payments whose settlement was unknown"),
        Err(error) => tracing::warn!(error = format!("{error:#}"), "settlement reconciliation round failed"),
    }
    match erase_due_owners(services).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(owners = n, "erased owner accounts after their grace period"),
        Err(error) => tracing::warn!(error = %error, "owner erasure round failed"),
    }
    true
}

/// Every payment whose settlement outcome is unknown is settled again (which
/// cannot move money twice): a declaration's is then anchored, even if its
/// agent never confirms again; an inline payment gets its usage recorded.
/// Returns how many were resolved either way.
pub async fn reconcile_unknown_settlements(services: &Services) -> anyhow::Result<usize> {
    let mut resolved = 0;
    for unknown in services.store.unknown_settlements(100).await? {
        let outcome = if unknown.subject.domain == SubjectDomain::Declaration {
            let Some(stored) = services.store.declaration(unknown.subject.id).await? else { continue };
            if stored.confirmed_at.is_some() || stored.settlement_status != SettlementStatus::Pending {
                continue;
            }
            declarations::settle_and_anchor(services, &stored, services.clock.now()).await.map(drop)
        } else {
            let Some(payment) = services.store.payment(unknown.payment_id).await? else { continue };
            charge::settle_inline(services, &payment).await.map(drop)
        };
        match outcome {
            Ok(()) | Err(AppError::SettlementFailed { .. }) => resolved += 1,
            Err(AppError::Unavailable { .. }) => {}
            Err(other) => tracing::warn!(payment_id = %unknown.payment_id, error = %other, "reconciliation failed"),
        }
    }
    Ok(resolved)
}

/// Owner accounts whose deletion grace period ended are erased.
pub async fn erase_due_owners(services: &Services) -> anyhow::Result<u64> {
    Ok(services.store.erase_due_owners(services.clock.now()).await?)
}
