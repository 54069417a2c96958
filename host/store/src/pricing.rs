//! Published pricing generations and when each comes into force.

use async_trait::async_trait;

use crate::engine::{Engine, Exec, Row, Transaction, sql};
use crate::*;

#[async_trait]
impl<E: Engine> PricingStore for SqlStore<E> {
    async fn publish_pricing(&self, a: &PricingActivation, wasm: &[u8]) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        tx.execute(
            sql("insert into pricing_component (sha256, version, interface, wasm) values ($1, $2, $3, $4) on conflict (sha256) do nothing")
                .bind(a.sha256.as_str())
                .bind(a.version.as_str())
                .bind(a.interface.as_str())
                .bind(wasm),
        )
        .await?;
        let added = tx
            .execute(
                sql("insert into pricing_activation (activate_at, sha256, published_at) values ($1, $2, $3) on conflict (activate_at) do nothing")
                    .bind(a.activate_at)
                    .bind(a.sha256.as_str())
                    .bind(a.published_at),
            )
            .await?;
        tx.commit().await?;
        Ok(added == 1)
    }

    async fn pricing_activations(&self) -> Result<Vec<PricingActivation>> {
        let rows = self
            .db()
            .fetch_all(sql("select a.sha256, c.version, c.interface, a.activate_at, a.published_at \
                 from pricing_activation a join pricing_component c on c.sha256 = a.sha256 order by a.activate_at"))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PricingActivation {
                    sha256: r.get("sha256")?,
                    version: r.get("version")?,
                    interface: r.get("interface")?,
                    activate_at: r.get("activate_at")?,
                    published_at: r.get("published_at")?,
                })
            })
            .collect()
    }

    async fn pricing_wasm(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.db().scalar_optional(sql("select wasm from pricing_component where sha256 = $1").bind(sha256)).await?)
    }
}
