//! ARA: the aggregate model statistics are read from, the releases cut from
//! it, and the log of observations made.
//!
//! Confirmed declarations are folded into `ara_agent_day` (per agent, UTC day,
//! dimension and value) and `ara_agent_total` (the same, all time) once, in
//! the verifiable log's order: the fold's watermark is a leaf index, and the
//! integrator gives every confirmed declaration a dense one. Cross-agent
//! statistics read only counts of visibility 0; they never name a record or an
//! agent.

use std::collections::BTreeMap;

use anchor_domain::MilliDac;
use anchor_domain::ara::{Dimension, Visibility, Window};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, Value, sql};
use crate::rows::decode_declaration;
use crate::*;

#[async_trait]
impl<E: Engine> AraStore for SqlStore<E> {
    async fn record_observation(&self, o: &NewObservation) -> Result<()> {
        self.db()
            .execute(Query::insert(
                "ara_observation",
                vec![
                    ("observation_id", o.observation_id.value()),
                    ("observer_agent_id", o.observer_agent_id.value()),
                    ("target_agent_id", o.target_agent_id.value()),
                    ("kind", o.kind.value()),
                    ("resolution_level", o.resolution_level.value()),
                    ("base_milli", o.base.milli().value()),
                    ("premium_milli", o.premium.milli().value()),
                    ("premium_source", o.premium_source.map(|s| s.as_str()).value()),
                    ("payment_id", o.payment_id.value()),
                    ("observed_at", o.observed_at.value()),
                    ("pricing_version", o.priced_by.version.as_str().value()),
                    ("pricing_sha256", o.priced_by.sha256.as_str().value()),
                ],
            ))
            .await?;
        Ok(())
    }

    async fn unfolded(&self, limit: i64) -> Result<Vec<Unfolded>> {
        let rows = self
            .db()
            .fetch_all(
                // The leaves first, limited: the join then plans for `limit`
                // rows, where a limit over the join let PostgreSQL plan for a
                // third of the log and start parallel workers for each read
                // (31 ms a read at ten million records, 3 ms this way).
                sql("select l.leaf_index, d.* from (select leaf_index, dd_id from log_entry \
                     where leaf_index >= (select next_leaf from ara_fold where ara_fold_id = 0) order by leaf_index limit $1) l \
                     join declaration d on d.dd_id = l.dd_id order by l.leaf_index")
                .bind(limit),
            )
            .await?;
        rows.iter().map(|row| Ok(Unfolded { leaf_index: row.get("leaf_index")?, declaration: decode_declaration(row)? })).collect()
    }

