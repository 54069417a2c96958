//! The tool market: tools, dependencies, purchases and how each sale's price
//! was shared, revenue shares, owners' human shares, transfer declarations.
//!
//! A purchase is written `pending` in the transaction that reserves its
//! payment ([`insert_pending`], called by `reserve_payment`), and completed in
//! the transaction that records the settlement ([`complete`], called by
//! `settle_payment`): there the price becomes Earned DAC lots of the revenue
//! shares' beneficiaries and of the seller, and the owner's human share is
//! accrued, so a settled payment and its distribution are never apart.
//! Rates are checked against each other under the tool row's lock.

use anchor_domain::MilliDac;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::tsl::{self, PPM_ONE, ShareKind, ToolStatus, TransferAction};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> TslStore for SqlStore<E> {
    async fn register_tool(&self, tool: &NewTool, max_active: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let active = lock_and_count_active_tools(&mut tx, self.db.for_update(), tool.seller_agent_id).await?;
        if active >= max_active {
            return Ok(false);
        }
        tx.execute(Query::insert(
            "tsl_tool",
            vec![
                ("tool_id", tool.tool_id.value()),
                ("seller_agent_id", tool.seller_agent_id.value()),
                ("registered_by", tool.seller_agent_id.value()),
                ("tool_name", tool.name.as_str().value()),
                ("tool_description", tool.description.as_deref().value()),
                ("layer", tool.layer.as_str().value()),
                ("price_milli", tool.price.milli().value()),
                ("status", ToolStatus::Active.as_str().value()),
                ("registered_at", tool.registered_at.value()),
                ("updated_at", tool.registered_at.value()),
            ],
        ))
        .await?;
        for (position, c) in tool.connections.iter().enumerate() {
            tx.execute(Query::insert(
                "tsl_tool_connection",
                vec![
                    ("tool_id", tool.tool_id.value()),
                    ("position", (position as i32).value()),
                    ("observation_type", c.observation_type.as_str().value()),
                    ("resolution_level", i32::from(c.resolution_level).value()),
                ],
            ))
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn tool(&self, tool_id: Uuid) -> Result<Option<ToolRecord>> {
        let mut db = self.db();
        let Some(row) = db.fetch_optional(sql("select * from tsl_tool where tool_id = $1").bind(tool_id)).await? else {
            return Ok(None);
        };
        let mut tool = tool_of(&row)?;
        tool.connections = connections(&mut db, tool_id).await?;
        Ok(Some(tool))
    }

    async fn tools(&self, filter: ToolFilter) -> Result<(Vec<ToolRecord>, i64)> {
        let mut db = self.db();
        let filtered = |select: &str| {
            let mut q = sql(format!("{select} from tsl_tool where 1 = 1"));
            if let Some(layer) = filter.layer {
                q.push(" and layer = ").push_bind(layer.as_str());
            }
            if let Some(status) = filter.status {
                q.push(" and status = ").push_bind(status.as_str());
            }
            if let Some(seller) = filter.seller {
                q.push(" and seller_agent_id = ").push_bind(seller);
            }
            q
        };
        let count = filtered("select count(*)");
        let mut page = filtered("select *");
        page.push(" order by registered_at desc, tool_id limit ").push_bind(filter.limit).push(" offset ").push_bind(filter.offset);
        let total: i64 = db.scalar(count).await?;
        let rows = db.fetch_all(page).await?;
        let mut tools = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut tool = tool_of(row)?;
            tool.connections = connections(&mut db, tool.tool_id).await?;
            tools.push(tool);
        }
        Ok((tools, total))
    }

    async fn dependencies(&self, tool_id: Uuid) -> Result<Vec<DependencyRecord>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select d.depends_on_tool_id, d.purchase_id, d.created_at, t.tool_name, t.layer, t.status \
                     from tsl_dependency d join tsl_tool t on t.tool_id = d.depends_on_tool_id \
                     where d.tool_id = $1 order by d.created_at, d.depends_on_tool_id")
                .bind(tool_id),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(DependencyRecord {
                    depends_on_tool_id: r.get("depends_on_tool_id")?,
                    name: r.get("tool_name")?,
                    layer: r.named("layer")?,
                    status: r.named("status")?,
                    purchase_id: r.get("purchase_id")?,
                    created_at: r.get("created_at")?,
                })
            })
            .collect()
    }

    async fn add_dependency(
        &self,
        tool_id: Uuid,
        depends_on: Uuid,
        purchase_id: Option<Uuid>,
        max_dependencies: i64,
        now: DateTime<Utc>,
    ) -> Result<DependencyAdded> {
        let mut tx = self.begin_write().await?;
        // One dependency change at a time: a cycle closed by two concurrent
        // inserts would be invisible to each of them.
        let _: Option<i32> =
            tx.scalar_optional(sql(format!("select lock_id from tsl_graph_lock where lock_id = 1{}", self.db.for_update()))).await?;
        let row = tx
            .fetch_one(
                sql("select (select count(*) from tsl_dependency where tool_id = $1 and depends_on_tool_id = $2) as same, \
                            (select count(*) from tsl_dependency where tool_id = $1) as dependencies")
                .bind(tool_id)
                .bind(depends_on),
            )
            .await?;
        let (same, dependencies): (i64, i64) = (row.get("same")?, row.get("dependencies")?);
        if same > 0 {
            return Ok(DependencyAdded::Exists);
        }
        if dependencies >= max_dependencies {
            return Ok(DependencyAdded::TooMany);
        }
        // Does the dependency reach the tool already?
        let reaches: i64 = tx
            .scalar(
                sql("with recursive reach (id) as ( \
                       select depends_on_tool_id from tsl_dependency where tool_id = $1 \
                       union select d.depends_on_tool_id from tsl_dependency d join reach r on d.tool_id = r.id) \
                     select count(*) from reach where id = $2")
                .bind(depends_on)
                .bind(tool_id),
            )
            .await?;
        if reaches > 0 {
            return Ok(DependencyAdded::Cycle);
        }
        tx.execute(Query::insert(
            "tsl_dependency",
            vec![
                ("tool_id", tool_id.value()),
                ("depends_on_tool_id", depends_on.value()),
                ("purchase_id", purchase_id.value()),
                ("created_at", now.value()),
            ],
        ))
        .await?;
        tx.commit().await?;
        Ok(DependencyAdded::Added)
    }

    async fn purchase(&self, purchase_id: Uuid) -> Result<Option<PurchaseRecord>> {
        let mut db = self.db();
        read_purchase(&mut db, sql(format!("{PURCHASE} where p.purchase_id = $1")).bind(purchase_id)).await
    }

    async fn purchase_by_request(&self, buyer: Uuid, request_id: Uuid) -> Result<Option<PurchaseRecord>> {
        let mut db = self.db();
        read_purchase(&mut db, sql(format!("{PURCHASE} where p.buyer_agent_id = $1 and p.request_id = $2")).bind(buyer).bind(request_id))
            .await
    }

    async fn live_purchase(&self, buyer: Uuid, tool_id: Uuid) -> Result<Option<PurchaseRecord>> {
        let mut db = self.db();
        read_purchase(
            &mut db,
            sql(format!("{PURCHASE} where p.buyer_agent_id = $1 and p.tool_id = $2 and p.status <> 'failed'")).bind(buyer).bind(tool_id),
        )
        .await
    }

    async fn purchases(&self, agent_id: Uuid, role: PurchaseRole, limit: i64, offset: i64) -> Result<(Vec<PurchaseRecord>, i64)> {
        let mut db = self.db();
        let condition = match role {
            PurchaseRole::Buyer => "p.buyer_agent_id = $1",
            PurchaseRole::Seller => "p.seller_agent_id = $1",
            PurchaseRole::Any => "(p.buyer_agent_id = $1 or p.seller_agent_id = $1)",
        };
        let total: i64 = db.scalar(sql(format!("select count(*) from tsl_purchase p where {condition}")).bind(agent_id)).await?;
        let rows = db
            .fetch_all(
                sql(format!("{PURCHASE} where {condition} order by p.created_at desc, p.purchase_id limit $2 offset $3"))
                    .bind(agent_id)
                    .bind(limit)
                    .bind(offset),
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut purchase = purchase_of(row)?;
            purchase.distributions = distributions(&mut db, purchase.purchase_id).await?;
            out.push(purchase);
        }
        Ok((out, total))
    }

    async fn revenue(&self, agent_id: Uuid) -> Result<Revenue> {
        let mut db = self.db();
        let row = db
            .fetch_one(
                sql("select \
                       (select count(*) from tsl_tool where seller_agent_id = $1) as tools, \
                       (select count(*) from tsl_purchase where seller_agent_id = $1 and status = 'completed') as sales, \
                       (select cast(coalesce(sum(price_milli), 0) as bigint) from tsl_purchase where seller_agent_id = $1 and status = 'completed') as gross, \
                       (select cast(coalesce(sum(fee_milli), 0) as bigint) from tsl_purchase where seller_agent_id = $1 and status = 'completed') as fees, \
                       (select count(*) from tsl_purchase where buyer_agent_id = $1 and status = 'completed') as purchases, \
                       (select cast(coalesce(sum(price_milli + fee_milli), 0) as bigint) from tsl_purchase where buyer_agent_id = $1 and status = 'completed') as spent, \
                       (select cast(coalesce(sum(amount_milli), 0) as bigint) from tsl_distribution where agent_id = $1 and kind = 'seller') as as_seller, \
                       (select cast(coalesce(sum(amount_milli), 0) as bigint) from tsl_distribution where agent_id = $1 and kind = 'revenue_share') as from_shares, \
                       (select cast(coalesce(sum(d.amount_milli), 0) as bigint) from tsl_distribution d join tsl_purchase p on p.purchase_id = d.purchase_id \
                          where p.seller_agent_id = $1 and d.kind = 'revenue_share') as shared_out, \
                       (select cast(coalesce(sum(amount_milli), 0) as bigint) from tsl_distribution where agent_id = $1 and kind = 'human_share') as human")
                .bind(agent_id),
            )
            .await?;
        Ok(Revenue {
            tools: row.get("tools")?,
            sales: row.get("sales")?,
            gross: MilliDac(row.get("gross")?),
            fees: MilliDac(row.get("fees")?),
            earned_as_seller: MilliDac(row.get("as_seller")?),
            earned_from_shares: MilliDac(row.get("from_shares")?),
            shared_out: MilliDac(row.get("shared_out")?),
            human_accrued: MilliDac(row.get("human")?),
            purchases: row.get("purchases")?,
            spent: MilliDac(row.get("spent")?),
        })
    }

    async fn market_window(&self, from: DateTime<Utc>, to: DateTime<Utc>, cap: i64) -> Result<MarketWindow> {
        let mut db = self.db();
        let tools = db
            .fetch_all(
                sql("select layer as value, count(*) as n from tsl_tool where status = 'active' and registered_at < $1 \
                     group by layer order by layer")
                .bind(to),
            )
            .await?;
        // Each buyer once: the layer it bought most (ties to the first layer).
        let buyers = db
            .fetch_all(
                sql("select layer as value, count(*) as n from ( \
                       select buyer_agent_id, min(layer) as layer from ( \
                         select buyer_agent_id, layer, count(*) as bought, \
                           max(count(*)) over (partition by buyer_agent_id) as most \
                         from tsl_purchase where status = 'completed' and created_at >= $1 and created_at < $2 \
                         group by buyer_agent_id, layer) per_layer \
                       where bought = most group by buyer_agent_id) per_buyer \
                     group by layer order by layer")
                .bind(from)
                .bind(to),
            )
            .await?;
        let totals = db
            .fetch_one(
                sql("select count(*) as buyers, cast(coalesce(sum(case when bought > $3 then $3 else bought end), 0) as bigint) as capped from ( \
                       select buyer_agent_id, count(*) as bought from tsl_purchase \
                       where status = 'completed' and created_at >= $1 and created_at < $2 group by buyer_agent_id) per_buyer")
                .bind(from)
                .bind(to)
                .bind(cap),
            )
            .await?;
        Ok(MarketWindow {
            tools_by_layer: value_counts(&tools)?,
            buyers_by_layer: value_counts(&buyers)?,
            buyers: totals.get("buyers")?,
            capped_purchases: totals.get("capped")?,
        })
    }

    async fn tool_sales(&self, seller: Uuid) -> Result<Vec<ToolSales>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select p.tool_id, count(*) as sales, cast(sum(p.price_milli) as bigint) as gross, \
                       cast(coalesce(sum((select sum(d.amount_milli) from tsl_distribution d \
                         where d.purchase_id = p.purchase_id and d.kind = 'seller' and d.agent_id = $1)), 0) as bigint) as earned \
                     from tsl_purchase p where p.seller_agent_id = $1 and p.status = 'completed' group by p.tool_id")
                .bind(seller),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ToolSales {
                    tool_id: r.get("tool_id")?,
                    sales: r.get("sales")?,
                    gross: MilliDac(r.get("gross")?),
                    earned: MilliDac(r.get("earned")?),
                })
            })
            .collect()
    }

    async fn add_revenue_share(&self, share: &NewShare, max_shares: i64) -> Result<ShareAdded> {
        let mut tx = self.begin_write().await?;
        lock_tool(&mut tx, self.db.for_update(), share.tool_id).await?;
        let row = tx
            .fetch_one(
                sql("select (select count(*) from tsl_revenue_share where tool_id = $1 and component_tool_id = $2 \
                               and beneficiary_agent_id = $3) as same, \
                            (select count(*) from tsl_revenue_share where tool_id = $1) as shares")
                .bind(share.tool_id)
                .bind(share.component_tool_id)
                .bind(share.beneficiary_agent_id),
            )
            .await?;
        let (same, shares): (i64, i64) = (row.get("same")?, row.get("shares")?);
        if same > 0 {
            return Ok(ShareAdded::Exists);
        }
        if shares >= max_shares {
            return Ok(ShareAdded::TooMany);
        }
        let committed = committed_ppm(&mut tx, share.tool_id).await?;
        if u64::from(committed) + u64::from(share.rate_ppm) > u64::from(PPM_ONE) {
            return Ok(ShareAdded::Exceeded { committed_ppm: committed });
        }
        tx.execute(Query::insert(
            "tsl_revenue_share",
            vec![
                ("share_id", share.share_id.value()),
                ("tool_id", share.tool_id.value()),
                ("component_tool_id", share.component_tool_id.value()),
                ("beneficiary_agent_id", share.beneficiary_agent_id.value()),
                ("rate_ppm", (share.rate_ppm as i32).value()),
                ("created_by", share.created_by.value()),
                ("created_at", share.created_at.value()),
            ],
        ))
        .await?;
        tx.commit().await?;
        Ok(ShareAdded::Added)
    }

    async fn revenue_shares(&self, tool_id: Uuid) -> Result<Vec<ShareRecord>> {
        let rows = self
            .db()
            .fetch_all(sql("select * from tsl_revenue_share where tool_id = $1 order by created_at, share_id").bind(tool_id))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ShareRecord {
                    share_id: r.get("share_id")?,
                    tool_id: r.get("tool_id")?,
                    component_tool_id: r.get("component_tool_id")?,
                    beneficiary_agent_id: r.get("beneficiary_agent_id")?,
                    rate_ppm: r.get::<i32>("rate_ppm")? as u32,
                    created_at: r.get("created_at")?,
                })
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    async fn set_human_share(
        &self,
        owner_id: Uuid,
        agent_id: Uuid,
        tool_id: Uuid,
        rate_ppm: u32,
        day_start: DateTime<Utc>,
        per_day: i64,
        now: DateTime<Utc>,
    ) -> Result<HumanShareSet> {
        let mut tx = self.begin_write().await?;
        lock_tool(&mut tx, self.db.for_update(), tool_id).await?;
        // The seller's row, while the owner still manages it and it still
        // sells the tool: an unlinking (which ends the owner's shares) waits
        // for this share or went first and refuses it.
        let linked: Option<Uuid> = tx
            .scalar_optional(
                sql(format!(
                    "select agent_id from agent where agent_id = $1 and owner_id = $2 \
                     and agent_id = (select seller_agent_id from tsl_tool where tool_id = $3){}",
                    self.db.for_update()
                ))
                .bind(agent_id)
                .bind(owner_id)
                .bind(tool_id),
            )
            .await?;
        if linked.is_none() {
            return Ok(HumanShareSet::NotLinked);
        }
        // Each setting is kept (the owner's listing shows them all): an
        // owner's settings of a tool in a day are bounded (read by the
        // owner's index; another owner's settings do not count).
        let today: i64 = tx
            .scalar(
                sql("select count(*) from tsl_human_share where owner_id = $1 and created_at >= $2 and tool_id = $3")
                    .bind(owner_id)
                    .bind(day_start)
                    .bind(tool_id),
            )
            .await?;
        if today >= per_day {
            return Ok(HumanShareSet::TooOften);
        }
        let shares: i64 = tx
            .scalar(sql("select cast(coalesce(sum(rate_ppm), 0) as bigint) from tsl_revenue_share where tool_id = $1").bind(tool_id))
            .await?;
        if shares as u64 + u64::from(rate_ppm) > u64::from(PPM_ONE) {
            return Ok(HumanShareSet::Exceeded { committed_ppm: shares as u32 });
        }
        tx.execute(
            sql("update tsl_human_share set ended_at = $1, end_reason = 'superseded' where tool_id = $2 and ended_at is null")
                .bind(now)
                .bind(tool_id),
        )
        .await?;
        let human_share_id = Uuid::new_v4();
        tx.execute(Query::insert(
            "tsl_human_share",
            vec![
                ("human_share_id", human_share_id.value()),
                ("owner_id", owner_id.value()),
                ("agent_id", agent_id.value()),
                ("tool_id", tool_id.value()),
                ("rate_ppm", (rate_ppm as i32).value()),
                ("created_at", now.value()),
            ],
        ))
        .await?;
        tx.commit().await?;
        Ok(HumanShareSet::Set { human_share_id })
    }

    async fn human_shares(&self, owner_id: Uuid) -> Result<Vec<HumanShareRecord>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select h.*, t.tool_name, a.owner_id as agent_owner, \
                       (select count(*) from tsl_distribution d where d.share_id = h.human_share_id) as sales, \
                       (select cast(coalesce(sum(d.amount_milli), 0) as bigint) from tsl_distribution d where d.share_id = h.human_share_id) as accrued \
                     from tsl_human_share h join tsl_tool t on t.tool_id = h.tool_id join agent a on a.agent_id = h.agent_id \
                     where h.owner_id = $1 \
                     order by h.created_at desc, case when h.ended_at is null then 0 else 1 end, h.ended_at desc, h.human_share_id")
                .bind(owner_id),
            )
            .await?;
        rows.iter()
            .map(|r| {
                let ended_at: Option<DateTime<Utc>> = r.get("ended_at")?;
                let agent_owner: Option<Uuid> = r.get("agent_owner")?;
                let linked = agent_owner == Some(owner_id);
                let mut end_reason: Option<String> = r.get("end_reason")?;
                if ended_at.is_none() && !linked {
                    end_reason = Some("unlinked".into());
                }
                Ok(HumanShareRecord {
                    human_share_id: r.get("human_share_id")?,
                    owner_id,
                    agent_id: r.get("agent_id")?,
                    tool_id: r.get("tool_id")?,
                    tool_name: r.get("tool_name")?,
                    rate_ppm: r.get::<i32>("rate_ppm")? as u32,
                    created_at: r.get("created_at")?,
                    ended_at,
                    end_reason,
                    in_force: ended_at.is_none() && linked,
                    sales: r.get("sales")?,
                    accrued: MilliDac(r.get("accrued")?),
                })
            })
            .collect()
    }

    async fn declare_transfer(&self, transfer: &TransferRecord) -> Result<Option<TransferRecord>> {
        let mut tx = self.begin_write().await?;
        lock_tool(&mut tx, self.db.for_update(), transfer.tool_id).await?;
        let inserted = tx
            .execute(
                sql("insert into tsl_transfer (transfer_id, tool_id, declared_by, action, target_agent_id, status, declared_at, effective_at) \
                     values ($1, $2, $3, $4, $5, 'pending', $6, $7) on conflict do nothing")
                .bind(transfer.transfer_id)
                .bind(transfer.tool_id)
                .bind(transfer.declared_by)
                .bind(transfer.action.as_str())
                .bind(transfer.target_agent_id)
                .bind(transfer.declared_at)
                .bind(transfer.effective_at),
            )
            .await?;
        if inserted == 0 {
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(*transfer))
    }

    async fn latest_transfer(&self, tool_id: Uuid) -> Result<Option<TransferRecord>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select * from tsl_transfer where tool_id = $1 \
                     order by case status when 'pending' then 0 else 1 end, declared_at desc, coalesce(ended_at, declared_at) desc, transfer_id limit 1")
                .bind(tool_id),
            )
            .await?;
        row.as_ref().map(transfer_of).transpose()
    }

    async fn cancel_transfer(&self, tool_id: Uuid, now: DateTime<Utc>) -> Result<Option<TransferRecord>> {
        let row = self
            .db()
            .fetch_optional(
                sql("update tsl_transfer set status = 'cancelled', ended_at = $1 where tool_id = $2 and status = 'pending' returning *")
                    .bind(now)
                    .bind(tool_id),
            )
            .await?;
        row.as_ref().map(transfer_of).transpose()
    }

    async fn execute_due_transfers(&self, now: DateTime<Utc>, limit: i64, max_active: i64) -> Result<u64> {
        let due = self
            .db()
            .fetch_all(
                sql("select transfer_id, tool_id from tsl_transfer where status = 'pending' and effective_at <= $1 \
                     order by effective_at limit $2")
                .bind(now)
                .bind(limit),
            )
            .await?;
        let mut done = 0;
        for row in due {
            let (transfer_id, tool_id): (Uuid, Uuid) = (row.get("transfer_id")?, row.get("tool_id")?);
            let mut tx = self.begin_write().await?;
            // The tool first, as a declaration locks it before its insert:
            // the two never wait for each other in a circle.
            lock_tool(&mut tx, self.db.for_update(), tool_id).await?;
            let row = tx
                .fetch_optional(
                    sql("update tsl_transfer set status = 'executed', ended_at = $1 where transfer_id = $2 and status = 'pending' returning *")
                        .bind(now)
                        .bind(transfer_id),
                )
                .await?;
            // Another host carried it out, or it was cancelled, in between.
            let Some(row) = row else { continue };
            let transfer = transfer_of(&row)?;
            if let (TransferAction::Transfer, Some(target)) = (transfer.action, transfer.target_agent_id) {
                // Counted as a registration counts them.
                if lock_and_count_active_tools(&mut tx, self.db.for_update(), target).await? >= max_active {
                    tx.execute(sql("update tsl_transfer set status = 'cancelled' where transfer_id = $1").bind(transfer_id)).await?;
                    tx.commit().await?;
                    tracing::info!(%transfer_id, tool_id = %transfer.tool_id, %target, "a transfer was cancelled: its target sells the most active tools");
                    continue;
                }
            }
            let (update, reason) = match (transfer.action, transfer.target_agent_id) {
                (TransferAction::Transfer, Some(target)) => (
                    sql("update tsl_tool set seller_agent_id = $1, updated_at = $2 where tool_id = $3").bind(target).bind(now),
                    "transferred",
                ),
                _ => (sql("update tsl_tool set status = 'defunct', updated_at = $1 where tool_id = $2").bind(now), "retired"),
            };
            tx.execute(update.bind(transfer.tool_id)).await?;
            // The human share was the old seller's owner's: it ends with the move.
            tx.execute(
                sql("update tsl_human_share set ended_at = $1, end_reason = $2 where tool_id = $3 and ended_at is null")
                    .bind(now)
                    .bind(reason)
                    .bind(transfer.tool_id),
            )
            .await?;
            tx.commit().await?;
            done += 1;
        }
        Ok(done)
    }
}

