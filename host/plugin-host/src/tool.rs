//! Interpretation tools as components of `anchor:tool/tool@1.0.0`: sellers'
//! code, so untrusted.
//!
//! - **Accepting** a component checks its size and its shape (the core
//!   instances, memories and tables instantiating it creates, read from the
//!   bytes before anything is compiled), compiles it once (on the tools' own
//!   engine, on a thread pool of its own: a compilation never takes every
//!   core) unless this host has it compiled already, refuses any import that
//!   is a capability (only the world's own types and the `wasi:cli`/`wasi:io`
//!   interfaces a standard library links, all bound to traps, are let
//!   through), checks that its exports implement the world, and instantiates
//!   it once under a run's limits. The compiled artifact is written to the
//!   cache directory, keyed by the component's SHA-256 and the engine's
//!   compatibility hash, so a restart deserializes it instead of compiling.
//! - **Running** one is a fresh store with a fuel budget, an epoch deadline
//!   and one budget for the whole run: every memory and table of every
//!   instance counts against it, and a growth past it traps before anything
//!   is allocated. The report is checked against the output bounds after it
//!   is lifted. Every failure is the run's own, named ([`RunFailure`]).
//!
//! Generated WIT types never leave this module.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anchor_domain::tools::{
    Accepted, Cell, DayCount, Metric, Observation, Rejected, Report, Row, RunFailure, RunStats, ToolInput, ToolLimits, ToolRuntime,
};
use anchor_domain::tsl::ObservationType;
use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker};

use crate::cache::CompiledCache;
use crate::engine::{CallState, EPOCH_TICK, Limits, PluginEngine, Profile, over_budget, over_count};

mod bindings {
    wasmtime::component::bindgen!({
        world: "anchor:tool/tool@1.0.0",
        path: "../../wit/tool@1.0.0",
    });
}

use bindings::anchor::tool::types as wit;

/// Import names a tool may have: its world's types, and the interfaces a
/// language's standard library links whether it uses them or not (bound to
/// traps: printing, reading the environment or exiting fails the run).
const ALLOWED_IMPORT_PREFIXES: &[&str] = &["anchor:tool/types@1.0.0", "wasi:cli/", "wasi:io/"];

/// A compiled, pre-linked tool.
struct Loaded {
    pre: bindings::ToolPre<CallState>,
    /// The compiled code's size, counted against the memory budget.
    bytes: usize,
}

/// The tools loaded in memory, and the order they were loaded in (oldest first).
#[derive(Default)]
struct LoadedSet {
    map: HashMap<[u8; 32], Arc<Loaded>>,
    /// Oldest first.
    order: Vec<[u8; 32]>,
    bytes: usize,
}

/// The compiled code one host keeps in memory; beyond it the oldest tools
/// are dropped (and deserialized again from the disk cache when they run).
/// About 5,000 small Rust tools, or 24 JavaScript ones (43 MB compiled each).
const LOADED_BUDGET: usize = 1 << 30;

/// Runs tool components: the tools' engine, the compiled cache on disk and
/// the tools loaded in memory.
pub struct WasmTools {
    engine: PluginEngine,
    limits: ToolLimits,
    cache: Option<CompiledCache>,
    loaded: Mutex<LoadedSet>,
    /// Where compilations run: `limits.compile_threads` threads of their own.
    compiler: rayon::ThreadPool,
}

impl WasmTools {
    /// A runtime over the tools' engine; `cache_dir`, when given, keeps
    /// compiled components across restarts (created if missing).
    pub fn new(cache_dir: Option<&Path>, limits: ToolLimits) -> anyhow::Result<WasmTools> {
        let compiler = rayon::ThreadPoolBuilder::new()
            .num_threads(limits.compile_threads.max(1))
            .thread_name(|i| format!("tool-compile-{i}"))
            .build()?;
        Ok(WasmTools {
            engine: PluginEngine::with_profile(Profile::Tools)?,
            limits,
            cache: cache_dir.map(CompiledCache::new).transpose()?,
            loaded: Mutex::default(),
            compiler,
        })
    }