    async fn fold(&self, from_leaf: i64, to_leaf: i64, counts: &[DayCount], bands: &[BandCount]) -> Result<bool> {
        let (rows, arrays) = (|columns| self.db.rows_per_statement(columns), self.db.arrays());
        // SQLite: run whole while the write lock is held (`direct::Writer`).
        if let Some(done) = self.write_direct(|tx| direct::run_now(fold_steps(tx, rows, arrays, from_leaf, to_leaf, counts, bands))) {
            return done;
        }
        let mut tx = self.begin_write().await?;
        if !fold_steps(&mut tx, rows, arrays, from_leaf, to_leaf, counts, bands).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn fold_progress(&self) -> Result<(i64, i64)> {
        let row = self
            .db()
            .fetch_one(sql("select (select next_leaf from ara_fold where ara_fold_id = 0) as next_leaf, \
                            (select size from log_state where log_state_id = 0) as size"))
            .await?;
        Ok((row.get("next_leaf")?, row.get("size")?))
    }

    async fn branch_one_sample(
        &self,
        agent_id: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        except: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<SampleRow>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select dd_id, tpl_decision_scale_value, tpl_decision_scale_unit, tpl_decision_class, tpl_target_class, \
                     decision_at, anchored_at, dac_amount_milli, base_fee_milli from declaration \
                     where agent_id = $1 and anchored_at >= $2 and anchored_at < $3 and content_inclusion = $4 \
                     and confirmed_at is not null and dd_id <> $5 order by anchored_at desc limit $6")
                .bind(agent_id)
                .bind(from)
                .bind(to)
                .bind(true)
                .bind(except.unwrap_or(Uuid::nil()))
                .bind(limit),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let total: i64 = row.get("dac_amount_milli")?;
                let base: i64 = row.get("base_fee_milli")?;
                Ok(SampleRow {
                    dd_id: row.get("dd_id")?,
                    scale_value: row.get("tpl_decision_scale_value")?,
                    scale_unit: row.get("tpl_decision_scale_unit")?,
                    decision_class: row.get("tpl_decision_class")?,
                    target_class: row.get("tpl_target_class")?,
                    decision_at: row.get("decision_at")?,
                    anchored_at: row.get("anchored_at")?,
                    premium: MilliDac(total - base),
                })
            })
            .collect()
    }

    async fn predominant(&self, dimension: Dimension, window: Window) -> Result<Vec<(String, i64)>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select value, count(*) as agents from (\
                       select agent_id, value, row_number() over (partition by agent_id order by sum(n) desc, value) as place \
                       from ara_agent_day where dimension = $1 and visibility = 0 and day >= $2 and day < $3 \
                       group by agent_id, value) ranked \
                     where place = 1 group by value order by value")
                .bind(dimension.as_str())
                .bind(window.start())
                .bind(window.end),
            )
            .await?;
        rows.iter().map(|r| Ok((r.get("value")?, r.get("agents")?))).collect()
    }

    async fn window_totals(&self, window: Window, cap: i64) -> Result<WindowTotals> {
        let row = self
            .db()
            .fetch_one(
                sql("select count(*) as agents, cast(coalesce(sum(case when n > $1 then $1 else n end), 0) as bigint) as capped from (\
                       select agent_id, sum(n) as n from ara_agent_day \
                       where dimension = 'all' and visibility = 0 and day >= $2 and day < $3 group by agent_id) per_agent")
                .bind(cap)
                .bind(window.start())
                .bind(window.end),
            )
            .await?;
        Ok(WindowTotals { agents: row.get("agents")?, capped_declarations: row.get("capped")? })
    }

    async fn activity(&self, window: Window) -> Result<Vec<(i64, i64)>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select n, count(*) as agents from (\
                       select agent_id, cast(sum(n) as bigint) as n from ara_agent_day \
                       where dimension = 'all' and visibility = 0 and day >= $1 and day < $2 group by agent_id) per_agent \
                     group by n order by n")
                .bind(window.start())
                .bind(window.end),
            )
            .await?;
        rows.iter().map(|r| Ok((r.get("n")?, r.get("agents")?))).collect()
    }

    async fn release(&self, kind: &str, window: Window) -> Result<Option<String>> {
        self.db()
            .scalar_optional(
                sql("select body from ara_release where kind = $1 and window_days = $2 and window_end = $3")
                    .bind(kind)
                    .bind(window.days)
                    .bind(window.end),
            )
            .await
    }

    async fn save_release_within_budget(
        &self,
        kind: &str,
        window: Window,
        body: &str,
        epsilon_micro: i64,
        budget_micro: i64,
        at: DateTime<Utc>,
    ) -> Result<SavedRelease> {
        let mut tx = self.begin_write().await?;
        let inserted = tx
            .execute(
                sql("insert into ara_release (kind, window_days, window_end, body, released_at) values ($1, $2, $3, $4, $5) \
                     on conflict (kind, window_days, window_end) do nothing")
                .bind(kind)
                .bind(window.days)
                .bind(window.end)
                .bind(body)
                .bind(at),
            )
            .await?;
        if inserted == 0 {
            drop(tx);
            let stored = self.release(kind, window).await?.ok_or_else(|| StoreError::Corrupt(format!("release {kind} vanished")))?;
            return Ok(SavedRelease::Stored(stored));
        }
        // Each day of the window is charged first, in ascending order: the
        // upserts lock the days' rows (a concurrent release of another window
        // of the kind, sharing days, waits for this one or went first and is
        // counted), and ascending order keeps two of them from deadlocking.
        // Only then is the ledger read; past the budget, the transaction
        // rolls back and nothing was charged.
        for day in window.start()..window.end {
            tx.execute(
                sql("insert into ara_epsilon (kind, day, epsilon_micro) values ($1, $2, $3) \
                     on conflict (kind, day) do update set epsilon_micro = ara_epsilon.epsilon_micro + excluded.epsilon_micro")
                .bind(kind)
                .bind(day)
                .bind(epsilon_micro),
            )
            .await?;
        }
        let ledger: i64 = tx
            .scalar(
                sql("select cast(coalesce(max(epsilon_micro), 0) as bigint) from ara_epsilon where kind = $1 and day >= $2 and day < $3")
                    .bind(kind)
                    .bind(window.start())
                    .bind(window.end),
            )
            .await?;
        if ledger > budget_micro {
            // Rolled back with the transaction: nothing stored, nothing charged.
            return Ok(SavedRelease::OverBudget { spent_micro: ledger.saturating_sub(epsilon_micro) });
        }
        tx.commit().await?;
        Ok(SavedRelease::Stored(body.to_string()))
    }

    async fn epsilon_spent(&self, kind: &str, window: Window) -> Result<i64> {
        self.db()
            .scalar(
                sql("select cast(coalesce(max(epsilon_micro), 0) as bigint) from ara_epsilon where kind = $1 and day >= $2 and day < $3")
                    .bind(kind)
                    .bind(window.start())
                    .bind(window.end),
            )
            .await
    }

    async fn save_release(&self, kind: &str, window: Window, body: &str, at: DateTime<Utc>) -> Result<String> {
        self.db()
            .execute(
                sql("insert into ara_release (kind, window_days, window_end, body, released_at) values ($1, $2, $3, $4, $5) \
                     on conflict (kind, window_days, window_end) do nothing")
                .bind(kind)
                .bind(window.days)
                .bind(window.end)
                .bind(body)
                .bind(at),
            )
            .await?;
        self.release(kind, window).await?.ok_or_else(|| StoreError::Corrupt(format!("release {kind} vanished")))
    }

    async fn agent_totals(&self, agent_id: Uuid, own: bool) -> Result<Vec<AgentCount>> {
        let rows = self
            .db()
            .fetch_all(
                sql("select dimension, value, cast(sum(n) as bigint) as n, min(first_day) as first_day, max(last_day) as last_day \
                     from ara_agent_total where agent_id = $1 and visibility <= $2 group by dimension, value order by dimension, value")
                .bind(agent_id)
                .bind(if own { Visibility::Own.code() } else { Visibility::Shared.code() }),
            )
            .await?;
        rows.iter().map(decode_count).collect::<Result<Vec<_>>>().map(|counts| counts.into_iter().flatten().collect())
    }

    async fn agent_days(&self, agent_id: Uuid, from_day: i32, to_day: i32, dimensions: &[Dimension], own: bool) -> Result<Vec<AgentCount>> {
        let mut query = sql("select dimension, value, cast(sum(n) as bigint) as n, day as first_day, day as last_day from ara_agent_day \
                             where agent_id = ");
        query.push_bind(agent_id).push(" and day >= ").push_bind(from_day).push(" and day < ").push_bind(to_day);
        query.push(" and visibility <= ").push_bind(if own { Visibility::Own.code() } else { Visibility::Shared.code() });
        query.push(" and dimension in (");
        for (i, d) in dimensions.iter().enumerate() {
            if i > 0 {
                query.push(", ");
            }
            query.push_bind(d.as_str());
        }
        query.push(") group by day, dimension, value order by day, dimension, value");
        let rows = self.db().fetch_all(query).await?;
        rows.iter().map(decode_count).collect::<Result<Vec<_>>>().map(|counts| counts.into_iter().flatten().collect())
    }
}

