//! ASA, the agent state archive: subscribe and extend (periods paid over
//! inline x402, DAB applying, or from Earned DAC; never Trial), cancel, the
//! informational next payment source, snapshot registration, the latest
//! snapshot and verification; and the owner's views of a managed agent.
//!
//! Only a snapshot's hash and the opaque metadata the agent sends with it are
//! kept: the service never holds the content nor a key it could use.

use async_trait::async_trait;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::asa::{AsaPurchaseKind, AsaSnapshot, AsaSource, AsaStatus, AsaSubscription};
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::records::{AgentRecord, OwnerRecord};
use anchor_ports::{AsaBought, AsaCancelled, AsaRefusal, NewAsaPurchase, Pending};

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const SUBSCRIBE: Route = Route { method: "POST", path: "/v1/asa/subscribe" };
pub const EXTEND: Route = Route { method: "POST", path: "/v1/asa/extend" };

/// Bounds of what a snapshot may carry (opaque to the service).
pub const BLOB_URL_MAX: usize = 2048;
pub const ENCRYPTED_KEY_MAX: usize = 8192;
pub const LABEL_MAX: usize = 200;

/// The generation's ASA terms.
#[derive(Clone, Copy, Debug)]
pub struct Terms {
    pub period: MilliDac,
    pub period_days: i64,
    pub grace_days: i64,
    pub max_periods: i64,
}

pub fn terms(services: &Services) -> AppResult<Terms> {
    let prices = services.pricing.services()?.ok_or_else(|| AppError::Unavailable {
        code: "FEATURE_NOT_AVAILABLE",
        message: "the loaded pricing generation does not price ASA".into(),
    })?;
    Ok(Terms {
        period: prices.asa_period,
        period_days: i64::from(prices.asa_period_days),
        grace_days: i64::from(prices.asa_grace_days),
        max_periods: i64::from(prices.asa_max_periods),
    })
}

fn no_subscription() -> AppError {
    AppError::not_found("NO_ACTIVE_SUBSCRIPTION", "this agent has no active or grace ASA subscription")
}

fn refused(refusal: AsaRefusal) -> AppError {
    match refusal {
        AsaRefusal::Live => AppError::Conflict {
            code: "ALREADY_SUBSCRIBED",
            message: "this agent's ASA subscription is active or in its grace period; extend it with POST /v1/asa/extend".into(),
        },
        AsaRefusal::NoneLive => no_subscription(),
        AsaRefusal::InFlight => AppError::Conflict {
            code: "DUPLICATE_REQUEST",
            message: "another ASA purchase of this agent is being paid; nothing was charged".into(),
        },
    }
}

/// Records a purchase of periods: from Earned DAC, the purchase and its
/// debit in one transaction; over x402, settled inline with the purchase,
/// the subscription it went to.
struct BuyPeriods<'a> {
    services: &'a Services,
    purchase: &'a NewAsaPurchase,
}

#[async_trait]
impl Commit for BuyPeriods<'_> {
    type Output = (AsaSubscription, Option<crate::charge::Settlement>);

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Self::Output>> {
        let store = &self.services.store;
        match funding {
            Funding::Earned(part) => match store.buy_asa_with_earned(self.purchase, part.threshold, self.services.clock.now()).await? {
                AsaBought::Done(subscription) => Ok(Committed::Done((subscription, None))),
                AsaBought::Refused(refusal) => Err(refused(refusal)),
                AsaBought::EarnedShort { balance } => Ok(Committed::EarnedShort { balance }),
            },
            Funding::Settled { settlement, .. } => {
                let subscription = store.asa_purchase_subscription(self.purchase.purchase_id).await?.ok_or_else(|| {
                    AppError::Internal(anyhow::anyhow!("ASA purchase {} vanished after its settlement", self.purchase.purchase_id))
                })?;
                Ok(Committed::Done((subscription, Some(settlement))))
            }
            Funding::Trial | Funding::External { .. } => {
                Err(AppError::Internal(anyhow::anyhow!("ASA periods are paid over x402 settled inline, or from Earned DAC")))
            }
        }
    }
}

/// What a purchase bought.
pub struct Bought {
    pub subscription: AsaSubscription,
    pub charged: MilliDac,
    pub source: AsaSource,
    /// The x402 settlement (reference, payer) when paid externally.
    pub settlement: Option<crate::charge::Settlement>,
    pub terms: Terms,
}

