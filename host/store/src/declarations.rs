//! Declarations: create (with its Trial debit or payment reservation), confirm, read, list, direct reads of the original, usage.

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::agents;
use crate::batch;
use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::rows::{self, DeclarationRow, confirm_in_one, confirm_steps, decode_declaration};
use crate::*;

/// A row of an agent's DAB columns (`payments::dab_columns`) beside the
/// declaration it recorded under a request_id (`d.*`, all null if none).
pub(crate) fn decode_request(row: &impl Row) -> Result<(Option<StoredDeclaration>, DabStatus)> {
    let dab = crate::payments::decode_dab(row)?;
    let earlier = match row.get::<Option<Uuid>>("dd_id")? {
        Some(_) => Some(decode_declaration(row)?),
        None => None,
    };
    Ok((earlier, dab))
}

/// A declaration beside its agent ([`agents::AGENT_BESIDE`]).
pub(crate) fn decode_confirming(row: &impl Row) -> Result<(AgentRecord, StoredDeclaration)> {
    Ok((agents::decode_agent_as(row, true)?, decode_declaration(row)?))
}

/// A record to confirm and what settling its payment needs, from the rows
/// of a read beside [`payments::SETTLING_COLUMNS`] (one row per payment).
fn to_confirm<R: Row>(rows: &[R]) -> Result<Option<(StoredDeclaration, Option<Settling>)>> {
    Ok(payments::first_payments(rows, |row| Ok(((), decode_declaration(row)?)))?.remove(&()))
}

/// [`to_confirm`], with the agent beside the record.
fn confirming<R: Row>(rows: &[R]) -> Result<Option<(AgentRecord, StoredDeclaration, Option<Settling>)>> {
    let mut found = payments::first_payments(rows, |row| Ok(((), decode_confirming(row)?)))?;
    Ok(found.remove(&()).map(|((agent, stored), settling)| (agent, stored, settling)))
}

