//! The interface in wire shapes, shared by REST (`http/`) and MCP (`mcp/`):
//! each operation's request and answer types, and the function it runs (read
//! the request into the use case's input, call `anchor_app`, render the
//! result). Neither transport knows the other.

pub mod account;
pub mod agents;
pub mod ara;
pub mod bilateral;
pub mod declarations;
pub mod discovery;
pub mod dur;
pub mod earned;
pub mod ise;
pub mod pricing;
pub mod reports;
pub mod sdac;
pub mod tools;
pub mod tsl;