    fn engine(&self) -> &wasmtime::Engine {
        self.engine.engine()
    }

    fn cached(&self, sha256: &[u8; 32]) -> bool {
        self.cache.as_ref().is_some_and(|cache| cache.contains(self.engine(), sha256))
    }

    /// Compiles `wasm` once, through the disk cache when there is one, on
    /// the compile pool (wasmtime's parallel compilation uses the pool it is
    /// called from).
    fn compile(&self, sha256: &[u8; 32], wasm: &[u8]) -> wasmtime::Result<Component> {
        self.compiler.install(|| match &self.cache {
            Some(cache) => cache.compile(self.engine(), sha256, wasm),
            None => Component::new(self.engine(), wasm),
        })
    }

    /// The compiled component: from memory, from the disk cache, else compiled.
    fn compiled(&self, sha256: &[u8; 32], wasm: &[u8]) -> wasmtime::Result<Component> {
        if let Some(loaded) = self.in_memory(sha256) {
            return Ok(loaded.pre.instance_pre().component().clone());
        }
        if let Some(component) = self.cache.as_ref().and_then(|cache| cache.read(self.engine(), sha256)) {
            return Ok(component);
        }
        self.compile(sha256, wasm)
    }

    fn link(&self, component: &Component) -> Result<Arc<Loaded>, Rejected> {
        let mut linker: Linker<CallState> = Linker::new(self.engine());
        linker.define_unknown_imports_as_traps(component).map_err(|e| Rejected::Invalid(e.to_string()))?;
        let instance_pre = linker.instantiate_pre(component).map_err(|e| Rejected::WrongWorld(e.to_string()))?;
        let pre = bindings::ToolPre::new(instance_pre).map_err(|e| Rejected::WrongWorld(format!("{e:#}")))?;
        let range = component.image_range();
        Ok(Arc::new(Loaded { pre, bytes: (range.end as usize).saturating_sub(range.start as usize) }))
    }

    fn remember(&self, sha256: [u8; 32], loaded: Arc<Loaded>) {
        let mut set = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = loaded.bytes;
        if set.map.insert(sha256, loaded).is_none() {
            set.order.push(sha256);
            set.bytes += bytes;
            while set.bytes > LOADED_BUDGET && set.order.len() > 1 {
                let oldest = set.order.remove(0);
                if let Some(dropped) = set.map.remove(&oldest) {
                    set.bytes -= dropped.bytes;
                }
            }
        }
    }

    fn in_memory(&self, sha256: &[u8; 32]) -> Option<Arc<Loaded>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner()).map.get(sha256).cloned()
    }

    /// The loaded tool: from memory, else the disk cache, else compiled from `wasm`.
    fn load(&self, sha256: &[u8; 32], wasm: Option<&[u8]>) -> Result<Arc<Loaded>, RunFailure> {
        if let Some(loaded) = self.in_memory(sha256) {
            return Ok(loaded);
        }
        let from_disk = self.cache.as_ref().and_then(|cache| cache.read(self.engine(), sha256));
        let component = match (from_disk, wasm) {
            (Some(component), _) => component,
            (None, Some(wasm)) => {
                if <[u8; 32]>::from(Sha256::digest(wasm)) != *sha256 {
                    return Err(RunFailure::Unavailable("the stored component does not match its hash".into()));
                }
                self.compile(sha256, wasm).map_err(|e| RunFailure::Unavailable(format!("the component no longer compiles: {e}")))?
            }
            (None, None) => return Err(RunFailure::Unavailable("the component is not loaded on this host".into())),
        };
        let loaded = self.link(&component).map_err(|r| RunFailure::Unavailable(r.detail()))?;
        self.remember(*sha256, loaded.clone());
        Ok(loaded)
    }

    fn call_limits(&self) -> Limits {
        call_limits(&self.limits)
    }

    /// Instantiates the tool once under a run's limits, calling nothing: a
    /// component whose instantiation alone is over them (or traps) could
    /// never run.
    fn try_instantiate(&self, loaded: &Loaded) -> Result<(), Rejected> {
        let mut store = self.engine.store(self.call_limits()).map_err(|e| Rejected::Invalid(e.to_string()))?;
        match loaded.pre.instantiate(&mut store) {
            Ok(_) => Ok(()),
            Err(error) => match classify(&error) {
                RunFailure::OutOfMemory(why) => Err(Rejected::OverLimits(why)),
                other => Err(Rejected::Traps(other.detail())),
            },
        }
    }
}

