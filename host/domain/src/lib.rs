//! The anchoring service's types and rules. No IO: no database, no HTTP, no WebAssembly.
//!
//! Reading order: [`money`] and [`clock`] (the two cross-cutting value types),
//! then [`declarations`] (DD and EE: what an agent declares), [`pricing`] (what a
//! declaration costs, as a trait the plugin host implements), [`integrity`]
//! (how a record is hashed), and [`agents`] (tokens and keys).

pub mod agents;
pub mod clock;
pub mod dab;
pub mod declarations;
pub mod error;
pub mod integrity;
pub mod money;
pub mod payments;
pub mod pricing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Invalid, brief};
pub use money::MilliDac;
