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
pub mod asa;
pub mod bilateral;
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
pub mod retention;
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
    /// What the operator switched off.
    pub features: Features,
}

/// Areas an operator can switch off; switched off, their routes answer 503
/// `FEATURE_NOT_AVAILABLE`. Everything is on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Indefinite-retention subscriptions (`/v1/retention/indefinite/*`);
    /// with them off, no declaration can be created with indefinite retention.
    pub retention: bool,
    /// Owners cancelling an agent's ASA subscription (`DELETE /dap/asa/subscription/{agent_id}`).
    pub dap_asa_cancel: bool,
}

impl Default for Features {
    fn default() -> Features {
        Features { retention: true, dap_asa_cancel: true }
    }
}

impl Features {
    /// The names `--features-off` takes.
    pub const NAMES: [&'static str; 2] = ["retention", "dap_asa_cancel"];

    /// Everything on except the named areas; an unknown name is refused.
    pub fn without(names: &[String]) -> Result<Features, String> {
        let mut features = Features::default();
        for name in names {
            match name.trim() {
                "retention" => features.retention = false,
                "dap_asa_cancel" => features.dap_asa_cancel = false,
                "" => {}
                other => return Err(format!("unknown feature {other:?}; the features are {}", Features::NAMES.join(", "))),
            }
        }
        Ok(features)
    }
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