/// POST /v1/asa/subscribe and POST /v1/asa/extend.
pub async fn buy(
    services: &Services,
    agent: &AgentRecord,
    kind: AsaPurchaseKind,
    periods: Option<i64>,
    source: Option<AsaSource>,
    offered: Offered,
) -> AppResult<Bought> {
    let terms = terms(services)?;
    let periods = periods.unwrap_or(1);
    if !(1..=terms.max_periods).contains(&periods) {
        return Err(AppError::invalid(
            "INVALID_VALUE",
            format!("periods must be between 1 and {} (asa.max_periods); got {periods}", terms.max_periods),
        ));
    }
    let source = source.unwrap_or(AsaSource::External);
    // Checked first for the documented answers; checked again where the purchase is written.
    if let Some(refusal) = state_refusal(services, agent.agent_id, kind).await? {
        return Err(refused(refusal));
    }
    let amount = MilliDac(terms.period.milli() * periods);
    let purchase = NewAsaPurchase {
        purchase_id: Uuid::new_v4(),
        agent_id: agent.agent_id,
        kind,
        periods,
        period_days: terms.period_days,
        grace_days: terms.grace_days,
        amount,
        source,
        priced_by: services.priced_by(),
    };
    let route = if kind == AsaPurchaseKind::Subscribe { SUBSCRIBE } else { EXTEND };
    let earned = source == AsaSource::Earned;
    let order = Order {
        agent_id: agent.agent_id,
        route,
        path: None,
        total: amount,
        description: format!("ASA: {periods} period(s) of {} days ({amount} DAC)", terms.period_days),
        trial: TrialUse::None,
        earned: if earned { amount } else { MilliDac::ZERO },
        offered,
        settle: Settle::Inline(Subject { domain: SubjectDomain::AsaSubscription, id: purchase.purchase_id }),
        pending: (!earned).then(|| Pending::Asa(purchase.clone())),
    };
    match charge::charge(services, order, &BuyPeriods { services, purchase: &purchase }).await {
        Ok((subscription, settlement)) => Ok(Bought { subscription, charged: amount, source, settlement, terms }),
        // The state changed between the check and the reservation: read why.
        Err(AppError::Conflict { code: "DUPLICATE_REQUEST", .. }) if !earned => {
            Err(refused(state_refusal(services, agent.agent_id, kind).await?.unwrap_or(AsaRefusal::InFlight)))
        }
        Err(other) => Err(other),
    }
}

/// The agent's live (active or grace) subscription, if any.
async fn live(services: &Services, agent_id: Uuid) -> AppResult<Option<AsaSubscription>> {
    let now = services.clock.now();
    Ok(services.store.asa_subscription(agent_id).await?.filter(|s| s.is_live(now)))
}

/// Why the subscription's state refuses a purchase of `kind` now, if it does.
async fn state_refusal(services: &Services, agent_id: Uuid, kind: AsaPurchaseKind) -> AppResult<Option<AsaRefusal>> {
    let live = live(services, agent_id).await?;
    Ok(match kind {
        AsaPurchaseKind::Subscribe if live.is_some() => Some(AsaRefusal::Live),
        AsaPurchaseKind::Extend if live.is_none() => Some(AsaRefusal::NoneLive),
        _ => None,
    })
}

/// GET /v1/asa/subscription: the latest subscription, live or ended.
pub async fn subscription(services: &Services, agent_id: Uuid) -> AppResult<(AsaSubscription, Terms)> {
    let found = services.store.asa_subscription(agent_id).await?;
    let subscription = found.ok_or_else(|| AppError::not_found("NO_SUBSCRIPTION", "this agent has never subscribed to ASA"))?;
    Ok((subscription, terms(services)?))
}

/// PATCH /v1/asa/subscription: stored only; nothing renews with it.
pub async fn set_next_source(services: &Services, agent: &AgentRecord, source: Option<AsaSource>) -> AppResult<(AsaSubscription, Terms)> {
    let now = services.clock.now();
    let current = services.store.asa_subscription(agent.agent_id).await?.filter(|s| s.status(now) == AsaStatus::Active);
    if current.is_none() {
        return Err(AppError::not_found("NO_ACTIVE_SUBSCRIPTION", "this agent has no active ASA subscription"));
    }
    let updated = services.store.set_asa_next_source(agent.agent_id, source, now).await?;
    let subscription = updated.ok_or_else(|| AppError::Conflict {
        code: "NO_ACTIVE_SUBSCRIPTION",
        message: "the ASA subscription stopped being active before the update".into(),
    })?;
    Ok((subscription, terms(services)?))
}

/// DELETE /v1/asa/subscribe (the agent) and DELETE /dap/asa/subscription/{agent_id} (its owner): final, not refunded.
pub async fn cancel(services: &Services, agent_id: Uuid, by_owner: bool) -> AppResult<AsaSubscription> {
    match services.store.cancel_asa(agent_id, by_owner, services.clock.now()).await? {
        AsaCancelled::Cancelled(subscription) => Ok(subscription),
        AsaCancelled::NoneLive => Err(no_subscription()),
        AsaCancelled::PurchasePending => Err(AppError::Conflict {
            code: "PURCHASE_PENDING",
            message: "a purchase of periods for this subscription is being paid; cancel once it has settled".into(),
        }),
        AsaCancelled::EarnedPaid => Err(AppError::forbidden(
            "EARNED_SUBSCRIPTION_OWNER_CANNOT_CANCEL",
            "a period of this subscription was paid from the agent's Earned DAC and has not ended; the owner cannot cancel it",
        )),
    }
}

/// The snapshot metadata an agent sends.
#[derive(Clone, Debug, Default)]
pub struct SnapshotInput {
    pub blob_hash: String,
    pub blob_url: Option<String>,
    pub blob_size_bytes: Option<i64>,
    pub encrypted_key: Option<String>,
    pub label: Option<String>,
}

