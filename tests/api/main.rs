//! The integration suite: one binary, real HTTP over loopback, real components
//! built from `plugins/`, and every storage test on SQLite and PostgreSQL.

mod agents;
mod app_use_cases;
mod ara;
mod asa;
mod bilateral;
mod concurrency;
mod connections;
mod coverage;
mod dap;
mod dates;
mod declarations;
mod deidentification;
mod discovery;
mod docs;
mod dur;
mod earned;
mod hardening;
mod ise;
mod mcp;
mod openapi_contract;
mod operating;
mod payments;
mod plugins;
mod replica;
mod retention;
mod scitt;
mod sdac;
mod sdk;
mod store_conformance;
mod tidy;
mod tidy_charges;
mod tools;
mod transparency;
mod tsl;
mod validation;
