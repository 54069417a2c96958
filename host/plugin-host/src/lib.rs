//! The WebAssembly component host: pricing generations (the operator's) and
//! interpretation tools (sellers'), each kind on its own engine.
//!
//! One [`PluginEngine`] compiles components; each loaded component becomes a
//! typed, pre-linked handle; every call runs in a fresh `Store` with a fuel
//! budget (CPU), an epoch deadline (wall clock) and one budget for all the
//! memories and tables its instances create, and with no capabilities at all: any import a component declares is linked to a trap.
//! A guest that traps, spins or grows fails its own call and nothing else.

pub mod cache;
pub mod engine;
pub mod pricing;
pub mod shape;
pub mod tool;

pub use cache::CompiledCache;
pub use engine::{Limits, OverBudget, PluginEngine, Profile};
pub use pricing::{WarmQuoter, WasmPricing};
pub use shape::{Shape, shape};
pub use tool::WasmTools;
/// The runtime, for callers that inspect components (tests, operator tools).
pub use wasmtime;

/// Where the build put the guest components (`<name>.wasm`), fixtures included.
pub const PLUGINS_DIR: &str = env!("ANCHOR_PLUGINS_DIR");

/// Pricing generation v1.3.0, bundled into the binary.
pub const DEFAULT_PRICING_WASM: &[u8] = include_bytes!(concat!(env!("ANCHOR_PLUGINS_DIR"), "/pricing_v1_3_0.wasm"));
