//! The bounds a tool run is held to, as the tool routes and the market show them.

use anchor_app::tools::{self};
use anchor_domain::tools::ToolLimits;
use schemars::JsonSchema;
use serde::Serialize;

/// The bounds every run is held to on this host, and how its slots are shared.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunLimitsView {
    /// The largest component accepted, in bytes.
    pub(crate) component_bytes: usize,
    /// Instructions (wasmtime fuel, about one per WebAssembly operator) per run.
    pub(crate) fuel_per_run: u64,
    pub(crate) wall_clock_ms_per_run: u64,
    /// Linear memory a run may hold: all the memories of all the component's
    /// instances together, counted before anything is allocated.
    pub(crate) memory_bytes_per_run: usize,
    /// Table elements a run may hold, all its tables together.
    pub(crate) table_elements_per_run: usize,
    /// Core instances a component may create (each of a language runtime's counts).
    pub(crate) core_instances_per_component: usize,
    /// Linear memories its instances may define, together.
    pub(crate) memories_per_component: usize,
    /// Tables its instances may define, together.
    pub(crate) tables_per_component: usize,
    /// The report's size: its strings plus eight bytes per number.
    pub(crate) output_bytes: usize,
    pub(crate) max_metrics: usize,
    pub(crate) max_columns: usize,
    pub(crate) max_rows: usize,
    pub(crate) max_values_per_row: usize,
    pub(crate) max_text_bytes: usize,
    /// Runs at once on one host, all agents together; past them a run waits
    /// a few seconds in line, then gets 503 TOOL_RUNNER_BUSY with Retry-After.
    pub(crate) concurrent_runs: usize,
    /// Runs at once of one agent on one host; past them its runs wait in
    /// its own line, then get 429 RATE_LIMITED.
    pub(crate) concurrent_runs_per_agent: usize,
    /// Uploads a tool takes in a UTC day (the same bytes again and refused components count).
    pub(crate) uploads_per_tool_per_day: i64,
    /// Uploads a seller makes in a UTC day, all its tools together.
    pub(crate) uploads_per_seller_per_day: i64,
}

impl From<ToolLimits> for RunLimitsView {
    fn from(l: ToolLimits) -> RunLimitsView {
        RunLimitsView {
            component_bytes: l.component_bytes,
            fuel_per_run: l.fuel,
            wall_clock_ms_per_run: l.wall_ms,
            memory_bytes_per_run: l.memory_bytes,
            table_elements_per_run: l.table_elements,
            core_instances_per_component: l.instances,
            memories_per_component: l.memories,
            tables_per_component: l.tables,
            output_bytes: l.output_bytes,
            max_metrics: l.max_metrics,
            max_columns: l.max_columns,
            max_rows: l.max_rows,
            max_values_per_row: l.max_values_per_row,
            max_text_bytes: l.max_text_bytes,
            concurrent_runs: l.concurrent_runs,
            concurrent_runs_per_agent: l.runs_per_agent,
            uploads_per_tool_per_day: tools::UPLOADS_PER_DAY,
            uploads_per_seller_per_day: tools::UPLOADS_PER_SELLER_PER_DAY,
        }
    }
}
