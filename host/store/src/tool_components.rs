//! Tools' uploaded components, their upload counts and their runs: the
//! store of what a seller uploads and a buyer runs (`ToolComponentStore`),
//! beside the market's own records (`tsl`).

use anchor_domain::MilliDac;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::tsl::lock_tool;
use crate::*;

#[async_trait]
impl<E: Engine> ToolComponentStore for SqlStore<E> {
    async fn uploads_since(&self, tool_id: Uuid, seller: Uuid, day_start: DateTime<Utc>) -> Result<(i64, i64)> {
        let row = self.db().fetch_one(uploads_since(tool_id, seller, day_start)).await?;
        Ok((row.get("tool")?, row.get("mine")?))
    }

    async fn count_upload(
        &self,
        tool_id: Uuid,
        seller: Uuid,
        now: DateTime<Utc>,
        day_start: DateTime<Utc>,
        per_tool: i64,
        per_seller: i64,
    ) -> Result<UploadCounted> {
        let mut tx = self.begin_write().await?;
        // The seller's row, locked: its uploads are counted one at a time.
        let found: Option<Uuid> =
            tx.scalar_optional(sql(format!("select agent_id from agent where agent_id = $1{}", self.db.for_update())).bind(seller)).await?;
        found.ok_or(StoreError::NotFound("no row returned".into()))?;
        let row = tx.fetch_one(uploads_since(tool_id, seller, day_start)).await?;
        let (tool, mine): (i64, i64) = (row.get("tool")?, row.get("mine")?);
        if mine >= per_seller || tool >= per_tool {
            return Ok(UploadCounted::TooMany { per_seller: mine >= per_seller });
        }
        tx.execute(Query::insert(
            "tsl_tool_upload",
            vec![("tool_id", tool_id.value()), ("seller_agent_id", seller.value()), ("uploaded_at", now.value())],
        ))
        .await?;
        tx.commit().await?;
        Ok(UploadCounted::Counted)
    }

    async fn add_component(&self, upload: &NewComponent<'_>) -> Result<ComponentAdded> {
        let NewComponent { tool_id, sha256, wasm, uploaded_by, now } = *upload;
        let mut tx = self.begin_write().await?;
        lock_tool(&mut tx, self.db.for_update(), tool_id).await?;
        let current = tx
            .fetch_optional(
                sql("select tool_id, version, sha256, size_bytes, uploaded_by, uploaded_at from tsl_tool_component \
                     where tool_id = $1 order by version desc limit 1")
                .bind(tool_id),
            )
            .await?;
        let current = current.as_ref().map(component_of).transpose()?;
        if let Some(current) = current.as_ref().filter(|c| &c.sha256 == sha256) {
            return Ok(ComponentAdded::Unchanged(current.clone()));
        }
        let record = ComponentRecord {
            tool_id,
            version: current.map_or(1, |c| c.version + 1),
            sha256: *sha256,
            size: wasm.len() as i64,
            uploaded_by,
            uploaded_at: now,
        };
        tx.execute(Query::insert(
            "tsl_tool_component",
            vec![
                ("tool_id", tool_id.value()),
                ("version", record.version.value()),
                ("sha256", sha256.value()),
                ("size_bytes", record.size.value()),
                ("wasm", wasm.value()),
                ("uploaded_by", uploaded_by.value()),
                ("uploaded_at", now.value()),
            ],
        ))
        .await?;
        tx.execute(sql("update tsl_tool set updated_at = $1 where tool_id = $2").bind(now).bind(tool_id)).await?;
        // Buyers run the latest version only: older ones keep their facts, not their bytes.
        tx.execute(
            sql("update tsl_tool_component set wasm = $1 where tool_id = $2 and version < $3")
                .bind(Vec::<u8>::new())
                .bind(tool_id)
                .bind(record.version),
        )
        .await?;
        tx.commit().await?;
        Ok(ComponentAdded::Added(record))
    }

