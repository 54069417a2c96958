//! The charge pipeline: the one way a paid route takes money.
//!
//! ```text
//!  price (from the pricing component, by the use case)
//!    │
//!    ├─ Trial ── on the routes the spec names; tried first, whole or base fee only
//!    │            └─ pays ──────────────────────────────────────────────► commit(Trial)
//!    │
//!    └─ x402 ─── DAB check (external spending only) ─► no payload: PaymentRequired
//!                 └─ payload ─► verify locally ─► verify with the settler
//!                        └─ commit(External): reserve the authorization (nonce
//!                           unique, DAB re-checked under the agent's lock) and
//!                           record the thing paid for, in one transaction
//! ```
//!
//! The use case supplies the price, the sources its route accepts, and a
//! [`Commit`]: how to record what is bought, paid a given way, in one
//! transaction. The pipeline decides which way is tried, in which order, and
//! turns every refusal into its documented error. Earned DAC joins as a source
//! with its ledger.
//!
//! External payments are reserved now and settled when the record is
//! confirmed (DD create). Usage is recorded by the confirmation, in the same
//! transaction that fixes the record.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use uuid::Uuid;

use alloy_primitives::keccak256;
use anchor_domain::MilliDac;
use anchor_store::{NewPayment, PaymentRecord, PaymentSource};
use anchor_x402::Reason;

use crate::{AppError, AppResult, Services};

/// A route, as payments and usage records name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// How long an externally paid declaration may wait for its confirmation.
pub const PAYMENT_WINDOW_SECS: u64 = 30 * 60;
/// `maxTimeoutSeconds` of a challenge settled at confirmation: the
/// authorization must outlive the confirmation window, plus five minutes for
/// settlement.
pub const CONFIRM_MAX_TIMEOUT_SECS: u64 = PAYMENT_WINDOW_SECS + 5 * 60;

/// What Trial may pay of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrialUse {
    /// Nothing: this route is not one Trial pays for, or the agent asked so.
    None,
    /// The whole price, or nothing.
    Whole,
    /// Only this part (the base fee); the rest is paid externally.
    Part(MilliDac),
}

/// What a payment offered with the request looked like.
#[derive(Clone, Debug)]
pub enum Offered {
    None,
    /// A header that could not be read as a payment payload: refused (400
    /// `INVALID_PAYLOAD`) once an external payment is needed, ignored before.
    Malformed(String),
    Payload(Value),
}

/// One purchase: what it costs and how it may be paid.
#[derive(Clone, Debug)]
pub struct Order {
    pub agent_id: Uuid,
    pub route: Route,
    pub total: MilliDac,
    /// What is bought, for the challenge (the pipeline adds why Trial did not pay).
    pub description: String,
    pub trial: TrialUse,
    pub offered: Offered,
}

/// How a commit is asked to pay.
#[derive(Clone, Debug)]
pub enum Funding {
    /// Trial pays the whole price.
    Trial,
    /// A verified authorization pays `payment.amount_units`; Trial pays `trial_part` (zero or the base fee).
    External { payment: Box<NewPayment>, trial_part: MilliDac },
}

/// What a commit's one transaction concluded.
#[derive(Clone, Debug)]
pub enum Committed<T> {
    Done(T),
    /// Trial could not pay its part (too little left, or expired); nothing was written.
    TrialShort {
        balance: MilliDac,
        expired: bool,
    },
    /// The authorization's nonce is already reserved; nothing was written.
    NonceUsed,
    /// The payment would pass the DAB; nothing was written.
    DabReached {
        limit: MilliDac,
        spent: MilliDac,
    },
}

/// Records what is bought, paid the given way, in one transaction.
#[async_trait]
pub trait Commit: Send + Sync {
    type Output: Send;
    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>>;
}

/// The typed "payment required" outcome.
#[derive(Clone, Debug)]
pub struct PaymentRequired {
    pub route: Route,
    /// What an external payment must carry.
    pub amount: MilliDac,
    pub description: String,
    /// Why an offered payment was refused (the x402 `error`), if one was.
    pub reason: Option<String>,
    /// The sources the route accepts (what the agent could use).
    pub accepts: Vec<PaymentSource>,
    /// The x402 requirement a payment must match, as the wire carries it.
    pub requirement: Value,
    /// The resource's URL.
    pub resource: String,
}

impl PaymentRequired {
    /// The x402 v2 `PaymentRequired` object.
    pub fn challenge(&self) -> Value {
        anchor_x402::challenge(&self.resource, &self.description, self.requirement.clone(), self.reason.as_deref())
    }
}

