//! Indefinite-retention subscriptions: subscribe, cancel, the monthly
//! charge and the expiry that demotes an agent's indefinite records. Each is
//! one transaction holding the agent's row lock (as Earned debits do), so a
//! subscribe racing a cancel, the billing job or another subscribe sees the
//! other's result; the charge is an Earned debit with its usage entry.

use anchor_domain::MilliDac;
use anchor_domain::payments::{CostComponent, PaymentSource, Subject, SubjectDomain};
use anchor_domain::retention::{self, RetentionStatus, Subscription};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

fn subject(agent_id: Uuid) -> Subject {
    Subject { domain: SubjectDomain::RetentionSubscription, id: agent_id }
}

async fn locked<X: Exec>(tx: &mut X, for_update: &str, agent_id: Uuid) -> Result<Option<Subscription>> {
    earned::lock_agent(tx, for_update, agent_id).await?;
    let row = tx.fetch_optional(sql("select * from retention_subscription where agent_id = $1").bind(agent_id)).await?;
    row.as_ref().map(subscription_of).transpose()
}

/// Takes the month's charge from Earned DAC, with its usage entry; the
/// balance when it cannot.
async fn charge<X: Exec>(
    tx: &mut X,
    for_update: &str,
    agent_id: Uuid,
    terms: &RetentionTerms,
    now: DateTime<Utc>,
) -> Result<Result<(), MilliDac>> {
    let spend =
        earned::debit(tx, for_update, agent_id, terms.monthly, terms.threshold, "indefinite retention", Some(subject(agent_id)), now)
            .await?;
    if let Some(balance) = spend.shortfall() {
        return Ok(Err(balance));
    }
    let entry = UsageEntry {
        cost_component: CostComponent::RetentionSub,
        source: PaymentSource::Earned,
        amount: terms.monthly,
        priced_by: Some(terms.priced_by.clone()),
    };
    payments::insert_usage(tx, agent_id, subject(agent_id), None, &entry, now).await?;
    Ok(Ok(()))
}

/// Carries out an ended grace period: the subscription expires at the end of
/// its grace, and every indefinite record of the agent is kept as a short one
/// from that moment.
async fn expire<X: Exec>(tx: &mut X, subscription: &Subscription) -> Result<u64> {
    let Some(ended) = subscription.grace_ends_at else { return Ok(0) };
    let demoted = tx
        .execute(
            sql("update declaration set retention_demoted_at = $1, retention_expires_at = $2 \
                 where agent_id = $3 and retention_expires_at is null")
            .bind(ended)
            .bind(retention::demoted_end(ended))
            .bind(subscription.agent_id),
        )
        .await?;
    tx.execute(
        sql("update retention_subscription set expired_at = $1, demoted_count = demoted_count + $2 where agent_id = $3")
            .bind(ended)
            .bind(demoted as i64)
            .bind(subscription.agent_id),
    )
    .await?;
    Ok(demoted)
}

#[async_trait]
impl<E: Engine> RetentionStore for SqlStore<E> {
    async fn retention_subscription(&self, agent_id: Uuid) -> Result<Option<Subscription>> {
        let row = self.db().fetch_optional(sql("select * from retention_subscription where agent_id = $1").bind(agent_id)).await?;
        row.as_ref().map(subscription_of).transpose()
    }

    async fn subscribe_retention(&self, agent_id: Uuid, terms: RetentionTerms, now: DateTime<Utc>) -> Result<Subscribed> {
        let mut tx = self.begin_write().await?;
        let for_update = self.db.for_update();
        let mut current = locked(&mut tx, for_update, agent_id).await?;
        // A grace period that ran out is carried out first: subscribing again
        // never saves the records it demotes.
        if let Some(s) = current.as_ref().filter(|s| s.expired_at.is_none() && s.status(now) == RetentionStatus::Expired) {
            expire(&mut tx, s).await?;
            current = locked(&mut tx, for_update, agent_id).await?;
        }
        let status = retention::status_of(current.as_ref(), now);
        let (reactivated, charged) = match (status, current.as_ref()) {
            (RetentionStatus::Active, Some(s)) => return Ok(Subscribed::AlreadyActive(s.clone())),
            (RetentionStatus::Grace, Some(s)) => {
                // Reactivated: the month already paid runs on; a month that fell due during the grace is charged now.
                let due = s.next_billing_at <= now;
                if due && let Err(balance) = charge(&mut tx, for_update, agent_id, &terms, now).await? {
                    return Ok(Subscribed::EarnedShort { balance });
                }
                let next = if due { retention::next_month(now) } else { s.next_billing_at };
                tx.execute(
                    sql("update retention_subscription set activated_at = $1, next_billing_at = $2, grace_started_at = null, \
                         grace_ends_at = null, cancelled_at = null, months_billed = months_billed + $3 where agent_id = $4")
                    .bind(now)
                    .bind(next)
                    .bind(i64::from(due))
                    .bind(agent_id),
                )
                .await?;
                (true, if due { terms.monthly } else { MilliDac::ZERO })
            }
            _ => {
                if let Err(balance) = charge(&mut tx, for_update, agent_id, &terms, now).await? {
                    return Ok(Subscribed::EarnedShort { balance });
                }
                tx.execute(
                    sql("insert into retention_subscription (agent_id, subscribed_at, activated_at, next_billing_at, months_billed) \
                         values ($1, $2, $2, $3, 1) \
                         on conflict (agent_id) do update set subscribed_at = $2, activated_at = $2, next_billing_at = $3, \
                           grace_started_at = null, grace_ends_at = null, cancelled_at = null, expired_at = null, \
                           months_billed = retention_subscription.months_billed + 1")
                    .bind(agent_id)
                    .bind(now)
                    .bind(retention::next_month(now)),
                )
                .await?;
                (false, terms.monthly)
            }
        };
        let subscription = locked(&mut tx, for_update, agent_id).await?.ok_or(StoreError::NotFound("no row returned".into()))?;
        tx.commit().await?;
        Ok(Subscribed::Active { subscription, reactivated, charged })
    }

