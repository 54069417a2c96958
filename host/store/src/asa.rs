//! ASA: subscriptions, their purchases and snapshots. A purchase is applied
//! in one transaction holding the agent's row lock: from Earned DAC with its
//! debit, or, paid externally, written as pending with the payment's
//! reservation (which checks the subscription's state there, so a purchase
//! the state no longer allows is never settled) and completed with the
//! settlement.

use anchor_domain::MilliDac;
use anchor_domain::asa::{AsaPurchaseKind, AsaSnapshot, AsaSource, AsaSubscription};
use anchor_domain::payments::{CostComponent, PaymentSource, Subject, SubjectDomain};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

async fn live<X: Exec>(tx: &mut X, agent_id: Uuid) -> Result<Option<AsaSubscription>> {
    let row = tx.fetch_optional(sql("select * from asa_subscription where agent_id = $1 and ended_at is null").bind(agent_id)).await?;
    row.as_ref().map(subscription_of).transpose()
}

/// Whether the state allows the purchase now (the agent's row is locked).
async fn refusal<X: Exec>(tx: &mut X, purchase: &NewAsaPurchase, now: DateTime<Utc>) -> Result<Option<AsaRefusal>> {
    let pending: i64 =
        tx.scalar(sql("select count(*) from asa_purchase where agent_id = $1 and status = 'pending'").bind(purchase.agent_id)).await?;
    if pending > 0 {
        return Ok(Some(AsaRefusal::InFlight));
    }
    let live_now = live(tx, purchase.agent_id).await?.is_some_and(|s| s.is_live(now));
    Ok(match purchase.kind {
        AsaPurchaseKind::Subscribe if live_now => Some(AsaRefusal::Live),
        AsaPurchaseKind::Extend if !live_now => Some(AsaRefusal::NoneLive),
        _ => None,
    })
}

async fn insert_purchase<X: Exec>(
    tx: &mut X,
    purchase: &NewAsaPurchase,
    payment_id: Option<Uuid>,
    status: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    tx.execute(Query::insert(
        "asa_purchase",
        vec![
            ("purchase_id", purchase.purchase_id.value()),
            ("agent_id", purchase.agent_id.value()),
            ("kind", purchase.kind.as_str().value()),
            ("periods", purchase.periods.value()),
            ("period_days", purchase.period_days.value()),
            ("grace_days", purchase.grace_days.value()),
            ("amount_milli", purchase.amount.milli().value()),
            ("payment_source", purchase.source.as_str().value()),
            ("payment_id", payment_id.value()),
            ("status", status.value()),
            ("created_at", now.value()),
        ],
    ))
    .await?;
    Ok(())
}

/// Applies a purchase to the agent's subscription: a new one (replacing an
/// expired one), or the live one extended. Returns the subscription's id.
async fn apply<X: Exec>(tx: &mut X, purchase: &NewAsaPurchase, now: DateTime<Utc>) -> Result<Uuid> {
    let days = purchase.periods * purchase.period_days;
    let current = live(tx, purchase.agent_id).await?;
    let earned = purchase.source == AsaSource::Earned;
    let id = match (purchase.kind, current) {
        (AsaPurchaseKind::Extend, Some(s)) => {
            let expires = s.extended_expiry(now, days);
            tx.execute(
                sql("update asa_subscription set expires_at = $1, periods = periods + $2, renewed_count = renewed_count + 1, \
                     earned_until = case when $3 then $1 else earned_until end where subscription_id = $4")
                .bind(expires)
                .bind(purchase.periods)
                .bind(earned)
                .bind(s.subscription_id),
            )
            .await?;
            s.subscription_id
        }
        (_, current) => {
            // An expired subscription is archived when a new one starts.
            if let Some(old) = current {
                tx.execute(sql("update asa_subscription set ended_at = $1 where subscription_id = $2").bind(now).bind(old.subscription_id))
                    .await?;
            }
            let id = Uuid::new_v4();
            let expires = now + Duration::days(days);
            tx.execute(Query::insert(
                "asa_subscription",
                vec![
                    ("subscription_id", id.value()),
                    ("agent_id", purchase.agent_id.value()),
                    ("started_at", now.value()),
                    ("expires_at", expires.value()),
                    ("grace_days", purchase.grace_days.value()),
                    ("periods", purchase.periods.value()),
                    ("earned_until", earned.then_some(expires).value()),
                ],
            ))
            .await?;
            id
        }
    };
    Ok(id)
}