/// Writes a purchase with its payment's reservation; `false` when the buyer
/// has a live purchase of the tool, or one with the same request id, already
/// (nothing written: the caller drops the transaction).
pub(crate) async fn insert_pending<X: Exec>(tx: &mut X, purchase: &NewPurchase, payment_id: Uuid, now: DateTime<Utc>) -> Result<bool> {
    let inserted = tx
        .execute(
            sql("insert into tsl_purchase (purchase_id, tool_id, buyer_agent_id, seller_agent_id, request_id, layer, price_milli, \
                   fee_milli, earned_expiry_days, payment_id, status, created_at) \
                 values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11) on conflict do nothing")
            .bind(purchase.purchase_id)
            .bind(purchase.tool_id)
            .bind(purchase.buyer_agent_id)
            .bind(purchase.seller_agent_id)
            .bind(purchase.request_id)
            .bind(purchase.layer.as_str())
            .bind(purchase.price.milli())
            .bind(purchase.fee.milli())
            .bind(purchase.earned_expiry_days as i32)
            .bind(payment_id)
            .bind(now),
        )
        .await?;
    Ok(inserted == 1)
}

/// Completes a purchase whose payment settled, inside the settlement's
/// transaction: the price is shared into Earned DAC lots (revenue shares
/// first, in the order they were agreed, then the seller's rest) and the
/// owner's human share is accrued.
pub(crate) async fn complete<X: Exec>(tx: &mut X, for_update: &str, purchase_id: Uuid, now: DateTime<Utc>) -> Result<()> {
    let row = tx
        .fetch_optional(
            sql("update tsl_purchase set status = 'completed', completed_at = $1 where purchase_id = $2 and status = 'pending' \
                 returning tool_id, seller_agent_id, price_milli, earned_expiry_days")
            .bind(now)
            .bind(purchase_id),
        )
        .await?;
    let Some(row) = row else {
        return Err(StoreError::Corrupt(format!("purchase {purchase_id} settled but is not pending")));
    };
    let tool_id: Uuid = row.get("tool_id")?;
    let seller: Uuid = row.get("seller_agent_id")?;
    let price = MilliDac(row.get("price_milli")?);
    let expires_at = now + Duration::days(i64::from(row.get::<i32>("earned_expiry_days")?));
    let shares = tx
        .fetch_all(
            sql("select share_id, beneficiary_agent_id, rate_ppm from tsl_revenue_share where tool_id = $1 order by created_at, share_id")
                .bind(tool_id),
        )
        .await?;
    let mut rates = Vec::with_capacity(shares.len());
    for s in &shares {
        rates.push(((s.get::<Uuid>("share_id")?, s.get::<Uuid>("beneficiary_agent_id")?), s.get::<i32>("rate_ppm")? as u32));
    }
    // The human share counts while its owner still manages the seller.
    let human = tx
        .fetch_optional(
            sql("select h.human_share_id, h.owner_id, h.rate_ppm from tsl_human_share h join agent a on a.agent_id = h.agent_id \
                 where h.tool_id = $1 and h.agent_id = $2 and h.ended_at is null and a.owner_id = h.owner_id")
            .bind(tool_id)
            .bind(seller),
        )
        .await?;
    let human = match human {
        Some(h) => Some((h.get::<Uuid>("human_share_id")?, h.get::<Uuid>("owner_id")?, h.get::<i32>("rate_ppm")? as u32)),
        None => None,
    };
    let split = tsl::split(price, &rates, human.map_or(0, |h| h.2))
        .ok_or_else(|| StoreError::Corrupt(format!("the shares of tool {tool_id} add up to more than one")))?;
    let sale = Subject { domain: SubjectDomain::TslPurchase, id: purchase_id };
    // Credits lock agent rows: in one order (by agent), so that two
    // settlements never wait for each other in a circle.
    let mut credits: Vec<Credit> = split
        .shares
        .iter()
        .zip(&rates)
        .map(|(((share_id, beneficiary), amount), (_, rate))| Credit {
            agent_id: *beneficiary,
            kind: ShareKind::RevenueShare,
            share: Some((*share_id, *rate)),
            amount: *amount,
        })
        .collect();
    credits.push(Credit { agent_id: seller, kind: ShareKind::Seller, share: None, amount: split.seller });
    credits.sort_by_key(|c| c.agent_id);
    for c in credits {
        let entry_id = if c.amount > MilliDac::ZERO {
            let reason = match c.kind {
                ShareKind::Seller => "tool sale",
                _ => "revenue share of a tool sale",
            };
            Some(earned::credit(tx, for_update, c.agent_id, c.amount, reason, Some(sale), expires_at, now).await?.entry_id)
        } else {
            None
        };
        let (share_id, rate) = (c.share.map(|s| s.0), c.share.map(|s| s.1));
        insert_distribution(tx, purchase_id, c.kind, c.agent_id, None, share_id, rate, c.amount, entry_id, now).await?;
    }
    if let Some((human_share_id, owner_id, rate)) = human {
        insert_distribution(
            tx,
            purchase_id,
            ShareKind::HumanShare,
            seller,
            Some(owner_id),
            Some(human_share_id),
            Some(rate),
            split.human,
            None,
            now,
        )
        .await?;
    }
    Ok(())
}