/// The bounds of one run, from the published limits.
pub fn call_limits(limits: &ToolLimits) -> Limits {
    let ticks = (limits.wall_ms as u128).div_ceil(EPOCH_TICK.as_millis().max(1)) as u64;
    Limits {
        fuel: limits.fuel,
        deadline_ticks: ticks.max(1),
        memory_bytes: limits.memory_bytes,
        table_elements: limits.table_elements,
        instances: limits.instances,
        memories: limits.memories,
        tables: limits.tables,
    }
}

/// The component's imports outside its world's types and the trapped
/// standard-library interfaces: `(capabilities, others)`. A capability is a
/// WASI interface (filesystem, sockets, clocks, random, http, …); anything
/// else is an import the tool world does not have.
fn unexpected_imports(engine: &wasmtime::Engine, component: &Component) -> (Vec<String>, Vec<String>) {
    component
        .component_type()
        .imports(engine)
        .filter(|(_, item)| !matches!(item.ty, ComponentItem::Type(_)))
        .map(|(name, _)| name.to_string())
        .filter(|name| !ALLOWED_IMPORT_PREFIXES.iter().any(|p| name.starts_with(p)))
        .partition(|name| name.starts_with("wasi:"))
}

impl ToolRuntime for WasmTools {
    fn limits(&self) -> ToolLimits {
        self.limits
    }

    fn accept(&self, wasm: &[u8]) -> Result<Accepted, Rejected> {
        if wasm.len() > self.limits.component_bytes {
            return Err(Rejected::TooLarge { size: wasm.len(), max: self.limits.component_bytes });
        }
        // The shape first: a component over the limits costs no compilation.
        let shape = crate::shape::shape(wasm).map_err(Rejected::Invalid)?;
        shape.check(&self.call_limits()).map_err(Rejected::OverLimits)?;
        let sha256: [u8; 32] = Sha256::digest(wasm).into();
        // Check the imports before anything is written to the cache.
        let component = self.compiled(&sha256, wasm).map_err(|e| Rejected::Invalid(format!("{e:#}")))?;
        let (capabilities, others) = unexpected_imports(self.engine(), &component);
        if !capabilities.is_empty() {
            return Err(Rejected::ForbiddenImports(capabilities));
        }
        if !others.is_empty() {
            return Err(Rejected::WrongWorld(format!("it imports {}, which the tool world does not have", others.join(", "))));
        }
        let imports: Vec<String> = component.component_type().imports(self.engine()).map(|(name, _)| name.to_string()).collect();
        let loaded = self.link(&component)?;
        self.try_instantiate(&loaded)?;
        if let Some(cache) = &self.cache {
            // The component compiled already; its serialized form is what restarts read.
            cache.keep(self.engine(), &sha256, &component);
        }
        self.remember(sha256, loaded);
        Ok(Accepted { sha256, size: wasm.len(), imports })
    }

    fn ready(&self, sha256: &[u8; 32]) -> bool {
        self.in_memory(sha256).is_some() || self.cached(sha256)
    }

    fn preload(&self, sha256: &[u8; 32]) -> bool {
        self.in_memory(sha256).is_some() || (self.cached(sha256) && self.load(sha256, None).is_ok())
    }

    fn retain(&self, keep: &[[u8; 32]]) -> usize {
        // Memory is bounded by its own budget; only the disk needs pruning.
        self.cache.as_ref().map_or(0, |cache| cache.retain(keep))
    }

