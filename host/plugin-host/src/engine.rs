//! The shared engine, its epoch ticker, and the per-call store with its bounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

/// How often the epoch advances. A deadline of N ticks is N times this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The bounds of one guest call, for the whole call: whatever number of
/// core instances, memories and tables the component creates, their sum is
/// held to these (one [`Budget`] per store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Instructions, roughly: wasmtime's fuel.
    pub fuel: u64,
    /// Wall-clock backstop, in epoch ticks.
    pub deadline_ticks: u64,
    /// Bytes of linear memory the call may hold, all its memories together.
    pub memory_bytes: usize,
    /// Table elements the call may hold, all its tables together.
    pub table_elements: usize,
    /// Core instances a call may create (a component built from a language
    /// runtime has several).
    pub instances: usize,
    /// Linear memories a call may create.
    pub memories: usize,
    /// Tables a call may create.
    pub tables: usize,
}

impl Limits {
    /// The bounds for pricing calls: a quote takes a few thousand instructions
    /// and well under a megabyte, so these leave wide room and still end a
    /// runaway guest within a few milliseconds.
    pub const PRICING: Limits = Limits {
        fuel: 20_000_000,
        deadline_ticks: 20,
        memory_bytes: 8 << 20,
        table_elements: 10_000,
        instances: 16,
        memories: 16,
        tables: 16,
    };
}

/// What a store carries: the budget of its call.
pub struct CallState {
    budget: Budget,
    /// Keeps the engine's epoch ticking while the store lives.
    _ticking: Ticking,
}

impl CallState {
    /// The most linear memory the call held at once, all memories together.
    pub fn peak_memory(&self) -> usize {
        self.budget.peak_memory
    }

    /// The most table elements the call held at once, all tables together.
    pub fn peak_table_elements(&self) -> usize {
        self.budget.table_elements
    }
}

/// The resource limiter of one call: it adds up every memory and table the
/// call's instances create or grow, and refuses (with a trap, as
/// [`OverBudget`]) the first growth that would take the sum past its limit,
/// before anything is allocated.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    memory: usize,
    peak_memory: usize,
    table_elements: usize,
}

impl Budget {
    pub fn new(limits: Limits) -> Budget {
        Budget { limits, memory: 0, peak_memory: 0, table_elements: 0 }
    }
}

/// What a call tried to hold beyond its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// Bytes of linear memory, all memories together.
    Memory,
    /// Table elements, all tables together.
    TableElements,
}

/// A growth the budget refused: the call traps with this error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    pub resource: Resource,
    /// The total the growth asked for.
    pub asked: usize,
    pub limit: usize,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.resource {
            Resource::Memory => write!(
                f,
                "memory bound reached: the call's memories would hold {} bytes together, more than the {} allowed",
                self.asked, self.limit
            ),
            Resource::TableElements => write!(
                f,
                "table bound reached: the call's tables would hold {} elements together, more than the {} allowed",
                self.asked, self.limit
            ),
        }
    }
}

impl std::error::Error for OverBudget {}

impl wasmtime::ResourceLimiter for Budget {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            // Past the memory's own declared maximum: `memory.grow` answers -1, as WebAssembly says.
            return Ok(false);
        }
        let total = self.memory.saturating_sub(current).saturating_add(desired);
        if total > self.limits.memory_bytes {
            return Err(wasmtime::Error::new(OverBudget { resource: Resource::Memory, asked: total, limit: self.limits.memory_bytes }));
        }
        self.memory = total;
        self.peak_memory = self.peak_memory.max(total);
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context("the host could not grow the memory"))
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        let total = self.table_elements.saturating_sub(current).saturating_add(desired);
        if total > self.limits.table_elements {
            return Err(wasmtime::Error::new(OverBudget {
                resource: Resource::TableElements,
                asked: total,
                limit: self.limits.table_elements,
            }));
        }
        self.table_elements = total;
        Ok(true)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context("the host could not grow the table"))
    }

    fn instances(&self) -> usize {
        self.limits.instances
    }

    fn tables(&self) -> usize {
        self.limits.tables
    }

    fn memories(&self) -> usize {
        self.limits.memories
    }
}

