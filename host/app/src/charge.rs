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
//! turns every refusal into its documented error. Earned DAC pays the part of
//! an order the use case gives it (`Order::earned`), checked before anything else.
//!
//! An external payment settles in one of two ways ([`Settle`]):
//!
//! - `AtConfirm` (DD create, bilateral propose): the commit reserves the
//!   authorization with the record, and confirmation settles it; usage is
//!   recorded by the confirmation, in the transaction that fixes the record.
//! - `Inline` (every other paid route): the pipeline reserves the
//!   authorization for the route's subject, settles it, records its usage with
//!   the settlement in one transaction, and only then asks the commit to
//!   record what was bought ([`Funding::Settled`]). An unknown settlement
//!   outcome is left to the reconciliation job, which settles it again.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use uuid::Uuid;

use alloy_primitives::keccak256;
use anchor_domain::MilliDac;
use anchor_domain::payments::{PaymentSource, PaymentStatus, Subject, SubjectDomain};
use anchor_domain::records::{DabStatus, PaymentRecord};
use anchor_ports::{EarnedPart, InlineDue, NewPayment, Pending, Reservation, StoreError, ValidityKey};
use anchor_x402::Reason;
use anchor_x402::settlement::{NONCE_USED, Settled};

use crate::{AppError, AppResult, Services};

pub use crate::catalog::Route;

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
    /// The whole price, but the balance read with the agent's token cannot
    /// pay it (Trial is only ever debited, so it cannot pay now either): not
    /// tried, said in the challenge as a refused `Whole` would be.
    Short { balance: MilliDac, expired: bool },
}

impl TrialUse {
    /// `Whole`, or `Short` if `balance` (read with the token, by `now`)
    /// cannot pay `amount` or its Trial has expired.
    pub fn whole_from(balance: MilliDac, expires_at: DateTime<Utc>, amount: MilliDac, now: DateTime<Utc>) -> TrialUse {
        let expired = expires_at <= now;
        if expired || balance < amount { TrialUse::Short { balance, expired } } else { TrialUse::Whole }
    }
}

/// Why Trial did not pay, as a challenge's description says it.
fn trial_short(balance: MilliDac, expired: bool) -> String {
    if expired { "Trial has expired".to_string() } else { format!("Trial holds {balance} DAC") }
}

/// What a payment offered with the request looked like.
#[derive(Clone, Debug)]
pub enum Offered {
    None,
    /// A header that could not be read as a payment payload: refused (400
    /// `INVALID_PAYLOAD`) once an external payment is needed, ignored before.
    Malformed(String),
    Payload(anchor_x402::Payload),
    /// Nobody is there to pay externally (a background job charging a
    /// balance): a price Trial or Earned DAC does not cover is refused as
    /// payment required at once, before the DAB is read.
    Unavailable,
}

/// When an external payment settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// The commit reserves it with the record; confirming the record settles it.
    AtConfirm,
    /// Settled before the answer, for this subject.
    Inline(Subject),
    /// Settled before the answer, for this subject, on a route that only
    /// reads (an observation); `request` digests what was asked. The same
    /// payment sent again by its agent with the same request, once it has
    /// settled, resumes it: answered again ([`Commit::resumed`]), charged
    /// once (decision 0085).
    InlineRead { subject: Subject, request: [u8; 32] },
}

impl Settle {
    /// The subject of a payment settled before the answer, and the digest of
    /// the request where the route only reads.
    fn inline(self) -> Option<(Subject, Option<[u8; 32]>)> {
        match self {
            Settle::AtConfirm => None,
            Settle::Inline(subject) => Some((subject, None)),
            Settle::InlineRead { subject, request } => Some((subject, Some(request))),
        }
    }
}

