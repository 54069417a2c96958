//! ASA, the agent state archive: an agent subscribes in periods and
//! registers the hashes of its own encrypted snapshots, to show later that a
//! snapshot is the one it registered. States are read off timestamps: active
//! until the paid periods end, then a grace, then expired; cancelled is final.

use chrono::{DateTime, Duration, Utc};

use crate::Invalid;
use crate::declarations::wire_enum;

wire_enum!(AsaStatus { Active = "active", Grace = "grace", Expired = "expired", Cancelled = "cancelled" });
wire_enum!(
    /// How a period is paid: over x402, or from Earned DAC.
    AsaSource { External = "external", Earned = "earned" }
);
wire_enum!(AsaPurchaseKind { Subscribe = "subscribe", Extend = "extend" });

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsaSubscription {
    pub subscription_id: uuid::Uuid,
    pub agent_id: uuid::Uuid,
    pub started_at: DateTime<Utc>,
    /// The end of the paid periods.
    pub expires_at: DateTime<Utc>,
    pub grace_days: i64,
    /// Periods bought in all.
    pub periods: i64,
    /// Extensions.
    pub renewed_count: i64,
    pub next_payment_source: Option<AsaSource>,
    /// An Earned-paid period runs until then.
    pub earned_until: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub cancelled_by: Option<String>,
}

impl AsaSubscription {
    pub fn grace_ends_at(&self) -> DateTime<Utc> {
        self.expires_at + Duration::days(self.grace_days)
    }

    pub fn status(&self, now: DateTime<Utc>) -> AsaStatus {
        if self.cancelled_at.is_some() {
            AsaStatus::Cancelled
        } else if now < self.expires_at {
            AsaStatus::Active
        } else if now < self.grace_ends_at() {
            AsaStatus::Grace
        } else {
            AsaStatus::Expired
        }
    }

    /// Active or in its grace: extendable, and its snapshots readable.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        matches!(self.status(now), AsaStatus::Active | AsaStatus::Grace)
    }

    /// Whole days of paid time left (a part of a day counts as one).
    pub fn days_remaining(&self, now: DateTime<Utc>) -> i64 {
        let left = self.expires_at - now;
        if left <= Duration::zero() { 0 } else { (left.num_seconds() + 86_399) / 86_400 }
    }

    /// Extending adds from the later of the current expiry and now, so time
    /// lapsed in a grace is not credited.
    pub fn extended_expiry(&self, now: DateTime<Utc>, days: i64) -> DateTime<Utc> {
        self.expires_at.max(now) + Duration::days(days)
    }
}

/// A registered snapshot: its hash and what the agent sent with it, opaque.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsaSnapshot {
    pub snapshot_id: uuid::Uuid,
    pub agent_id: uuid::Uuid,
    pub subscription_id: uuid::Uuid,
    /// Lowercase hex.
    pub blob_hash: String,
    pub blob_url: Option<String>,
    pub blob_size_bytes: Option<i64>,
    pub encrypted_key: Option<String>,
    pub label: Option<String>,
    pub registered_at: DateTime<Utc>,
}

/// A SHA-256 digest as 64 hex characters (either case), returned in
/// lowercase; a `sha256:` prefix or anything else is 400 `INVALID_HASH_FORMAT`.
pub fn parse_hash(text: &str) -> Result<String, Invalid> {
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(text.to_ascii_lowercase());
    }
    let why = if text.to_ascii_lowercase().starts_with("sha256:") { "; send it without the sha256: prefix" } else { "" };
    Err(Invalid::new("INVALID_HASH_FORMAT", format!("blob_hash must be a SHA-256 digest as 64 hex characters{why}")))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn states_and_days_follow_the_timestamps() {
        let start = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
        let mut s = AsaSubscription {
            subscription_id: uuid::Uuid::nil(),
            agent_id: uuid::Uuid::nil(),
            started_at: start,
            expires_at: start + Duration::days(90),
            grace_days: 7,
            periods: 1,
            renewed_count: 0,
            next_payment_source: None,
            earned_until: None,
            cancelled_at: None,
            cancelled_by: None,
        };
        assert_eq!(s.status(start), AsaStatus::Active);
        assert_eq!(s.days_remaining(start + Duration::hours(1)), 90);
        assert_eq!(s.status(start + Duration::days(90)), AsaStatus::Grace);
        assert_eq!(s.days_remaining(start + Duration::days(91)), 0);
        assert_eq!(s.status(start + Duration::days(97)), AsaStatus::Expired);
        assert_eq!(s.extended_expiry(start + Duration::days(95), 90), start + Duration::days(185));
        assert_eq!(s.extended_expiry(start, 90), start + Duration::days(180));
        s.cancelled_at = Some(start);
        assert_eq!(s.status(start), AsaStatus::Cancelled);
    }

    #[test]
    fn hashes_are_bare_hex() {
        let hex = "AB".repeat(32);
        assert_eq!(parse_hash(&hex).unwrap(), "ab".repeat(32));
        assert_eq!(parse_hash(&format!("sha256:{}", "a".repeat(64))).unwrap_err().code, "INVALID_HASH_FORMAT");
        assert!(parse_hash(&"g".repeat(64)).is_err());
        assert!(parse_hash(&"é".repeat(32)).is_err());
    }
}
