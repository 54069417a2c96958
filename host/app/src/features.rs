//! Feature switches while the service runs. A host starts with its flags'
//! values (`Config::features`); `anchor feature off NAME` stores a switch in
//! the database, which overrides them on every host: each reads the table
//! every [`REFRESH`] ([`watch`]), so a switch takes effect everywhere within
//! about half a second. A request reads the switches once, where its use
//! case checks them; one already past that check completes.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::{Features, Services};

/// How often each host reads the stored switches.
pub const REFRESH: Duration = Duration::from_millis(500);

/// The switches in force on this host.
#[derive(Clone, Debug)]
pub struct Switches(Arc<RwLock<Features>>);

impl Switches {
    pub fn new(start: Features) -> Switches {
        Switches(Arc::new(RwLock::new(start)))
    }

    pub fn get(&self) -> Features {
        *self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, features: Features) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = features;
    }
}

/// The flags' values with the stored switches applied (a name this build
/// does not know, stored by a newer one, is left aside).
pub async fn stored(services: &Services) -> anyhow::Result<Features> {
    let mut features = services.config.features;
    for (name, enabled) in services.store.feature_switches().await? {
        if features.set(&name, enabled).is_err() {
            tracing::debug!(%name, "a stored feature switch this build does not know");
        }
    }
    Ok(features)
}

/// Reads the stored switches and puts them in force; whether anything changed.
pub async fn refresh(services: &Services) -> anyhow::Result<bool> {
    let features = stored(services).await?;
    let before = services.switches.get();
    if before == features {
        return Ok(false);
    }
    services.switches.set(features);
    tracing::info!(off = ?features.off(), "feature switches changed");
    Ok(true)
}

/// Refreshes every [`REFRESH`] until the task is dropped (every host runs it).
pub async fn watch(services: Services) {
    loop {
        if let Err(error) = refresh(&services).await {
            tracing::warn!(error = format!("{error:#}"), "reading the feature switches failed; the last ones stay in force");
        }
        tokio::time::sleep(REFRESH).await;
    }
}

/// Stores an operator's switch (`anchor feature on|off NAME`); an unknown name is refused.
pub async fn switch(store: &dyn anchor_ports::Store, name: &str, enabled: bool, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    Features::default().set(name, enabled).map_err(|e| anyhow::anyhow!(e))?;
    store.set_feature_switch(name, enabled, now).await?;
    Ok(())
}

/// The switches operators stored, by name.
pub async fn stored_switches(store: &dyn anchor_ports::Store) -> anyhow::Result<Vec<(String, bool)>> {
    Ok(store.feature_switches().await?)
}
