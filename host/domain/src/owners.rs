//! Owners: the humans (or agents promoted by a human) who manage agents in the
//! portal. Their vocabularies and the rules their input must meet.

use crate::Invalid;
use crate::declarations::wire_enum;

wire_enum!(
    /// A human (email and password) or an agent a human owner promoted.
    OwnerType { Human = "human", Agent = "agent" }
);

wire_enum!(
    /// Where an owner says it resides (EU member states share one value).
    Residence { Kr = "KR", Eu = "EU", Uk = "UK", Us = "US", Cn = "CN", Jp = "JP", Other = "OTHER" }
);

wire_enum!(
    /// Whether an owner's agents may, must or must not attach a template.
    ContentPolicy { AgentChoice = "agent_choice", AlwaysBranch0 = "always_branch_0", AlwaysBranch1 = "always_branch_1" }
);

wire_enum!(
    /// Where an owner account stands: deletion has a grace period.
    AccountStatus { Active = "active", PendingDeletion = "pending_deletion", Deleted = "deleted" }
);

impl ContentPolicy {
    /// The flag every declaration must carry under the policy, if it fixes one.
    pub fn required_flag(self) -> Option<bool> {
        match self {
            ContentPolicy::AgentChoice => None,
            ContentPolicy::AlwaysBranch0 => Some(false),
            ContentPolicy::AlwaysBranch1 => Some(true),
        }
    }

    /// What the policy does, in a sentence.
    pub fn effect(self) -> &'static str {
        match self {
            ContentPolicy::AlwaysBranch0 => {
                "declarations must use content_inclusion_flag 0 and no template; others are refused with 403 CONTENT_INCLUSION_POLICY"
            }
            ContentPolicy::AlwaysBranch1 => {
                "declarations must use content_inclusion_flag 1 with a template; others are refused with 403 CONTENT_INCLUSION_POLICY"
            }
            ContentPolicy::AgentChoice => "each agent chooses content_inclusion_flag per declaration",
        }
    }
}

/// EU member states, which share one residence value.
const EU: &[&str] = &[
    "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT",
    "RO", "SK", "SI", "ES", "SE",
];

impl Residence {
    /// The residence value of an ISO 3166 country code.
    pub fn of_country(country: &str) -> Residence {
        match country.to_ascii_uppercase().as_str() {
            "KR" => Residence::Kr,
            "US" => Residence::Us,
            "CN" => Residence::Cn,
            "JP" => Residence::Jp,
            "GB" | "UK" => Residence::Uk,
            c if EU.contains(&c) => Residence::Eu,
            _ => Residence::Other,
        }
    }
}

/// How deep agent-type owners may nest below a human owner.
pub const MAX_OWNER_DEPTH: i32 = 3;
/// The versions of the terms and privacy policy an owner agrees to at sign-up.
pub const TERMS_VERSION: &str = "2026-11-01";
pub const PRIVACY_VERSION: &str = "2026-11-01";

pub const PASSWORD_MIN: usize = 10;
pub const PASSWORD_MAX: usize = 128;

/// The password policy: 10 to 128 characters, at least one letter and one
/// character that is not a letter, not the account's email.
pub fn check_password(password: &str, email: Option<&str>) -> Result<(), Invalid> {
    let length = password.chars().count();
    let weak = |why: &str| {
        Invalid::new(
            "INVALID_VALUE",
            format!(
                "password {why}: use {PASSWORD_MIN} to {PASSWORD_MAX} characters with at least one letter and one character that is not a letter"
            ),
        )
    };
    if length < PASSWORD_MIN {
        return Err(weak("is too short"));
    }
    if length > PASSWORD_MAX {
        return Err(weak("is too long"));
    }
    if !password.chars().any(char::is_alphabetic) || password.chars().all(char::is_alphabetic) {
        return Err(weak("needs letters and non-letters"));
    }
    if email.is_some_and(|e| password.eq_ignore_ascii_case(e)) {
        return Err(weak("must not be the email address"));
    }
    Ok(())
}

/// A plausible email address, trimmed and lower-cased.
pub fn normalize_email(email: &str) -> Result<String, Invalid> {
    let email = email.trim().to_lowercase();
    let valid = email.len() <= 254
        && !email.chars().any(char::is_whitespace)
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.contains('@') && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
        });
    if valid { Ok(email) } else { Err(Invalid::new("INVALID_VALUE", "email must be an email address (name@domain.tld)")) }
}

/// An owner's classification category keys: `^[a-z][a-z0-9_]*$`, at most 100.
pub const KEY_PATTERN: &str = "^[a-z][a-z0-9_]*$";
pub const KEY_MAX: usize = 100;
pub const LABEL_MAX: usize = 200;
pub const DESCRIPTION_MAX: usize = 1000;

pub fn check_category_key(key: &str) -> Result<(), Invalid> {
    let mut chars = key.chars();
    let shaped =
        chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !shaped || key.len() > KEY_MAX {
        return Err(Invalid::new(
            "INVALID_VALUE",
            format!("classification_key must match {KEY_PATTERN} and have at most {KEY_MAX} characters; got {}", crate::brief(key)),
        ));
    }
    Ok(())
}

/// A label: one line of text, not blank, at most `max` characters, no
/// control character at all (no line break, no tab).
pub fn check_label(name: &str, value: &str, max: usize) -> Result<(), Invalid> {
    // Every line break Unicode names (NEL, the line and paragraph separators too).
    if value.contains(['\n', '\r', '\t', '\u{0b}', '\u{0c}', '\u{85}', '\u{2028}', '\u{2029}']) {
        return Err(Invalid::new("INVALID_VALUE", format!("{name} must be one line, with no tab")));
    }
    check_text(name, value, max)
}

/// A description: not blank, at most `max` characters, no control
/// characters but line breaks and tabs.
pub fn check_text(name: &str, value: &str, max: usize) -> Result<(), Invalid> {
    if value.trim().is_empty() {
        return Err(Invalid::new("INVALID_VALUE", format!("{name} must not be empty")));
    }
    if value.chars().count() > max {
        return Err(Invalid::new("INVALID_VALUE", format!("{name} is longer than {max} characters")));
    }
    if value.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return Err(Invalid::new("INVALID_VALUE", format!("{name} must not contain control characters (line breaks and tabs may)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_policy() {
        assert!(check_password("short1", None).is_err());
        assert!(check_password("onlyletterslong", None).is_err());
        assert!(check_password("1234567890123", None).is_err());
        assert!(check_password(&"a1".repeat(65), None).is_err());
        assert!(check_password("a@b.example1", Some("A@B.example1")).is_err());
        assert!(check_password("correct horse 9", Some("x@y.z")).is_ok());
    }

    #[test]
    fn residences_group_the_eu() {
        assert_eq!(Residence::of_country("de"), Residence::Eu);
        assert_eq!(Residence::of_country("GB"), Residence::Uk);
        assert_eq!(Residence::of_country("BR"), Residence::Other);
        assert_eq!(Residence::parse("EU"), Some(Residence::Eu));
    }

    #[test]
    fn category_keys() {
        assert!(check_category_key("vendor_payment2").is_ok());
        for bad in ["", "2x", "Vendor", "a-b", &"a".repeat(101)] {
            assert!(check_category_key(bad).is_err(), "{bad}");
        }
    }
}
