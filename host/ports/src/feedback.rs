//! Anonymous feedback: what it says and the UTC day it arrived, nothing
//! that names who sent it; the newest notes are kept, the oldest dropped.

use async_trait::async_trait;
use chrono::NaiveDate;

use crate::*;

pub use anchor_domain::records::Feedback;

#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Keeps a note received on `day`, then drops the oldest past `keep`.
    async fn add_feedback(&self, feedback: &Feedback, day: NaiveDate, keep: i64) -> Result<()>;
    /// The newest notes, newest first, with their day.
    async fn feedback(&self, limit: i64) -> Result<Vec<(NaiveDate, Feedback)>>;
}
