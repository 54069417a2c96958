//! ARA: statistics of recorded history, and the log of observations made.
//!
//! Cross-agent statistics count anchored (confirmed) declarations only, never
//! those whose access class is `internal_only`, and return counts, never a
//! record or an agent id.

use anchor_domain::MilliDac;
use anchor_domain::payments::PaymentSource;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, sql};
use crate::*;

/// The environment's activity in a window, de-identified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvironmentStats {
    pub declarations: i64,
    /// How many distinct agents the declarations come from.
    pub agents: i64,
    /// (action type, count), by action type.
    pub by_action_type: Vec<(String, i64)>,
    /// (retention period, count), by retention period.
    pub by_retention: Vec<(String, i64)>,
}

/// One observation made, with what it cost.
#[derive(Clone, Debug)]
pub struct NewObservation {
    pub observation_id: Uuid,
    pub observer_agent_id: Uuid,
    /// The agent observed, for agent-level observations.
    pub target_agent_id: Option<Uuid>,
    /// The observation tier (`environment`, `pattern`, …).
    pub kind: &'static str,
    pub resolution_level: i32,
    pub base: MilliDac,
    pub premium: MilliDac,
    pub premium_source: Option<PaymentSource>,
    pub payment_id: Option<Uuid>,
    pub observed_at: DateTime<Utc>,
}

/// Anchored declarations visible to cross-agent views, in `($1, $2]`.
const VISIBLE: &str = "from declaration where confirmed_at is not null and access_class <> 'internal_only' \
                       and anchored_at > $1 and anchored_at <= $2";

#[async_trait]
pub trait AraStore: Send + Sync {
    /// Every agent's anchored declarations in `(from, to]`, counted.
    async fn environment(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<EnvironmentStats>;
    async fn record_observation(&self, observation: &NewObservation) -> Result<()>;
}

#[async_trait]
impl<E: Engine> AraStore for SqlStore<E> {
    async fn environment(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<EnvironmentStats> {
        let totals = self
            .db()
            .fetch_one(sql(format!("select count(*) as n, count(distinct agent_id) as agents {VISIBLE}")).bind(from).bind(to))
            .await?;
        let by = |column: &str| {
            sql(format!("select {column} as k, count(*) as n {VISIBLE} group by {column} order by {column}")).bind(from).bind(to)
        };
        let counted = |rows: Vec<E::Row>| rows.iter().map(|r| Ok((r.get("k")?, r.get("n")?))).collect::<Result<Vec<(String, i64)>>>();
        Ok(EnvironmentStats {
            declarations: totals.get("n")?,
            agents: totals.get("agents")?,
            by_action_type: counted(self.db().fetch_all(by("decision_action_type")).await?)?,
            by_retention: counted(self.db().fetch_all(by("ee_retention_period")).await?)?,
        })
    }

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
                ],
            ))
            .await?;
        Ok(())
    }
}
