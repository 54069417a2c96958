//! Tools that run: a seller uploads a component for its tool; an agent that
//! bought the tool (or its seller) runs it on the ARA observations the tool
//! declared, made on the runner's behalf with ARA's own gates and prices.
//!
//! A run happens before it is paid for, and is paid only if it succeeded:
//! with a price above zero and no payment offered, the answer is the 402
//! challenge before anything runs; with a payment, the tool runs first and
//! the payment settles only on success, so a failing (or hostile) tool costs
//! its runner nothing. Runs are bounded by the runtime's published limits
//! and run off the async executor. Slots are shared fairly: an agent has
//! [`ToolLimits::runs_per_agent`] of its own, and its further runs wait in
//! its own line (then 429), never in the host's; the host has
//! [`ToolLimits::concurrent_runs`] for everyone, with a short line in which
//! each agent has at most its own slots' worth of places (then 503 with
//! Retry-After). One agent's spinning tool therefore holds at most its own
//! slots, and every other agent finds the rest.
//!
//! An upload is let in before its bytes are read ([`admit_upload`]): the tool
//! must be the seller's and take components, its daily quota not spent, and
//! it takes one of the host's [`UPLOADS_AT_ONCE`] upload places, one per
//! seller at a time, held until the work on its bytes ends; so the bytes
//! uploads hold in memory at once are bounded, and no one but a tool's
//! seller makes the host read any. Once its bytes have arrived (not empty,
//! not over the size) it counts against the seller's and the tool's daily
//! quota, a component refused at compilation and the same bytes again
//! included; an upload told to try again later (503) does not count. The
//! same bytes as the current version change nothing and compile nothing,
//! and a component this host has compiled before is not compiled again.
//!
//! Content-blind: a run's observations and report are never stored, only
//! who ran which component version, when, the outcome and the instructions used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::payments::{PaymentSource, Subject, SubjectDomain};
use anchor_domain::records::{AgentRecord, ComponentRecord, RunRecord, ToolRecord};
use anchor_domain::tools::{Rejected, Report, RunFailure, RunStats, ToolInput, ToolLimits, ToolRuntime};
use anchor_domain::tsl::{PurchaseStatus, ToolStatus};
use anchor_ports::{ComponentAdded, NewComponent, NewObservation, UploadCounted};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ara::for_tools::{self, Gathered};
use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const RUN: Route = Route { method: "POST", path: "/v1/tsl/tool/{tool_id}/run" };

/// How long a run waits for one of the host's slots before it is refused.
const RUN_WAIT: Duration = Duration::from_secs(5);
/// How long an agent's run waits for the agent's own slot.
const AGENT_WAIT: Duration = Duration::from_secs(5);
/// How long an upload waits for the compiler (one compilation at a time per host).
const COMPILE_WAIT: Duration = Duration::from_secs(10);
/// The most uploads one tool takes in a UTC day.
pub const UPLOADS_PER_DAY: i64 = 10;
/// The most uploads one seller makes in a UTC day, all its tools together.
pub const UPLOADS_PER_SELLER_PER_DAY: i64 = 30;
/// Uploads a host reads and compiles at once in each lane (a large one
/// holds up to [`ToolLimits::component_bytes`] in memory); a seller has one
/// at a time.
pub const UPLOADS_AT_ONCE: usize = 4;
/// An upload that says it is at most this large (its `Content-Length`)
/// goes in the small lane: places and a compiler of its own, so small
/// components are never queued behind large ones (decision 0063).
pub const SMALL_UPLOAD_BYTES: u64 = 1 << 20;
/// How fast an upload's bytes must arrive: its body is read whole within
/// [`UPLOAD_GRACE`] plus its size at this rate, or it is refused (408) and
/// its place freed, so a trickled body holds a place for seconds, not for
/// the whole body deadline.
pub const UPLOAD_MIN_BYTES_PER_SEC: u64 = 1 << 20;
pub const UPLOAD_GRACE: Duration = Duration::from_secs(2);

/// Which of the host's two upload lanes an upload is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Said to be at most [`SMALL_UPLOAD_BYTES`].
    Small,
    Large,
}