    async fn cancel_retention(&self, agent_id: Uuid, grace: Duration, now: DateTime<Utc>) -> Result<Option<Subscription>> {
        let mut tx = self.begin_write().await?;
        let for_update = self.db.for_update();
        let current = locked(&mut tx, for_update, agent_id).await?;
        if retention::status_of(current.as_ref(), now) != RetentionStatus::Active {
            return Ok(None);
        }
        tx.execute(
            sql("update retention_subscription set grace_started_at = $1, grace_ends_at = $2, cancelled_at = $1 where agent_id = $3")
                .bind(now)
                .bind(now + grace)
                .bind(agent_id),
        )
        .await?;
        let subscription = locked(&mut tx, for_update, agent_id).await?;
        tx.commit().await?;
        Ok(subscription)
    }

    async fn due_retention(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<Uuid>> {
        self.db()
            .scalar_all(
                sql("select agent_id from retention_subscription \
                     where grace_started_at is null and expired_at is null and next_billing_at <= $1 \
                     order by next_billing_at limit $2")
                .bind(now)
                .bind(limit),
            )
            .await
    }

    async fn bill_retention(&self, agent_id: Uuid, terms: &RetentionTerms, now: DateTime<Utc>) -> Result<Billing> {
        let mut tx = self.begin_write().await?;
        let for_update = self.db.for_update();
        let Some(current) = locked(&mut tx, for_update, agent_id).await? else { return Ok(Billing::NotDue) };
        if current.status(now) != RetentionStatus::Active || current.next_billing_at > now {
            return Ok(Billing::NotDue);
        }
        let billing = match charge(&mut tx, for_update, agent_id, terms, now).await? {
            Ok(()) => {
                tx.execute(
                    sql("update retention_subscription set next_billing_at = $1, months_billed = months_billed + 1 where agent_id = $2")
                        .bind(retention::next_month(current.next_billing_at))
                        .bind(agent_id),
                )
                .await?;
                Billing::Charged
            }
            Err(_) => {
                tx.execute(
                    sql("update retention_subscription set grace_started_at = $1, grace_ends_at = $2 where agent_id = $3")
                        .bind(now)
                        .bind(now + terms.grace)
                        .bind(agent_id),
                )
                .await?;
                Billing::ToGrace
            }
        };
        tx.commit().await?;
        Ok(billing)
    }

    async fn expire_due_retention(&self, now: DateTime<Utc>, limit: i64) -> Result<usize> {
        let due: Vec<Uuid> = self
            .db()
            .scalar_all(
                sql("select agent_id from retention_subscription \
                     where grace_started_at is not null and expired_at is null and grace_ends_at <= $1 \
                     order by grace_ends_at limit $2")
                .bind(now)
                .bind(limit),
            )
            .await?;
        let mut expired = 0;
        for agent_id in due {
            let mut tx = self.begin_write().await?;
            let Some(current) = locked(&mut tx, self.db.for_update(), agent_id).await? else { continue };
            if current.expired_at.is_some() || current.status(now) != RetentionStatus::Expired {
                continue;
            }
            expire(&mut tx, &current).await?;
            tx.commit().await?;
            expired += 1;
        }
        Ok(expired)
    }

    async fn demotions(&self, agent_id: Uuid) -> Result<(i64, Option<DateTime<Utc>>)> {
        let row = self
            .db()
            .fetch_optional(
                sql("select count(*) as n, max(retention_demoted_at) as last from declaration \
                     where agent_id = $1 and retention_demoted_at is not null")
                .bind(agent_id),
            )
            .await?;
        match row {
            Some(row) => Ok((row.get("n")?, row.get("last")?)),
            None => Ok((0, None)),
        }
    }

    async fn demoted_anchorings(&self, agent_id: Uuid, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>> {
        self.db()
            .scalar_all(
                sql("select anchored_at from declaration where agent_id = $1 and retention_demoted_at is not null \
                     and anchored_at >= $2 and anchored_at < $3")
                .bind(agent_id)
                .bind(from)
                .bind(to),
            )
            .await
    }

    async fn indefinite_declarations(&self, agent_id: Uuid) -> Result<i64> {
        self.db().scalar(sql("select count(*) from declaration where agent_id = $1 and retention_expires_at is null").bind(agent_id)).await
    }
}

fn subscription_of(row: &impl Row) -> Result<Subscription> {
    Ok(Subscription {
        agent_id: row.get("agent_id")?,
        subscribed_at: row.get("subscribed_at")?,
        activated_at: row.get("activated_at")?,
        next_billing_at: row.get("next_billing_at")?,
        grace_started_at: row.get("grace_started_at")?,
        grace_ends_at: row.get("grace_ends_at")?,
        cancelled_at: row.get("cancelled_at")?,
        expired_at: row.get("expired_at")?,
        months_billed: row.get("months_billed")?,
        demoted_count: row.get("demoted_count")?,
    })
}
