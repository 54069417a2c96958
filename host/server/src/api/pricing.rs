//! The pricing generation a discovery document or the pricing routes name as next.

use anchor_app::pricing;
use schemars::JsonSchema;
use serde::Serialize;

#[derive(Serialize, JsonSchema)]
pub(crate) struct NextGeneration {
    pub(crate) pricing_version: String,
    pub(crate) component_sha256: String,
    pub(crate) wit_package: String,
    /// The UTC date it comes into force, `YYYY-MM-DD`.
    #[schemars(extend("format" = "date"))]
    pub(crate) effective_from: String,
    /// The instant it comes into force.
    pub(crate) effective_at: crate::wire::Time,
}

impl NextGeneration {
    pub(crate) fn of(standing: &pricing::Standing) -> Option<NextGeneration> {
        standing.next.as_ref().map(|(at, generation)| NextGeneration {
            pricing_version: generation.version.clone(),
            component_sha256: generation.sha256.clone(),
            wit_package: generation.interface.clone(),
            effective_from: at.date_naive().to_string(),
            effective_at: crate::wire::Time(*at),
        })
    }
}
