//! The transparency log: the integrator lease, integration of pending leaves, hashes, entries and checkpoints.

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> LogStore for SqlStore<E> {
    async fn acquire_log_lease(&self, holder: Uuid, now: DateTime<Utc>, ttl: Duration) -> Result<bool> {
        let update = || {
            sql("update log_lease set holder = $1, expires_at = $2 \
             where log_lease_id = 0 and (holder = $1 or holder is null or expires_at < $3)")
            .bind(holder)
            .bind(now + ttl)
            .bind(now)
        };
        // (A lease renewal waited 16-56 ms for SQLite's lock on the pool.)
        Ok(self.execute_background(update).await? == 1)
    }

    async fn release_log_lease(&self, holder: Uuid) -> Result<bool> {
        let done = self.db().execute(sql("update log_lease set holder = null where log_lease_id = 0 and holder = $1").bind(holder)).await?;
        Ok(done == 1)
    }

    async fn integrate_log(&self, max: i64, now: DateTime<Utc>, planner: Planner<'_>) -> Result<Option<LogState>> {
        let (for_update, rows_per_statement) = (self.db.for_update(), |columns| self.db.rows_per_statement(columns));
        // SQLite: run whole while the write lock is held (`direct::Writer`).
        if let Some(done) = self.write_direct(|tx| direct::run_now(integrate(tx, for_update, rows_per_statement, None, max, now, planner)))
        {
            return Ok(done?.map(|(state, _)| state));
        }
        let mut tx = self.begin_write().await?;
        let from = *self.pending_from.lock().unwrap_or_else(|e| e.into_inner());
        let Some((state, last)) = integrate(&mut tx, for_update, rows_per_statement, from, max, now, planner).await? else {
            return Ok(None);
        };
        tx.commit().await?;
        if self.db.round_trips() {
            *self.pending_from.lock().unwrap_or_else(|e| e.into_inner()) = last;
        }
        Ok(Some(state))
    }

    async fn log_state(&self) -> Result<LogState> {
        let row = self.db().fetch_one(sql("select size, root, edge from log_state where log_state_id = 0")).await?;
        decode_state(&row)
    }

    async fn log_hashes(&self, indexes: &[i64]) -> Result<Vec<(i64, [u8; 32])>> {
        let mut out = Vec::with_capacity(indexes.len());
        for chunk in indexes.chunks(self.db.rows_per_statement(1)) {
            let mut select = sql("select hash_index, hash from log_hash where hash_index in (");
            for (i, index) in chunk.iter().enumerate() {
                select.push(if i == 0 { "" } else { ", " }).push_bind(*index);
            }
            select.push(")");
            for row in self.db().fetch_all(select).await? {
                out.push((row.get("hash_index")?, hash32("hash", row.get("hash")?)?));
            }
        }
        Ok(out)
    }

    async fn log_indexes(&self, dd_ids: &[Uuid]) -> Result<Vec<(Uuid, i64)>> {
        if dd_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut query = sql("select dd_id, leaf_index from log_entry where ");
        query.push_in("dd_id", dd_ids);
        let rows = self.db().fetch_all(query).await?;
        rows.iter().map(|row| Ok((row.get("dd_id")?, row.get("leaf_index")?))).collect()
    }

    async fn log_entry_for(&self, dd_id: Uuid) -> Result<Option<(i64, Vec<u8>)>> {
        let row = self.db().fetch_optional(sql("select leaf_index, leaf_data from log_entry where dd_id = $1").bind(dd_id)).await?;
        row.map(|r| Ok((r.get("leaf_index")?, r.get("leaf_data")?))).transpose()
    }

    async fn log_entries(&self, from: i64, count: i64) -> Result<Vec<Vec<u8>>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select leaf_index, leaf_data from log_entry where leaf_index >= $1 and leaf_index < $2 \
                     union all select leaf_index, leaf_data from scitt_entry where leaf_index >= $1 and leaf_index < $2 \
                     order by leaf_index")
                .bind(from)
                .bind(from + count),
            )
            .await?;
        rows.iter().map(|r| r.get("leaf_data")).collect()
    }

    async fn log_pending_count(&self) -> Result<i64> {
        Ok(self
            .db()
            .scalar(sql("select (select count(*) from log_pending) + (select count(*) from scitt_entry where leaf_index is null)"))
            .await?)
    }

    async fn register_statement(&self, e: &StatementEntry) -> Result<bool> {
        let done = self
            .db()
            .execute(
                sql("insert into scitt_entry (entry_id, issuer, subject, kid, content_type, payload_bytes, leaf_data, registered_at) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (entry_id) do nothing")
                .bind(e.entry_id.as_slice())
                .bind(e.issuer.as_str())
                .bind(e.subject.as_str())
                .bind(e.kid.as_slice())
                .bind(e.content_type.as_deref())
                .bind(e.payload_bytes)
                .bind(e.leaf_data.as_slice())
                .bind(e.registered_at),
            )
            .await?;
        Ok(done == 1)
    }

    async fn statement_entry(&self, entry_id: &[u8; 32]) -> Result<Option<StatementEntry>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select entry_id, issuer, subject, kid, content_type, payload_bytes, leaf_data, registered_at, leaf_index \
                     from scitt_entry where entry_id = $1")
                .bind(entry_id.as_slice()),
            )
            .await?;
        row.map(|r| {
            Ok(StatementEntry {
                entry_id: hash32("entry_id", r.get("entry_id")?)?,
                issuer: r.get("issuer")?,
                subject: r.get("subject")?,
                kid: r.get("kid")?,
                content_type: r.get("content_type")?,
                payload_bytes: r.get("payload_bytes")?,
                leaf_data: r.get("leaf_data")?,
                registered_at: r.get("registered_at")?,
                leaf_index: r.get("leaf_index")?,
            })
        })
        .transpose()
    }

    async fn insert_checkpoint(&self, c: &CheckpointRecord) -> Result<()> {
        let insert = || {
            sql("insert into log_checkpoint (size, root, note, published_at) values ($1, $2, $3, $4) on conflict (size) do nothing")
                .bind(c.size)
                .bind(&c.root)
                .bind(c.note.as_str())
                .bind(c.published_at)
        };
        // (On the pool, SQLite's own waits of up to 100 ms each let the
        // committer's batches take the lock first: 0.24 s a checkpoint
        // under a paid load.)
        self.execute_background(insert).await?;
        Ok(())
    }

    async fn latest_checkpoint(&self) -> Result<Option<CheckpointRecord>> {
        let row =
            self.db().fetch_optional(sql("select size, root, note, published_at from log_checkpoint order by size desc limit 1")).await?;
        row.as_ref().map(decode_checkpoint).transpose()
    }

    async fn checkpoints_after(&self, after: i64, limit: i64) -> Result<Vec<CheckpointRecord>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select size, root, note, published_at from log_checkpoint where size > $1 order by size limit $2")
                    .bind(after)
                    .bind(limit),
            )
            .await?;
        rows.iter().map(decode_checkpoint).collect()
    }

    async fn publish_receipt_key(&self, kid: &[u8; 32], cose_key: &[u8], now: DateTime<Utc>) -> Result<()> {
        self.db()
            .execute(
                sql("insert into receipt_key (kid, cose_key, first_used_at) values ($1, $2, $3) on conflict (kid) do nothing")
                    .bind(kid.as_slice())
                    .bind(cose_key)
                    .bind(now),
            )
            .await?;
        Ok(())
    }

    async fn receipt_keys(&self) -> Result<Vec<Vec<u8>>> {
        let rows = self.db().fetch_all(sql("select cose_key from receipt_key order by first_used_at, kid")).await?;
        rows.iter().map(|row| row.get::<Vec<u8>>("cose_key")).collect()
    }

    async fn checkpoint(&self, size: i64) -> Result<Option<CheckpointRecord>> {
        let row =
            self.db().fetch_optional(sql("select size, root, note, published_at from log_checkpoint where size = $1").bind(size)).await?;
        row.as_ref().map(decode_checkpoint).transpose()
    }

    async fn witness_size(&self, witness: &str) -> Result<i64> {
        let size: Option<i64> = self.db().scalar_optional(sql("select size from log_witness where witness = $1").bind(witness)).await?;
        Ok(size.unwrap_or(0))
    }

    async fn set_witness_size(&self, witness: &str, size: i64, now: DateTime<Utc>) -> Result<()> {
        self.db().execute(witness_holds(witness, size, now)).await?;
        Ok(())
    }

    async fn record_cosignatures(&self, cosignatures: &[CosignatureRecord], now: DateTime<Utc>) -> Result<()> {
        if cosignatures.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for c in cosignatures {
            tx.execute(
                sql("insert into log_cosignature (size, witness, line, signed_at) values ($1, $2, $3, $4)
                     on conflict (size, witness) do update set line = excluded.line, signed_at = excluded.signed_at")
                .bind(c.size)
                .bind(c.witness.as_str())
                .bind(c.line.as_str())
                .bind(c.signed_at),
            )
            .await?;
            tx.execute(witness_holds(&c.witness, c.size, now)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn cosignatures(&self, size: i64, witnesses: &[String]) -> Result<Vec<CosignatureRecord>> {
        if witnesses.is_empty() {
            return Ok(Vec::new());
        }
        let mut query = sql("select size, witness, line, signed_at from log_cosignature where size = $1 and witness in ").bind(size);
        push_witnesses(&mut query, witnesses);
        query.push(" order by witness");
        let rows = self.db().fetch_all(query).await?;
        rows.iter()
            .map(|row| {
                Ok(CosignatureRecord {
                    size: row.get("size")?,
                    witness: row.get("witness")?,
                    line: row.get("line")?,
                    signed_at: row.get("signed_at")?,
                })
            })
            .collect()
    }

    async fn newest_witnessed_checkpoint(&self, witnesses: &[String], quorum: i64) -> Result<Option<CheckpointRecord>> {
        let Ok(quorum) = usize::try_from(quorum) else { return Ok(None) };
        if witnesses.is_empty() || quorum == 0 {
            return Ok(None);
        }
        // No checkpoint above the quorum-th largest size the witnesses hold
        // can have the quorum: the search starts there, newest first, and
        // usually ends at once.
        let mut query = sql("select size from log_witness where witness in ");
        push_witnesses(&mut query, witnesses);
        let mut sizes: Vec<i64> = self.db().scalar_all(query).await?;
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&ceiling) = sizes.get(quorum - 1) else { return Ok(None) };
        let mut query = sql("select c.size, c.root, c.note, c.published_at from log_checkpoint c
             where c.size <= $1 and (select count(*) from log_cosignature s where s.size = c.size and s.witness in ")
        .bind(ceiling);
        push_witnesses(&mut query, witnesses);
        query.push(") >= ").push_bind(quorum as i64).push(" order by c.size desc limit 1");
        let row = self.db().fetch_optional(query).await?;
        row.as_ref().map(decode_checkpoint).transpose()
    }

    async fn record_timestamp(&self, t: &TimestampRecord, now: DateTime<Utc>) -> Result<()> {
        self.db()
            .execute(
                sql("insert into log_timestamp (size, tsa, token, gen_time, stamped_at) values ($1, $2, $3, $4, $5)
                     on conflict (size) do nothing")
                .bind(t.size)
                .bind(t.tsa.as_str())
                .bind(t.token.as_slice())
                .bind(t.gen_time)
                .bind(now),
            )
            .await?;
        Ok(())
    }

    async fn timestamp(&self, size: i64) -> Result<Option<TimestampRecord>> {
        let row = self.db().fetch_optional(sql("select size, tsa, token, gen_time from log_timestamp where size = $1").bind(size)).await?;
        row.map(|row| {
            Ok(TimestampRecord { size: row.get("size")?, tsa: row.get("tsa")?, token: row.get("token")?, gen_time: row.get("gen_time")? })
        })
        .transpose()
    }

    async fn declared_level_count(&self, level: &str, from: i64) -> Result<i64> {
        self.db()
            .scalar(
                sql("select count(*) from log_entry e join declaration d on d.dd_id = e.dd_id
                     where e.leaf_index >= $1 and d.ee_integrity_verification_level = $2")
                .bind(from)
                .bind(level),
            )
            .await
    }

    async fn newest_timestamped_checkpoint(&self) -> Result<Option<CheckpointRecord>> {
        let row = self
            .db()
            .fetch_optional(sql("select c.size, c.root, c.note, c.published_at from log_checkpoint c
                 where c.size = (select max(size) from log_timestamp)"))
            .await?;
        row.as_ref().map(decode_checkpoint).transpose()
    }
}

/// Records that `witness` holds this log's tree of `size`.
fn witness_holds(witness: &str, size: i64, now: DateTime<Utc>) -> engine::Query<'_> {
    sql("insert into log_witness (witness, size, updated_at) values ($1, $2, $3)
         on conflict (witness) do update set size = excluded.size, updated_at = excluded.updated_at")
    .bind(witness)
    .bind(size)
    .bind(now)
}

/// Appends `(…)`, the witnesses' keys as parameters.
fn push_witnesses<'q>(query: &mut engine::Query<'q>, witnesses: &'q [String]) {
    query.push("(");
    for (i, witness) in witnesses.iter().enumerate() {
        query.push(if i == 0 { "" } else { ", " }).push_bind(witness.as_str());
    }
    query.push(")");
}

fn decode_state(row: &impl Row) -> Result<LogState> {
    let edge: Vec<u8> = row.get("edge")?;
    if !edge.len().is_multiple_of(32) {
        return Err(StoreError::Corrupt("log_state.edge is not a list of hashes".into()));
    }
    Ok(LogState {
        size: row.get("size")?,
        root: hash32("root", row.get("root")?)?,
        edge: edge.chunks(32).map(|c| c.try_into().expect("32-byte chunks")).collect(),
    })
}

fn decode_checkpoint(row: &impl Row) -> Result<CheckpointRecord> {
    Ok(CheckpointRecord {
        size: row.get("size")?,
        root: hash32("root", row.get("root")?)?,
        note: row.get("note")?,
        published_at: row.get("published_at")?,
    })
}

/// The log's integration in `tx`: up to `max` pending leaves (read from
/// `from` on, see below) planned by `planner` and written, the head moved;
/// the new head, and where a full batch's read ended (`None` if it was not
/// full). `None` if nothing was pending.
#[allow(clippy::too_many_arguments)]
async fn integrate<X: Exec>(
    tx: &mut X,
    for_update: &str,
    rows_per_statement: impl Fn(usize) -> usize,
    from: Option<DateTime<Utc>>,
    max: i64,
    now: DateTime<Utc>,
    planner: Planner<'_>,
) -> Result<Option<(LogState, Option<DateTime<Utc>>)>> {
    // The head's row lock serializes integrators: whoever holds it
    // plans from the head as stored, so two integrators cannot fork.
    let row = tx.fetch_one(sql(format!("select size, root, edge from log_state where log_state_id = 0{for_update}"))).await?;
    let state = decode_state(&row)?;
    // PostgreSQL leaves the entries this integrator deleted in the order
    // index, dead, until vacuum comes: a read from the start of the
    // index walks all of them, and while a backlog of millions drains
    // that walk costs more than the rest of the batch (130 ms a read at
    // ten million). So while a backlog drains (the last batch was
    // full), a read begins five seconds before where this host's last
    // one ended, past them. A leaf committed later than that after its
    // enqueuing time is not lost: whenever the bounded read comes back
    // short, the read from the start follows (and, the backlog drained,
    // is the only read again).
    // (Only set on PostgreSQL, by the caller.)
    // Declarations' leaves and registered statements' wait side by side
    // and enter the one tree in the order they came (a declaration
    // first at the same instant): each is read by its own index, up to
    // `max`, and the two merged.
    let read = |from: Option<DateTime<Utc>>, statements: bool| {
        let mut q = if statements {
            sql("select entry_id, leaf_data, registered_at as enqueued_at from scitt_entry where leaf_index is null")
        } else {
            sql("select dd_id, leaf_data, enqueued_at from log_pending where 1 = 1")
        };
        if let Some(from) = from {
            q.push(if statements { " and registered_at >= " } else { " and enqueued_at >= " }).push_bind(from - Duration::seconds(5));
        }
        q.push(if statements { " order by registered_at, entry_id limit " } else { " order by enqueued_at, dd_id limit " }).push_bind(max);
        q
    };
    let mut pending: Vec<(DateTime<Utc>, PendingLeaf)> = Vec::new();
    for from in [from, None] {
        if from.is_none() && pending.len() as i64 >= max {
            break;
        }
        pending.clear();
        for row in tx.fetch_all(read(from, false)).await? {
            let owner = LeafOwner::Declaration(row.get("dd_id")?);
            pending.push((row.get("enqueued_at")?, PendingLeaf { owner, leaf_data: row.get("leaf_data")? }));
        }
        for row in tx.fetch_all(read(from, true)).await? {
            let owner = LeafOwner::Statement(hash32("entry_id", row.get("entry_id")?)?);
            pending.push((row.get("enqueued_at")?, PendingLeaf { owner, leaf_data: row.get("leaf_data")? }));
        }
        if from.is_none() {
            break;
        }
    }
    if pending.is_empty() {
        return Ok(None);
    }
    pending.sort_by(|(a, x), (b, y)| {
        let key = |owner: &LeafOwner| match owner {
            LeafOwner::Declaration(id) => (0, id.as_bytes().to_vec()),
            LeafOwner::Statement(id) => (1, id.to_vec()),
        };
        a.cmp(b).then_with(|| key(&x.owner).cmp(&key(&y.owner)))
    });
    pending.truncate(max as usize);
    let last = pending.last().expect("not empty").0;
    let batch: Vec<PendingLeaf> = pending.into_iter().map(|(_, leaf)| leaf).collect();
    let plan = planner(&state, &batch).map_err(StoreError::Corrupt)?;
    let declarations: Vec<(i64, Uuid, &Vec<u8>)> = plan
        .entries
        .iter()
        .filter_map(|(index, owner, leaf)| match owner {
            LeafOwner::Declaration(dd_id) => Some((*index, *dd_id, leaf)),
            LeafOwner::Statement(_) => None,
        })
        .collect();
    for (index, owner, _) in &plan.entries {
        if let LeafOwner::Statement(entry_id) = owner {
            tx.execute(
                sql("update scitt_entry set leaf_index = $1, integrated_at = $2 where entry_id = $3 and leaf_index is null")
                    .bind(*index)
                    .bind(now)
                    .bind(entry_id.as_slice()),
            )
            .await?;
        }
    }
    for chunk in declarations.chunks(rows_per_statement(4)) {
        let mut insert = sql("insert into log_entry (leaf_index, dd_id, leaf_data, integrated_at) values ");
        for (i, (index, dd_id, leaf)) in chunk.iter().enumerate() {
            insert.push(if i == 0 { "(" } else { ", (" });
            insert.push_bind(*index).push(", ").push_bind(*dd_id).push(", ").push_bind(leaf.as_slice()).push(", ").push_bind(now).push(")");
        }
        tx.execute(insert).await?;
    }
    for chunk in plan.hashes.chunks(rows_per_statement(2)) {
        let mut insert = sql("insert into log_hash (hash_index, hash) values ");
        for (i, (index, hash)) in chunk.iter().enumerate() {
            insert.push(if i == 0 { "(" } else { ", (" });
            insert.push_bind(*index).push(", ").push_bind(hash).push(")");
        }
        tx.execute(insert).await?;
    }
    let pending: Vec<Uuid> = batch
        .iter()
        .filter_map(|leaf| match leaf.owner {
            LeafOwner::Declaration(dd_id) => Some(dd_id),
            LeafOwner::Statement(_) => None,
        })
        .collect();
    for chunk in pending.chunks(rows_per_statement(1)) {
        let mut delete = sql("delete from log_pending where dd_id in (");
        for (i, dd_id) in chunk.iter().enumerate() {
            delete.push(if i == 0 { "" } else { ", " }).push_bind(*dd_id);
        }
        delete.push(")");
        tx.execute(delete).await?;
    }
    let edge: Vec<u8> = plan.state.edge.iter().flatten().copied().collect();
    tx.execute(
        sql("update log_state set size = $1, root = $2, edge = $3, updated_at = $4 where log_state_id = 0 and size = $5")
            .bind(plan.state.size)
            .bind(&plan.state.root)
            .bind(edge)
            .bind(now)
            .bind(state.size),
    )
    .await?;
    Ok(Some((plan.state, (batch.len() as i64 >= max).then_some(last))))
}
