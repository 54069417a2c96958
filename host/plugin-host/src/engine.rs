//! The shared engine, its epoch ticker, and the per-call store with its bounds.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder};

/// How often the epoch advances. A deadline of N ticks is N times this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The bounds of one guest call.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Instructions, roughly: wasmtime's fuel.
    pub fuel: u64,
    /// Wall-clock backstop, in epoch ticks.
    pub deadline_ticks: u64,
    /// Bytes of linear memory the guest may hold.
    pub memory_bytes: usize,
    /// Instances, tables and memories a component may create (a component
    /// built from a language runtime has several core instances).
    pub instances: usize,
}

impl Limits {
    /// The bounds for pricing calls: a quote takes a few thousand instructions
    /// and well under a megabyte, so these leave wide room and still end a
    /// runaway guest within a few milliseconds.
    pub const PRICING: Limits = Limits { fuel: 20_000_000, deadline_ticks: 20, memory_bytes: 8 << 20, instances: 16 };
}

/// What a store carries: its memory limiter.
pub struct CallState {
    limits: StoreLimits,
}

/// What an engine runs: the operator's pricing generations (trusted, small,
/// called on every paid request), or sellers' tools (untrusted, large,
/// called seldom). Their compiled code differs, so each has its own engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Pricing,
    Tools,
}

/// One engine for one kind of component. Cheap to clone.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    _ticker: Arc<Ticker>,
}

struct Ticker;

impl PluginEngine {
    /// Builds the engine (pooling allocator when the address space allows it,
    /// on-demand otherwise) and starts its epoch ticker.
    pub fn new() -> anyhow::Result<PluginEngine> {
        PluginEngine::with_profile(Profile::Pricing)
    }

    /// The engine for `profile`. Tools get on-demand allocation (their
    /// components are few, large and of every shape) and a deeper stack.
    pub fn with_profile(profile: Profile) -> anyhow::Result<PluginEngine> {
        let engine = match profile {
            Profile::Pricing => match Engine::new(&config(true)) {
                Ok(engine) => engine,
                Err(pooling_error) => {
                    tracing::warn!(%pooling_error, "pooling allocator unavailable; using on-demand instance allocation");
                    Engine::new(&config(false))?
                }
            },
            Profile::Tools => {
                let mut config = config(false);
                config.max_wasm_stack(1 << 20);
                Engine::new(&config)?
            }
        };
        // The ticker holds a weak reference, so it stops when the engine is dropped.
        let weak = engine.weak();
        std::thread::Builder::new().name("wasm-epoch".into()).spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })?;
        Ok(PluginEngine { engine, _ticker: Arc::new(Ticker) })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A fresh store with the given bounds applied.
    pub fn store(&self, limits: Limits) -> wasmtime::Result<Store<CallState>> {
        let state = CallState {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(limits.instances)
                .tables(limits.instances)
                .memories(limits.instances)
                .trap_on_grow_failure(true)
                .build(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        store.set_fuel(limits.fuel)?;
        store.set_epoch_deadline(limits.deadline_ticks);
        Ok(store)
    }
}

/// How much of a pooled memory (and table) is reset with `memset` when its
/// instance is dropped, instead of being handed back to the kernel with
/// `madvise`. A pricing instance lives for one call: handed back, every call
/// paid a `madvise` (with a TLB shootdown on every core the process ran on)
/// and then a page fault for each page the next instance touched, most of
/// a fresh quote's time. The bundled generation's whole memory (a 64 KiB
/// stack, its data and a 32 KiB arena) fits in this.
const KEEP_RESIDENT: usize = 256 << 10;

fn config(pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(512 << 10);
    if pooling {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(256)
            .total_core_instances(1024)
            .max_core_instances_per_component(16)
            .total_memories(512)
            .total_tables(512)
            .max_memory_size(16 << 20)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// Names a failed call: the trap kind when there is one, else the error's chain.
pub fn describe_failure(error: &wasmtime::Error) -> String {
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        return describe_trap(trap);
    }
    for cause in error.chain() {
        if let Some(trap) = cause.downcast_ref::<wasmtime::Trap>() {
            return describe_trap(trap);
        }
    }
    let root = error.root_cause().to_string();
    if root.contains("growing memory") {
        return format!("memory bound reached: {root}");
    }
    format!("trap: {root}")
}

fn describe_trap(trap: &wasmtime::Trap) -> String {
    match trap {
        wasmtime::Trap::OutOfFuel => "CPU budget (fuel) exhausted".into(),
        wasmtime::Trap::Interrupt => "wall-clock deadline passed".into(),
        other => format!("trap: {other}"),
    }
}