    fn run(&self, sha256: &[u8; 32], wasm: Option<&[u8]>, input: &ToolInput) -> Result<(Report, RunStats), RunFailure> {
        let loaded = self.load(sha256, wasm)?;
        let limits = self.call_limits();
        let started = Instant::now();
        let mut store = self.engine.store(limits).map_err(|e| classify(&e))?;
        let instance = loaded.pre.instantiate(&mut store).map_err(|e| classify(&e))?;
        let outcome = instance.call_run(&mut store, &to_wit(input));
        let fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        let memory_bytes = store.data().peak_memory();
        let wall = started.elapsed();
        drop(store);
        let report = match outcome {
            Ok(Ok(report)) => from_wit(report),
            Ok(Err(reason)) => return Err(RunFailure::Refused(truncate(reason, 1024))),
            Err(error) => return Err(classify(&error)),
        };
        let output_bytes = self.limits.check(&report).map_err(RunFailure::OutputTooLarge)?;
        Ok((report, RunStats { fuel_used, memory_bytes, wall, output_bytes }))
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Names a failed call.
fn classify(error: &wasmtime::Error) -> RunFailure {
    let trap =
        error.downcast_ref::<wasmtime::Trap>().copied().or_else(|| error.chain().find_map(|c| c.downcast_ref::<wasmtime::Trap>().copied()));
    if let Some(over) = over_budget(error) {
        return RunFailure::OutOfMemory(over.to_string());
    }
    match trap {
        Some(wasmtime::Trap::OutOfFuel) => return RunFailure::OutOfFuel,
        Some(wasmtime::Trap::Interrupt) => return RunFailure::Deadline,
        _ => {}
    }
    if let Some(count) = over_count(error) {
        return RunFailure::OutOfMemory(truncate(count, 512));
    }
    RunFailure::Trap(truncate(
        match trap {
            Some(trap) => trap.to_string(),
            None => error.root_cause().to_string(),
        },
        512,
    ))
}

fn kind_to_wit(kind: ObservationType) -> wit::ObservationKind {
    use wit::ObservationKind as K;
    match kind {
        ObservationType::AgentEePattern => K::AgentEePattern,
        ObservationType::AgentProfile => K::AgentProfile,
        ObservationType::AgentTimeline => K::AgentTimeline,
        ObservationType::AnomalyCompare => K::AnomalyCompare,
        ObservationType::DecisionMetadata => K::DecisionMetadata,
        ObservationType::EnvironmentAnomaly => K::EnvironmentAnomaly,
        ObservationType::EnvironmentDensity => K::EnvironmentDensity,
        ObservationType::EnvironmentSummary => K::EnvironmentSummary,
        ObservationType::EnvironmentTsl => K::EnvironmentTsl,
        ObservationType::EvidenceReport => K::EvidenceReport,
        ObservationType::PatternActionType => K::PatternActionType,
        ObservationType::PatternCompare => K::PatternCompare,
        ObservationType::PatternEeDistribution => K::PatternEeDistribution,
    }
}

fn to_wit(input: &ToolInput) -> wit::Input {
    wit::Input {
        today: input.today,
        observations: input
            .observations
            .iter()
            .map(|o: &Observation| wit::Observation {
                kind: kind_to_wit(o.kind),
                resolution_level: o.resolution_level,
                subject_agent: o.subject_agent.clone(),
                first_day: o.first_day,
                last_day: o.last_day,
                agents: o.agents,
                declarations: o.declarations,
                cells: o
                    .cells
                    .iter()
                    .map(|c: &Cell| wit::Cell { dimension: c.dimension.clone(), value: c.value.clone(), count: c.count })
                    .collect(),
                series: o
                    .series
                    .iter()
                    .map(|d: &DayCount| wit::DayCount {
                        day: d.day,
                        dimension: d.dimension.clone(),
                        value: d.value.clone(),
                        count: d.count,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn from_wit(report: wit::Report) -> Report {
    Report {
        metrics: report.metrics.into_iter().map(|m| Metric { name: m.name, value: m.value, scale: m.scale }).collect(),
        columns: report.columns,
        rows: report.rows.into_iter().map(|r| Row { label: r.label, values: r.values }).collect(),
    }
}