/// One Earned credit of a sale.
struct Credit {
    agent_id: Uuid,
    kind: ShareKind,
    /// The revenue share and its rate.
    share: Option<(Uuid, u32)>,
    amount: MilliDac,
}

/// Marks a purchase whose payment ended unsettled as failed.
pub(crate) async fn fail<X: Exec>(tx: &mut X, purchase_id: Uuid) -> Result<()> {
    tx.execute(sql("update tsl_purchase set status = 'failed' where purchase_id = $1 and status = 'pending'").bind(purchase_id)).await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn insert_distribution<X: Exec>(
    tx: &mut X,
    purchase_id: Uuid,
    kind: ShareKind,
    agent_id: Uuid,
    owner_id: Option<Uuid>,
    share_id: Option<Uuid>,
    rate_ppm: Option<u32>,
    amount: MilliDac,
    earned_entry_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<()> {
    tx.execute(Query::insert(
        "tsl_distribution",
        vec![
            ("distribution_id", Uuid::new_v4().value()),
            ("purchase_id", purchase_id.value()),
            ("kind", kind.as_str().value()),
            ("agent_id", agent_id.value()),
            ("owner_id", owner_id.value()),
            ("share_id", share_id.value()),
            ("rate_ppm", rate_ppm.map(|r| r as i32).value()),
            ("amount_milli", amount.milli().value()),
            ("earned_entry_id", earned_entry_id.value()),
            ("created_at", now.value()),
        ],
    ))
    .await?;
    Ok(())
}

/// Locks a tool's row: changes to its rates and transfers run one at a time.
/// The agent's active tools, counted under a lock of its row, so that a
/// registration and a transfer to it are counted one at a time.
async fn lock_and_count_active_tools<X: Exec>(tx: &mut X, for_update: &str, agent_id: Uuid) -> Result<i64> {
    let _: Option<Uuid> =
        tx.scalar_optional(sql(format!("select agent_id from agent where agent_id = $1{for_update}")).bind(agent_id)).await?;
    tx.scalar(sql("select count(*) from tsl_tool where seller_agent_id = $1 and status = 'active'").bind(agent_id)).await
}

pub(crate) async fn lock_tool<X: Exec>(tx: &mut X, for_update: &str, tool_id: Uuid) -> Result<()> {
    // On PostgreSQL `for no key update`: changes of one tool still take
    // turns, but rows that merely point at the tool (a purchase, an upload,
    // a run) are not held up by them, so a purchase that holds its buyer's
    // row can never wait in a circle with a transfer that moves the tool to
    // that buyer (tool, then agent).
    let mode = crate::engine::for_no_key_update(for_update);
    let found: Option<Uuid> =
        tx.scalar_optional(sql(format!("select tool_id from tsl_tool where tool_id = $1{mode}")).bind(tool_id)).await?;
    found.map(|_| ()).ok_or_else(|| StoreError::NotFound("no row returned".into()))
}

/// The rates committed on a tool: its revenue shares and its human share in force.
async fn committed_ppm<X: Exec>(tx: &mut X, tool_id: Uuid) -> Result<u32> {
    let ppm: i64 = tx
        .scalar(
            sql("select cast(coalesce((select sum(rate_ppm) from tsl_revenue_share where tool_id = $1), 0) \
                   + coalesce((select max(h.rate_ppm) from tsl_human_share h join agent a on a.agent_id = h.agent_id \
                       join tsl_tool t on t.tool_id = h.tool_id \
                       where h.tool_id = $1 and h.ended_at is null and a.owner_id = h.owner_id and h.agent_id = t.seller_agent_id), 0) as bigint)")
            .bind(tool_id),
        )
        .await?;
    Ok(ppm as u32)
}

const PURCHASE: &str = "select p.*, t.tool_name from tsl_purchase p join tsl_tool t on t.tool_id = p.tool_id";

async fn read_purchase<X: Exec>(x: &mut X, query: Query<'_>) -> Result<Option<PurchaseRecord>> {
    let Some(row) = x.fetch_optional(query).await? else { return Ok(None) };
    let mut purchase = purchase_of(&row)?;
    purchase.distributions = distributions(x, purchase.purchase_id).await?;
    Ok(Some(purchase))
}

async fn distributions<X: Exec>(x: &mut X, purchase_id: Uuid) -> Result<Vec<Distribution>> {
    let rows = x
        .fetch_all(
            sql("select * from tsl_distribution where purchase_id = $1 \
                 order by case kind when 'revenue_share' then 0 when 'human_share' then 1 else 2 end, created_at, distribution_id")
            .bind(purchase_id),
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Distribution {
                kind: r.named("kind")?,
                agent_id: r.get("agent_id")?,
                owner_id: r.get("owner_id")?,
                rate_ppm: r.get::<Option<i32>>("rate_ppm")?.map(|r| r as u32),
                amount: MilliDac(r.get("amount_milli")?),
                earned_entry_id: r.get("earned_entry_id")?,
            })
        })
        .collect()
}