/// One purchase: what it costs and how it may be paid.
#[derive(Clone, Debug)]
pub struct Order {
    pub agent_id: Uuid,
    pub route: Route,
    /// The request's path where the route has parameters (the challenge's
    /// resource names it); `None`: the route's path.
    pub path: Option<String>,
    pub total: MilliDac,
    /// What is bought, for the challenge (the pipeline adds why Trial did not pay).
    pub description: String,
    pub trial: TrialUse,
    /// The part of `total` Earned DAC pays: zero for most orders; a
    /// surcharge or premium the agent chose to pay so (inline orders have the
    /// pipeline debit it with the reservation, an `AtConfirm` commit with its
    /// record); or all of `total` where a route or job is paid from Earned DAC
    /// whole (the commit debits it, [`Funding::Earned`]).
    pub earned: MilliDac,
    pub offered: Offered,
    pub settle: Settle,
    /// What an inline payment's reservation writes with it (a purchase,
    /// completed in the settlement's transaction); `None` for most orders.
    pub pending: Option<Pending>,
}

/// How a commit is asked to pay.
#[derive(Clone, Debug)]
pub enum Funding {
    /// Trial pays the whole price.
    Trial,
    /// Earned DAC pays the whole price: the commit debits up to
    /// `part.amount` under the agent's lock, if the unexpired balance reaches
    /// `part.threshold` (else `Committed::EarnedShort`).
    Earned(EarnedPart),
    /// A verified authorization pays `payment.amount_units`; Trial pays `trial_part` (zero or the base fee).
    External { payment: Box<NewPayment>, trial_part: MilliDac },
    /// Settled inline already (its usage is recorded): record what was bought.
    Settled { payment_id: Uuid, settlement: Settlement },
}

/// An x402 payment that settled: the settler's reference (the
/// transaction), who paid, and the resource it paid for (the URL its 402
/// named), which its signed receipt names too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    pub reference: String,
    pub payer: String,
    pub resource: String,
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
    /// Earned DAC could not pay its part; nothing was written.
    EarnedShort {
        balance: MilliDac,
    },
}

/// Records what is bought, paid the given way, in one transaction.
#[async_trait]
pub trait Commit: Send + Sync {
    type Output: Send;
    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>>;
    /// Whether a `Done` with this output debited what it was asked to (a
    /// replayed request, answered with the earlier record, debited nothing).
    fn debited(_output: &Self::Output) -> bool {
        true
    }
    /// The answer to a request that sent again a payment which settled for
    /// the same request (an order settled [`Settle::InlineRead`]), written
    /// nowhere: `None` where a second answer cannot be given without a
    /// second purchase (then 409 `DUPLICATE_REQUEST`).
    fn resumed(&self, _settlement: Settlement) -> Option<Self::Output> {
        None
    }
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
    /// The x402 requirement a payment must match.
    pub requirement: anchor_x402::Requirement,
    /// The resource's URL.
    pub resource: String,
    /// The signed offer of `requirement` (x402's `offer-receipt`), when the
    /// host signs offers ([`crate::offers`]).
    pub offer: Option<serde_json::Value>,
}

impl PaymentRequired {
    /// The same, its offer signed when the host signs offers: its terms
    /// hold as long as an authorization for them may (`maxTimeoutSeconds`).
    fn signed(mut self, services: &Services) -> PaymentRequired {
        self.offer = services.offers.as_ref().map(|signer| {
            let until = services.clock.now().timestamp().max(0) as u64 + self.requirement.max_timeout_seconds;
            anchor_x402::offers::signed_offer(signer.as_ref(), &self.resource, &self.requirement, 0, until)
        });
        self
    }

