//! Attempt limits: fixed windows of counted attempts per scope and subject (logins, recovery keys, password confirmations).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::engine::{Engine, Exec, sql};
use crate::*;

#[async_trait]
impl<E: Engine> AttemptStore for SqlStore<E> {
    async fn reserve_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<Attempt> {
        // One statement: a row whose window ended starts a new one at
        // one attempt; otherwise the count rises only while it is
        // under the limit. PostgreSQL locks the conflicting row and
        // re-checks the condition, SQLite has one writer: either way
        // concurrent attempts count one after another.
        let window_open_after = now - limit.window;
        let used: Option<i64> = self
            .db()
            .scalar_optional(
                sql("insert into attempt_window (scope, subject, window_start, used) values ($1, $2, $3, 1) \
             on conflict (scope, subject) do update set \
             window_start = case when attempt_window.window_start <= $4 then excluded.window_start else attempt_window.window_start end, \
             used = case when attempt_window.window_start <= $4 then 1 else attempt_window.used + 1 end \
             where attempt_window.window_start <= $4 or attempt_window.used < $5 \
             returning cast(used as bigint)")
                .bind(limit.scope)
                .bind(subject)
                .bind(now)
                .bind(window_open_after)
                .bind(limit.max),
            )
            .await?;
        if used.is_some() {
            return Ok(Attempt::Reserved);
        }
        let start: Option<DateTime<Utc>> = self
            .db()
            .scalar_optional(
                sql("select window_start from attempt_window where scope = $1 and subject = $2").bind(limit.scope).bind(subject),
            )
            .await?;
        Ok(Attempt::Spent { retry_at: start.unwrap_or(now) + limit.window })
    }

    async fn spent_windows(&self, limit: AttemptLimit, subjects: &[String], now: DateTime<Utc>) -> Result<Vec<String>> {
        let mut spent = Vec::new();
        for subject in subjects {
            let found: Option<String> = self
                .db()
                .scalar_optional(
                    sql("select subject from attempt_window where scope = $1 and subject = $2 and window_start > $3 and used >= $4")
                        .bind(limit.scope)
                        .bind(subject.as_str())
                        .bind(now - limit.window)
                        .bind(limit.max),
                )
                .await?;
            spent.extend(found);
        }
        Ok(spent)
    }

    async fn release_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<()> {
        self.db()
            .execute(
                sql("update attempt_window set used = used - 1 \
             where scope = $1 and subject = $2 and used > 0 and window_start > $3")
                .bind(limit.scope)
                .bind(subject)
                .bind(now - limit.window),
            )
            .await?;
        Ok(())
    }
}
