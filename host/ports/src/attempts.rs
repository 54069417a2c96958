//! Attempt limits: fixed windows of counted attempts per scope and subject (logins, recovery keys, password confirmations).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::*;

pub use anchor_domain::records::{Attempt, AttemptLimit};

#[async_trait]
pub trait AttemptStore: Send + Sync {
    /// Takes one attempt of `limit` for `subject` in one conditional
    /// statement, before the secret is checked: concurrent attempts cannot
    /// pass the limit. Windows are fixed and start with their first attempt.
    async fn reserve_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<Attempt>;
    /// Which of `subjects` have spent their window of `limit` at `now`.
    async fn spent_windows(&self, limit: AttemptLimit, subjects: &[String], now: DateTime<Utc>) -> Result<Vec<String>>;
    /// Gives a reserved attempt back (the secret was right).
    async fn release_attempt(&self, limit: AttemptLimit, subject: &str, now: DateTime<Utc>) -> Result<()>;
}
