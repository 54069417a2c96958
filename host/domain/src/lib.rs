//! The anchoring service's types and rules. No IO: no database, no HTTP, no WebAssembly.
//!
//! Reading order: [`money`] and [`clock`] (the two cross-cutting value types),
//! then [`declarations`] (DD and EE: what an agent declares), [`pricing`] (what a
//! declaration costs, as a trait the plugin host implements), [`integrity`]
//! (how a record is hashed), and [`agents`] (tokens and keys).

pub mod agents;
pub mod ara;
pub mod asa;
pub mod bilateral;
pub mod clock;
pub mod dab;
pub mod dates;
pub mod declarations;
pub mod earned;
pub mod error;
pub mod integrity;
pub mod ise;
pub mod money;
pub mod owners;
pub mod payments;
pub mod pricing;
pub mod records;
pub mod retention;
pub mod schema;
pub mod screen;
pub mod tools;
pub mod trace;
pub mod tsl;

pub use clock::{Clock, ManualClock, SystemClock};

/// A closed vocabulary with fixed wire names (every `wire_enum!` type): what
/// a front end needs to read, show and document it.
pub trait WireEnum: Copy + Send + Sync + 'static {
    /// The type's name, for documentation.
    const TYPE_NAME: &'static str;
    /// Every wire name, in declaration order.
    const NAMES: &'static [&'static str];
    fn as_str(self) -> &'static str;
    fn parse(text: &str) -> Option<Self>;
}
pub use error::{Invalid, brief};

/// The id of a row written on every anchoring (a declaration, its EE, a
/// payment, a usage row): a UUIDv7, whose leading 48 bits are the creation
/// time in milliseconds and the rest random. Consecutive records land beside
/// one another in every index keyed by them, so a growing table's inserts
/// touch the index's newest pages instead of a random page of all of them
/// (which, once the indexes outgrow memory, is a read and a full-page write
/// per insert). The time it shows is no secret: the record's `anchored_at`
/// is in its receipt and in the log's leaf.
pub fn record_id() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}
pub use money::MilliDac;