/// The tool runtime and the slots runs and compiles take on this host. Cheap to clone.
#[derive(Clone)]
pub struct Tools {
    runtime: Arc<dyn ToolRuntime>,
    runs: Arc<Semaphore>,
    /// Each agent's own slots, while it has a run under way or waiting.
    agents: Arc<Mutex<HashMap<Uuid, Arc<Semaphore>>>>,
    /// The compiler, one compilation at a time in each lane (large, small).
    compiles: (Arc<Semaphore>, Arc<Semaphore>),
    /// The host's upload places in each lane (large, small), and the sellers holding one.
    uploads: (Arc<Semaphore>, Arc<Semaphore>),
    uploading: Arc<Mutex<std::collections::HashSet<Uuid>>>,
    /// How long a run, and a compile, wait for their slot.
    waits: (Duration, Duration),
    /// How long an upload waits for its place.
    upload_wait: Duration,
    /// An upload's body arrives within the grace plus its size at the rate (bytes a second).
    upload_rate: (Duration, u64),
}

/// What a blocking tool task waits for.
#[derive(Clone, Copy)]
enum Slot {
    /// A run of this agent's.
    Run(Uuid),
    Compile(Lane),
}

/// An agent's slot, given back (and its entry dropped when no one else
/// holds or waits for it) when the run ends.
struct AgentSlot {
    agents: Arc<Mutex<HashMap<Uuid, Arc<Semaphore>>>>,
    agent: Uuid,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for AgentSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map holds it: no run of this agent's holds or waits for a slot.
        if agents.get(&self.agent).is_some_and(|slots| Arc::strong_count(slots) == 1) {
            agents.remove(&self.agent);
        }
    }
}

impl Tools {
    pub fn new(runtime: Arc<dyn ToolRuntime>) -> Tools {
        Tools::with_waits(runtime, RUN_WAIT, COMPILE_WAIT)
    }

    /// The same with other waits for a slot (a test process that shares one
    /// runtime among many servers compiles far more than one host does).
    pub fn with_waits(runtime: Arc<dyn ToolRuntime>, run_wait: Duration, compile_wait: Duration) -> Tools {
        let runs = Arc::new(Semaphore::new(runtime.limits().concurrent_runs.max(1)));
        Tools {
            runtime,
            runs,
            agents: Arc::default(),
            compiles: (Arc::new(Semaphore::new(1)), Arc::new(Semaphore::new(1))),
            uploads: (Arc::new(Semaphore::new(UPLOADS_AT_ONCE)), Arc::new(Semaphore::new(UPLOADS_AT_ONCE))),
            uploading: Arc::default(),
            waits: (run_wait, compile_wait),
            upload_wait: compile_wait,
            upload_rate: (UPLOAD_GRACE, UPLOAD_MIN_BYTES_PER_SEC),
        }
    }

    /// The same with another wait for an upload place (the compile wait by default).
    pub fn with_upload_wait(self, upload_wait: Duration) -> Tools {
        Tools { upload_wait, ..self }
    }

    /// The same with another upload rate: the body arrives within `grace`
    /// plus its size at `bytes_per_sec` (a test that holds bodies open on purpose).
    pub fn with_upload_rate(self, grace: Duration, bytes_per_sec: u64) -> Tools {
        Tools { upload_rate: (grace, bytes_per_sec.max(1)), ..self }
    }

    /// How long an upload's body said to hold `declared` bytes (at most
    /// `max`) may take to arrive.
    pub fn upload_deadline(&self, declared: Option<u64>, max: u64) -> Duration {
        let (grace, rate) = self.upload_rate;
        let bytes = declared.unwrap_or(max).min(max);
        grace + Duration::from_millis(bytes.saturating_mul(1000) / rate)
    }

    pub fn limits(&self) -> ToolLimits {
        self.runtime.limits()
    }

    /// The agent's own slot: it waits in the agent's line, not the host's.
    async fn agent_slot(&self, agent: Uuid) -> AppResult<AgentSlot> {
        let slots = {
            let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            let per_agent = self.limits().runs_per_agent.max(1);
            agents.entry(agent).or_insert_with(|| Arc::new(Semaphore::new(per_agent))).clone()
        };
        let mut slot = AgentSlot { agents: self.agents.clone(), agent, permit: None };
        let wait = AGENT_WAIT.min(self.waits.0);
        let permit = tokio::time::timeout(wait, slots.acquire_owned()).await;
        match permit {
            Ok(Ok(permit)) => {
                slot.permit = Some(permit);
                Ok(slot)
            }
            _ => Err(AppError::RateLimited {
                message: format!(
                    "this agent already has {} tool run(s) under way on this host, the most it may; try again when one ends",
                    self.limits().runs_per_agent.max(1)
                ),
                retry_after_secs: self.limits().wall_ms.div_ceil(1000).max(1),
            }),
        }
    }

