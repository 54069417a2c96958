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
mod agreements;
pub mod ara;
pub mod asa;
pub mod backup;
pub mod bilateral;
pub mod catalog;
pub mod charge;
pub mod declarations;
pub mod dur;
pub mod earned;
pub mod error;
pub mod features;
pub mod feedback;
pub mod ise;
pub mod jobs;
pub mod log;
pub mod metrics;
pub mod offers;
pub mod owners;
pub mod paging;
pub mod payment_status;
pub mod peers;
pub mod pricing;
pub mod receipt_key;
pub mod requests;
pub mod retention;
pub mod scitt;
pub mod sdac;
pub mod status;
pub mod tasks;
pub mod timestamp;
pub mod tools;
pub mod transparency;
pub mod tsl;
pub mod witness;

use std::sync::Arc;

use anchor_domain::pricing::Pricing;
use anchor_domain::{Clock, MilliDac};
use anchor_ports::Store;
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
    /// The Trial credit each new agent receives (`anchor_domain::agents::TRIAL_DAC` by default).
    pub trial_grant: MilliDac,
    /// What owners may do here.
    pub owners: owners::OwnerSettings,
    /// How cross-agent statistics are protected.
    pub privacy: ara::privacy::Privacy,
    /// What the operator switched off.
    pub features: Features,
}

/// Areas an operator can switch off; switched off, their routes answer 503
/// `FEATURE_NOT_AVAILABLE`. Everything is on by default. A host starts with
/// its flags' values (`--features-off`); switches stored in the database
/// (`anchor feature off NAME`) override them on every host ([`features`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Indefinite-retention subscriptions (`/v1/retention/indefinite/*`);
    /// with them off, no declaration can be created with indefinite retention.
    pub retention: bool,
    /// Owners cancelling an agent's ASA subscription (`DELETE /dap/asa/subscription/{agent_id}`).
    pub dap_asa_cancel: bool,
    /// Agent-type owners (`/dap/owner/register-agent`, `/dap/auth/agent-login`).
    pub agent_owners: bool,
}

impl Default for Features {
    fn default() -> Features {
        Features { retention: true, dap_asa_cancel: true, agent_owners: true }
    }
}

impl Features {
    /// The names `--features-off` and `anchor feature` take.
    pub const NAMES: [&'static str; 3] = ["retention", "dap_asa_cancel", "agent_owners"];

    /// Everything on except the named areas; an unknown name is refused.
    pub fn without(names: &[String]) -> Result<Features, String> {
        let mut features = Features::default();
        for name in names {
            match name.trim() {
                "" => {}
                other => features.set(other, false)?,
            }
        }
        Ok(features)
    }

    /// Switches the named area; an unknown name is refused.
    pub fn set(&mut self, name: &str, enabled: bool) -> Result<(), String> {
        let switch = match name {
            "retention" => &mut self.retention,
            "dap_asa_cancel" => &mut self.dap_asa_cancel,
            "agent_owners" => &mut self.agent_owners,
            other => return Err(format!("unknown feature {other:?}; the features are {}", Features::NAMES.join(", "))),
        };
        *switch = enabled;
        Ok(())
    }

    pub fn is_on(&self, name: &str) -> Option<bool> {
        match name {
            "retention" => Some(self.retention),
            "dap_asa_cancel" => Some(self.dap_asa_cancel),
            "agent_owners" => Some(self.agent_owners),
            _ => None,
        }
    }

    /// The names of the areas switched off.
    pub fn off(&self) -> Vec<&'static str> {
        Features::NAMES.into_iter().filter(|name| self.is_on(name) == Some(false)).collect()
    }
}

/// Everything a use case reaches. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    /// The storage ports. Only the use cases reach them: the crates above
    /// (the server, its operations, MCP) cannot name this field.
    pub(crate) store: Arc<dyn Store>,
    pub pricing: Arc<dyn Pricing>,
    /// How x402 payments are verified and settled; only the charge pipeline
    /// and the reconciliation job call it.
    pub(crate) settler: Arc<dyn Settler>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    /// Where sellers' tools run.
    pub tools: tools::Tools,
    /// This host's numbers (`GET /metrics`).
    pub metrics: Arc<metrics::Metrics>,
    /// A read-only replica for observation reads, if the operator gave one.
    pub replica: Replica,
    /// What is switched on now (the flags, overridden by the database's switches).
    pub switches: features::Switches,
    /// The pricing generations and when each is in force; `pricing` answers
    /// with the one a request started with.
    pub schedule: Arc<pricing::Schedule>,
    /// Who vouches for the log beyond its own key: the witnesses and their quorum.
    pub trust: witness::Trust,
    /// The issuers whose signed statements are registered (SCRAPI).
    pub scitt: scitt::Registry,
    /// The signer of x402 offers and receipts (the log key), when the host
    /// has one ([`offers`]).
    pub offers: Option<Arc<offers::OfferSigner>>,
}

