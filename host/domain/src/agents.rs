//! Agent credentials: how tokens and recovery keys look and how they are kept.
//!
//! Both secrets carry 256 bits from the operating system's generator, so a
//! single SHA-256 is a sufficient one-way function for storing them: there is no
//! dictionary to attack. Only the hash is stored; the value is shown once.

use sha2::{Digest, Sha256};

pub const TOKEN_PREFIX: &str = "da_tk_";
pub const RECOVERY_PREFIX: &str = "da_rk_";

/// Trial credit granted at registration, and how long it lasts.
pub const TRIAL_DAC: crate::MilliDac = crate::MilliDac::from_dac(500);
pub const TRIAL_DAYS: i64 = 30;

/// Where an agent says it is based: five tracked countries, then macro-regions.
pub const REGION_CODES: &[&str] =
    &["KR", "CN", "JP", "TW", "HK", "ASIA", "EUROPE", "N_AMERICA", "S_AMERICA", "AFRICA", "OCEANIA", "ANTARCTICA", "unknown"];

/// Recovery attempts allowed per agent within [`RECOVERY_WINDOW_MINUTES`].
pub const RECOVERY_ATTEMPTS: i64 = 5;
pub const RECOVERY_WINDOW_MINUTES: i64 = 15;

/// Formats 32 random bytes as a secret with the given prefix.
pub fn format_secret(prefix: &str, random: &[u8; 32]) -> String {
    format!("{prefix}{}", hex::encode(random))
}

/// The stored form of a token or recovery key.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// True when `text` has the shape of a secret with `prefix` (so a malformed one
/// can be refused without a lookup).
pub fn has_secret_shape(prefix: &str, text: &str) -> bool {
    text.strip_prefix(prefix).is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

crate::declarations::wire_enum!(
    /// Where an agent's credentials stand, as its owner sees them: its token
    /// works (`active`), or wrong recovery keys sent for it spent the
    /// recovery window (`recovery_locked`: recovery with the right key still
    /// works, wrong ones are refused until the window ends).
    AuthStatus { Active = "active", RecoveryLocked = "recovery_locked" }
);

crate::declarations::wire_enum!(
    /// How much of the agent's record ARA may show to others.
    DisclosureLevel { None = "none", Summary = "summary", Detailed = "detailed", Full = "full" }
);