    /// A slot of this host's (and the agent's own, for a run), once one is free.
    async fn hold(&self, slot: Slot) -> AppResult<Held> {
        let agent_slot = match slot {
            Slot::Run(agent) => Some(self.agent_slot(agent).await?),
            Slot::Compile(_) => None,
        };
        let (slots, wait, what) = match slot {
            Slot::Run(_) => (&self.runs, self.waits.0, "tool run"),
            Slot::Compile(Lane::Large) => (&self.compiles.0, self.waits.1, "compilation"),
            Slot::Compile(Lane::Small) => (&self.compiles.1, self.waits.1, "small-component compilation"),
        };
        let permit = tokio::time::timeout(wait, slots.clone().acquire_owned())
            .await
            .map_err(|_| AppError::Busy {
                code: "TOOL_RUNNER_BUSY",
                message: format!("every {what} slot of this host is busy, and so is its line; try again in a few seconds"),
                retry_after_secs: self.limits().wall_ms.div_ceil(1000).max(1),
            })?
            .map_err(|e| AppError::Internal(e.into()))?;
        Ok(Held { _permit: permit, _agent: agent_slot })
    }

    /// Runs `work` on a blocking thread once a slot is free.
    async fn blocking<T: Send + 'static>(&self, slot: Slot, work: impl FnOnce(&dyn ToolRuntime) -> T + Send + 'static) -> AppResult<T> {
        let held = self.hold(slot).await?;
        self.blocking_in(held, work).await
    }

    /// Runs `work` on a blocking thread in a slot already held, giving it back after.
    async fn blocking_in<T: Send + 'static>(&self, held: Held, work: impl FnOnce(&dyn ToolRuntime) -> T + Send + 'static) -> AppResult<T> {
        let runtime = self.runtime.clone();
        let out = tokio::task::spawn_blocking(move || {
            let out = work(runtime.as_ref());
            drop(held);
            out
        })
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("a tool task failed: {e}")))?;
        Ok(out)
    }

    /// One of the host's upload places in `lane` for `seller`: 429 while
    /// the seller has an upload under way here, 503 when every place stays
    /// taken for the upload wait (places are given in the order asked).
    async fn upload_place(&self, seller: Uuid, lane: Lane) -> AppResult<UploadPlace> {
        let inserted = self.uploading.lock().unwrap_or_else(|p| p.into_inner()).insert(seller);
        if !inserted {
            return Err(AppError::RateLimited {
                message: "this seller already has an upload under way on this host; send the next when it is answered".into(),
                retry_after_secs: 10,
            });
        }
        // From here on the seller's entry is cleared however this ends.
        let mut place = UploadPlace { uploading: self.uploading.clone(), seller, _permit: None };
        let places = match lane {
            Lane::Large => &self.uploads.0,
            Lane::Small => &self.uploads.1,
        };
        let size = if lane == Lane::Small { "small" } else { "large" };
        let permit = tokio::time::timeout(self.upload_wait, places.clone().acquire_owned())
            .await
            .map_err(|_| AppError::Busy {
                code: "TOOL_RUNNER_BUSY",
                message: format!(
                    "this host is receiving or compiling {UPLOADS_AT_ONCE} {size} uploads already, the most it does at once; try again in a few seconds"
                ),
                retry_after_secs: 2,
            })?
            .map_err(|e| AppError::Internal(e.into()))?;
        place._permit = Some(permit);
        Ok(place)
    }
}

/// A slot taken: the host's, and the agent's own for a run.
struct Held {
    _permit: OwnedSemaphorePermit,
    _agent: Option<AgentSlot>,
}

/// One of the host's upload places, held by a seller.
struct UploadPlace {
    uploading: Arc<Mutex<std::collections::HashSet<Uuid>>>,
    seller: Uuid,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for UploadPlace {
    fn drop(&mut self) {
        self.uploading.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.seller);
    }
}