/// With the payment's reservation: the purchase, pending, if the state allows it.
pub(crate) async fn insert_pending<X: Exec>(tx: &mut X, purchase: &NewAsaPurchase, payment_id: Uuid, now: DateTime<Utc>) -> Result<bool> {
    if refusal(tx, purchase, now).await?.is_some() {
        return Ok(false);
    }
    insert_purchase(tx, purchase, Some(payment_id), "pending", now).await?;
    Ok(true)
}

/// With the settlement: the pending purchase is applied.
pub(crate) async fn complete<X: Exec>(tx: &mut X, purchase_id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let row = tx.fetch_optional(sql("select * from asa_purchase where purchase_id = $1 and status = 'pending'").bind(purchase_id)).await?;
    let Some(row) = row else {
        return Err(StoreError::Corrupt(format!("ASA purchase {purchase_id} settled but is not pending")));
    };
    let purchase = purchase_of(&row)?;
    let subscription_id = apply(tx, &purchase, now).await?;
    tx.execute(
        sql("update asa_purchase set status = 'completed', completed_at = $1, subscription_id = $2 where purchase_id = $3")
            .bind(now)
            .bind(subscription_id)
            .bind(purchase_id),
    )
    .await?;
    Ok(())
}

pub(crate) async fn fail<X: Exec>(tx: &mut X, purchase_id: Uuid) -> Result<()> {
    tx.execute(sql("update asa_purchase set status = 'failed' where purchase_id = $1 and status = 'pending'").bind(purchase_id)).await?;
    Ok(())
}

#[async_trait]
impl<E: Engine> AsaStore for SqlStore<E> {
    async fn asa_subscription(&self, agent_id: Uuid) -> Result<Option<AsaSubscription>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select * from asa_subscription where agent_id = $1 \
                     order by case when ended_at is null then 0 else 1 end, started_at desc limit 1")
                .bind(agent_id),
            )
            .await?;
        row.as_ref().map(subscription_of).transpose()
    }

    async fn asa_purchase_subscription(&self, purchase_id: Uuid) -> Result<Option<AsaSubscription>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select s.* from asa_purchase p join asa_subscription s on s.subscription_id = p.subscription_id \
                     where p.purchase_id = $1")
                .bind(purchase_id),
            )
            .await?;
        row.as_ref().map(subscription_of).transpose()
    }

    async fn buy_asa_with_earned(&self, purchase: &NewAsaPurchase, threshold: MilliDac, now: DateTime<Utc>) -> Result<AsaBought> {
        let mut tx = self.begin_write().await?;
        earned::lock_agent(&mut tx, self.db.for_update(), purchase.agent_id).await?;
        if let Some(refused) = refusal(&mut tx, purchase, now).await? {
            return Ok(AsaBought::Refused(refused));
        }
        let subject = Subject { domain: SubjectDomain::AsaSubscription, id: purchase.purchase_id };
        let spend =
            earned::debit(&mut tx, self.db.for_update(), purchase.agent_id, purchase.amount, threshold, "ASA periods", Some(subject), now)
                .await?;
        if let Some(balance) = spend.shortfall() {
            return Ok(AsaBought::EarnedShort { balance });
        }
        insert_purchase(&mut tx, purchase, None, "pending", now).await?;
        complete(&mut tx, purchase.purchase_id, now).await?;
        let entry = UsageEntry {
            cost_component: CostComponent::AsaSubscribe,
            source: PaymentSource::Earned,
            amount: purchase.amount,
            priced_by: Some(purchase.priced_by.clone()),
        };
        payments::insert_usage(&mut tx, purchase.agent_id, subject, None, &entry, now).await?;
        let subscription = live(&mut tx, purchase.agent_id).await?.ok_or(StoreError::NotFound("no row returned".into()))?;
        tx.commit().await?;
        Ok(AsaBought::Done(subscription))
    }

    async fn cancel_asa(&self, agent_id: Uuid, by_owner: bool, now: DateTime<Utc>) -> Result<AsaCancelled> {
        let mut tx = self.begin_write().await?;
        earned::lock_agent(&mut tx, self.db.for_update(), agent_id).await?;
        let Some(current) = live(&mut tx, agent_id).await?.filter(|s| s.is_live(now)) else {
            return Ok(AsaCancelled::NoneLive);
        };
        if by_owner && current.earned_until.is_some_and(|until| until > now) {
            return Ok(AsaCancelled::EarnedPaid);
        }
        let pending: i64 =
            tx.scalar(sql("select count(*) from asa_purchase where agent_id = $1 and status = 'pending'").bind(agent_id)).await?;
        if pending > 0 {
            return Ok(AsaCancelled::PurchasePending);
        }
        let by = if by_owner { "owner" } else { "agent" };
        tx.execute(
            sql("update asa_subscription set cancelled_at = $1, cancelled_by = $2, ended_at = $1 where subscription_id = $3")
                .bind(now)
                .bind(by)
                .bind(current.subscription_id),
        )
        .await?;
        let row = tx.fetch_optional(sql("select * from asa_subscription where subscription_id = $1").bind(current.subscription_id)).await?;
        let cancelled = row.as_ref().map(subscription_of).transpose()?.ok_or(StoreError::NotFound("no row returned".into()))?;
        tx.commit().await?;
        Ok(AsaCancelled::Cancelled(cancelled))
    }

    async fn set_asa_next_source(&self, agent_id: Uuid, source: Option<AsaSource>, now: DateTime<Utc>) -> Result<Option<AsaSubscription>> {
        let row = self
            .db()
            .fetch_optional(
                sql("update asa_subscription set next_payment_source = $1 \
                     where agent_id = $2 and ended_at is null and expires_at > $3 returning *")
                .bind(source.map(|s| s.as_str()))
                .bind(agent_id)
                .bind(now),
            )
            .await?;
        row.as_ref().map(subscription_of).transpose()
    }

    async fn register_asa_snapshot(&self, s: &AsaSnapshot, now: DateTime<Utc>) -> Result<Option<AsaSnapshot>> {
        let row = self
            .db()
            .fetch_optional(
                sql("insert into asa_snapshot (snapshot_id, agent_id, subscription_id, blob_hash, blob_url, blob_size_bytes, \
                       encrypted_key, label, registered_at) \
                     select $1, $2, subscription_id, $3, $4, $5, $6, $7, $8 from asa_subscription \
                     where agent_id = $2 and ended_at is null and expires_at > $8 returning *")
                .bind(s.snapshot_id)
                .bind(s.agent_id)
                .bind(s.blob_hash.as_str())
                .bind(s.blob_url.as_deref())
                .bind(s.blob_size_bytes)
                .bind(s.encrypted_key.as_deref())
                .bind(s.label.as_deref())
                .bind(now),
            )
            .await?;
        row.as_ref().map(snapshot_of).transpose()
    }

    async fn latest_asa_snapshot(&self, agent_id: Uuid) -> Result<Option<AsaSnapshot>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select * from asa_snapshot where agent_id = $1 order by registered_at desc, snapshot_id desc limit 1").bind(agent_id),
            )
            .await?;
        row.as_ref().map(snapshot_of).transpose()
    }

    async fn asa_snapshot_by_hash(&self, agent_id: Uuid, blob_hash: &str) -> Result<Option<AsaSnapshot>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select * from asa_snapshot where agent_id = $1 and blob_hash = $2 order by registered_at desc, snapshot_id desc limit 1")
                    .bind(agent_id)
                    .bind(blob_hash),
            )
            .await?;
        row.as_ref().map(snapshot_of).transpose()
    }
}