    async fn current_component(&self, tool_id: Uuid) -> Result<Option<ComponentRecord>> {
        let row = self
            .db()
            .fetch_optional(
                sql("select tool_id, version, sha256, size_bytes, uploaded_by, uploaded_at from tsl_tool_component \
                     where tool_id = $1 order by version desc limit 1")
                .bind(tool_id),
            )
            .await?;
        row.as_ref().map(component_of).transpose()
    }

    async fn current_component_hashes(&self) -> Result<Vec<[u8; 32]>> {
        let hashes: Vec<Vec<u8>> = self
            .db()
            .scalar_all(sql("select c.sha256 from tsl_tool_component c join tsl_tool t on t.tool_id = c.tool_id \
                 where t.status = 'active' and c.version = (select max(version) from tsl_tool_component l where l.tool_id = c.tool_id)"))
            .await?;
        hashes.into_iter().map(|h| hash32("sha256", h)).collect()
    }

    async fn component_wasm(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        self.db()
            .scalar_optional(sql("select wasm from tsl_tool_component where sha256 = $1 and length(wasm) > 0 limit 1").bind(sha256))
            .await
    }

    async fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.db()
            .execute(Query::insert(
                "tsl_tool_run",
                vec![
                    ("run_id", run.run_id.value()),
                    ("tool_id", run.tool_id.value()),
                    ("version", run.version.value()),
                    ("sha256", (&run.sha256).value()),
                    ("runner_agent_id", run.runner_agent_id.value()),
                    ("started_at", run.started_at.value()),
                    ("wall_micros", run.wall_micros.value()),
                    ("outcome", run.outcome.as_str().value()),
                    ("fuel_used", run.fuel_used.value()),
                    ("output_bytes", run.output_bytes.value()),
                    ("charged_milli", run.charged.milli().value()),
                    ("payment_id", run.payment_id.value()),
                ],
            ))
            .await?;
        Ok(())
    }

    async fn runs(&self, runner: Uuid, limit: i64, offset: i64) -> Result<(Vec<RunRecord>, i64)> {
        let mut db = self.db();
        let total: i64 = db.scalar(sql("select count(*) from tsl_tool_run where runner_agent_id = $1").bind(runner)).await?;
        let rows = db
            .fetch_all(
                sql("select * from tsl_tool_run where runner_agent_id = $1 order by started_at desc, run_id limit $2 offset $3")
                    .bind(runner)
                    .bind(limit)
                    .bind(offset),
            )
            .await?;
        let runs = rows
            .iter()
            .map(|r| {
                Ok(RunRecord {
                    run_id: r.get("run_id")?,
                    tool_id: r.get("tool_id")?,
                    version: r.get("version")?,
                    sha256: hash32("sha256", r.get("sha256")?)?,
                    runner_agent_id: r.get("runner_agent_id")?,
                    started_at: r.get("started_at")?,
                    wall_micros: r.get("wall_micros")?,
                    outcome: r.get("outcome")?,
                    fuel_used: r.get("fuel_used")?,
                    output_bytes: r.get("output_bytes")?,
                    charged: MilliDac(r.get("charged_milli")?),
                    payment_id: r.get("payment_id")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((runs, total))
    }
}

fn component_of(row: &impl Row) -> Result<ComponentRecord> {
    Ok(ComponentRecord {
        tool_id: row.get("tool_id")?,
        version: row.get("version")?,
        sha256: hash32("sha256", row.get("sha256")?)?,
        size: row.get("size_bytes")?,
        uploaded_by: row.get("uploaded_by")?,
        uploaded_at: row.get("uploaded_at")?,
    })
}

/// The uploads to a tool (`tool`) and by its seller (`mine`) since `day_start`.
fn uploads_since(tool_id: Uuid, seller: Uuid, day_start: DateTime<Utc>) -> Query<'static> {
    sql("select (select count(*) from tsl_tool_upload where tool_id = $1 and uploaded_at >= $3) as tool, \
            (select count(*) from tsl_tool_upload where seller_agent_id = $2 and uploaded_at >= $3) as mine")
    .bind(tool_id)
    .bind(seller)
    .bind(day_start)
}