fn bounded(field: &str, text: &Option<String>, max: usize) -> AppResult<()> {
    if let Some(text) = text {
        let chars = text.chars().count();
        if chars > max {
            return Err(AppError::invalid("INVALID_INPUT", format!("{field} holds at most {max} characters; got {chars}")));
        }
        if text.chars().any(char::is_control) {
            return Err(AppError::invalid("INVALID_INPUT", format!("{field} must not contain control characters")));
        }
    }
    Ok(())
}

/// POST /v1/asa/register: needs an active subscription (403 otherwise).
pub async fn register(services: &Services, agent: &AgentRecord, input: SnapshotInput) -> AppResult<AsaSnapshot> {
    let blob_hash = anchor_domain::asa::parse_hash(&input.blob_hash)?;
    bounded("blob_url", &input.blob_url, BLOB_URL_MAX)?;
    bounded("encrypted_key", &input.encrypted_key, ENCRYPTED_KEY_MAX)?;
    if let Some(label) = &input.label {
        anchor_domain::tsl::check_text("label", label, LABEL_MAX, false)?;
    }
    if input.blob_size_bytes.is_some_and(|n| n < 0) {
        return Err(AppError::invalid("INVALID_VALUE", "blob_size_bytes must not be negative"));
    }
    let snapshot = AsaSnapshot {
        snapshot_id: Uuid::new_v4(),
        agent_id: agent.agent_id,
        subscription_id: Uuid::nil(),
        blob_hash,
        blob_url: input.blob_url,
        blob_size_bytes: input.blob_size_bytes,
        encrypted_key: input.encrypted_key,
        label: input.label,
        registered_at: services.clock.now(),
    };
    services
        .store
        .register_asa_snapshot(&snapshot, snapshot.registered_at)
        .await?
        .ok_or_else(|| AppError::forbidden("ASA_SUBSCRIPTION_REQUIRED", "registering a snapshot needs an active ASA subscription"))
}

/// Snapshot and verify need an active or grace subscription (agents; owners need none).
async fn require_live(services: &Services, agent_id: Uuid) -> AppResult<AsaSubscription> {
    live(services, agent_id).await?.ok_or_else(|| {
        AppError::forbidden("ASA_SUBSCRIPTION_REQUIRED", "reading snapshots needs an active ASA subscription or one in its grace period")
    })
}

/// GET /v1/asa/snapshot (`for_agent`) and GET /dap/asa/snapshot/{agent_id}.
pub async fn latest(services: &Services, agent_id: Uuid, for_agent: bool) -> AppResult<(AsaSnapshot, Option<AsaSubscription>)> {
    let subscription =
        if for_agent { Some(require_live(services, agent_id).await?) } else { services.store.asa_subscription(agent_id).await? };
    let snapshot = services.store.latest_asa_snapshot(agent_id).await?;
    let snapshot = snapshot.ok_or_else(|| AppError::not_found("NO_SNAPSHOT", "no ASA snapshot is registered for this agent"))?;
    Ok((snapshot, subscription))
}

/// The outcome of a verification.
pub struct Verified {
    pub blob_hash: String,
    /// The latest snapshot with this hash, if any.
    pub found: Option<AsaSnapshot>,
    pub is_latest: bool,
}

/// POST /v1/asa/verify (`for_agent`) and POST /dap/asa/verify/{agent_id}: whether any of the agent's snapshots has this hash.
pub async fn verify(services: &Services, agent_id: Uuid, blob_hash: &str, for_agent: bool) -> AppResult<Verified> {
    let blob_hash = anchor_domain::asa::parse_hash(blob_hash)?;
    if for_agent {
        require_live(services, agent_id).await?;
    }
    let found = services.store.asa_snapshot_by_hash(agent_id, &blob_hash).await?;
    let latest = match &found {
        Some(_) => services.store.latest_asa_snapshot(agent_id).await?,
        None => None,
    };
    let is_latest = matches!((&found, &latest), (Some(f), Some(l)) if f.snapshot_id == l.snapshot_id || f.blob_hash == l.blob_hash);
    Ok(Verified { blob_hash, found, is_latest })
}

/// The DAP routes answer 404 `NOT_LINKED` for an agent the owner does not
/// manage (as the reference does on these four routes; elsewhere it is 403).
pub async fn managed(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<()> {
    match services.store.managed_agent(owner.owner_id, agent_id).await? {
        Some(_) => Ok(()),
        None => Err(AppError::not_found("NOT_LINKED", format!("agent {agent_id} is not managed by this owner"))),
    }
}

/// DELETE /dap/asa/subscription/{agent_id}: switched by `dap_asa_cancel`.
pub async fn owner_cancel(services: &Services, owner: &OwnerRecord, agent_id: Uuid) -> AppResult<AsaSubscription> {
    if !services.features().dap_asa_cancel {
        return Err(AppError::Unavailable {
            code: "FEATURE_NOT_AVAILABLE",
            message: "owners cancelling ASA subscriptions is switched off on this service".into(),
        });
    }
    managed(services, owner, agent_id).await?;
    cancel(services, agent_id, true).await
}