/// The refusal when a payment would pass the agent's DAB.
pub fn dab_reached(limit: MilliDac, spent: MilliDac, amount: MilliDac, resets: DateTime<Utc>) -> AppError {
    AppError::forbidden(
        "DAB_LIMIT_REACHED",
        format!(
            "this payment of {amount} DAC would pass the agent's DAB of {limit} DAC per month ({spent} DAC spent externally this month); \
             the budget resets at {}; Trial-covered work is not affected",
            resets.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
    )
}

/// The deterministic reference of a local settlement: keccak-256 over the
/// payment's identity (network, asset, payer, payment id).
pub fn local_settlement_reference(payment: &PaymentRecord) -> String {
    let identity = format!("{}|{}|{}|{}", payment.network, payment.asset, payment.payer, payment.payment_id);
    format!("local:{}", keccak256(identity.as_bytes()))
}

/// Takes payment for `order` and records it through `commit`.
pub async fn charge<C: Commit>(services: &Services, order: Order, commit: &C) -> AppResult<C::Output> {
    let now = services.clock.now();
    let mut description = order.description.clone();
    let trial_part = match order.trial {
        TrialUse::Whole => match commit.commit(Funding::Trial).await? {
            Committed::Done(output) => return Ok(output),
            Committed::TrialShort { balance, expired } => {
                let why = if expired { "Trial has expired".to_string() } else { format!("Trial holds {balance} DAC") };
                description = format!("{description}; {why}");
                MilliDac::ZERO
            }
            Committed::NonceUsed | Committed::DabReached { .. } => {
                return Err(AppError::Internal(anyhow::anyhow!("a Trial-only commit reported an external payment outcome")));
            }
        },
        TrialUse::Part(part) => part,
        TrialUse::None => MilliDac::ZERO,
    };
    let amount = order.total - trial_part;
    let accepts = match order.trial {
        TrialUse::None => vec![PaymentSource::External],
        _ => vec![PaymentSource::Trial, PaymentSource::External],
    };
    let requirement = anchor_x402::requirement(&services.config.pay_to, amount.usdc_base_units(), CONFIRM_MAX_TIMEOUT_SECS);
    let required = |reason: Option<String>| {
        AppError::PaymentRequired(Box::new(PaymentRequired {
            route: order.route,
            amount,
            description: description.clone(),
            reason,
            accepts: accepts.clone(),
            requirement: requirement.clone(),
            resource: format!("{}{}", services.config.public_url, order.route.path),
        }))
    };

    // DAB: external spending only, before any challenge is issued.
    let (period_start, resets) = anchor_domain::dab::period(now);
    let dab = services.store.dab_status(order.agent_id, period_start).await?;
    let limit = dab.own_limit.unwrap_or(services.config.dab_default);
    if dab.spent + amount > limit {
        return Err(dab_reached(limit, dab.spent, amount, resets));
    }
    let payload = match order.offered {
        Offered::None => return Err(required(None)),
        Offered::Malformed(message) => return Err(AppError::invalid("INVALID_PAYLOAD", message)),
        Offered::Payload(payload) => payload,
    };
    let verified = anchor_x402::verify(&payload, &requirement, now.timestamp()).map_err(|r| required(Some(r.as_str().into())))?;
    if let Err(reason) = services.settler.verify(&payload, &requirement).await {
        return Err(required(Some(reason)));
    }
    let payment = NewPayment {
        payment_id: Uuid::new_v4(),
        network: anchor_x402::NETWORK.into(),
        asset: anchor_x402::USDC_BASE.to_ascii_lowercase(),
        payer: verified.payer.clone(),
        nonce: verified.nonce.clone(),
        amount_units: verified.amount_units,
        pay_to: verified.pay_to.clone(),
        valid_after: verified.valid_after,
        valid_before: verified.valid_before,
        route: order.route.to_string(),
        payload: payload.to_string(),
        deadline: now + Duration::seconds(PAYMENT_WINDOW_SECS as i64),
        dab_default: services.config.dab_default,
        period_start,
    };
    match commit.commit(Funding::External { payment: Box::new(payment), trial_part }).await? {
        Committed::Done(output) => Ok(output),
        Committed::NonceUsed => Err(required(Some(Reason::NonceUsed.as_str().into()))),
        Committed::DabReached { limit, spent } => Err(dab_reached(limit, spent, amount, resets)),
        Committed::TrialShort { .. } => Err(AppError::invalid(
            "INSUFFICIENT_DAC",
            format!(
                "Trial cannot pay its {trial_part} DAC part of this price; leave premium_payment_source out to pay the whole price over x402"
            ),
        )),
    }
}
