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
