//! Agents as their owner sees them: linking, unlinking, the owner-set DAB, the content-inclusion policy, totals for reports.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> LinkStore for SqlStore<E> {
    async fn link_agent(
        &self,
        agent_id: Uuid,
        owner_id: Uuid,
        token_hash: &[u8; 32],
        new_token_hash: &[u8; 32],
        now: DateTime<Utc>,
        max_agents: i64,
    ) -> Result<Link> {
        let done = async {
            let mut tx = self.begin_write().await?;
            // The owner row is the lock that serialises this owner's links.
            // An account erased meanwhile links nothing (its erasure, holding
            // this row, unlinks the agents linked before it).
            let owner = tx
                .execute(sql("update owner set owner_depth = owner_depth where owner_id = $1 and deleted_at is null").bind(owner_id))
                .await?;
            if owner == 0 {
                return Ok(Link::OwnerGone);
            }
            let current = tx.fetch_optional(sql("select owner_id, token_hash from agent where agent_id = $1").bind(agent_id)).await?;
            let Some(current) = current else { return Ok(Link::WrongToken) };
            let current_owner: Option<Uuid> = current.get("owner_id")?;
            let stored: Vec<u8> = current.get("token_hash")?;
            // Hashes of 256-bit secrets: comparing them leaks nothing about a token.
            if stored.as_slice() != token_hash.as_slice() {
                return Ok(Link::WrongToken);
            }
            match current_owner {
                Some(other) if other != owner_id => return Ok(Link::LinkedElsewhere),
                Some(_) => {}
                None => {
                    let count: i64 = tx.scalar(sql("select count(*) from agent where owner_id = $1").bind(owner_id)).await?;
                    if count >= max_agents {
                        return Ok(Link::TooMany);
                    }
                }
            }
            let linked_at: Option<DateTime<Utc>> = tx
                .scalar_optional(
                    sql("update agent set owner_id = $1, token_hash = $2, linked_at = coalesce(linked_at, $3) \
                 where agent_id = $4 and token_hash = $5 and (owner_id is null or owner_id = $1) returning linked_at")
                    .bind(owner_id)
                    .bind(new_token_hash)
                    .bind(now)
                    .bind(agent_id)
                    .bind(token_hash),
                )
                .await?;
            let Some(linked_at) = linked_at else {
                // Another owner linked it since it was read (the token matched then).
                let now_owner: Option<Uuid> =
                    tx.scalar_optional(sql("select owner_id from agent where agent_id = $1").bind(agent_id)).await?.flatten();
                return Ok(if now_owner.is_some_and(|other| other != owner_id) { Link::LinkedElsewhere } else { Link::WrongToken });
            };
            tx.commit().await?;
            Ok(Link::Linked { linked_at })
        }
        .await;
        // A DD create reads what this changed: no agent read before it is used after it.
        self.recent.forget_all();
        done
    }

    async fn unlink_agent(&self, agent_id: Uuid, owner_id: Uuid, now: DateTime<Utc>) -> Result<bool> {
        let done = async {
            let mut tx = self.begin_write().await?;
            let done = tx
                .execute(
                    sql("update agent set owner_id = null, linked_at = null, dab_limit_milli = null where agent_id = $1 and owner_id = $2")
                        .bind(agent_id)
                        .bind(owner_id),
                )
                .await?;
            if done != 1 {
                return Ok(false);
            }
            // A share that outlived the link would count again on a new link,
            // beside revenue shares set while it did not count.
            tx.execute(
                sql("update tsl_human_share set ended_at = $1, end_reason = 'unlinked' where agent_id = $2 and owner_id = $3 \
                     and ended_at is null")
                .bind(now)
                .bind(agent_id)
                .bind(owner_id),
            )
            .await?;
            tx.commit().await?;
            Ok(true)
        }
        .await;
        // A DD create reads what this changed: no agent read before it is used after it.
        self.recent.forget_all();
        done
    }

    async fn owner_agents(&self, owner_id: Uuid) -> Result<Vec<LinkedAgent>> {
        let rows = self
            .db()
            .fetch_all(
                sql(format!("{} where a.owner_id = $1 order by a.linked_at, a.agent_id", super::agents::AGENT_SELECT)).bind(owner_id),
            )
            .await?;
        rows.iter().map(decode_linked).collect()
    }

    async fn managed_agent(&self, owner_id: Uuid, agent_id: Uuid) -> Result<Option<LinkedAgent>> {
        let row = self
            .db()
            .fetch_optional(
                sql(format!("{} where a.owner_id = $1 and a.agent_id = $2", super::agents::AGENT_SELECT)).bind(owner_id).bind(agent_id),
            )
            .await?;
        row.as_ref().map(decode_linked).transpose()
    }

    async fn set_agent_dab(&self, agent_id: Uuid, owner_id: Uuid, limit: Option<MilliDac>) -> Result<bool> {
        let done = self
            .db()
            .execute(
                sql("update agent set dab_limit_milli = $1 where agent_id = $2 and owner_id = $3")
                    .bind(limit.map(|l| l.milli()))
                    .bind(agent_id)
                    .bind(owner_id),
            )
            .await?;
        Ok(done == 1)
    }

    async fn declaration_totals(&self, agent_id: Uuid, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Result<Totals> {
        let row = self
            .db()
            .fetch_one(
                sql("select count(*) as n, cast(coalesce(sum(dac_amount_milli), 0) as bigint) as dac, \
             cast(coalesce(sum(case when settlement_status = 'settled' then \
             (case when dac_amount_milli > base_fee_milli then 2 else 1 end) else 0 end), 0) as bigint) as settled \
             from declaration \
             where agent_id = $1 and settlement_status not in ('released', 'failed') \
             and ($2 is null or anchored_at >= $2) and ($3 is null or anchored_at < $3)")
                .bind(agent_id)
                .bind(from)
                .bind(to),
            )
            .await?;
        Ok(Totals { count: row.get("n")?, dac: MilliDac(row.get("dac")?), settled_rows: row.get("settled")? })
    }
}

fn decode_linked(row: &impl Row) -> Result<LinkedAgent> {
    Ok(LinkedAgent {
        agent: crate::agents::decode_agent(row)?,
        linked_at: row.get("linked_at")?,
        dab_limit: row.get::<Option<i64>>("dab_limit_milli")?.map(MilliDac),
    })
}
