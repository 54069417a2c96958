//! Tools' uploaded components, their upload counts and their runs: the
//! store of what a seller uploads and a buyer runs (`ToolComponentStore`),
//! beside the market's own records (`tsl`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::*;

pub use anchor_domain::records::{ComponentRecord, RunRecord};

/// A component to add as a tool's next version.
#[derive(Clone, Copy, Debug)]
pub struct NewComponent<'a> {
    pub tool_id: Uuid,
    pub sha256: &'a [u8; 32],
    pub wasm: &'a [u8],
    pub uploaded_by: Uuid,
    pub now: DateTime<Utc>,
}

/// What adding a component concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComponentAdded {
    Added(ComponentRecord),
    /// The tool's current component is this one already.
    Unchanged(ComponentRecord),
}

/// Whether an upload fits the day's quotas (and was counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadCounted {
    Counted,
    /// The tool (or, with `per_seller`, its seller) had its day's uploads
    /// already; nothing was counted.
    TooMany {
        per_seller: bool,
    },
}

#[async_trait]
pub trait ToolComponentStore {
    /// The uploads to the tool, and by its seller to all its tools, since
    /// `day_start` (a read: [`count_upload`](Self::count_upload) is what counts).
    async fn uploads_since(&self, tool_id: Uuid, seller: Uuid, day_start: DateTime<Utc>) -> Result<(i64, i64)>;
    /// Counts an upload to the tool by its seller, unless the tool already
    /// had `per_tool` uploads since `day_start` or the seller `per_seller`.
    async fn count_upload(
        &self,
        tool_id: Uuid,
        seller: Uuid,
        now: DateTime<Utc>,
        day_start: DateTime<Utc>,
        per_tool: i64,
        per_seller: i64,
    ) -> Result<UploadCounted>;
    /// Adds a component as the tool's next version (unless it is the current
    /// one), and drops the bytes of the versions it supersedes (their facts stay).
    async fn add_component(&self, upload: &NewComponent<'_>) -> Result<ComponentAdded>;
    /// The tool's current (latest) component.
    async fn current_component(&self, tool_id: Uuid) -> Result<Option<ComponentRecord>>;
    /// The hashes of every tool's current component (for warming a host's cache).
    async fn current_component_hashes(&self) -> Result<Vec<[u8; 32]>>;
    /// A component's bytes, by hash.
    async fn component_wasm(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>>;
    async fn record_run(&self, run: &RunRecord) -> Result<()>;
    /// The agent's runs, newest first, and how many in all.
    async fn runs(&self, runner: Uuid, limit: i64, offset: i64) -> Result<(Vec<RunRecord>, i64)>;
}