fn owned_tool(tool: ToolRecord, agent: &AgentRecord) -> AppResult<ToolRecord> {
    if tool.seller_agent_id != agent.agent_id {
        return Err(AppError::forbidden("NOT_TOOL_OWNER", format!("only the seller of tool {} may do this", tool.tool_id)));
    }
    Ok(tool)
}

/// What an upload answered.
#[derive(Clone, Debug)]
pub struct Uploaded {
    pub component: ComponentRecord,
    /// The tool's current component was this one already.
    pub unchanged: bool,
    pub imports: Vec<String>,
}

/// An upload let in, before its bytes are read: the tool is the seller's
/// and takes components, its quota is not spent, and the seller holds one of
/// the host's upload places until the upload is answered (or, if the client
/// goes away meanwhile, until the work on its bytes ends).
pub struct UploadAdmitted {
    tool_id: Uuid,
    seller: Uuid,
    place: UploadPlace,
    lane: Lane,
}

impl UploadAdmitted {
    /// The most bytes this upload's body may hold: its lane's.
    pub fn max_bytes(&self, limits: &ToolLimits) -> u64 {
        match self.lane {
            Lane::Small => SMALL_UPLOAD_BYTES,
            Lane::Large => limits.component_bytes as u64,
        }
    }
}

/// PUT /v1/tsl/tool/{tool_id}/component, before its body is read: the checks
/// that need no byte of it, the day's quota (read; the upload counts once
/// its bytes have arrived), and an upload place in the lane its declared
/// size (`Content-Length`) puts it in.
pub async fn admit_upload(services: &Services, agent: &AgentRecord, tool_id: Uuid, declared: Option<u64>) -> AppResult<UploadAdmitted> {
    let tool = owned_tool(crate::tsl::tool(services, tool_id).await?, agent)?;
    if tool.status == ToolStatus::Defunct {
        return Err(AppError::Conflict { code: "TOOL_NOT_AVAILABLE", message: format!("tool {tool_id} is defunct") });
    }
    if let Some(c) = tool.connections.iter().find(|c| !for_tools::SUPPORTED.contains(&c.observation_type)) {
        return Err(AppError::Conflict {
            code: "TOOL_INPUT_UNSUPPORTED",
            message: format!("the tool declares {}, which tools cannot receive yet; register a tool without it", c.observation_type),
        });
    }
    let now = services.clock.now();
    let day_start = anchor_domain::ara::day_start_of(now);
    let (tool_uploads, seller_uploads) = services.store.uploads_since(tool_id, agent.agent_id, day_start).await?;
    if seller_uploads >= UPLOADS_PER_SELLER_PER_DAY || tool_uploads >= UPLOADS_PER_DAY {
        return Err(quota_spent(seller_uploads >= UPLOADS_PER_SELLER_PER_DAY, now));
    }
    let limits = services.tools.limits();
    if let Some(size) = declared.filter(|size| *size > limits.component_bytes as u64) {
        return Err(rejected(Rejected::TooLarge { size: size as usize, max: limits.component_bytes }));
    }
    let lane = if declared.is_some_and(|size| size <= SMALL_UPLOAD_BYTES) { Lane::Small } else { Lane::Large };
    let place = services.tools.upload_place(agent.agent_id, lane).await?;
    Ok(UploadAdmitted { tool_id, seller: agent.agent_id, place, lane })
}

/// 429 for a spent daily upload quota (the seller's, or the tool's).
fn quota_spent(per_seller: bool, now: chrono::DateTime<chrono::Utc>) -> AppError {
    let message = if per_seller {
        format!(
            "a seller makes at most {UPLOADS_PER_SELLER_PER_DAY} uploads a UTC day, all its tools together; try again after the day turns"
        )
    } else {
        format!("a tool takes at most {UPLOADS_PER_DAY} uploads a UTC day; try again after the day turns")
    };
    AppError::until_the_day_turns(message, now)
}

