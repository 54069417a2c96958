//! The use cases of the anchoring service, with no HTTP.
//!
//! A use case takes typed input (already parsed by a front end: the HTTP API,
//! a background job, a test), reaches storage, pricing, settlement and the
//! clock through [`Services`], and returns a typed outcome or an [`AppError`]
//! with its documented `error_code`. "Payment required" is one of those
//! outcomes ([`charge::PaymentRequired`]): HTTP renders it as an x402
//! challenge, another front end may render it its own way.
//!
//! Reading order: [`error`], [`charge`] (the one pipeline every paid route
//! goes through), [`declarations`] (DD create and confirm), [`jobs`] (the
//! background work one host does at a time).

pub mod agents;
pub mod ara;
pub mod catalog;
pub mod charge;
pub mod declarations;
pub mod dur;
pub mod earned;
pub mod error;
pub mod ise;
pub mod jobs;
pub mod log;
pub mod owners;
pub mod payments;
pub mod pricing;
pub mod sdac;
pub mod status;
pub mod tools;
pub mod transparency;
pub mod tsl;

use std::sync::Arc;

use anchor_domain::pricing::Pricing;
use anchor_domain::{Clock, MilliDac};
use anchor_store::Store;
use anchor_x402::settlement::Settler;

pub use error::AppError;

pub type AppResult<T> = Result<T, AppError>;

/// What the use cases need to know of the deployment.
#[derive(Clone, Debug)]
pub struct Config {
    /// The base URL clients use, without a trailing slash (x402 resources name it).
    pub public_url: String,
    /// The x402 recipient.
    pub pay_to: String,
    /// The DAB of agents whose owner set none.
    pub dab_default: MilliDac,
    /// What owners may do here.
    pub owners: owners::OwnerSettings,
    /// How cross-agent statistics are protected.
    pub privacy: ara::privacy::Privacy,
}

/// Everything a use case reaches. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub store: Arc<dyn Store>,
    pub pricing: Arc<dyn Pricing>,
    pub settler: Arc<dyn Settler>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    /// Where sellers' tools run.
    pub tools: tools::Tools,
}