fn subscription_of(row: &impl Row) -> Result<AsaSubscription> {
    Ok(AsaSubscription {
        subscription_id: row.get("subscription_id")?,
        agent_id: row.get("agent_id")?,
        started_at: row.get("started_at")?,
        expires_at: row.get("expires_at")?,
        grace_days: row.get("grace_days")?,
        periods: row.get("periods")?,
        renewed_count: row.get("renewed_count")?,
        next_payment_source: row.opt_named("next_payment_source")?,
        earned_until: row.get("earned_until")?,
        cancelled_at: row.get("cancelled_at")?,
        cancelled_by: row.get("cancelled_by")?,
    })
}

fn purchase_of(row: &impl Row) -> Result<NewAsaPurchase> {
    Ok(NewAsaPurchase {
        purchase_id: row.get("purchase_id")?,
        agent_id: row.get("agent_id")?,
        kind: row.named("kind")?,
        periods: row.get("periods")?,
        period_days: row.get("period_days")?,
        grace_days: row.get("grace_days")?,
        amount: MilliDac(row.get("amount_milli")?),
        source: row.named("payment_source")?,
        // A pending purchase is paid over x402: its usage is the payment's,
        // which names the generation.
        priced_by: PricedBy::default(),
    })
}

fn snapshot_of(row: &impl Row) -> Result<AsaSnapshot> {
    Ok(AsaSnapshot {
        snapshot_id: row.get("snapshot_id")?,
        agent_id: row.get("agent_id")?,
        subscription_id: row.get("subscription_id")?,
        blob_hash: row.get("blob_hash")?,
        blob_url: row.get("blob_url")?,
        blob_size_bytes: row.get("blob_size_bytes")?,
        encrypted_key: row.get("encrypted_key")?,
        label: row.get("label")?,
        registered_at: row.get("registered_at")?,
    })
}
