//! Interpretation tools that run here: what a tool is given (the ARA
//! observations it declared, as typed records), what it returns (a bounded,
//! structured report), the bounds of a run, and how a run can fail. The
//! [`ToolRuntime`] trait is implemented by the WebAssembly host
//! (`anchor:tool@1.0.0` components); nothing here knows how.
//!
//! The service never stores a run's input or output: only who ran which
//! component, when, with what outcome and how many instructions.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tsl::ObservationType;

/// How many agents (or declarations) share one value of one dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    pub dimension: String,
    pub value: String,
    pub count: u64,
}

/// A count on one UTC day (days since 1970-01-01).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DayCount {
    pub day: i32,
    pub dimension: String,
    pub value: String,
    pub count: u64,
}

/// One observation, with the figures its runner would have received from ARA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    #[serde(with = "observation_kind")]
    pub kind: ObservationType,
    pub resolution_level: u8,
    #[serde(default)]
    pub subject_agent: Option<String>,
    pub first_day: i32,
    pub last_day: i32,
    #[serde(default)]
    pub agents: Option<u64>,
    #[serde(default)]
    pub declarations: Option<u64>,
    #[serde(default)]
    pub cells: Vec<Cell>,
    #[serde(default)]
    pub series: Vec<DayCount>,
}

/// What a run is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolInput {
    /// Today, as a UTC day number: tools have no clock of their own.
    pub today: i32,
    pub observations: Vec<Observation>,
}

/// A number in fixed point: `value` / 10^`scale`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub value: i64,
    pub scale: u8,
}

/// A row of the report's table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub label: String,
    pub values: Vec<i64>,
}

/// What a run returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub metrics: Vec<Metric>,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
}

/// The published bounds of components and their runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ToolLimits {
    /// The largest component accepted, in bytes.
    pub component_bytes: usize,
    /// Instructions per run (wasmtime fuel: about one per WebAssembly operator).
    pub fuel: u64,
    /// Wall-clock time per run, in milliseconds.
    pub wall_ms: u64,
    /// Linear memory a run may hold, in bytes: all the memories of all the
    /// component's instances together.
    pub memory_bytes: usize,
    /// Table elements a run may hold: all its tables together.
    pub table_elements: usize,
    /// Core instances a component may create (a language runtime's
    /// component has several; each is counted).
    pub instances: usize,
    /// Linear memories a component's instances may define, together.
    pub memories: usize,
    /// Tables a component's instances may define, together.
    pub tables: usize,
    /// The report's size, in bytes (strings plus eight per number).
    pub output_bytes: usize,
    pub max_metrics: usize,
    pub max_columns: usize,
    pub max_rows: usize,
    pub max_values_per_row: usize,
    /// The longest name, column or label, in bytes.
    pub max_text_bytes: usize,
    /// Runs at once on one host, all agents together; more wait briefly in
    /// line, then are refused (503 with Retry-After).
    pub concurrent_runs: usize,
    /// Runs at once of one agent on one host; its further runs wait for
    /// its own, never for another agent's slot (then 429).
    pub runs_per_agent: usize,
    /// Threads that compile uploaded components on one host (a pool of its
    /// own, so a compilation never takes every core).
    pub compile_threads: usize,
}

impl ToolLimits {
    pub const DEFAULT: ToolLimits = ToolLimits {
        component_bytes: 24 << 20,
        fuel: 4_000_000_000,
        wall_ms: 2_000,
        memory_bytes: 128 << 20,
        table_elements: 200_000,
        instances: 64,
        memories: 32,
        tables: 32,
        output_bytes: 256 << 10,
        max_metrics: 256,
        max_columns: 32,
        max_rows: 4096,
        max_values_per_row: 32,
        max_text_bytes: 256,
        concurrent_runs: 2,
        runs_per_agent: 1,
        compile_threads: 1,
    };

    /// The defaults, with runs and compile threads sized to this machine:
    /// as many runs at once as it has cores (at least two), and half its
    /// cores to compile (at least one).
    pub fn for_this_machine() -> ToolLimits {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        ToolLimits { concurrent_runs: cores.max(2), compile_threads: (cores / 2).max(1), ..ToolLimits::DEFAULT }
    }