#[async_trait]
impl<E: Engine> DeclarationStore for SqlStore<E> {
    async fn create_declaration(&self, new: &NewDeclaration, now: DateTime<Utc>) -> Result<Created> {
        let d = &new.declaration;
        let refused = |outcome: Created| async move {
            Ok::<_, StoreError>(match self.declaration_for_request(d.agent_id, new.request_id).await? {
                Some(earlier) => Created::Replayed(Box::new(earlier)),
                None => outcome,
            })
        };
        let trial_only = new.external.is_none() && new.earned_premium.is_none() && new.agreement.is_none();
        // Paid from Trial or over x402 (Earned DAC, a bilateral agreement or a
        // parent aside): handed to the group committer, which answers once its
        // batch has committed.
        // A token is checked by the batches alone, of creates Trial or x402
        // pays whole.
        if new.token_check.is_some() && (new.base_from_trial || !batch::batchable(new)) {
            return Ok(Created::Unchecked);
        }
        if batch::batchable(new)
            && let Some(batcher) = self.batcher()
        {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = batch::Job::Create(Box::new(batch::CreateJob { new: new.clone(), now, from_peer: false, reply }));
            if batcher.submit(job).await {
                match answer.await {
                    Ok(Ok(batch::Taken::Stored(record))) => {
                        // Stored with its token checked (paid by Trial or by its
                        // payment whole): a confirmation by that token may use it
                        // and the payment it reserved unread (0088).
                        if let Some(token_hash) = new.token_check {
                            let settling = new.external.as_ref().map(|payment| Settling {
                                payment_id: payment.payment_id,
                                network: payment.network.clone(),
                                asset: payment.asset.clone(),
                                payer: payment.payer.clone(),
                                status: PaymentStatus::Reserved,
                                payload: payment.payload.clone(),
                            });
                            self.recent.keep_record(token_hash, &record, settling);
                        }
                        return Ok(Created::New { trial_remaining: record.trial_remaining_after.unwrap_or(MilliDac::ZERO), record });
                    }
                    Ok(Err(unavailable)) => return Err(unavailable),
                    // The batch answers a request_id recorded before with its
                    // record only where the token to check is still the agent's.
                    Ok(Ok(batch::Taken::Replayed(earlier))) => return Ok(Created::Replayed(earlier)),
                    // Its token was checked by the batch alone: whatever else
                    // it would answer is found again with the agent read afresh.
                    _ if new.token_check.is_some() => return Ok(Created::Unchecked),
                    // Refused from the batch's own reading, with no write of its own
                    // (a paid create tries Trial first, on its 402 and its retry).
                    Ok(Ok(batch::Taken::TrialShort { balance, expired })) if trial_only => {
                        return refused(Created::TrialCannotPay { balance, expired }).await;
                    }
                    // A payment's job looked its request_id up first.
                    Ok(Ok(batch::Taken::TrialShort { balance, expired })) => return Ok(Created::TrialCannotPay { balance, expired }),
                    // A copy of this request may have committed since its
                    // lookup (with its payment): it is answered with that record.
                    Ok(Ok(batch::Taken::NonceUsed)) => return refused(Created::PaymentReplayed).await,
                    Ok(Ok(batch::Taken::DabReached { limit, spent })) => return refused(Created::DabReached { limit, spent }).await,
                    _ => {}
                }
            }
        }
        if new.token_check.is_some() {
            return Ok(Created::Unchecked);
        }
        // A request_id used before is answered with its record. Paid over x402,
        // that is looked up first: a retried request carries the same
        // authorization, whose nonce would otherwise refuse it. Otherwise the
        // unique (agent, request_id) key finds it with no lookup of its own:
        // the insert fails, the transaction (and its debit) is dropped, and
        // every refusal below is checked against an earlier record first.
        if new.external.is_some()
            && let Some(earlier) = self.declaration_for_request(d.agent_id, new.request_id).await?
        {
            return Ok(Created::Replayed(Box::new(earlier)));
        }
        // Not taken by a batch (or none runs here), on PostgreSQL: one statement.
        if self.db.writes_in_with() && trial_only && d.dd.parent_dd_id.is_none() {
            return match self.db().fetch_optional(DeclarationRow::trial_paid(new).debit_and_insert(d.dac_amount, now)).await {
                Ok(Some(stored)) => {
                    let record = Box::new(decode_declaration(&stored)?);
                    Ok(Created::New { trial_remaining: record.trial_remaining_after.unwrap_or(MilliDac::ZERO), record })
                }
                Ok(None) => {
                    let (balance, expired) = agents::trial_shortfall(&mut self.db(), d.agent_id, now).await?;
                    refused(Created::TrialCannotPay { balance, expired }).await
                }
                Err(error) if error.is_unique_violation() => match self.declaration_for_request(d.agent_id, new.request_id).await? {
                    Some(earlier) => Ok(Created::Replayed(Box::new(earlier))),
                    None => Err(error),
                },
                Err(error) => Err(error),
            };
        }
        let mut tx = self.begin_write().await?;
        let mut lineage_group_id = d.lineage_group_id;
        if let Some(parent) = d.dd.parent_dd_id {
            let row = tx.fetch_optional(sql("select agent_id, lineage_group_id from declaration where dd_id = $1").bind(parent)).await?;
            let Some(row) = row else {
                drop(tx);
                return refused(Created::ParentNotFound).await;
            };
            let parent_agent: Uuid = row.get("agent_id")?;
            if parent_agent != d.agent_id {
                drop(tx);
                return refused(Created::ParentForeign).await;
            }
            lineage_group_id = row.get("lineage_group_id")?;
        }
        match rows::record_steps(&mut tx, self.db.for_update(), new, lineage_group_id, now).await {
            Ok(created @ Created::New { .. }) => {
                if let Some(agreement) = &new.agreement {
                    bilateral::insert(&mut tx, agreement, d, now).await?;
                }
                tx.commit().await?;
                Ok(created)
            }
            Ok(
                refusal @ (Created::TrialCannotPay { .. }
                | Created::EarnedShort { .. }
                | Created::DabReached { .. }
                | Created::PaymentReplayed),
            ) => {
                drop(tx);
                refused(refusal).await
            }
            Ok(other) => Ok(other),
            // A concurrent request with the same request_id won: drop our
            // debit with the transaction and answer with its record.
            Err(error) if error.is_unique_violation() => {
                tx.rollback().await?;
                match self.declaration_for_request(d.agent_id, new.request_id).await? {
                    Some(earlier) => Ok(Created::Replayed(Box::new(earlier))),
                    None => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn declaration_to_confirm(&self, dd_id: Uuid) -> Result<Option<(StoredDeclaration, Option<Settling>)>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.declaration(dd_id).await
        {
            return found;
        }
        // The record beside its payment, in one statement (a row per
        // payment, the first by payment_id kept, as `payment_for` reads it).
        let query = || {
            sql(format!(
                "select d.*, {} from declaration d {} where d.dd_id = $1 and d.deidentified_at is null",
                payments::SETTLING_COLUMNS,
                payments::SETTLING_JOIN_PLAIN
            ))
            .bind(dd_id)
        };
        if let Some(found) = self.read_direct_rows(query(), to_confirm) {
            return Ok(found);
        }
        to_confirm(&self.db().fetch_all(query()).await?)
    }

    async fn declaration_to_confirm_as(
        &self,
        token_hash: &[u8; 32],
        dd_id: Uuid,
    ) -> Result<Option<(AgentRecord, StoredDeclaration, Option<Settling>)>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.confirming((*token_hash, dd_id)).await
        {
            return found;
        }
        // The record beside its agent and its payment, in one statement.
        let query = || {
            sql(format!(
                "select d.*, {}, {} from declaration d {} {} \
                 where d.dd_id = $1 and d.deidentified_at is null and a.token_hash = $2",
                agents::AGENT_BESIDE,
                payments::SETTLING_COLUMNS,
                agents::AGENT_BESIDE_JOIN,
                payments::SETTLING_JOIN_PLAIN
            ))
            .bind(dd_id)
            .bind(&token_hash[..])
        };
        if let Some(found) = self.read_direct_rows(query(), confirming) {
            return Ok(found);
        }
        confirming(&self.db().fetch_all(query()).await?)
    }

    fn recent_declaration_to_confirm_as(
        &self,
        token_hash: &[u8; 32],
        dd_id: Uuid,
        paid: bool,
    ) -> Option<(AgentRecord, StoredDeclaration, Option<Settling>)> {
        let found = self.recent.take_record(token_hash, dd_id, paid);
        if found.is_some() {
            self.db.metrics().remembered_records.inc();
        }
        found
    }

    async fn declaration_by_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>> {
        self.declaration_for_request(agent_id, request_id).await
    }

    async fn declaration_by_request_and_dab(
        &self,
        agent_id: Uuid,
        request_id: Uuid,
        period_start: DateTime<Utc>,
    ) -> Result<(Option<StoredDeclaration>, DabStatus)> {
        let period = crate::payments::period_key(period_start);
        if let Some(reader) = self.reader()
            && let Some(found) = reader.request((agent_id, request_id, period.clone())).await
        {
            return found?.ok_or_else(|| StoreError::Corrupt(format!("no agent {agent_id} for its DAB")));
        }
        let query = || {
            sql(format!(
                "select {}, d.* from agent a \
                 left join declaration d on d.agent_id = a.agent_id and d.request_id = $3 where a.agent_id = $1",
                crate::payments::dab_columns()
            ))
            .bind(agent_id)
            .bind(period.as_str())
            .bind(request_id)
        };
        let found = match self.read_direct(query(), decode_request) {
            Some(found) => found,
            None => self.db().fetch_optional(query()).await?.as_ref().map(decode_request).transpose()?,
        };
        found.ok_or_else(|| StoreError::Corrupt(format!("no agent {agent_id} for its DAB")))
    }

    async fn declaration(&self, dd_id: Uuid) -> Result<Option<StoredDeclaration>> {
        if let Some(reader) = self.reader()
            && let Some(found) = reader.declaration(dd_id).await
        {
            return found.map(|found| found.map(|(stored, _)| stored));
        }
        let query = || sql("select * from declaration where dd_id = $1 and deidentified_at is null").bind(dd_id);
        if let Some(found) = self.read_direct(query(), decode_declaration) {
            return Ok(found);
        }
        let row = self.db().fetch_optional(query()).await?;
        row.as_ref().map(decode_declaration).transpose()
    }

    async fn confirm_declaration(
        &self,
        dd_id: Uuid,
        integrity_hash: &str,
        now: DateTime<Utc>,
        usage: &[UsageEntry],
        leaf_data: &[u8],
        settlement_ref: Option<&str>,
    ) -> Result<bool> {
        // Handed to the group committer (settling the payment, if any).
        let anchoring = Anchoring { integrity_hash, now, usage, leaf_data, settlement_ref };
        match self.committed_confirm(dd_id, anchoring, None).await {
            Some(Ok(Some(confirmed))) => return Ok(confirmed),
            Some(Err(unavailable)) => return Err(unavailable),
            _ => {}
        }
        // Not taken by a batch, on PostgreSQL: one statement.
        if settlement_ref.is_none() && self.db.writes_in_with() {
            let agent_id: Option<Uuid> = self.db().scalar_optional(confirm_in_one(dd_id, integrity_hash, now, usage, leaf_data)).await?;
            return Ok(agent_id.is_some());
        }
        let mut tx = self.begin_write().await?;
        let confirmed = confirm_steps(&mut tx, dd_id, integrity_hash, now, usage, leaf_data, settlement_ref).await?;
        if confirmed {
            tx.commit().await?;
        }
        Ok(confirmed)
    }

    async fn confirm_declaration_as(&self, token_hash: &[u8; 32], dd_id: Uuid, anchoring: Anchoring<'_>) -> Result<bool> {
        // Only the committer checks the token: anything it does not take is
        // confirmed from a fresh read.
        match self.committed_confirm(dd_id, anchoring, Some(*token_hash)).await {
            Some(Ok(confirmed)) => Ok(confirmed == Some(true)),
            Some(Err(unavailable)) => Err(unavailable),
            None => Ok(false),
        }
    }

    async fn consume_direct_read(&self, dd_id: Uuid, now: DateTime<Utc>) -> Result<DirectRead> {
        let left: Option<i64> = self
            .db()
            .scalar_optional(
                sql("update declaration set direct_reads_used = direct_reads_used + 1 \
             where dd_id = $1 and direct_reads_used < ee_direct_access_quota and direct_access_expires_at > $2 \
             returning ee_direct_access_quota - direct_reads_used")
                .bind(dd_id)
                .bind(now),
            )
            .await?;
        if let Some(remaining) = left {
            return Ok(DirectRead::Granted { remaining });
        }
        let expires: DateTime<Utc> =
            self.db().scalar(sql("select direct_access_expires_at from declaration where dd_id = $1").bind(dd_id)).await?;
        Ok(if expires <= now { DirectRead::Expired } else { DirectRead::Exhausted })
    }

    async fn list_declarations(&self, agent_id: Uuid, filter: ListFilter) -> Result<(Vec<StoredDeclaration>, i64)> {
        // Bounds that compare correctly as text on SQLite as well.
        let far_past = DateTime::<Utc>::UNIX_EPOCH;
        let far_future = "9999-12-31T23:59:59Z".parse::<DateTime<Utc>>().unwrap_or(DateTime::<Utc>::MAX_UTC);
        let from = filter.from.unwrap_or(far_past);
        let to = filter.to.unwrap_or(far_future);
        let rows = self
            .db()
            .fetch_all(
                sql("select * from declaration \
             where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3 \
             order by anchored_at desc, dd_id desc limit $4 offset $5")
                .bind(agent_id)
                .bind(from)
                .bind(to)
                .bind(filter.limit)
                .bind(filter.offset),
            )
            .await?;
        let total: i64 = self
            .db()
            .scalar(
                sql("select count(*) from declaration where agent_id = $1 and anchored_at >= $2 and anchored_at <= $3")
                    .bind(agent_id)
                    .bind(from)
                    .bind(to),
            )
            .await?;
        Ok((rows.iter().map(decode_declaration).collect::<Result<_>>()?, total))
    }

    async fn lineage_group(&self, agent_id: Uuid, group_id: Uuid) -> Result<Vec<StoredDeclaration>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select * from declaration \
             where agent_id = $1 and lineage_group_id = $2 order by anchored_at, dd_id")
                .bind(agent_id)
                .bind(group_id),
            )
            .await?;
        rows.iter().map(decode_declaration).collect()
    }
}

