//! DUR: what agents spent (usage entries, the observation log, settlements)
//! and what their own branch-1 decisions declared, over a time range.
//! Every query names its agents and a range: the cost follows one agent's
//! own records, not the store's size.

use anchor_domain::MilliDac;
use anchor_domain::payments::SubjectDomain;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Engine, Exec, Query, Row, sql};
use crate::*;

/// The template columns DUR counts, by the name the reports use.
pub const TEMPLATE_COLUMNS: [(&str, &str); 5] = [
    ("decision_class", "tpl_decision_class"),
    ("target_class", "tpl_target_class"),
    ("decision_trigger", "tpl_decision_trigger"),
    ("human_involvement", "tpl_human_involvement"),
    ("self_classification", "tpl_self_classification"),
];

/// The union `tsl_lines` pages through.
const TSL_LINES: &str = "select * from ( \
       select usage_id as line_id, 'paid' as direction, amount_milli, subject_id as purchase_id, recorded_at as at \
       from usage_entry where agent_id = $1 and subject_domain = 'tsl_purchase' and recorded_at >= $2 and recorded_at < $3 \
     union all \
       select entry_id as line_id, 'received' as direction, amount_milli, reference_id as purchase_id, at \
       from earned_entry where agent_id = $1 and kind = 'credit' and reference_kind = 'tsl_purchase' and at >= $2 and at < $3 \
     ) lines where ($4 = 'all' or direction = $4)";

/// Appends `column in (…) and time >= from and time < to` for a span.
fn filter<'q>(span: &Span<'_>, query: &mut Query<'q>, agent_column: &str, time_column: &str) {
    query.push_in(agent_column, span.agents);
    query.push(" and ").push(time_column).push(" >= ").push_bind(span.from);
    query.push(" and ").push(time_column).push(" < ").push_bind(span.to);
}