    /// Checks a report against the output bounds; the reason when it is over.
    pub fn check(&self, report: &Report) -> Result<usize, String> {
        let over = |what: &str, n: usize, max: usize| Err(format!("the report has {n} {what}, more than the {max} allowed"));
        if report.metrics.len() > self.max_metrics {
            return over("metrics", report.metrics.len(), self.max_metrics);
        }
        if report.columns.len() > self.max_columns {
            return over("columns", report.columns.len(), self.max_columns);
        }
        if report.rows.len() > self.max_rows {
            return over("rows", report.rows.len(), self.max_rows);
        }
        let texts = report.metrics.iter().map(|m| &m.name).chain(&report.columns).chain(report.rows.iter().map(|r| &r.label));
        if let Some(long) = texts.clone().find(|t| t.len() > self.max_text_bytes) {
            return Err(format!("a name or label of {} bytes is longer than the {} allowed", long.len(), self.max_text_bytes));
        }
        if let Some(wide) = report.rows.iter().find(|r| r.values.len() > self.max_values_per_row) {
            return over("values in a row", wide.values.len(), self.max_values_per_row);
        }
        let bytes =
            texts.map(String::len).sum::<usize>() + 8 * (report.metrics.len() + report.rows.iter().map(|r| r.values.len()).sum::<usize>());
        if bytes > self.output_bytes {
            return over("bytes", bytes, self.output_bytes);
        }
        Ok(bytes)
    }
}

/// What a successful run used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunStats {
    pub fuel_used: u64,
    /// The most linear memory the run held at once, all memories together.
    pub memory_bytes: usize,
    pub wall: Duration,
    pub output_bytes: usize,
}

/// Why a run failed. Each is the tool's own failure: the service goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunFailure {
    /// The instruction budget ran out.
    OutOfFuel,
    /// The wall-clock deadline passed.
    Deadline,
    /// The tool tried to hold more memory than allowed.
    OutOfMemory(String),
    /// The report is over the output bounds.
    OutputTooLarge(String),
    /// The tool trapped (a panic, an unreachable, a call to a capability it does not have).
    Trap(String),
    /// The tool returned its own error.
    Refused(String),
    /// The component could not be loaded (it is not stored, or no longer compiles).
    Unavailable(String),
}

impl RunFailure {
    /// The reason's name, as runs record and answers show it.
    pub fn kind(&self) -> &'static str {
        match self {
            RunFailure::OutOfFuel => "out_of_fuel",
            RunFailure::Deadline => "deadline",
            RunFailure::OutOfMemory(_) => "out_of_memory",
            RunFailure::OutputTooLarge(_) => "output_too_large",
            RunFailure::Trap(_) => "trap",
            RunFailure::Refused(_) => "tool_error",
            RunFailure::Unavailable(_) => "unavailable",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            RunFailure::OutOfFuel => "the run used its whole instruction budget".into(),
            RunFailure::Deadline => "the run passed its wall-clock deadline".into(),
            RunFailure::OutOfMemory(d)
            | RunFailure::OutputTooLarge(d)
            | RunFailure::Trap(d)
            | RunFailure::Refused(d)
            | RunFailure::Unavailable(d) => d.clone(),
        }
    }
}

/// A component accepted for upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub sha256: [u8; 32],
    pub size: usize,
    /// What it imports (names of component imports); none of them a capability.
    pub imports: Vec<String>,
}

/// Why a component was refused at upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejected {
    TooLarge {
        size: usize,
        max: usize,
    },
    /// Not a WebAssembly component (or not one this host can compile).
    Invalid(String),
    /// It imports capabilities tools never get.
    ForbiddenImports(Vec<String>),
    /// Its exports do not implement `anchor:tool/tool@1.0.0`.
    WrongWorld(String),
    /// Instantiating it would go over a run's limits (instances, memories,
    /// tables, or what they start with).
    OverLimits(String),
    /// Instantiating it, before any call, traps: no run could succeed.
    Traps(String),
}

impl Rejected {
    pub fn detail(&self) -> String {
        match self {
            Rejected::TooLarge { size, max } => format!("the component is {size} bytes, more than the {max} accepted"),
            Rejected::Invalid(why) => format!("not a WebAssembly component this host can compile: {why}"),
            Rejected::ForbiddenImports(names) => {
                format!("it imports capabilities tools never get (no filesystem, network, clock or randomness): {}", names.join(", "))
            }
            Rejected::WrongWorld(why) => format!("it does not implement the world anchor:tool/tool@1.0.0: {why}"),
            Rejected::OverLimits(why) => format!("it is over the limits every run is held to (GET /v1/tsl/runtime): {why}"),
            Rejected::Traps(why) => format!("instantiating it traps before any call, so no run could succeed: {why}"),
        }
    }
}

