//! Pricing generations as components of `anchor:pricing`.
//!
//! One bindings module per supported WIT version: `v1_0_0`, and `v1_1_0`,
//! whose world adds the `services` export and shares the 1.0.0 types. A
//! component is loaded as 1.1.0 when its exports match that world, else as
//! 1.0.0. Generated types never leave this module: they are converted to
//! `anchor_domain::pricing` types at the edge.

mod v1_0_0;
mod v1_1_0;

use std::sync::Arc;

use anchor_domain::declarations::ee::Scope;
use anchor_domain::pricing::{Generation, Policy, Preset, Pricing, PricingError, Quote, ServicePrices};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};

use crate::cache::CompiledCache;
use crate::engine::{CallState, Limits, PluginEngine, describe_failure};
use v1_0_0 as types;

/// A component, pre-instantiated against the world it implements.
enum Pre {
    V1_0(v1_0_0::bindings::PricingPre<CallState>),
    V1_1(v1_1_0::bindings::GenerationPre<CallState>),
}

/// One instance of a component. Both worlds share the 1.0.0 types, so the
/// common exports return the same generated types whichever it is.
pub enum Instance {
    V1_0(v1_0_0::bindings::Pricing),
    V1_1(v1_1_0::bindings::Generation),
}

type WitQuote = v1_0_0::bindings::anchor::pricing::types::Quote;

