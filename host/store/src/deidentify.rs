//! De-identification: records past their retention end become statistics.
//!
//! A batch is one transaction. It takes the records whose retention ended
//! (oldest end first; a confirmed one only once the log integrated it and
//! ARA folded it, so its counts are known), moves their shared ARA counts
//! from their agents' rows into id-free monthly buckets (their own-only
//! counts are dropped: nobody may see them any more), and rewrites each row
//! so that nothing in it names the agent, the request, the EE, the lineage,
//! the parent, the salt, the template or the decision time. Usage, payment
//! and Earned ledger rows keep their amounts and lose the record's id (the
//! nil UUID stands in). A bilateral agreement one of whose records goes is
//! deleted: it pairs two agents. The row itself stays, for the record's log
//! leaf points at it, but under a key derived from its id by a one-way hash
//! (`deidentified_key`), and every link to it (the leaf, the parent and
//! lineage group of a record still kept) is moved to that key: the id is
//! found nowhere, and whoever presents it is told 410.
//!
//! Interrupted anywhere, a batch leaves nothing behind (one transaction);
//! run by two hosts at once, a record is taken by one only (the rewrite is
//! conditional on the row not being de-identified yet, and a batch that
//! finds fewer rows to rewrite than it read rolls back).

use std::collections::HashMap;

use anchor_domain::ara::{Dimension, Visibility, contributions, day_of};
use anchor_domain::retention::deidentified_key;
use async_trait::async_trait;
use chrono::{DateTime, Datelike, Utc};
use uuid::Uuid;

use crate::ara::add_counts;
use crate::engine::{Engine, Exec, Query, Row, Transaction, sql};
use crate::rows::decode_declaration;
use crate::*;

/// Old ids and their keys, bound once in a statement and named as often as it needs.
struct Rekey {
    pairs: Vec<(String, String)>,
}

impl Rekey {
    fn new(query: &mut Query<'_>, ids: &[Uuid]) -> Rekey {
        Rekey { pairs: ids.iter().map(|id| (query.placeholder(*id), query.placeholder(deidentified_key(*id)))).collect() }
    }

    /// `case COLUMN when $old then $key … end`.
    fn case(&self, column: &str) -> String {
        let mut case = format!("case {column}");
        for (old, key) in &self.pairs {
            case.push_str(&format!(" when {old} then {key}"));
        }
        case.push_str(" end");
        case
    }

