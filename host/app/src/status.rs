//! How this host is doing: whether storage answers, which pricing generation
//! is loaded, how far the log has been signed.

use crate::Services;

#[derive(Clone, Debug)]
pub struct Status {
    /// `sqlite` or `postgres`.
    pub storage: &'static str,
    pub storage_reachable: bool,
    pub pricing_version: String,
    pub pricing_sha256: String,
    pub pricing: crate::pricing::Standing,
    /// The size of the latest signed checkpoint, if one exists and storage answers.
    pub checkpoint_size: Option<i64>,
}

pub async fn status(services: &Services) -> Status {
    let storage_reachable = services.store.ping().await.is_ok();
    let checkpoint_size = if storage_reachable { services.store.latest_checkpoint().await.ok().flatten().map(|c| c.size) } else { None };
    Status {
        storage: services.store.backend(),
        storage_reachable,
        pricing_version: services.pricing.generation().version.clone(),
        pricing_sha256: services.pricing.generation().sha256.clone(),
        pricing: services.schedule.standing(),
        checkpoint_size,
    }
}

/// Whether this host can serve requests now, for a load balancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// `sqlite` or `postgres`.
    pub storage: &'static str,
    pub storage_reachable: bool,
    /// A write would be accepted (PostgreSQL: this is the primary, not a standby).
    pub writable: bool,
    /// Every migration this build carries is applied, none half-applied,
    /// and any newer one is one this build may serve beside (decision 0067).
    pub migrations_applied: bool,
    /// The database holds newer migrations this build serves beside: a
    /// rolling upgrade is under way.
    pub schema_ahead: bool,
}

impl Readiness {
    pub fn ready(&self) -> bool {
        self.storage_reachable && self.writable && self.migrations_applied
    }
}

/// `GET /ready`: the database answers, takes writes, and holds the
/// migrations this build carries, with at most newer ones whose rules let
/// this build serve beside them (a host of an older build beside a
/// contracted schema, or of a newer build before its migrations ran, is not
/// ready).
pub async fn readiness(services: &Services) -> Readiness {
    let store = &services.store;
    let storage = store.backend();
    let storage_reachable = store.ping().await.is_ok();
    if !storage_reachable {
        return Readiness { storage, storage_reachable, writable: false, migrations_applied: false, schema_ahead: false };
    }
    let writable = store.writable().await.unwrap_or(false);
    let fit = crate::backup::check_migrations(store.as_ref(), &store.expected_migrations()).await;
    let schema_ahead = matches!(fit, Ok((_, anchor_domain::schema::Fit::Ahead(_))));
    Readiness { storage, storage_reachable, writable, migrations_applied: fit.is_ok(), schema_ahead }
}