impl<E: Engine> SqlStore<E> {
    /// A confirmation handed to the group committer: its answer (`Some(true)`
    /// confirmed, `Some(false)` not, `None` not taken), or `None` when no
    /// committer took it.
    async fn committed_confirm(
        &self,
        dd_id: Uuid,
        anchoring: Anchoring<'_>,
        token_check: Option<[u8; 32]>,
    ) -> Option<Result<Option<bool>>> {
        let batcher = self.batcher()?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = batch::Job::Confirm(Box::new(batch::ConfirmJob {
            dd_id,
            integrity_hash: anchoring.integrity_hash.to_owned(),
            now: anchoring.now,
            usage: anchoring.usage.to_vec(),
            leaf_data: anchoring.leaf_data.to_vec(),
            settlement_ref: anchoring.settlement_ref.map(str::to_owned),
            token_check,
            from_peer: false,
            reply,
        }));
        if !batcher.submit(job).await {
            return None;
        }
        answer.await.ok()
    }

    async fn declaration_for_request(&self, agent_id: Uuid, request_id: Uuid) -> Result<Option<StoredDeclaration>> {
        let query = || sql("select * from declaration where agent_id = $1 and request_id = $2").bind(agent_id).bind(request_id);
        if let Some(found) = self.read_direct(query(), decode_declaration) {
            return Ok(found);
        }
        let row = self.db().fetch_optional(query()).await?;
        row.as_ref().map(decode_declaration).transpose()
    }
}