    /// The old ids' placeholders, comma-separated.
    fn ids(&self) -> String {
        self.pairs.iter().map(|(old, _)| old.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// UTC month number: year * 12 + month - 1.
pub fn month_of(t: DateTime<Utc>) -> i32 {
    t.year() * 12 + t.month0() as i32
}

const DUE: &str = "d.retention_expires_at is not null and d.retention_expires_at <= $1 and d.deidentified_at is null \
     and ((d.confirmed_at is null and (d.payment_deadline is null or d.payment_deadline < $1)) \
          or exists (select 1 from log_entry l where l.dd_id = d.dd_id \
                     and l.leaf_index < (select next_leaf from ara_fold where ara_fold_id = 0)))";

#[async_trait]
impl<E: Engine> DeidentifyStore for SqlStore<E> {
    async fn deidentify_due(&self, now: DateTime<Utc>, limit: i64) -> Result<Deidentified> {
        let mut tx = self.begin_write().await?;
        let select =
            format!("select d.* from declaration d where {DUE} order by d.retention_expires_at, d.dd_id limit $2{}", self.db.for_update());
        let rows = tx.fetch_all(sql(select).bind(now).bind(limit)).await?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(Deidentified::default());
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut confirmed = Vec::new();
        let mut agreements = Vec::new();
        let mut agents = Vec::new();
        for row in &rows {
            let stored = decode_declaration(row)?;
            ids.push(stored.declaration.dd_id);
            if let Some(agreement) = stored.agreement_id {
                agreements.push(agreement);
            }
            if stored.confirmed_at.is_some() {
                agents.push(stored.declaration.agent_id);
                confirmed.push(stored);
            }
        }
        agents.sort_unstable();
        agents.dedup();

        // ARA: what each confirmed record added to its agent's rows is taken
        // back (its band positions as they were kept when it was folded), and
        // its shared counts go to the id-free month of its anchoring.
        let mut bands: HashMap<Uuid, Vec<(Dimension, String, Visibility)>> = HashMap::new();
        if !confirmed.is_empty() {
            let mut select = sql("select dd_id, dimension, value, visibility from ara_band where ");
            let folded_ids: Vec<Uuid> = confirmed.iter().map(|s| s.declaration.dd_id).collect();
            select.push_in("dd_id", &folded_ids);
            for row in tx.fetch_all(select).await? {
                let dimension: String = row.get("dimension")?;
                let visibility: i32 = row.get("visibility")?;
                let (Some(dimension), Some(visibility)) = (Dimension::parse(&dimension), Visibility::from_code(visibility)) else {
                    return Err(StoreError::Corrupt(format!("ara_band holds an unknown dimension {dimension} or visibility {visibility}")));
                };
                bands.entry(row.get("dd_id")?).or_default().push((dimension, row.get("value")?, visibility));
            }
        }
        let mut taken: HashMap<(Uuid, i32, Dimension, String, Visibility), i64> = HashMap::new();
        let mut months: HashMap<(i32, Dimension, String), i64> = HashMap::new();
        for stored in &confirmed {
            let d = &stored.declaration;
            let (day, month) = (day_of(d.anchored_at), month_of(d.anchored_at));
            let own = contributions(d).into_iter().map(|c| (c.dimension, c.value, c.visibility));
            let banded = bands.remove(&d.dd_id).unwrap_or_default();
            for (dimension, value, visibility) in own.chain(banded) {
                if visibility == Visibility::Shared {
                    *months.entry((month, dimension, value.clone())).or_default() += 1;
                }
                *taken.entry((d.agent_id, day, dimension, value, visibility)).or_default() += 1;
            }
        }
        let taken: Vec<DayCount> = taken
            .into_iter()
            .map(|((agent_id, day, dimension, value, visibility), n)| DayCount { agent_id, day, dimension, value, visibility, n: -n })
            .collect();
        add_counts(&mut tx, self.db.rows_per_statement(7), self.db.arrays(), &taken).await?;
        // A count taken below zero can only be one the fold never added
        // (a database changed by hand): it ends at zero, as every emptied key.
        for table in ["ara_agent_day", "ara_agent_total"] {
            for chunk in agents.chunks(self.db.rows_per_statement(1)) {
                let mut delete = sql(format!("delete from {table} where n <= 0 and "));
                delete.push_in("agent_id", chunk);
                tx.execute(delete).await?;
            }
        }
        let months: Vec<_> = months.into_iter().collect();
        for chunk in months.chunks(self.db.rows_per_statement(4)) {
            let mut insert = sql("insert into ara_deidentified_month (month, dimension, value, n) values ");
            for (i, ((month, dimension, value), n)) in chunk.iter().enumerate() {
                insert.push(if i == 0 { "(" } else { ", (" });
                insert.push_bind(*month).push(", ").push_bind(dimension.as_str()).push(", ").push_bind(value.as_str());
                insert.push(", ").push_bind(*n).push(")");
            }
            insert.push(" on conflict (month, dimension, value) do update set n = ara_deidentified_month.n + excluded.n");
            tx.execute(insert).await?;
        }
        let mut delete = sql("delete from ara_band where ");
        delete.push_in("dd_id", &ids);
        tx.execute(delete).await?;

        // Money keeps its amounts and loses the record's id.
        let domain = SubjectDomain::Declaration.as_str();
        let mut usage =
            sql("update usage_entry set dd_id = null, subject_id = $1 where subject_domain = $2 and ").bind(Uuid::nil()).bind(domain);
        usage.push_in("subject_id", &ids);
        tx.execute(usage).await?;
        let mut payments =
            sql("update x402_payment set dd_id = null, subject_id = $1 where subject_domain = $2 and ").bind(Uuid::nil()).bind(domain);
        payments.push_in("subject_id", &ids);
        tx.execute(payments).await?;
        let mut ledger = sql("update earned_entry set reference_id = $1 where reference_kind = $2 and ").bind(Uuid::nil()).bind(domain);
        ledger.push_in("reference_id", &ids);
        tx.execute(ledger).await?;

        // An agreement pairs two agents: it goes with either of its records.
        agreements.sort_unstable();
        agreements.dedup();
        if !agreements.is_empty() {
            let mut detach = sql("update declaration set agreement_id = null where ");
            detach.push_in("agreement_id", &agreements);
            tx.execute(detach).await?;
            let mut delete = sql("delete from bilateral_agreement where ");
            delete.push_in("agreement_id", &agreements);
            tx.execute(delete).await?;
        }
        // Last, the rows themselves, re-keyed (see `deidentified_key`) with
        // every link to them: the log leaf, and the parent and lineage group
        // of any record still kept. The rewrite is conditional: a record
        // another host took meanwhile is not taken twice.
        let defer = match self.db.name() {
            "postgres" => "set constraints log_entry_dd_id_fkey, declaration_parent_dd_id_fkey deferred",
            _ => "pragma defer_foreign_keys = on",
        };
        tx.execute(sql(defer)).await?;
        let mut rewritten = 0;
        for chunk in ids.chunks(self.db.rows_per_statement(2).saturating_sub(4).max(1)) {
            let mut rewrite = sql("update declaration set ");
            let map = Rekey::new(&mut rewrite, chunk);
            let (nil, salt, at) = (rewrite.placeholder(Uuid::nil()), rewrite.placeholder(vec![0u8; 32]), rewrite.placeholder(now));
            let key = map.case("dd_id");
            rewrite.push(&format!(
                "dd_id = {key}, request_id = {key}, ee_id = {key}, lineage_group_id = {key}, agent_id = {nil}, parent_dd_id = null, \
                 salt = {salt}, trace_key = null, selection_scope = null, decision_at = null, tpl_decision_class = null, tpl_decision_scale_value = null, \
                 tpl_decision_scale_unit = null, tpl_target_class = null, tpl_call_chain = null, tpl_self_classification = null, \
                 tpl_decision_trigger = null, tpl_human_involvement = null, agreement_id = null, deidentified_at = {at} \
                 where deidentified_at is null and dd_id in ({})",
                map.ids()
            ));
            rewritten += tx.execute(rewrite).await?;
            for (table, column) in [("declaration", "parent_dd_id"), ("declaration", "lineage_group_id"), ("log_entry", "dd_id")] {
                let mut relink = sql(format!("update {table} set {column} = "));
                let map = Rekey::new(&mut relink, chunk);
                relink.push(&format!("{} where {column} in ({})", map.case(column), map.ids()));
                tx.execute(relink).await?;
            }
        }
        if rewritten != ids.len() as u64 {
            tx.rollback().await?;
            return Ok(Deidentified::default());
        }
        tx.commit().await?;
        Ok(Deidentified { records: ids.len(), folded: confirmed.len(), agreements: agreements.len() })
    }

    async fn is_deidentified(&self, dd_id: Uuid) -> Result<bool> {
        let key = deidentified_key(dd_id);
        let n: i64 =
            self.db().scalar(sql("select count(*) from declaration where dd_id = $1 and deidentified_at is not null").bind(key)).await?;
        Ok(n > 0)
    }

    async fn deidentify_backlog(&self, now: DateTime<Utc>) -> Result<i64> {
        self.db().scalar(sql(format!("select count(*) from declaration d where {DUE}")).bind(now)).await
    }
}
