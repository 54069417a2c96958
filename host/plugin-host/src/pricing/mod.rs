//! Pricing generations as components of `anchor:pricing`.
//!
//! One bindings module per supported WIT version (today only `v1_0_0`, which is
//! also `latest`). Generated types never leave this module: they are converted
//! to `anchor_domain::pricing` types at the edge.

mod v1_0_0;

use std::sync::Arc;

use anchor_domain::declarations::ee::Scope;
use anchor_domain::pricing::{Generation, Policy, Preset, Pricing, PricingError, Quote};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};

use crate::engine::{CallState, Limits, PluginEngine, describe_failure};
use v1_0_0 as latest;

/// A pricing generation loaded from a component.
pub struct WasmPricing {
    engine: PluginEngine,
    pre: latest::bindings::PricingPre<CallState>,
    limits: Limits,
    generation: Generation,
}

impl WasmPricing {
    /// Compiles and checks a component: its exports must match `anchor:pricing`,
    /// and it must answer `generation()` within its bounds.
    pub fn load(engine: &PluginEngine, wasm: &[u8], limits: Limits) -> anyhow::Result<Arc<WasmPricing>> {
        let sha256 = hex::encode(Sha256::digest(wasm));
        let component = Component::new(engine.engine(), wasm)?;
        let mut linker: Linker<CallState> = Linker::new(engine.engine());
        // No capabilities: whatever the component imports traps when called.
        linker.define_unknown_imports_as_traps(&component)?;
        let pre = latest::bindings::PricingPre::new(linker.instantiate_pre(&component)?)?;
        let mut pricing =
            WasmPricing { engine: engine.clone(), pre, limits, generation: Generation { version: String::from("(loading)"), sha256 } };
        let version = pricing.call(|bindings, store| bindings.call_generation(store)).map_err(anyhow::Error::msg)?;
        pricing.generation.version = version;
        Ok(Arc::new(pricing))
    }

    /// Runs one export in a fresh, bounded store.
    fn call<T>(
        &self,
        f: impl FnOnce(&latest::bindings::Pricing, &mut wasmtime::Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, String> {
        let mut store = self.engine.store(self.limits).map_err(|e| describe_failure(&e))?;
        let instance = self.pre.instantiate(&mut store).map_err(|e| describe_failure(&e))?;
        f(&instance, &mut store).map_err(|e| describe_failure(&e))
    }

    fn failed(&self, reason: String) -> PricingError {
        tracing::warn!(version = %self.generation.version, %reason, "pricing component call failed");
        PricingError::Failed { version: self.generation.version.clone(), reason }
    }
}

/// One instance kept alive across calls, for measuring the cost of a call
/// without instantiation. The service never does this: a warm instance keeps
/// guest state from one call to the next.
pub struct WarmQuoter {
    store: wasmtime::Store<CallState>,
    instance: latest::bindings::Pricing,
    fuel: u64,
}

impl WarmQuoter {
    pub fn quote(&mut self, scope: Scope) -> Result<Quote, String> {
        self.store.set_fuel(self.fuel).map_err(|e| describe_failure(&e))?;
        self.store.set_epoch_deadline(Limits::PRICING.deadline_ticks);
        match self.instance.call_quote(&mut self.store, latest::envelope(scope)) {
            Ok(Ok(quote)) => Ok(latest::quote(quote)),
            Ok(Err(reason)) => Err(reason),
            Err(error) => Err(describe_failure(&error)),
        }
    }
}

impl WasmPricing {
    /// A warm instance of this component (see [`WarmQuoter`]).
    pub fn warm(&self) -> anyhow::Result<WarmQuoter> {
        let mut store = self.engine.store(self.limits)?;
        let instance = self.pre.instantiate(&mut store)?;
        Ok(WarmQuoter { store, instance, fuel: self.limits.fuel })
    }
}

impl Pricing for WasmPricing {
    fn generation(&self) -> &Generation {
        &self.generation
    }

    fn quote(&self, scope: Scope) -> Result<Quote, PricingError> {
        let envelope = latest::envelope(scope);
        match self.call(|bindings, store| bindings.call_quote(store, envelope)) {
            Ok(Ok(quote)) => Ok(latest::quote(quote)),
            Ok(Err(reason)) => Err(PricingError::Refused { version: self.generation.version.clone(), reason }),
            Err(reason) => Err(self.failed(reason)),
        }
    }

    fn presets(&self) -> Result<Vec<Preset>, PricingError> {
        self.call(|bindings, store| bindings.call_presets(store))
            .map(|presets| presets.into_iter().map(latest::preset).collect())
            .map_err(|reason| self.failed(reason))
    }

    fn policy(&self) -> Result<Policy, PricingError> {
        self.call(|bindings, store| bindings.call_describe(store)).map(latest::policy).map_err(|reason| self.failed(reason))
    }
}