impl Instance {
    fn generation(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<String> {
        match self {
            Instance::V1_0(i) => i.call_generation(store),
            Instance::V1_1(i) => i.call_generation(store),
        }
    }

    fn quote(&self, store: &mut wasmtime::Store<CallState>, scope: Scope) -> wasmtime::Result<Result<WitQuote, String>> {
        let envelope = types::envelope(scope);
        match self {
            Instance::V1_0(i) => i.call_quote(store, envelope),
            Instance::V1_1(i) => i.call_quote(store, envelope),
        }
    }

    fn presets(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<Vec<Preset>> {
        let presets = match self {
            Instance::V1_0(i) => i.call_presets(store)?,
            Instance::V1_1(i) => i.call_presets(store)?,
        };
        Ok(presets.into_iter().map(types::preset).collect())
    }

    fn policy(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<Policy> {
        let policy = match self {
            Instance::V1_0(i) => i.call_describe(store)?,
            Instance::V1_1(i) => i.call_describe(store)?,
        };
        Ok(types::policy(policy))
    }

    fn services(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<Option<ServicePrices>> {
        match self {
            Instance::V1_0(_) => Ok(None),
            Instance::V1_1(i) => Ok(Some(v1_1_0::services(i.call_services(store)?))),
        }
    }
}

/// A pricing generation loaded from a component.
pub struct WasmPricing {
    engine: PluginEngine,
    pre: Pre,
    limits: Limits,
    generation: Generation,
    /// The presets, once a call has answered them: a generation is a pure
    /// function, so its named scopes are the same on every call, and every
    /// create expands its preset through them.
    presets: std::sync::OnceLock<Vec<Preset>>,
    /// Each scope's answer (a quote or a refusal) once a call has given it,
    /// for the same reason: every create prices its scope, and there are
    /// only so many scopes (the product of the six axes' values). A call
    /// that failed (a trap, its bounds) is not kept: it is tried again.
    quotes: std::sync::RwLock<std::collections::HashMap<Scope, Result<Quote, String>>>,
}

impl WasmPricing {
    /// Compiles and checks a component: its exports must match `anchor:pricing`,
    /// and it must answer `generation()` within its bounds.
    pub fn load(engine: &PluginEngine, wasm: &[u8], limits: Limits) -> anyhow::Result<Arc<WasmPricing>> {
        WasmPricing::load_cached(engine, wasm, limits, None)
    }

    /// [`WasmPricing::load`], through a disk cache of compiled components:
    /// a component compiled once (by this host before, or by another host
    /// sharing the directory) is deserialized instead of compiled.
    pub fn load_cached(
        engine: &PluginEngine,
        wasm: &[u8],
        limits: Limits,
        cache: Option<&CompiledCache>,
    ) -> anyhow::Result<Arc<WasmPricing>> {
        // The same shape bounds as a tool's: a component over them is refused before it is compiled.
        crate::shape::shape(wasm).and_then(|shape| shape.check(&limits)).map_err(anyhow::Error::msg)?;
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        let sha256 = hex::encode(digest);
        let component = match cache {
            Some(cache) => match cache.read(engine.engine(), &digest) {
                Some(component) => component,
                None => cache.compile(engine.engine(), &digest, wasm)?,
            },
            None => Component::new(engine.engine(), wasm)?,
        };
        let mut linker: Linker<CallState> = Linker::new(engine.engine());
        // No capabilities: whatever the component imports traps when called.
        linker.define_unknown_imports_as_traps(&component)?;
        let instance_pre = linker.instantiate_pre(&component)?;
        let (pre, interface) = match v1_1_0::bindings::GenerationPre::new(instance_pre.clone()) {
            Ok(pre) => (Pre::V1_1(pre), "1.1.0"),
            Err(_) => (Pre::V1_0(v1_0_0::bindings::PricingPre::new(instance_pre)?), "1.0.0"),
        };
        let mut pricing = WasmPricing {
            engine: engine.clone(),
            pre,
            limits,
            generation: Generation { version: String::from("(loading)"), sha256, interface: format!("anchor:pricing@{interface}") },
            presets: std::sync::OnceLock::new(),
            quotes: std::sync::RwLock::default(),
        };
        let version = pricing.call(|instance, store| instance.generation(store)).map_err(anyhow::Error::msg)?;
        pricing.generation.version = version;
        Ok(Arc::new(pricing))
    }

    fn instantiate(&self, store: &mut wasmtime::Store<CallState>) -> wasmtime::Result<Instance> {
        Ok(match &self.pre {
            Pre::V1_0(pre) => Instance::V1_0(pre.instantiate(store)?),
            Pre::V1_1(pre) => Instance::V1_1(pre.instantiate(store)?),
        })
    }

    /// Runs one export in a fresh, bounded store.
    fn call<T>(&self, f: impl FnOnce(&Instance, &mut wasmtime::Store<CallState>) -> wasmtime::Result<T>) -> Result<T, String> {
        let mut store = self.engine.store(self.limits).map_err(|e| describe_failure(&e))?;
        let instance = self.instantiate(&mut store).map_err(|e| describe_failure(&e))?;
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
    instance: Instance,
    fuel: u64,
}

impl WarmQuoter {
    pub fn quote(&mut self, scope: Scope) -> Result<Quote, String> {
        self.store.set_fuel(self.fuel).map_err(|e| describe_failure(&e))?;
        self.store.set_epoch_deadline(Limits::PRICING.deadline_ticks);
        match self.instance.quote(&mut self.store, scope) {
            Ok(Ok(quote)) => Ok(types::quote(quote)),
            Ok(Err(reason)) => Err(reason),
            Err(error) => Err(describe_failure(&error)),
        }
    }
}

impl WasmPricing {
    /// The component's answer for `scope` (a quote, or its refusal), from a
    /// fresh instance, whatever was answered before; `Err`: the call failed.
    pub fn answer(&self, scope: Scope) -> Result<Result<Quote, String>, String> {
        self.call(|instance, store| instance.quote(store, scope)).map(|answer| answer.map(types::quote))
    }

    /// A warm instance of this component (see [`WarmQuoter`]).
    pub fn warm(&self) -> anyhow::Result<WarmQuoter> {
        let mut store = self.engine.store(self.limits)?;
        let instance = self.instantiate(&mut store)?;
        Ok(WarmQuoter { store, instance, fuel: self.limits.fuel })
    }
}

impl Pricing for WasmPricing {
    fn generation(&self) -> &Generation {
        &self.generation
    }

    fn quote(&self, scope: Scope) -> Result<Quote, PricingError> {
        let known = self.quotes.read().ok().and_then(|quotes| quotes.get(&scope).cloned());
        let answer = match known {
            Some(answer) => answer,
            None => {
                let answer = self.answer(scope).map_err(|reason| self.failed(reason))?;
                if let Ok(mut quotes) = self.quotes.write() {
                    quotes.insert(scope, answer.clone());
                }
                answer
            }
        };
        answer.map_err(|reason| PricingError::Refused { version: self.generation.version.clone(), reason })
    }

    fn presets(&self) -> Result<Vec<Preset>, PricingError> {
        if let Some(presets) = self.presets.get() {
            return Ok(presets.clone());
        }
        let presets = self.call(|instance, store| instance.presets(store)).map_err(|reason| self.failed(reason))?;
        Ok(self.presets.get_or_init(|| presets).clone())
    }

    fn policy(&self) -> Result<Policy, PricingError> {
        self.call(|instance, store| instance.policy(store)).map_err(|reason| self.failed(reason))
    }

    fn services(&self) -> Result<Option<ServicePrices>, PricingError> {
        self.call(|instance, store| instance.services(store)).map_err(|reason| self.failed(reason))
    }
}