#[async_trait]
impl<E: Engine> DurStore for SqlStore<E> {
    async fn tsl_lines(
        &self,
        agent_id: Uuid,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        direction: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<TslLine>, i64)> {
        let mut db = self.db();
        let direction = direction.unwrap_or("all");
        let total: i64 = db
            .scalar(sql(format!("select count(*) from ({TSL_LINES}) counted")).bind(agent_id).bind(from).bind(to).bind(direction))
            .await?;
        let rows = db
            .fetch_all(
                sql(format!("{TSL_LINES} order by at desc, line_id limit $5 offset $6"))
                    .bind(agent_id)
                    .bind(from)
                    .bind(to)
                    .bind(direction)
                    .bind(limit)
                    .bind(offset),
            )
            .await?;
        let lines = rows
            .iter()
            .map(|r| {
                Ok(TslLine {
                    line_id: r.get("line_id")?,
                    direction: r.get("direction")?,
                    amount: MilliDac(r.get("amount_milli")?),
                    purchase_id: r.get("purchase_id")?,
                    at: r.get("at")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((lines, total))
    }

    async fn spend(&self, span: &Span<'_>) -> Result<Vec<SpendLine>> {
        let mut query = sql("select subject_domain, payment_source, count(*) as entries, \
                             cast(coalesce(sum(amount_milli), 0) as bigint) as amount from usage_entry where ");
        filter(span, &mut query, "agent_id", "recorded_at");
        query.push(" group by subject_domain, payment_source order by subject_domain, payment_source");
        let rows = self.db().fetch_all(query).await?;
        rows.iter()
            .map(|r| {
                Ok(SpendLine {
                    domain: r.named("subject_domain")?,
                    source: r.named("payment_source")?,
                    entries: r.get("entries")?,
                    amount: MilliDac(r.get("amount")?),
                })
            })
            .collect()
    }

    async fn observation_spend(&self, span: &Span<'_>) -> Result<ObservationSpend> {
        let mut query = sql("select count(*) as n, cast(coalesce(sum(base_milli), 0) as bigint) as base, \
             cast(coalesce(sum(case when premium_source = 'earned' then 0 else premium_milli end), 0) as bigint) as external, \
             cast(coalesce(sum(case when premium_source = 'earned' then premium_milli else 0 end), 0) as bigint) as earned \
             from ara_observation where ");
        filter(span, &mut query, "observer_agent_id", "observed_at");
        let row = self.db().fetch_one(query).await?;
        Ok(ObservationSpend {
            count: row.get("n")?,
            base: MilliDac(row.get("base")?),
            premium_external: MilliDac(row.get("external")?),
            premium_earned: MilliDac(row.get("earned")?),
        })
    }

    async fn anchored_count(&self, span: &Span<'_>) -> Result<i64> {
        let mut query = sql("select count(*) from declaration where settlement_status not in ('released', 'failed') and ");
        filter(span, &mut query, "agent_id", "anchored_at");
        self.db().scalar(query).await
    }

    async fn earned_flow(&self, span: &Span<'_>) -> Result<EarnedFlow> {
        let mut query =
            sql("select cast(coalesce(sum(case when kind = 'credit' then amount_milli else 0 end), 0) as bigint) as received, \
             cast(count(*) as bigint) as moved from earned_entry where kind in ('credit', 'debit', 'refund') and ");
        filter(span, &mut query, "agent_id", "at");
        let row = self.db().fetch_one(query).await?;
        Ok(EarnedFlow { received: MilliDac(row.get("received")?), transactions: row.get("moved")? })
    }

    async fn settlement_refs(&self, span: &Span<'_>) -> Result<Vec<String>> {
        let mut query = sql("select settlement_ref from x402_payment where status = 'settled' and settlement_ref is not null and ");
        filter(span, &mut query, "agent_id", "updated_at");
        query.push(" order by updated_at desc");
        self.db().scalar_all(query).await
    }

    async fn usage_lines(&self, span: &Span<'_>, domains: &[SubjectDomain], offset: i64, limit: i64) -> Result<(Vec<UsageLine>, i64)> {
        let filtered = |select: &str| {
            let mut query = sql(select.to_string());
            filter(span, &mut query, "agent_id", "recorded_at");
            if !domains.is_empty() {
                query.push(" and subject_domain in (");
                for (i, domain) in domains.iter().enumerate() {
                    if i > 0 {
                        query.push(", ");
                    }
                    query.push_bind(domain.as_str());
                }
                query.push(")");
            }
            query
        };
        let total: i64 = self.db().scalar(filtered("select count(*) from usage_entry where ")).await?;
        let mut page = filtered("select * from usage_entry where ");
        page.push(" order by recorded_at desc, usage_id limit ").push_bind(limit).push(" offset ").push_bind(offset);
        let rows = self.db().fetch_all(page).await?;
        let lines = rows
            .iter()
            .map(|r| {
                Ok(UsageLine {
                    usage_id: r.get("usage_id")?,
                    agent_id: r.get("agent_id")?,
                    domain: r.named("subject_domain")?,
                    subject_id: r.get("subject_id")?,
                    cost_component: r.named("cost_component")?,
                    source: r.named("payment_source")?,
                    amount: MilliDac(r.get("amount_milli")?),
                    recorded_at: r.get("recorded_at")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((lines, total))
    }

    async fn template_counts(&self, span: &Span<'_>) -> Result<(Vec<(String, String, i64)>, i64)> {
        let branch_one = |select: String| {
            let mut query = sql(select);
            query.push(" from declaration where content_inclusion = ").push_bind(true).push(" and confirmed_at is not null and ");
            filter(span, &mut query, "agent_id", "anchored_at");
            query
        };
        let total: i64 = self.db().scalar(branch_one("select count(*)".into())).await?;
        let mut counts = Vec::new();
        for (name, column) in TEMPLATE_COLUMNS {
            let mut query = branch_one(format!("select {column} as value, count(*) as n"));
            query.push(" and ").push(column).push(" is not null group by ").push(column).push(" order by ").push(column);
            for row in self.db().fetch_all(query).await? {
                counts.push((name.to_string(), row.get::<String>("value")?, row.get::<i64>("n")?));
            }
        }
        Ok((counts, total))
    }

    async fn scale_values(&self, span: &Span<'_>) -> Result<Vec<(String, String)>> {
        let mut query = sql("select tpl_decision_scale_unit as unit, tpl_decision_scale_value as value from declaration \
                             where content_inclusion = ");
        query.push_bind(true).push(" and confirmed_at is not null and tpl_decision_scale_value is not null and ");
        filter(span, &mut query, "agent_id", "anchored_at");
        let rows = self.db().fetch_all(query).await?;
        rows.iter().map(|r| Ok((r.get::<Option<String>>("unit")?.unwrap_or_default(), r.get::<String>("value")?))).collect()
    }
}
