//! Background work that one host does at a time, in one loop: the host
//! holding the lease (a row in the database, tried for every round, renewed
//! a third of its length after the last renewal, expiring after a few
//! seconds) integrates the verifiable log every round
//! and runs each periodic job when it is due. When that host stops, its lease
//! runs out and another takes over; every job is safe to run again or to be
//! interrupted, since each is one transaction per unit of work.
//!
//! | job | every | what |
//! | --- | --- | --- |
//! | log | round (100 ms) | integrate the leaves pending as the round begins (a backlog: full batches for up to a second), sign a checkpoint about once a second |
//! | ARA fold | 1 s (every round while a backlog lasts) | fold newly integrated declarations into the aggregate model (a few batches a run) |
//! | ARA releases | 60 s | once the fold has caught up, cut the day's de-identified releases not cut yet |
//! | reconcile | 30 s | mark the inline payments a stopped host left reserved ten minutes past their authorization as unknown (`charge::mark_abandoned`), then settle again the payments whose settlement outcome is unknown |
//! | erase | 30 s | erase owner accounts whose deletion grace period ended |
//! | release | 60 s (every round while a backlog lasts) | release the reservations of externally paid declarations left unconfirmed 15 minutes past their window, walking their deadlines (`declarations::release_lapsed`) |
//! | de-identify | 5 s (every round while a backlog lasts) | records past their retention end become id-free statistics, a few batches a run |
//! | witness | 100 ms, in a task of its own (a round does work only when a new checkpoint was signed) | offer the newest checkpoint to the witnesses that do not hold it (`witness`) |
//! | timestamp | 100 ms (one token per `--tsa-interval-secs` at most), in a task of its own | ask a TSA for an RFC 3161 token over the newest witnessed checkpoint (`timestamp`) |
//! | expire | 60 s | end Earned lots, close ISE stays at their limit, bill indefinite retention and end its grace periods, carry out tool transfers |
//!
//! Jobs call use cases like any front end; a failed job is logged and the
//! next round tries again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use anchor_domain::payments::{SettlementStatus, SubjectDomain};

use crate::log::{self, LogKey};
use crate::{AppError, Services, ara, charge, declarations};

/// How often each job runs.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Pause between rounds; the log is integrated every round.
    pub round: Duration,
    /// How long a lease taken in a round lasts without renewal.
    pub lease: Duration,
    /// Least time between two signed checkpoints.
    pub checkpoint_every: Duration,
    /// Leaves per integration transaction.
    pub log_batch: i64,
    pub reconcile_every: Duration,
    pub erase_every: Duration,
    /// How often Earned lots past their expiry are ended.
    pub expire_every: Duration,
    /// How often the ARA fold runs while it keeps up. A fold updates each
    /// active agent's counts once however many of its declarations it
    /// folds, so folding a second's worth at a time costs less per
    /// declaration than folding every round; observations see a
    /// declaration that much later.
    pub fold_every: Duration,
    /// Batches of declarations the ARA fold takes per run (a run that
    /// takes them all goes on the next round).
    pub fold_batches: usize,
    /// How often records past their retention are looked for, and how many
    /// batches a run takes (a run that found more goes on the next round).
    pub deidentify_every: Duration,
    pub deidentify_batches: usize,
    pub releases_every: Duration,
    /// How often the newest checkpoint is offered to the witnesses that do
    /// not hold it yet (`witness`), in a task of its own.
    pub witness_every: Duration,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule {
            round: Duration::from_millis(100),
            lease: Duration::from_secs(3),
            checkpoint_every: Duration::from_secs(1),
            log_batch: 1000,
            reconcile_every: Duration::from_secs(30),
            erase_every: Duration::from_secs(30),
            expire_every: Duration::from_secs(60),
            fold_every: Duration::from_secs(1),
            fold_batches: 5,
            deidentify_every: Duration::from_secs(5),
            deidentify_batches: 4,
            releases_every: Duration::from_secs(60),
            witness_every: Duration::from_millis(100),
        }
    }
}

/// When each periodic job last ran on this host (while it held the lease),
/// and when this host last wrote its lease.
#[derive(Debug, Default)]
pub struct Runs {
    /// The clock's time of this host's last renewal of the lease, while it
    /// holds it.
    lease_renewed: Option<chrono::DateTime<chrono::Utc>>,
    checkpoint: Option<Instant>,
    fold: Option<Instant>,
    reconcile: Option<Instant>,
    erase: Option<Instant>,
    expire: Option<Instant>,
    deidentify: Option<Instant>,
    releases: Option<Instant>,
    lapsed: Option<Instant>,
    /// How far this host has walked the payment deadlines.
    lapsed_walked: Option<anchor_ports::DueKey>,
    /// How far this host has walked the inline payments' authorizations.
    abandoned_walked: Option<anchor_ports::ValidityKey>,
}

