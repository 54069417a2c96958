//! Anonymous feedback: what it says and the UTC day it arrived, nothing
//! that names who sent it; the newest notes are kept, the oldest dropped.

use async_trait::async_trait;
use chrono::NaiveDate;

use crate::engine::{Bind, Engine, Exec, Query, Row, Transaction, sql};
use crate::*;

const TEXTS: [&str; 7] =
    ["note", "would_recommend", "recommend_reason", "would_report_to_operator", "report_reason", "would_keep_as_tool", "keep_reason"];

#[async_trait]
impl<E: Engine> FeedbackStore for SqlStore<E> {
    async fn add_feedback(&self, feedback: &Feedback, day: NaiveDate, keep: i64) -> Result<()> {
        let texts = [
            &feedback.note,
            &feedback.would_recommend,
            &feedback.recommend_reason,
            &feedback.would_report_to_operator,
            &feedback.report_reason,
            &feedback.would_keep_as_tool,
            &feedback.keep_reason,
        ];
        let mut columns: Vec<(&'static str, crate::engine::Value<'_>)> = vec![("received_on", day.to_string().value())];
        for (name, text) in TEXTS.iter().zip(texts) {
            columns.push((name, text.as_deref().value()));
        }
        let tools = (!feedback.tools_used.is_empty()).then(|| feedback.tools_used.join("\n"));
        columns.push(("tools_used", tools.as_deref().value()));
        let mut tx = self.begin_write().await?;
        tx.execute(Query::insert("feedback", columns)).await?;
        tx.execute(sql("delete from feedback where feedback_id <= (select max(feedback_id) from feedback) - $1").bind(keep)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn feedback(&self, limit: i64) -> Result<Vec<(NaiveDate, Feedback)>> {
        let rows = self.db().fetch_all(sql("select * from feedback order by feedback_id desc limit $1").bind(limit)).await?;
        rows.iter()
            .map(|r| {
                let day: String = r.get("received_on")?;
                let day =
                    NaiveDate::parse_from_str(&day, "%Y-%m-%d").map_err(|e| StoreError::Corrupt(format!("feedback day {day}: {e}")))?;
                let tools: Option<String> = r.get("tools_used")?;
                Ok((
                    day,
                    Feedback {
                        note: r.get("note")?,
                        would_recommend: r.get("would_recommend")?,
                        recommend_reason: r.get("recommend_reason")?,
                        would_report_to_operator: r.get("would_report_to_operator")?,
                        report_reason: r.get("report_reason")?,
                        would_keep_as_tool: r.get("would_keep_as_tool")?,
                        keep_reason: r.get("keep_reason")?,
                        tools_used: tools.map(|t| t.lines().map(str::to_string).collect()).unwrap_or_default(),
                    },
                ))
            })
            .collect()
    }
}
