//! Feature switches the operator sets while the service runs.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::*;

#[async_trait]
pub trait FeatureStore: Send + Sync {
    /// Every stored switch: (name, enabled), by name.
    async fn feature_switches(&self) -> Result<Vec<(String, bool)>>;
    /// Stores a switch (replacing the one of that name).
    async fn set_feature_switch(&self, name: &str, enabled: bool, now: DateTime<Utc>) -> Result<()>;
}