/// The budget a failed call went over, if that is why it failed.
pub fn over_budget(error: &wasmtime::Error) -> Option<OverBudget> {
    error.chain().find_map(|cause| cause.downcast_ref::<OverBudget>().copied())
}

/// Whether a call failed on one of wasmtime's own counts (instances,
/// memories or tables past the budget's numbers).
pub fn over_count(error: &wasmtime::Error) -> Option<String> {
    error.chain().map(|cause| cause.to_string()).find(|text| text.contains("resource limit exceeded"))
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
    ticker: Arc<Ticker>,
}

/// The engine's epoch ticker: a thread that advances the epoch every
/// [`EPOCH_TICK`] while some store of the engine lives (a call under way),
/// and sleeps otherwise. An idle host's two tickers woke 400 times a second
/// for nothing (about 4.5 ms of CPU a second, 2026-12-06).
struct Ticker {
    /// Stores alive (calls under way, and warm instances).
    calls: Arc<AtomicUsize>,
    thread: std::thread::Thread,
}

/// One store's hold on its engine's ticker (see [`Ticker`]).
struct Ticking(Arc<Ticker>);

impl Ticking {
    fn new(ticker: &Arc<Ticker>) -> Ticking {
        if ticker.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            ticker.thread.unpark();
        }
        Ticking(ticker.clone())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long an idle ticker sleeps before it looks whether its engine is gone.
const IDLE_LOOK: Duration = Duration::from_secs(1);

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
        // The ticker holds a weak reference, so it stops when the engine is
        // dropped. Each tick comes a whole EPOCH_TICK after the one before,
        // or after the ticker woke for a call: a deadline of N ticks is at
        // least N ticks' time.
        let weak = engine.weak();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let thread = std::thread::Builder::new().name("wasm-epoch".into()).spawn(move || {
            while weak.upgrade().is_some() {
                if counted.load(Ordering::SeqCst) == 0 {
                    std::thread::park_timeout(IDLE_LOOK);
                    continue;
                }
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })?;
        Ok(PluginEngine { engine, ticker: Arc::new(Ticker { calls, thread: thread.thread().clone() }) })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A fresh store with the given bounds applied.
    pub fn store(&self, limits: Limits) -> wasmtime::Result<Store<CallState>> {
        let mut store = Store::new(&self.engine, CallState { budget: Budget::new(limits), _ticking: Ticking::new(&self.ticker) });
        store.limiter(|state| &mut state.budget);
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
    if let Some(over) = over_budget(error) {
        return over.to_string();
    }
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        return describe_trap(trap);
    }
    for cause in error.chain() {
        if let Some(trap) = cause.downcast_ref::<wasmtime::Trap>() {
            return describe_trap(trap);
        }
    }
    if let Some(count) = over_count(error) {
        return count;
    }
    format!("trap: {}", error.root_cause())
}

fn describe_trap(trap: &wasmtime::Trap) -> String {
    match trap {
        wasmtime::Trap::OutOfFuel => "CPU budget (fuel) exhausted".into(),
        wasmtime::Trap::Interrupt => "wall-clock deadline passed".into(),
        other => format!("trap: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_ticks_only_while_a_store_lives() {
        let engine = PluginEngine::with_profile(Profile::Tools).unwrap();
        let calls = || engine.ticker.calls.load(Ordering::SeqCst);
        assert_eq!(calls(), 0, "a new engine's ticker sleeps");
        let first = engine.store(Limits::PRICING).unwrap();
        let second = engine.store(Limits::PRICING).unwrap();
        assert_eq!(calls(), 2);
        drop(first);
        assert_eq!(calls(), 1, "one store still ticks");
        drop(second);
        assert_eq!(calls(), 0, "no store: the ticker sleeps again");
    }
}
