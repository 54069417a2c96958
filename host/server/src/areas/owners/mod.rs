//! The owner portal's API (DAP), under `/dap`: owner accounts and sessions
//! (`auth`, `account`), linked agents with their DAB and Trial (`agents`),
//! reports (`reports`), and the classification registry and content-inclusion
//! policy (`registry`). The use cases are `anchor_app::owners`.
//!
//! Every route but register, login, logout and the country suggestion needs an
//! owner session (`crate::owner::AuthOwner`). An owner reaches only the agents
//! it manages: anything else is 403 `NOT_LINKED`, whether the agent exists or
//! not, so the portal does not reveal which agent ids exist.

pub mod account;
pub mod agents;
pub mod auth;
pub mod registry;
pub mod reports;
pub mod subscriptions;
pub mod tsl;

use schemars::JsonSchema;
use serde::Serialize;

use crate::openapi::Operation;

pub fn operations() -> Vec<Operation> {
    let mut all = Vec::new();
    all.extend(auth::operations());
    all.extend(account::operations());
    all.extend(agents::operations());
    all.extend(reports::operations());
    all.extend(registry::operations());
    all.extend(tsl::operations());
    all.extend(subscriptions::operations());
    all
}

/// An answer that only says what happened.
#[derive(Serialize, JsonSchema)]
pub struct Message {
    pub message: &'static str,
}