/// PUT /v1/tsl/tool/{tool_id}/component: the seller's component for its
/// tool, once [`admit_upload`] let it in and its bytes are read. The upload
/// counts against the day's quota before anything is compiled.
pub async fn upload(services: &Services, admitted: UploadAdmitted, wasm: Vec<u8>) -> AppResult<Uploaded> {
    let UploadAdmitted { tool_id, seller, place, lane } = admitted;
    if wasm.is_empty() {
        return Err(AppError::invalid(
            "COMPONENT_INVALID",
            "the body is empty: send the component's bytes (Content-Type: application/wasm)",
        ));
    }
    let limits = services.tools.limits();
    let max = if lane == Lane::Small { SMALL_UPLOAD_BYTES as usize } else { limits.component_bytes };
    if wasm.len() > max {
        return Err(rejected(Rejected::TooLarge { size: wasm.len(), max }));
    }
    // Hash first: the "unchanged" answer costs no compilation. The place
    // goes with the bytes into each blocking task: a client gone meanwhile
    // frees it only when the work on them ends.
    let (sha256, wasm, place) = tokio::task::spawn_blocking(move || (<[u8; 32]>::from(Sha256::digest(&wasm)), wasm, place))
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("hashing the component failed: {e}")))?;
    if let Some(current) = services.store.current_component(tool_id).await?.filter(|c| c.sha256 == sha256) {
        count_upload(services, tool_id, seller).await?;
        return Ok(Uploaded { component: current, unchanged: true, imports: Vec::new() });
    }
    // The compiler's slot before the count: an upload told to try again
    // later (503) has not spent an upload of the day.
    let held = services.tools.hold(Slot::Compile(lane)).await?;
    count_upload(services, tool_id, seller).await?;
    let (accepted, wasm, _place) = services
        .tools
        .blocking_in(held, move |runtime| {
            let accepted = runtime.accept(&wasm);
            (accepted, wasm, place)
        })
        .await?;
    let accepted = accepted.map_err(rejected)?;
    let now = services.clock.now();
    let upload = NewComponent { tool_id, sha256: &accepted.sha256, wasm: &wasm, uploaded_by: seller, now };
    let added = services.store.add_component(&upload).await?;
    let uploaded = match added {
        ComponentAdded::Added(component) => Uploaded { component, unchanged: false, imports: accepted.imports },
        ComponentAdded::Unchanged(component) => Uploaded { component, unchanged: true, imports: accepted.imports },
    };
    // The version this one superseded (and anything else no longer current)
    // leaves this host's cache; the upload is done whether or not that
    // happens now (the next upload, or start-up, tidies again).
    let tidied = match services.store.current_component_hashes().await {
        Ok(current) => services.tools.blocking(Slot::Compile(lane), move |runtime| runtime.retain(&current)).await,
        Err(error) => Err(error.into()),
    };
    if let Err(error) = tidied {
        tracing::warn!(%tool_id, %error, "the compiled-component cache was not tidied after an upload");
    }
    Ok(uploaded)
}

/// Counts an upload whose bytes arrived against the seller's and the tool's
/// quota of the day (refused with 429 when one is spent).
async fn count_upload(services: &Services, tool_id: Uuid, seller: Uuid) -> AppResult<()> {
    let now = services.clock.now();
    let day_start = anchor_domain::ara::day_start_of(now);
    match services.store.count_upload(tool_id, seller, now, day_start, UPLOADS_PER_DAY, UPLOADS_PER_SELLER_PER_DAY).await? {
        UploadCounted::TooMany { per_seller } => Err(quota_spent(per_seller, now)),
        UploadCounted::Counted => Ok(()),
    }
}

/// A refused component, with its documented code.
fn rejected(rejected: Rejected) -> AppError {
    let code = match rejected {
        Rejected::TooLarge { .. } => "COMPONENT_TOO_LARGE",
        Rejected::Invalid(_) | Rejected::Traps(_) => "COMPONENT_INVALID",
        Rejected::ForbiddenImports(_) => "COMPONENT_FORBIDDEN_IMPORT",
        Rejected::WrongWorld(_) => "COMPONENT_WRONG_WORLD",
        Rejected::OverLimits(_) => "COMPONENT_OVER_LIMITS",
    };
    AppError::invalid(code, rejected.detail())
}

/// GET /v1/tsl/tool/{tool_id}/component (public): the current component's facts.
pub async fn component(services: &Services, tool_id: Uuid) -> AppResult<ComponentRecord> {
    crate::tsl::tool(services, tool_id).await?;
    services.store.current_component(tool_id).await?.ok_or_else(|| not_runnable(tool_id))
}

