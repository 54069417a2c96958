//! Indefinite retention: the subscription's states, read off its timestamps,
//! and when a record's retention ends.
//!
//! | from | event | to |
//! | --- | --- | --- |
//! | none, expired | subscribe (first month charged) | active |
//! | grace | subscribe before the grace ends | active (`reactivated`) |
//! | active | cancel, or a monthly charge that fails | grace |
//! | grace | the grace period ends | expired: every indefinite record of the agent is demoted to short, from then on, for good |

use chrono::{DateTime, Duration, Months, Utc};

use crate::declarations::ee::Retention;
use crate::declarations::wire_enum;

wire_enum!(
    /// Where an agent's indefinite-retention subscription stands.
    RetentionStatus { None = "none", Active = "active", Grace = "grace", Expired = "expired" }
);

/// What a subscription row holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub agent_id: uuid::Uuid,
    pub subscribed_at: DateTime<Utc>,
    /// The last time it became active (subscribed or reactivated).
    pub activated_at: DateTime<Utc>,
    /// When the next month is due (kept through a grace period: reactivating
    /// before it charges nothing).
    pub next_billing_at: DateTime<Utc>,
    pub grace_started_at: Option<DateTime<Utc>>,
    pub grace_ends_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Set when the expiry (and its demotion) has been carried out.
    pub expired_at: Option<DateTime<Utc>>,
    pub months_billed: i64,
    /// Records demoted when it expired.
    pub demoted_count: i64,
}

impl Subscription {
    /// The state at `now`: a grace period that has run out is expired even
    /// before the job has carried the expiry out.
    pub fn status(&self, now: DateTime<Utc>) -> RetentionStatus {
        if self.expired_at.is_some() {
            return RetentionStatus::Expired;
        }
        match self.grace_ends_at {
            Some(end) if now >= end => RetentionStatus::Expired,
            Some(_) => RetentionStatus::Grace,
            None => RetentionStatus::Active,
        }
    }
}

/// The status of an agent that may have no subscription.
pub fn status_of(subscription: Option<&Subscription>, now: DateTime<Utc>) -> RetentionStatus {
    subscription.map_or(RetentionStatus::None, |s| s.status(now))
}

/// One calendar month later (the last day of a shorter month when the day does not exist).
pub fn next_month(at: DateTime<Utc>) -> DateTime<Utc> {
    at.checked_add_months(Months::new(1)).unwrap_or(at + Duration::days(30))
}

/// When a record anchored at `anchored_at` with `retention` stops being kept;
/// `None` for indefinite retention.
pub fn retention_end(retention: Retention, anchored_at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    retention.days().map(|days| anchored_at + Duration::days(days))
}

/// A demoted record is kept as a short one, counted from the demotion.
pub fn demoted_end(demoted_at: DateTime<Utc>) -> DateTime<Utc> {
    retention_end(Retention::Short, demoted_at).unwrap_or(demoted_at)
}

/// The key a de-identified record is kept under instead of its id: derived
/// from the id by a one-way hash, so the id is found nowhere any more, while
/// whoever holds it can still be told the record was de-identified (410).
/// A version-8 (custom) UUID.
pub fn deidentified_key(dd_id: uuid::Uuid) -> uuid::Uuid {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(b"anchor-deidentified/1\0").chain_update(dd_id.as_bytes()).finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, day, 12, 0, 0).unwrap()
    }

    fn active() -> Subscription {
        Subscription {
            agent_id: uuid::Uuid::nil(),
            subscribed_at: at(1),
            activated_at: at(1),
            next_billing_at: next_month(at(1)),
            grace_started_at: None,
            grace_ends_at: None,
            cancelled_at: None,
            expired_at: None,
            months_billed: 1,
            demoted_count: 0,
        }
    }

    #[test]
    fn states_follow_the_timestamps() {
        let mut s = active();
        assert_eq!(s.status(at(20)), RetentionStatus::Active);
        s.grace_started_at = Some(at(2));
        s.grace_ends_at = Some(at(16));
        assert_eq!(s.status(at(15)), RetentionStatus::Grace);
        assert_eq!(s.status(at(16)), RetentionStatus::Expired);
        s.grace_ends_at = None;
        s.expired_at = Some(at(3));
        assert_eq!(s.status(at(3)), RetentionStatus::Expired);
        assert_eq!(status_of(None, at(1)), RetentionStatus::None);
    }

    #[test]
    fn months_are_calendar_months() {
        let jan31 = Utc.with_ymd_and_hms(2027, 1, 31, 0, 0, 0).unwrap();
        assert_eq!(next_month(jan31), Utc.with_ymd_and_hms(2027, 2, 28, 0, 0, 0).unwrap());
        assert_eq!(retention_end(Retention::Indefinite, jan31), None);
        assert_eq!(retention_end(Retention::Medium, jan31), Some(jan31 + Duration::days(365)));
        assert_eq!(demoted_end(jan31), jan31 + Duration::days(90));
    }

    #[test]
    fn a_deidentified_key_is_fixed_per_id_and_never_the_id() {
        let id = uuid::Uuid::new_v4();
        assert_eq!(deidentified_key(id), deidentified_key(id));
        assert_ne!(deidentified_key(id), id);
        assert_ne!(deidentified_key(id), deidentified_key(uuid::Uuid::new_v4()));
        assert_eq!(deidentified_key(id).get_version_num(), 8);
    }
}