/// A count row; a dimension this version does not know (a newer host folded
/// it) is skipped, not an error.
/// Adds `counts` (negative ones take counts back) to the agents' daily and
/// all-time rows, a multi-row statement per chunk of `rows` keys.
/// An all-time row's key: agent, dimension, value, visibility.
type TotalKey<'a> = (Uuid, &'a str, &'a str, i32);

/// Rows of counts one array statement carries (PostgreSQL).
const COUNTS_PER_ARRAY_STATEMENT: usize = 20_000;

/// A fold's writes in `tx`: the fold moved from `from_leaf` to `to_leaf`
/// (`false`, and nothing written, if another fold moved it first), then the
/// counts added and the bands recorded.
async fn fold_steps<X: Exec>(
    tx: &mut X,
    rows: impl Fn(usize) -> usize,
    arrays: bool,
    from_leaf: i64,
    to_leaf: i64,
    counts: &[DayCount],
    bands: &[BandCount],
) -> Result<bool> {
    let moved = tx
        .execute(sql("update ara_fold set next_leaf = $1 where ara_fold_id = 0 and next_leaf = $2").bind(to_leaf).bind(from_leaf))
        .await?;
    if moved != 1 {
        return Ok(false);
    }
    add_counts(tx, rows(7), arrays, counts).await?;
    for chunk in bands.chunks(rows(4)) {
        let mut insert = sql("insert into ara_band (dd_id, dimension, value, visibility) values ");
        for (i, b) in chunk.iter().enumerate() {
            insert.push(if i == 0 { "(" } else { ", (" });
            insert.push_bind(b.dd_id).push(", ").push_bind(b.dimension.as_str()).push(", ").push_bind(b.value.as_str());
            insert.push(", ").push_bind(b.visibility.code()).push(")");
        }
        insert.push(" on conflict (dd_id, dimension) do nothing");
        tx.execute(insert).await?;
    }
    Ok(true)
}