/// What [`Services`] is made of, handed over once when a host (or a test)
/// assembles it; afterwards the store and the settler are the use cases' own.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub pricing: Arc<dyn Pricing>,
    pub settler: Arc<dyn Settler>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    pub tools: tools::Tools,
    pub metrics: Arc<metrics::Metrics>,
    pub replica: Replica,
    pub switches: features::Switches,
    pub schedule: Arc<pricing::Schedule>,
    pub trust: witness::Trust,
}

impl From<Parts> for Services {
    fn from(p: Parts) -> Services {
        Services {
            store: p.store,
            pricing: p.pricing,
            settler: p.settler,
            clock: p.clock,
            config: p.config,
            tools: p.tools,
            metrics: p.metrics,
            replica: p.replica,
            switches: p.switches,
            schedule: p.schedule,
            trust: p.trust,
            scitt: scitt::Registry::default(),
            offers: None,
        }
    }
}

impl Services {
    /// The same services, signing x402 offers and receipts with `signer`.
    pub fn with_offers(mut self, signer: offers::OfferSigner) -> Services {
        self.offers = Some(Arc::new(signer));
        self
    }

    /// The same services, paying through another settler (facilitator mode).
    pub fn set_settler(&mut self, settler: Arc<dyn Settler>) {
        self.settler = settler;
    }

    /// The areas switched on at this moment.
    pub fn features(&self) -> Features {
        self.switches.get()
    }

    /// The generation pricing this request (or, outside one, the one in
    /// force), as every charge records it.
    pub fn priced_by(&self) -> anchor_domain::records::PricedBy {
        let generation = self.pricing.generation();
        anchor_domain::records::PricedBy { version: generation.version.clone(), sha256: generation.sha256.clone() }
    }
}

/// Where observation reads go: a streaming replica of the primary when one
/// is set (`--database-read-url`), else the primary. Set once at start (or
/// by a test once its replica runs); every clone of the services sees it.
/// After a failed read the replica is left alone for [`Replica::REST`], so a
/// replica that is down costs one slow read, not one per request.
#[derive(Clone, Default)]
pub struct Replica(Arc<ReplicaState>);

#[derive(Default)]
struct ReplicaState {
    store: std::sync::RwLock<Option<Arc<dyn Store>>>,
    resting_until: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Replica {
    /// How long one read may take on the replica before the primary answers instead.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);
    /// How long the replica is left alone after a failure.
    pub const REST: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn set(&self, store: Option<Arc<dyn Store>>) {
        *self.0.store.write().unwrap_or_else(|p| p.into_inner()) = store;
        *self.0.resting_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The replica, unless there is none or it is resting after a failure.
    pub fn get(&self) -> Option<Arc<dyn Store>> {
        let resting = self.0.resting_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|until| std::time::Instant::now() < until);
        if resting {
            return None;
        }
        self.0.store.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn failed(&self) {
        *self.0.resting_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now() + Replica::REST);
    }
}

impl Services {
    /// Counts a read the replica served, or one it failed (then
    /// [`observation_read!`] reads the primary, and the replica rests).
    pub fn replica_outcome(&self, failure: Option<String>) {
        let outcome = match failure {
            None => "replica",
            Some(error) => {
                self.replica.failed();
                tracing::warn!(%error, rest_secs = Replica::REST.as_secs(), "the read replica failed; reading from the primary");
                "fell_back_to_primary"
            }
        };
        self.metrics.replica_reads.get_or_create(&metrics::OutcomeLabels { outcome }).inc();
    }
}

/// Runs a read that may trail the primary (an ARA observation's) on the
/// replica, within [`Replica::TIMEOUT`]; if there is none, or it fails
/// (stopped, unreachable, slow, recovering), on the primary. Never for a read
/// that must see this request's own writes. `$s` names the store in
/// `$read`, a store call to await.
macro_rules! observation_read {
    ($services:expr, |$s:ident| $read:expr) => {{
        let services: &$crate::Services = $services;
        let on_replica = match services.replica.get() {
            Some(replica) => {
                let $s: &dyn anchor_ports::Store = replica.as_ref();
                match tokio::time::timeout($crate::Replica::TIMEOUT, $read).await {
                    Ok(Ok(value)) => {
                        services.replica_outcome(None);
                        Some(value)
                    }
                    Ok(Err(error)) => {
                        services.replica_outcome(Some(error.to_string()));
                        None
                    }
                    Err(_) => {
                        services.replica_outcome(Some(format!("no answer within {:?}", $crate::Replica::TIMEOUT)));
                        None
                    }
                }
            }
            None => None,
        };
        match on_replica {
            Some(value) => Ok(value),
            None => {
                let $s: &dyn anchor_ports::Store = services.store.as_ref();
                $read.await
            }
        }
    }};
}
pub(crate) use observation_read;