/// Runs tool components. Calls block (compiling takes seconds for large
/// components, a run up to its deadline): callers run them off the async
/// executor.
pub trait ToolRuntime: Send + Sync {
    fn limits(&self) -> ToolLimits;
    /// Validates a component (size, imports, exports), compiles it and keeps
    /// the compiled artifact, keyed by its hash.
    fn accept(&self, wasm: &[u8]) -> Result<Accepted, Rejected>;
    /// Whether the component with this hash can run without its bytes
    /// (loaded, or compiled on this host's disk).
    fn ready(&self, sha256: &[u8; 32]) -> bool;
    /// Loads the component from this host's compiled cache, if it is there,
    /// so its first run does not wait; whether it is loaded now.
    fn preload(&self, sha256: &[u8; 32]) -> bool;
    /// Removes every compiled component but `keep` from this host's disk
    /// cache (superseded versions, retired tools); how many files it removed.
    /// (Memory holds compiled code within its own budget.)
    fn retain(&self, keep: &[[u8; 32]]) -> usize;
    /// Runs the component with this hash; `wasm` is needed when it is not ready.
    fn run(&self, sha256: &[u8; 32], wasm: Option<&[u8]>, input: &ToolInput) -> Result<(Report, RunStats), RunFailure>;
}

/// `n` synthetic observations of every kind a tool can receive, each with
/// cells over two dimensions and a short series: for trying a tool locally
/// (`anchor tool run --sample N`) and for measuring runs.
pub fn sample_input(n: usize) -> ToolInput {
    let kinds = [
        ObservationType::EnvironmentSummary,
        ObservationType::PatternEeDistribution,
        ObservationType::AgentProfile,
        ObservationType::AgentTimeline,
    ];
    let actions = ["execute", "hold", "reject", "depend", "approve"];
    ToolInput {
        today: 20_500,
        observations: (0..n)
            .map(|i| Observation {
                kind: kinds[i % kinds.len()],
                resolution_level: 1,
                subject_agent: None,
                first_day: 20_470,
                last_day: 20_499,
                agents: Some(10 + (i % 7) as u64),
                declarations: Some(40 + i as u64),
                cells: vec![
                    Cell { dimension: "action_type".into(), value: actions[i % actions.len()].into(), count: 5 + (i % 11) as u64 },
                    Cell { dimension: "retention".into(), value: "short".into(), count: 3 },
                ],
                series: vec![DayCount { day: 20_470 + (i % 30) as i32, dimension: "all".into(), value: "declarations".into(), count: 2 }],
            })
            .collect(),
    }
}

/// `ObservationType` by its interface name in JSON (`environment_summary`).
mod observation_kind {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::tsl::ObservationType;

    pub fn serialize<S: Serializer>(kind: &ObservationType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObservationType, D::Error> {
        let text = String::deserialize(d)?;
        ObservationType::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown observation kind {text:?}; expected one of {:?}", ObservationType::NAMES))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_over_the_bounds_are_named() {
        let limits = ToolLimits::DEFAULT;
        let row = |label: &str, n: usize| Row { label: label.into(), values: vec![1; n] };
        assert!(limits.check(&Report { rows: vec![row("a", 2)], ..Default::default() }).is_ok());
        let wide = Report { rows: vec![row("a", 33)], ..Default::default() };
        assert!(limits.check(&wide).unwrap_err().contains("values in a row"));
        let long = Report { columns: vec!["x".repeat(257)], ..Default::default() };
        assert!(limits.check(&long).unwrap_err().contains("257 bytes"));
        let many = Report { rows: (0..4097).map(|i| row(&i.to_string(), 1)).collect(), ..Default::default() };
        assert!(limits.check(&many).unwrap_err().contains("4097 rows"));
        let heavy = Report { rows: (0..4000).map(|_| row(&"y".repeat(100), 32)).collect(), ..Default::default() };
        assert!(limits.check(&heavy).unwrap_err().contains("bytes"));
    }
}
