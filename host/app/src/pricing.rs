//! What the active pricing generation publishes: its policy, its presets with
//! their quotes, and its service prices. Nothing here is computed by the host.

use anchor_domain::pricing::{Generation, Policy, Preset, Quote, ServicePrices};

use crate::{AppResult, Services};

/// The generation in force and everything it prices.
#[derive(Clone, Debug)]
pub struct Published {
    pub generation: Generation,
    pub policy: Policy,
    /// `None` for generations of `anchor:pricing@1.0.0`, which price declarations only.
    pub services: Option<ServicePrices>,
}

pub fn current(services: &Services) -> AppResult<Published> {
    Ok(Published {
        generation: services.pricing.generation().clone(),
        policy: services.pricing.policy()?,
        services: services.pricing.services()?,
    })
}

/// Every preset of the generation with what it costs.
pub fn presets(services: &Services) -> AppResult<(Generation, Vec<(Preset, Quote)>)> {
    let mut out = Vec::new();
    for preset in services.pricing.presets()? {
        let quote = services.pricing.quote(preset.scope())?;
        out.push((preset, quote));
    }
    Ok((services.pricing.generation().clone(), out))
}