async fn connections<X: Exec>(x: &mut X, tool_id: Uuid) -> Result<Vec<Connection>> {
    let rows = x
        .fetch_all(
            sql("select observation_type, resolution_level from tsl_tool_connection where tool_id = $1 order by position").bind(tool_id),
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Connection { observation_type: r.named("observation_type")?, resolution_level: r.get::<i32>("resolution_level")? as u8 })
        })
        .collect()
}

fn tool_of(row: &impl Row) -> Result<ToolRecord> {
    Ok(ToolRecord {
        tool_id: row.get("tool_id")?,
        seller_agent_id: row.get("seller_agent_id")?,
        registered_by: row.get("registered_by")?,
        name: row.get("tool_name")?,
        description: row.get("tool_description")?,
        layer: row.named("layer")?,
        price: MilliDac(row.get("price_milli")?),
        status: row.named("status")?,
        connections: Vec::new(),
        registered_at: row.get("registered_at")?,
        updated_at: row.get("updated_at")?,
    })
}

fn purchase_of(row: &impl Row) -> Result<PurchaseRecord> {
    Ok(PurchaseRecord {
        purchase_id: row.get("purchase_id")?,
        tool_id: row.get("tool_id")?,
        tool_name: row.get("tool_name")?,
        buyer_agent_id: row.get("buyer_agent_id")?,
        seller_agent_id: row.get("seller_agent_id")?,
        request_id: row.get("request_id")?,
        layer: row.named("layer")?,
        price: MilliDac(row.get("price_milli")?),
        fee: MilliDac(row.get("fee_milli")?),
        payment_id: row.get("payment_id")?,
        status: row.named("status")?,
        created_at: row.get("created_at")?,
        completed_at: row.get("completed_at")?,
        distributions: Vec::new(),
    })
}

fn transfer_of(row: &impl Row) -> Result<TransferRecord> {
    Ok(TransferRecord {
        transfer_id: row.get("transfer_id")?,
        tool_id: row.get("tool_id")?,
        declared_by: row.get("declared_by")?,
        action: row.named("action")?,
        target_agent_id: row.get("target_agent_id")?,
        status: row.named("status")?,
        declared_at: row.get("declared_at")?,
        effective_at: row.get("effective_at")?,
        ended_at: row.get("ended_at")?,
    })
}

fn value_counts<R: Row>(rows: &[R]) -> Result<Vec<(String, i64)>> {
    rows.iter().map(|r| Ok((r.get("value")?, r.get("n")?))).collect()
}
