//! Feature switches the operator sets while the service runs.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::engine::{Engine, Exec, Row, sql};
use crate::*;

#[async_trait]
impl<E: Engine> FeatureStore for SqlStore<E> {
    async fn feature_switches(&self) -> Result<Vec<(String, bool)>> {
        let rows = self.db().fetch_all(sql("select name, enabled from feature_switch order by name")).await?;
        rows.iter().map(|r| Ok((r.get("name")?, r.get("enabled")?))).collect()
    }

    async fn set_feature_switch(&self, name: &str, enabled: bool, now: DateTime<Utc>) -> Result<()> {
        self.db()
            .execute(
                sql("insert into feature_switch (name, enabled, changed_at) values ($1, $2, $3) \
                     on conflict (name) do update set enabled = excluded.enabled, changed_at = excluded.changed_at")
                .bind(name)
                .bind(enabled)
                .bind(now),
            )
            .await?;
        Ok(())
    }
}