/// How many times the holder writes its lease within one lease's length.
const LEASE_RENEWALS: i32 = 3;

fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_some_and(|at| at.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// Runs rounds until the task is dropped, or until `stop` says true: then
/// it finishes the round under way and gives up the lease, so another host
/// takes the log over at its next round instead of when the lease runs out.
pub async fn run(services: Services, key: Arc<LogKey>, host_id: Uuid, schedule: Schedule, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut runs = Runs::default();
    // Witnesses are called beside the rounds, while this host holds the
    // lease, so that no round (and no anchoring) waits for one.
    let holding = Arc::new(AtomicBool::new(false));
    let witnessing = tokio::spawn(crate::witness::run(services.clone(), holding.clone(), schedule.witness_every, stop.clone()));
    let stamping = tokio::spawn(crate::timestamp::run(services.clone(), holding.clone(), schedule.witness_every, stop.clone()));
    loop {
        // Each round prices with one generation, as a request does.
        // Its writes go to the jobs' own writer connection where the store has one.
        let held =
            anchor_ports::in_background(services.schedule.in_one_generation(round(&services, &key, host_id, &schedule, &mut runs))).await;
        holding.store(held, Ordering::Release);
        tokio::select! {
            () = tokio::time::sleep(schedule.round) => {}
            // A dropped sender never asks to stop.
            Ok(_) = stop.wait_for(|stop| *stop) => break,
        }
    }
    holding.store(false, Ordering::Release);
    witnessing.abort();
    stamping.abort();
    match services.store.release_log_lease(host_id).await {
        Ok(true) => tracing::info!("released the integrator lease"),
        Ok(false) => {}
        Err(error) => tracing::warn!(error = %error, "releasing the integrator lease failed; it runs out on its own"),
    }
}

/// One round: take (or renew) the lease, then integrate the log and run every
/// job that is due. False when another host holds the lease.
pub async fn round(services: &Services, key: &LogKey, host_id: Uuid, schedule: &Schedule, runs: &mut Runs) -> bool {
    let lease = chrono::Duration::from_std(schedule.lease).unwrap_or(chrono::TimeDelta::seconds(3));
    let now = services.clock.now();
    // The holder writes its lease a third of its length after the last
    // write, not every round: until it runs out no other host can take it,
    // and an idle host wrote (and synced) ten times a second for nothing.
    // A host without it tries every round, to take over within one.
    let held = runs.lease_renewed.is_some_and(|at| now >= at && now - at < lease / LEASE_RENEWALS);
    if !held {
        runs.lease_renewed = None;
        match services.store.acquire_log_lease(host_id, now, lease).await {
            Ok(true) => runs.lease_renewed = Some(now),
            Ok(false) => return false,
            Err(error) => {
                tracing::warn!(error = %error, "the lease could not be taken");
                return false;
            }
        }
    }
    let store = services.store.as_ref();
    let metrics = &services.metrics;
    match metrics.job(
        "log",
        log::integrate(store, key, services.clock.as_ref(), schedule.log_batch, schedule.checkpoint_every, &mut runs.checkpoint).await,
    ) {
        Ok(Some(_)) => {
            metrics.checkpoints_signed.inc();
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(error = format!("{error:#}"), "log integration failed"),
    }
    if due(&mut runs.fold, schedule.fold_every) {
        match metrics.job("ara_fold", ara::fold::round(services, schedule.fold_batches).await) {
            // Behind by more than a run takes: the next round goes on.
            Ok(folded) if folded >= schedule.fold_batches * ara::fold::BATCH as usize => runs.fold = None,
            Ok(_) => {}
            Err(error) => tracing::warn!(error = format!("{error:#}"), "ARA fold failed"),
        }
    }
    if due(&mut runs.deidentify, schedule.deidentify_every) {
        match metrics.job("deidentify", crate::retention::deidentify_due(services, schedule.deidentify_batches).await) {
            Ok((0, _)) => {}
            Ok((n, more)) => {
                tracing::info!(records = n, "de-identified records past their retention end");
                if more {
                    runs.deidentify = None;
                }
            }
            Err(error) => tracing::warn!(error = format!("{error:#}"), "de-identification failed"),
        }
    }
    if due(&mut runs.releases, schedule.releases_every) {
        let cut = async {
            if !ara::fold::caught_up(services).await? {
                return Ok(0);
            }
            Ok::<usize, anyhow::Error>(ara::releases::cut_due(services).await?)
        };
        match metrics.job("ara_releases", cut.await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(releases = n, "cut the day's de-identified ARA releases"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "cutting ARA releases failed"),
        }
    }
    if due(&mut runs.reconcile, schedule.reconcile_every) {
        // First what a stopped host left reserved, which the reconciliation then settles.
        match metrics.job("abandoned_payments", charge::mark_abandoned(services, &mut runs.abandoned_walked, 4).await) {
            Ok((marked, more)) => {
                if marked > 0 {
                    tracing::warn!(payments = marked, "inline payments left reserved by a stopped host are reconciled");
                }
                if more {
                    runs.reconcile = None;
                }
            }
            Err(error) => tracing::warn!(error = %error, "looking for abandoned inline payments failed"),
        }
        match metrics.job("reconcile", reconcile_unknown_settlements(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(payments = n, "reconciled payments whose settlement was unknown"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "settlement reconciliation failed"),
        }
        match metrics.job("close_settled", close_settled_subjects(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(subjects = n, "closed stays and sDAC sessions their settled payments paid for"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "closing settled stays and sessions failed"),
        }
    }
    if due(&mut runs.lapsed, schedule.expire_every) {
        match metrics.job("payment_release", declarations::release_lapsed(services, &mut runs.lapsed_walked, 4).await) {
            Ok((released, more)) => {
                if released > 0 {
                    tracing::info!(declarations = released, "released the reservations of records left unconfirmed past their window");
                }
                if more {
                    runs.lapsed = None;
                }
            }
            Err(error) => tracing::warn!(error = %error, "releasing lapsed reservations failed"),
        }
    }
    if due(&mut runs.erase, schedule.erase_every) {
        match metrics.job("erase", erase_due_owners(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(owners = n, "erased owner accounts after their grace period"),
            Err(error) => tracing::warn!(error = %error, "owner erasure failed"),
        }
    }
    if due(&mut runs.expire, schedule.expire_every) {
        match metrics.job("earned_expiry", crate::earned::expire_due(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(lots = n, "ended Earned DAC lots past their expiry"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "Earned expiry failed"),
        }
        match metrics.job("ise_close", crate::ise::close_due(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(stays = n, "closed ISE stays at their limit"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "closing ISE stays failed"),
        }
        // Billing and expiry go on with the routes switched off: a subscription
        // keeps its terms (and is not free) whatever the operator switches.
        {
            match metrics.job("retention_billing", crate::retention::run_due(services).await) {
                Ok((billed, expired)) if billed.charged + billed.to_grace + expired == 0 => {}
                Ok((billed, expired)) => tracing::info!(
                    charged = billed.charged,
                    to_grace = billed.to_grace,
                    expired,
                    "indefinite-retention subscriptions billed and ended"
                ),
                Err(error) => tracing::warn!(error = format!("{error:#}"), "indefinite-retention billing failed"),
            }
        }
        match metrics.job("bilateral_expiry", crate::bilateral::expire_due(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(proposals = n, "expired unanswered bilateral proposals"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "expiring bilateral proposals failed"),
        }
        match metrics.job("tool_transfers", crate::tsl::execute_due_transfers(services).await) {
            Ok(0) => {}
            Ok(n) => tracing::info!(declarations = n, "carried out tool transfer declarations"),
            Err(error) => tracing::warn!(error = format!("{error:#}"), "tool transfers failed"),
        }
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
            declarations::settle_and_anchor(services, &stored, None, services.clock.now()).await.map(drop)
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

/// Stays and sDAC sessions whose inline payment settled (a reconciled
/// outcome, or a host that stopped between the settlement and the close)
/// are closed as paid by it, a minute after the settlement (the request
/// that settled it closes it itself meanwhile). Their other closes wait
/// while such a payment is live, so without this they would stay open.
pub async fn close_settled_subjects(services: &Services) -> anyhow::Result<u64> {
    let now = services.clock.now();
    Ok(services.store.close_settled_subjects(now - chrono::Duration::minutes(1), now, 100).await?)
}

/// Owner accounts whose deletion grace period ended are erased.
pub async fn erase_due_owners(services: &Services) -> anyhow::Result<u64> {
    Ok(services.store.erase_due_owners(services.clock.now()).await?)
}