fn not_runnable(tool_id: Uuid) -> AppError {
    AppError::Conflict { code: "TOOL_NOT_RUNNABLE", message: format!("tool {tool_id} has no component uploaded; it is a listing only") }
}

/// A run as asked for.
#[derive(Clone, Debug)]
pub struct RunAsk {
    /// The agent observed by the tool's agent-level observations (the runner when absent).
    pub subject: Option<Uuid>,
    pub offered: Offered,
}

/// A successful run.
#[derive(Clone, Debug)]
pub struct RunDone {
    pub run_id: Uuid,
    pub version: i32,
    pub sha256: [u8; 32],
    pub report: Report,
    pub stats: RunStats,
    pub observations: usize,
    pub charged: MilliDac,
    /// The settlement reference and payer, when paid externally.
    pub settlement: Option<crate::charge::Settlement>,
}

/// Records the run's observations once its payment has settled.
struct RecordObservations<'a> {
    services: &'a Services,
    observations: Vec<NewObservation>,
}

#[async_trait]
impl Commit for RecordObservations<'_> {
    type Output = (Uuid, crate::charge::Settlement);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let Funding::Settled { payment_id, settlement } = funding else {
            return Err(AppError::Internal(anyhow::anyhow!("a tool run is paid over x402 and settled inline only")));
        };
        for observation in &self.observations {
            let observation = NewObservation { payment_id: Some(payment_id), ..observation.clone() };
            self.services.store.record_observation(&observation).await?;
        }
        Ok(Committed::Done((payment_id, settlement)))
    }
}

fn failure_code(failure: &RunFailure) -> &'static str {
    match failure {
        RunFailure::OutOfFuel => "TOOL_OUT_OF_FUEL",
        RunFailure::Deadline => "TOOL_DEADLINE",
        RunFailure::OutOfMemory(_) => "TOOL_OUT_OF_MEMORY",
        RunFailure::OutputTooLarge(_) => "TOOL_OUTPUT_TOO_LARGE",
        RunFailure::Trap(_) => "TOOL_TRAPPED",
        RunFailure::Refused(_) => "TOOL_REFUSED",
        RunFailure::Unavailable(_) => "TOOL_UNAVAILABLE",
    }
}

