//! Published pricing generations and when each comes into force.

use async_trait::async_trait;

use crate::*;

pub use anchor_domain::records::PricingActivation;

#[async_trait]
pub trait PricingStore: Send + Sync {
    /// Stores the component (once per hash) and its activation time; false
    /// if another publication already holds that exact time.
    async fn publish_pricing(&self, activation: &PricingActivation, wasm: &[u8]) -> Result<bool>;
    /// Every publication, by activation time.
    async fn pricing_activations(&self) -> Result<Vec<PricingActivation>>;
    async fn pricing_wasm(&self, sha256: &str) -> Result<Option<Vec<u8>>>;
}