/// Adds `counts` to the per-day and all-time tables (see [`upsert_counts`]
/// for how the rows are sent).
pub(crate) async fn add_counts<X: Exec>(tx: &mut X, rows: usize, arrays: bool, counts: &[DayCount]) -> Result<()> {
    let days = counts
        .iter()
        .map(|c| {
            vec![
                ("agent_id", c.agent_id.value()),
                ("day", c.day.value()),
                ("dimension", c.dimension.as_str().value()),
                ("value", c.value.as_str().value()),
                ("visibility", c.visibility.code().value()),
                ("n", c.n.value()),
            ]
        })
        .collect();
    upsert_counts(
        tx,
        "ara_agent_day",
        days,
        " on conflict (agent_id, day, dimension, value, visibility) do update set n = ara_agent_day.n + excluded.n",
        rows,
        arrays,
    )
    .await?;
    // One row per all-time key: a statement may not update a row twice
    // (PostgreSQL refuses it), and a batch counts one key on several days.
    let mut totals: BTreeMap<TotalKey, (i64, i32, i32)> = BTreeMap::new();
    for c in counts {
        let total = totals.entry((c.agent_id, c.dimension.as_str(), c.value.as_str(), c.visibility.code())).or_insert((0, c.day, c.day));
        *total = (total.0 + c.n, total.1.min(c.day), total.2.max(c.day));
    }
    let totals = totals
        .into_iter()
        .map(|((agent_id, dimension, value, visibility), (n, first_day, last_day))| {
            vec![
                ("agent_id", agent_id.value()),
                ("dimension", dimension.value()),
                ("value", value.value()),
                ("visibility", visibility.value()),
                ("n", n.value()),
                ("first_day", first_day.value()),
                ("last_day", last_day.value()),
            ]
        })
        .collect();
    upsert_counts(
        tx,
        "ara_agent_total",
        totals,
        " on conflict (agent_id, dimension, value, visibility) do update set n = ara_agent_total.n + excluded.n, \
         first_day = case when excluded.first_day < ara_agent_total.first_day then excluded.first_day else ara_agent_total.first_day end, \
         last_day = case when excluded.last_day > ara_agent_total.last_day then excluded.last_day else ara_agent_total.last_day end",
        rows,
        arrays,
    )
    .await
}

/// Inserts `rows` (the same named columns in each) into `table`, `conflict`
/// saying how a row already there is updated. Where the engine takes arrays
/// (PostgreSQL) the rows are one statement of a fixed text per
/// [`COUNTS_PER_ARRAY_STATEMENT`], its columns bound as arrays and planned
/// once per connection; elsewhere they are VALUES lists of `per_statement` rows.
async fn upsert_counts<'q, X: Exec>(
    tx: &mut X,
    table: &str,
    rows: Vec<Vec<(&'static str, Value<'q>)>>,
    conflict: &str,
    per_statement: usize,
    arrays: bool,
) -> Result<()> {
    let Some(first) = rows.first() else { return Ok(()) };
    let names: Vec<&str> = first.iter().map(|(name, _)| *name).collect();
    let head = format!("insert into {table} ({}) ", names.join(", "));
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<_> = rows.by_ref().take(if arrays { COUNTS_PER_ARRAY_STATEMENT } else { per_statement }).collect();
        let mut insert = sql(head.clone());
        if arrays {
            insert.push("select * from ");
            insert.push_unnest("counted", chunk).ok_or_else(|| StoreError::Unsupported(format!("{table} rows as arrays")))?;
        } else {
            insert.push("values ");
            for (i, row) in chunk.into_iter().enumerate() {
                insert.push(if i == 0 { "(" } else { ", (" });
                for (j, (_, value)) in row.into_iter().enumerate() {
                    if j > 0 {
                        insert.push(", ");
                    }
                    insert.push_value(value);
                }
                insert.push(")");
            }
        }
        insert.push(conflict);
        tx.execute(insert).await?;
    }
    Ok(())
}

fn decode_count(row: &impl Row) -> Result<Option<AgentCount>> {
    let dimension: String = row.get("dimension")?;
    let Some(dimension) = Dimension::parse(&dimension) else { return Ok(None) };
    Ok(Some(AgentCount {
        dimension,
        value: row.get("value")?,
        n: row.get("n")?,
        first_day: row.get("first_day")?,
        last_day: row.get("last_day")?,
    }))
}