/// POST /v1/tsl/tool/{tool_id}/run.
pub async fn run(services: &Services, runner: &AgentRecord, tool_id: Uuid, ask: RunAsk) -> AppResult<RunDone> {
    let tool = crate::tsl::tool(services, tool_id).await?;
    if tool.seller_agent_id != runner.agent_id {
        let bought = services.store.live_purchase(runner.agent_id, tool_id).await?.is_some_and(|p| p.status == PurchaseStatus::Completed);
        if !bought {
            return Err(AppError::forbidden("TOOL_NOT_PURCHASED", format!("buy tool {tool_id} first (POST /v1/tsl/purchase)")));
        }
    }
    let component = services.store.current_component(tool_id).await?.ok_or_else(|| not_runnable(tool_id))?;
    let now = services.clock.now();
    let mut gathered: Vec<Gathered> = Vec::with_capacity(tool.connections.len());
    for connection in &tool.connections {
        gathered.push(for_tools::gather(services, runner, connection.observation_type, connection.resolution_level, ask.subject).await?);
    }
    let total = gathered.iter().fold(MilliDac::ZERO, |sum, g| sum + g.base + g.surcharge);
    let run_id = Uuid::new_v4();
    let path = RUN.path.replace("{tool_id}", &tool_id.to_string());
    let order = |offered: Offered| Order {
        agent_id: runner.agent_id,
        route: RUN,
        path: Some(path.clone()),
        total,
        description: format!("{} ARA observation(s) for a run of tool {} ({total} DAC)", gathered.len(), tool.name),
        trial: TrialUse::None,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::AraObservation, id: run_id }),
        pending: None,
    };
    let observations: Vec<NewObservation> = gathered
        .iter()
        .map(|g| NewObservation {
            observation_id: Uuid::new_v4(),
            observer_agent_id: runner.agent_id,
            target_agent_id: g.target,
            kind: g.tier.as_str(),
            resolution_level: i32::from(g.level),
            base: g.base,
            premium: g.surcharge,
            premium_source: (g.surcharge > MilliDac::ZERO).then_some(PaymentSource::External),
            payment_id: None,
            observed_at: now,
            priced_by: services.priced_by(),
        })
        .collect();
    // Nothing offered for a paid run: the challenge, before anything runs.
    if total > MilliDac::ZERO && matches!(ask.offered, Offered::None) {
        let commit = RecordObservations { services, observations };
        charge::charge(services, order(Offered::None), &commit).await?;
        return Err(AppError::Internal(anyhow::anyhow!("a paid run without a payment was charged")));
    }
    let input =
        ToolInput { today: anchor_domain::ara::day_of(now), observations: gathered.iter().map(|g| g.observation.clone()).collect() };
    let sha256 = component.sha256;
    // The slot first: a component's bytes (up to 24 MiB) are loaded only by a run that holds one.
    let held = services.tools.hold(Slot::Run(runner.agent_id)).await?;
    let wasm = if services.tools.runtime.ready(&sha256) { None } else { services.store.component_wasm(&sha256).await? };
    let metrics = services.metrics.clone();
    let outcome = services
        .tools
        .blocking_in(held, move |runtime| {
            metrics.guest("tool", "run", crate::metrics::tool_reason, || runtime.run(&sha256, wasm.as_deref(), &input))
        })
        .await?;
    let mut record = RunRecord {
        run_id,
        tool_id,
        version: component.version,
        sha256,
        runner_agent_id: runner.agent_id,
        started_at: now,
        wall_micros: 0,
        outcome: String::new(),
        fuel_used: None,
        output_bytes: None,
        charged: MilliDac::ZERO,
        payment_id: None,
    };
    let (report, stats) = match outcome {
        Ok(done) => done,
        Err(failure) => {
            record.outcome = failure.kind().to_string();
            services.store.record_run(&record).await?;
            tracing::info!(%tool_id, version = component.version, reason = failure.kind(), "a tool run failed");
            return Err(AppError::Unprocessable {
                code: failure_code(&failure),
                message: format!("the tool's run failed ({}): {}; nothing was charged", failure.kind(), failure.detail()),
            });
        }
    };
    record.wall_micros = stats.wall.as_micros() as i64;
    record.fuel_used = Some(stats.fuel_used as i64);
    record.output_bytes = Some(stats.output_bytes as i64);
    let settlement = if total > MilliDac::ZERO {
        let commit = RecordObservations { services, observations };
        match charge::charge(services, order(ask.offered), &commit).await {
            Ok((payment_id, settlement)) => {
                record.payment_id = Some(payment_id);
                Some(settlement)
            }
            Err(refused) => {
                record.outcome = "payment_refused".into();
                services.store.record_run(&record).await?;
                return Err(refused);
            }
        }
    } else {
        for observation in &observations {
            services.store.record_observation(observation).await?;
        }
        None
    };
    record.outcome = "ok".into();
    record.charged = total;
    services.store.record_run(&record).await?;
    Ok(RunDone { run_id, version: component.version, sha256, report, stats, observations: gathered.len(), charged: total, settlement })
}

/// GET /v1/tsl/runs: the agent's runs, newest first (metadata only).
pub async fn runs(
    services: &Services,
    agent: &AgentRecord,
    limit: Option<i64>,
    offset: Option<i64>,
) -> AppResult<crate::tsl::Page<RunRecord>> {
    let crate::paging::Window { limit, offset } = crate::paging::by_offset(crate::paging::MARKET, limit, offset)?;
    let (items, total) = services.store.runs(agent.agent_id, limit, offset).await?;
    Ok(crate::tsl::Page { items, total, limit, offset })
}

/// Loads the compiled form of every current component this host has on
/// disk, so their first runs do not wait; returns how many.
pub async fn warm(services: &Services) -> anyhow::Result<usize> {
    let hashes = services.store.current_component_hashes().await?;
    let kept = hashes.clone();
    services.tools.blocking(Slot::Compile(Lane::Large), move |runtime| runtime.retain(&kept)).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    services
        .tools
        .blocking(Slot::Compile(Lane::Large), move |runtime| hashes.iter().filter(|h| runtime.preload(h)).count())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}