    /// The x402 v2 `PaymentRequired` object.
    pub fn challenge(&self) -> anchor_x402::Challenge {
        let mut challenge = anchor_x402::challenge(&self.resource, &self.description, self.requirement.clone(), self.reason.as_deref());
        if let Some(offer) = &self.offer {
            let extension = anchor_x402::offers::offers_extension(vec![offer.clone()]);
            challenge.extensions = Some(serde_json::json!({ anchor_x402::offers::EXTENSION: extension }));
        }
        challenge
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

/// What Earned DAC is asked to pay, once the agent's balance can: before any
/// challenge, so that an agent never pays externally for an order Earned
/// then refuses (the reservation checks again, under the agent's lock).
async fn earned_part(services: &Services, order: &Order) -> AppResult<EarnedPart> {
    let threshold = crate::earned::terms(services)?.threshold;
    let balance = services.store.earned_balance(order.agent_id, services.clock.now()).await?.balance;
    if balance < threshold || balance < order.earned {
        return Err(earned_short(order.ask(), balance, Some(threshold)));
    }
    Ok(EarnedPart { amount: order.earned, threshold })
}

/// What of an order a refusal names.
#[derive(Clone, Copy)]
struct Ask {
    total: MilliDac,
    earned: MilliDac,
    /// Nothing could be paid otherwise (`Offered::Unavailable`).
    only_earned: bool,
}

impl Order {
    fn ask(&self) -> Ask {
        Ask { total: self.total, earned: self.earned, only_earned: matches!(self.offered, Offered::Unavailable) }
    }

    /// The URL of what is bought: the one its 402 names and its receipt signs.
    fn resource(&self, services: &Services) -> String {
        format!("{}{}", services.config.public_url, self.path.as_deref().unwrap_or(self.route.path))
    }
}

/// `INSUFFICIENT_DAC`: Earned DAC cannot pay what the order gives it. The
/// one refusal of a balance too low, for every route and job: 400 where the
/// agent could pay otherwise, a plain 402 where Earned DAC is the only way to
/// pay (indefinite retention: no x402 route).
fn earned_short(order: Ask, balance: MilliDac, threshold: Option<MilliDac>) -> AppError {
    let amount = order.earned;
    let threshold = threshold.map(|t| format!(", and pays only from a balance of at least {t} DAC")).unwrap_or_default();
    let whole = amount == order.total;
    let instead =
        if whole { "nothing was charged and nothing changed" } else { "pay the part externally instead (leave the Earned option out)" };
    let message =
        format!("Earned DAC was asked to pay {amount} DAC: this agent holds {balance} unexpired Earned DAC{threshold}; {instead}");
    match order.only_earned {
        false => AppError::invalid("INSUFFICIENT_DAC", message),
        true => AppError::Unpaid { code: "INSUFFICIENT_DAC", message },
    }
}

/// The deterministic reference of a local settlement: keccak-256 over the
/// payment's identity (network, asset, payer, payment id).
pub fn local_settlement_reference(payment: &PaymentRecord) -> String {
    local_reference(&payment.network, &payment.asset, &payment.payer, payment.payment_id)
}

/// [`local_settlement_reference`] from the identity's parts.
pub fn local_reference(network: &str, asset: &str, payer: &str, payment_id: Uuid) -> String {
    let identity = format!("{network}|{asset}|{payer}|{payment_id}");
    format!("local:{}", keccak256(identity.as_bytes()))
}

/// Asks the settler to settle an authorization (`payload`: its JSON text,
/// as offered and recorded; `requirement`: the terms it pays, `None` for the
/// ones it accepted). After an unknown outcome
/// (`reconciling`), "nonce already used" means the first attempt went
/// through: it is read as settled, so a payment is never charged twice.
pub(crate) async fn settle(
    services: &Services,
    payment_id: Uuid,
    payload: &str,
    requirement: Option<&Value>,
    local: &str,
    reconciling: bool,
) -> Settled {
    let settled = match services.settler.settle(payload, requirement, local).await {
        Settled::No { reason } if reconciling && reason == NONCE_USED => Settled::Yes { reference: format!("reconciled:{payment_id}") },
        other => other,
    };
    let outcome = match &settled {
        Settled::Yes { .. } => "settled",
        Settled::No { .. } => "refused",
        Settled::Unknown { .. } => "unknown",
    };
    services.metrics.x402_settlements.get_or_create(&crate::metrics::OutcomeLabels { outcome }).inc();
    settled
}

/// Settles a reserved inline payment and records its usage; a failure ends
/// it, an unknown outcome leaves it to the reconciliation job. `reconciling`:
/// an earlier attempt's outcome was unknown, so a used nonce means it went through.
async fn settle_reserved(
    services: &Services,
    payment_id: Uuid,
    payer: &str,
    payload: &str,
    requirement: Option<&Value>,
    local: &str,
    reconciling: bool,
) -> AppResult<String> {
    let store = &services.store;
    let now = services.clock.now();
    let reference = match settle(services, payment_id, payload, requirement, local, reconciling).await {
        Settled::Yes { reference } => reference,
        Settled::No { reason } => {
            store.end_payment(payment_id, PaymentStatus::SettleFailed, &reason, now).await?;
            return Err(AppError::SettlementFailed { reason, payer: payer.to_string() });
        }
        Settled::Unknown { detail } => {
            store.end_payment(payment_id, PaymentStatus::SettleUnknown, &detail, now).await?;
            return Err(AppError::Unavailable {
                code: "SETTLEMENT_PENDING",
                message: "the payment's settlement outcome is not known yet; it is retried in the background and charged at most once"
                    .into(),
            });
        }
    };
    record_settled(services, payment_id, reference).await
}

/// Records an inline payment whose settlement went through. The money moved:
/// the record is tried again while the database refuses it for the moment;
/// if it still fails, the payment is marked unknown with its reference kept,
/// and the reconciliation job records it (without settling again).
async fn record_settled(services: &Services, payment_id: Uuid, reference: String) -> AppResult<String> {
    let store = &services.store;
    let now = services.clock.now();
    match with_retries(|| store.settle_payment(payment_id, &reference, now)).await {
        Ok(_) => Ok(reference),
        Err(error) => Err(settled_unrecorded(services, payment_id, &reference, &error).await),
    }
}

/// Marks a payment that settled but whose record failed with `error` for the
/// reconciliation job, and says so (503 `SETTLEMENT_PENDING`).
pub(crate) async fn settled_unrecorded(services: &Services, payment_id: Uuid, reference: &str, error: &StoreError) -> AppError {
    tracing::error!(%payment_id, %error, "a settled payment could not be recorded; it is left to the reconciliation job");
    if let Err(error) = services.store.mark_settled_unrecorded(payment_id, reference, services.clock.now()).await {
        tracing::error!(%payment_id, %error, "nor could it be marked for reconciliation");
    }
    AppError::Unavailable {
        code: "SETTLEMENT_PENDING",
        message: "the payment settled but could not be recorded at once; it is recorded in the background and charged once".into(),
    }
}

/// Runs `write` again, after 50 then 200 ms, while the database refuses it
/// for the moment ([`StoreError::is_transient`]); its last outcome.
pub(crate) async fn with_retries<T, F, Fut>(write: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    retried(write, StoreError::is_transient).await
}

/// [`with_retries`] for a use case's own write, refused for the moment as
/// 503 `STORAGE_UNAVAILABLE`.
async fn app_with_retries<T, F, Fut>(write: F) -> AppResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = AppResult<T>>,
{
    retried(write, is_storage_busy).await
}

fn is_storage_busy(error: &AppError) -> bool {
    matches!(error, AppError::Busy { code: "STORAGE_UNAVAILABLE", .. })
}

async fn retried<T, E, F, Fut>(mut write: F, transient: impl Fn(&E) -> bool) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut waits = [50u64, 200].into_iter();
    loop {
        match write().await {
            Err(error) if transient(&error) => match waits.next() {
                Some(wait) => tokio::time::sleep(std::time::Duration::from_millis(wait)).await,
                None => return Err(error),
            },
            outcome => return outcome,
        }
    }
}

/// Settles an inline payment again whose outcome was unknown (the
/// reconciliation job): the reference, once settled.
pub async fn settle_inline(services: &Services, payment: &PaymentRecord) -> AppResult<String> {
    // Settled already, its record left to this job: recorded, not settled again.
    if payment.status == PaymentStatus::SettleUnknown
        && let Some(reference) = &payment.settlement_ref
    {
        return record_settled(services, payment.payment_id, reference.clone()).await;
    }
    let local = local_settlement_reference(payment);
    let reconciling = payment.status == PaymentStatus::SettleUnknown;
    settle_reserved(services, payment.payment_id, &payment.payer, &payment.payload, None, &local, reconciling).await
}

/// How long after its authorization ended a reserved inline payment is
/// taken for abandoned: the request that reserved it settles it at once,
/// within its settler's timeout, so one still reserved this long after no
/// transfer could begin belongs to a host that stopped half-way.
const ABANDONED_AFTER_MINUTES: i64 = 10;
/// How far back a host that has not walked the authorizations yet starts.
const ABANDONED_LOOKBACK_DAYS: i64 = 2;
/// Payments per page of the walk.
const ABANDONED_PAGE: i64 = 1000;

/// Marks the inline payments a stopped host left reserved (decision 0084)
/// as of unknown outcome, which the reconciliation then settles again:
/// charged once if the money moved before the host stopped (a used nonce),
/// ended and given back (Earned, the DAB, a pending purchase) if it did
/// not. Walks the payments in the order of their authorization's end from
/// `walked` (where the last walk stopped), `pages` pages at most. Returns
/// how many it marked and whether the walk has further to go.
pub async fn mark_abandoned(services: &Services, walked: &mut Option<ValidityKey>, pages: usize) -> AppResult<(usize, bool)> {
    let now = services.clock.now();
    let before = (now - Duration::minutes(ABANDONED_AFTER_MINUTES)).timestamp();
    let start = ValidityKey { valid_before: (now - Duration::days(ABANDONED_LOOKBACK_DAYS)).timestamp(), payment_id: Uuid::nil() };
    let reason = "the request that reserved it never finished (its host stopped); settled again by the reconciliation";
    // Each step's future owns its store handle (see `declarations::release_lapsed`).
    let store = || services.store.clone();
    crate::paging::walk(
        walked,
        start,
        pages,
        ABANDONED_PAGE,
        |due: InlineDue| due.key,
        |after, limit| {
            let store = store();
            async move { Ok(store.inline_payments_by_validity(after, before, limit).await?) }
        },
        |due: InlineDue| {
            let store = store();
            async move {
                Ok(due.status == PaymentStatus::Reserved
                    && store.end_payment(due.key.payment_id, PaymentStatus::SettleUnknown, reason, now).await?)
            }
        },
    )
    .await
}

/// The agent's DAB status as the use case read it already, with its own
/// reads (one statement), for the period starting at `period_start`.
#[derive(Clone, Copy, Debug)]
pub struct KnownDab {
    pub period_start: DateTime<Utc>,
    pub status: DabStatus,
}

/// What the use case found out before the charge.
#[derive(Clone, Debug)]
pub enum Known {
    /// Nothing: the pipeline reads the DAB status itself.
    Nothing,
    /// The DAB status, read with the use case's own reads (not read again
    /// if its period is still the current one).
    Dab(KnownDab),
    /// The offered payment, verified already ([`verify_ahead`]): the DAB is
    /// not read before the commit, whose own check under the agent's lock
    /// refuses a payment past it as the first check would have.
    Verified(Box<anchor_x402::Verified>),
}

/// The x402 requirement an external payment of `amount` must match.
fn requirement_for(services: &Services, amount: MilliDac) -> anchor_x402::Requirement {
    anchor_x402::requirement(&services.config.pay_to, amount.usdc_base_units(), CONFIRM_MAX_TIMEOUT_SECS)
}

/// The payment offered for an order Trial cannot pay (`TrialUse::Short`),
/// verified before anything is read, where nothing but this verification
/// looks at it before settlement (local settlement mode). `None` when no
/// payment is offered, a facilitator verifies too, or it does not verify:
/// the pipeline then reads the DAB first and refuses in its usual order.
pub fn verify_ahead(services: &Services, order: &Order) -> Option<anchor_x402::Verified> {
    if !matches!(order.trial, TrialUse::Short { .. }) || services.settler.mode() != "local" {
        return None;
    }
    let Offered::Payload(payload) = &order.offered else { return None };
    let requirement = requirement_for(services, order.total - order.earned).to_value();
    anchor_x402::verify(&payload.value, &requirement, services.clock.now().timestamp()).ok()
}

/// Takes payment for `order` and records it through `commit`.
pub async fn charge<C: Commit>(services: &Services, order: Order, commit: &C) -> AppResult<C::Output> {
    charge_knowing(services, order, commit, Known::Nothing).await
}

/// [`charge`], with what the use case knows already.
pub async fn charge_knowing<C: Commit>(services: &Services, order: Order, commit: &C, known: Known) -> AppResult<C::Output> {
    // The catalog is what the discovery documents say of a route: an order
    // that would use Trial or Earned DAC where they say it cannot is a defect.
    if let Some(rules) = crate::catalog::paid_route(order.route) {
        if !rules.trial && !matches!(order.trial, TrialUse::None) {
            return Err(AppError::Internal(anyhow::anyhow!(
                "{} is not Trial-eligible in the catalog, yet an order used Trial",
                order.route
            )));
        }
        if rules.earned == crate::catalog::EarnedUse::Never && order.earned > MilliDac::ZERO {
            return Err(AppError::Internal(anyhow::anyhow!(
                "{} does not accept Earned DAC in the catalog, yet an order used it",
                order.route
            )));
        }
        let whole = matches!(rules.earned, crate::catalog::EarnedUse::Whole | crate::catalog::EarnedUse::EarnedOnlyStay);
        if order.earned > MilliDac::ZERO && order.earned == order.total && !whole {
            return Err(AppError::Internal(anyhow::anyhow!(
                "{} accepts Earned DAC for part of a price only in the catalog, yet an order had it pay all",
                order.route
            )));
        }
    }
    let now = services.clock.now();
    let mut description = order.description.clone();
    // Earned DAC first: an order it cannot pay is refused before Trial or a challenge.
    let earned = match order.earned {
        MilliDac::ZERO => None,
        part if part < order.total => Some(earned_part(services, &order).await?),
        part if part == order.total => return pay_from_earned(services, &order, commit).await,
        _ => return Err(AppError::Internal(anyhow::anyhow!("Earned DAC was asked to pay more than the order's price"))),
    };
    let ask = order.ask();
    let short = |balance| earned_short(ask, balance, earned.map(|e: EarnedPart| e.threshold));
    let trial_part = match order.trial {
        TrialUse::Whole => match commit.commit(Funding::Trial).await? {
            Committed::Done(output) => {
                if C::debited(&output) {
                    services.metrics.debit("trial", order.total - order.earned);
                    services.metrics.debit("earned", order.earned);
                }
                return Ok(output);
            }
            Committed::TrialShort { balance, expired } => {
                description = format!("{description}; {}", trial_short(balance, expired));
                MilliDac::ZERO
            }
            Committed::EarnedShort { balance } => return Err(short(balance)),
            Committed::NonceUsed | Committed::DabReached { .. } => {
                return Err(AppError::Internal(anyhow::anyhow!("a Trial-only commit reported an external payment outcome")));
            }
        },
        TrialUse::Short { balance, expired } => {
            description = format!("{description}; {}", trial_short(balance, expired));
            MilliDac::ZERO
        }
        TrialUse::Part(part) => part,
        TrialUse::None => MilliDac::ZERO,
    };
    let amount = order.total - trial_part - order.earned;
    let accepts = match order.trial {
        TrialUse::None => vec![PaymentSource::External],
        _ => vec![PaymentSource::Trial, PaymentSource::External],
    };
    let typed_requirement = requirement_for(services, amount);
    let requirement = typed_requirement.to_value();
    let resource = order.resource(services);
    let required = |reason: Option<String>| {
        AppError::PaymentRequired(Box::new(
            PaymentRequired {
                route: order.route,
                amount,
                description: description.clone(),
                reason,
                accepts: accepts.clone(),
                requirement: typed_requirement.clone(),
                resource: resource.clone(),
                offer: None,
            }
            .signed(services),
        ))
    };

    if matches!(order.offered, Offered::Unavailable) {
        return Err(required(None));
    }
    // DAB: external spending only, before any challenge is issued.
    let (period_start, resets) = anchor_domain::dab::period(now);
    let (dab, ahead) = match known {
        Known::Dab(known) if known.period_start == period_start => (Some(known.status), None),
        // Verified for the amount asked here (the order Trial cannot pay).
        Known::Verified(verified) if trial_part == MilliDac::ZERO => (None, Some(verified)),
        _ => (Some(services.store.dab_status(order.agent_id, period_start).await?), None),
    };
    if let Some(dab) = dab {
        let limit = dab.own_limit.unwrap_or(services.config.dab_default);
        if dab.spent + amount > limit {
            return Err(dab_reached(limit, dab.spent, amount, resets));
        }
    }
    let anchor_x402::Payload { value: payload, text: payload_text } = match order.offered {
        Offered::None => return Err(required(None)),
        Offered::Malformed(message) => return Err(AppError::invalid("INVALID_PAYLOAD", message)),
        Offered::Payload(payload) => payload,
        Offered::Unavailable => return Err(required(None)),
    };
    let verification = |outcome| services.metrics.x402_verifications.get_or_create(&crate::metrics::OutcomeLabels { outcome }).inc();
    let verified = match ahead {
        Some(verified) => *verified,
        None => {
            let verified = anchor_x402::verify(&payload, &requirement, now.timestamp()).map_err(|r| {
                verification("refused");
                required(Some(r.as_str().into()))
            })?;
            if let Err(reason) = services.settler.verify(&payload, &requirement).await {
                verification("refused_by_settler");
                return Err(required(Some(reason)));
            }
            verified
        }
    };
    verification("verified");
    let inline = order.settle.inline();
    let payment = NewPayment {
        payment_id: anchor_domain::record_id(),
        network: anchor_x402::NETWORK.into(),
        asset: anchor_x402::USDC_BASE.to_ascii_lowercase(),
        payer: verified.payer.clone(),
        nonce: verified.nonce.clone(),
        amount_units: verified.amount_units,
        pay_to: verified.pay_to.clone(),
        valid_after: verified.valid_after,
        valid_before: verified.valid_before,
        route: order.route.to_string(),
        payload: payload_text,
        deadline: now + Duration::seconds(PAYMENT_WINDOW_SECS as i64),
        dab_default: services.config.dab_default,
        period_start,
        priced_by: services.priced_by(),
        request: inline.and_then(|(_, request)| request),
    };
    if let Some((subject, request)) = inline {
        debug_assert!(
            crate::catalog::settles_inline(order.route.method, order.route.path),
            "{} settles inline but the catalog does not say so",
            order.route
        );
        match services.store.reserve_payment(&payment, order.agent_id, subject, earned, order.pending.as_ref(), now).await? {
            Reservation::Reserved => {}
            Reservation::Duplicate => {
                return Err(AppError::Conflict {
                    code: "DUPLICATE_REQUEST",
                    message: "the same purchase is being made or was made already; nothing was charged".into(),
                });
            }
            // The same payment sent again by its agent (a retry, or one
            // request sent twice at once) is not a replay: told so, and
            // charged once, for the request that reserved it.
            Reservation::NonceUsed => {
                if let Some(earlier) = sent_before(services, &payment, order.agent_id).await? {
                    // Settled for this very request: answered again, charged once.
                    if let (Some(request), PaymentStatus::Settled, Some(reference)) = (request, earlier.status, earlier.settlement_ref)
                        && earlier.request.as_deref() == Some(&request[..])
                        && let Some(output) = commit.resumed(Settlement { reference, payer: earlier.payer, resource: resource.clone() })
                    {
                        return Ok(output);
                    }
                    return Err(AppError::Conflict {
                        code: "DUPLICATE_REQUEST",
                        message: "this agent sent this payment before, for a request being completed or completed already: \
                                  it is charged once, and not again for this one"
                            .into(),
                    });
                }
                return Err(required(Some(Reason::NonceUsed.as_str().into())));
            }
            Reservation::DabReached { limit, spent } => return Err(dab_reached(limit, spent, amount, resets)),
            Reservation::EarnedShort { balance } => return Err(short(balance)),
            Reservation::SubjectClosed => {
                let (code, what) = match subject.domain {
                    SubjectDomain::IseSession => ("NO_ACTIVE_SESSION", "stay"),
                    _ => ("SESSION_NOT_FOUND", "session"),
                };
                return Err(AppError::not_found(code, format!("the {what} was closed meanwhile; nothing was charged")));
            }
        }
        let local = local_reference(&payment.network, &payment.asset, &payment.payer, payment.payment_id);
        let reference =
            settle_reserved(services, payment.payment_id, &payment.payer, &payment.payload, Some(&requirement), &local, false).await?;
        let settlement = Settlement { reference, payer: payment.payer.clone(), resource: resource.clone() };
        let settled = Funding::Settled { payment_id: payment.payment_id, settlement };
        // The payment is settled and recorded: what it paid for is closed by
        // this commit, or else by the job that closes settled subjects.
        let committed = match app_with_retries(|| commit.commit(settled.clone())).await {
            Ok(committed) => committed,
            Err(error) if is_storage_busy(&error) => {
                tracing::warn!(%error, "a settled payment's subject is left to the job that closes settled subjects");
                return Err(AppError::Unavailable {
                    code: "SETTLEMENT_PENDING",
                    message: "the payment settled and is recorded; what it paid for is completed in the background".into(),
                });
            }
            Err(error) => return Err(error),
        };
        return match committed {
            Committed::Done(output) => {
                if C::debited(&output) {
                    services.metrics.debit("earned", order.earned);
                }
                Ok(output)
            }
            _ => Err(AppError::Internal(anyhow::anyhow!("a commit refused a payment that had already settled"))),
        };
    }
    match commit.commit(Funding::External { payment: Box::new(payment), trial_part }).await? {
        Committed::Done(output) => {
            if C::debited(&output) {
                services.metrics.debit("trial", trial_part);
                services.metrics.debit("earned", order.earned);
            }
            Ok(output)
        }
        Committed::NonceUsed => Err(required(Some(Reason::NonceUsed.as_str().into()))),
        Committed::DabReached { limit, spent } => Err(dab_reached(limit, spent, amount, resets)),
        Committed::EarnedShort { balance } => Err(short(balance)),
        // Trial was spent meanwhile: it cannot pay its part, so the whole
        // price is asked (nothing was written; the offered payment was for
        // the rest alone).
        Committed::TrialShort { balance, expired } => {
            let whole = order.total - order.earned;
            Err(AppError::PaymentRequired(Box::new(
                PaymentRequired {
                    route: order.route,
                    amount: whole,
                    description: format!("{}; {}, so x402 pays the whole {whole} DAC", order.description, trial_short(balance, expired)),
                    reason: None,
                    accepts: vec![PaymentSource::External],
                    requirement: requirement_for(services, whole),
                    resource,
                    offer: None,
                }
                .signed(services),
            )))
        }
    }
}

/// The payment whose authorization is reserved already, when it is this
/// one, sent before by the same agent (the payload exactly as it was
/// received): a retry or a duplicate of one request, not another's replay.
async fn sent_before(services: &Services, payment: &NewPayment, agent_id: Uuid) -> AppResult<Option<PaymentRecord>> {
    let earlier = services.store.payment_with_nonce(&payment.network, &payment.asset, &payment.payer, &payment.nonce).await?;
    Ok(earlier.filter(|earlier| earlier.agent_id == agent_id && earlier.payload == payment.payload))
}

/// An order Earned DAC pays whole: the commit debits it under the agent's
/// lock, in the transaction that records what was bought; no external
/// payment is offered or read. The balance is not read first: the commit's
/// own check is the only one, and its shortfall the one refusal.
async fn pay_from_earned<C: Commit>(services: &Services, order: &Order, commit: &C) -> AppResult<C::Output> {
    let threshold = crate::earned::terms(services)?.threshold;
    match commit.commit(Funding::Earned(EarnedPart { amount: order.earned, threshold })).await? {
        Committed::Done(output) => {
            if C::debited(&output) {
                services.metrics.debit("earned", order.earned);
            }
            Ok(output)
        }
        Committed::EarnedShort { balance } => Err(earned_short(order.ask(), balance, Some(threshold))),
        Committed::TrialShort { .. } | Committed::NonceUsed | Committed::DabReached { .. } => {
            Err(AppError::Internal(anyhow::anyhow!("an Earned-only commit reported a Trial or external payment outcome")))
        }
    }
}
