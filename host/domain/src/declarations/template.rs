//! The content-inclusion template (branch 1): decision metadata in closed
//! dimensions. Nothing here can carry free text.

use std::sync::LazyLock;

use regex::Regex;

use super::wire_enum;
use crate::Invalid;

wire_enum!(
    DecisionClass {
        Payment = "payment",
        ApiCall = "api_call",
        DataAccess = "data_access",
        Delegation = "delegation",
        ResourceTransfer = "resource_transfer",
        Communication = "communication",
        Other = "other",
    }
);
wire_enum!(
    TargetClass {
        Internal = "internal",
        External = "external",
        ThirdParty = "third_party",
        Subagent = "subagent",
        HumanOwner = "human_owner",
        Public = "public",
        System = "system",
    }
);
wire_enum!(
    Trigger {
        UserRequest = "user_request",
        Scheduled = "scheduled",
        EventDriven = "event_driven",
        Autonomous = "autonomous",
        Delegated = "delegated",
        ExternalEvent = "external_event",
    }
);
wire_enum!(
    HumanInvolvement {
        None = "none",
        Notification = "notification",
        Approval = "approval",
        CoDecision = "co_decision",
        Review = "review",
    }
);

/// The most entries `call_chain` may hold.
pub const CALL_CHAIN_MAX: usize = 32;

/// A validated template. `decision_scale_value` keeps the number's JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Template {
    pub decision_class: Option<DecisionClass>,
    pub decision_scale_value: Option<String>,
    pub decision_scale_unit: Option<String>,
    pub target_class: Option<TargetClass>,
    pub call_chain: Option<Vec<String>>,
    pub self_classification: Option<String>,
    pub decision_trigger: Option<Trigger>,
    pub human_involvement: Option<HumanInvolvement>,
}

impl Template {
    /// True when at least one dimension is filled.
    pub fn has_any_dimension(&self) -> bool {
        self.decision_class.is_some()
            || self.decision_scale_value.is_some()
            || self.decision_scale_unit.is_some()
            || self.target_class.is_some()
            || self.call_chain.as_ref().is_some_and(|c| !c.is_empty())
            || self.self_classification.is_some()
            || self.decision_trigger.is_some()
            || self.human_involvement.is_some()
    }
}

/// What one `call_chain` entry may look like: a tool identifier.
pub const CALL_CHAIN_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$";
/// What `decision_scale_unit` may look like: a unit, not a sentence.
pub const SCALE_UNIT_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9_./%-]{0,19}$";

static CALL_CHAIN_TOKEN: LazyLock<Regex> = LazyLock::new(|| Regex::new(CALL_CHAIN_PATTERN).expect("static pattern"));
static SCALE_UNIT: LazyLock<Regex> = LazyLock::new(|| Regex::new(SCALE_UNIT_PATTERN).expect("static pattern"));
static IPV4: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(^|[^0-9])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}($|[^0-9])").expect("static pattern"));
/// Labels that introduce a personal value (`email:…`, `phone-…`).
static PII_LABEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(e-?mail|phone|tel|mobile|ssn|passport|name|first_?name|last_?name|address|addr|dob|birth(date|day)?|user(name)?|iban|card)[:._-].+")
        .expect("static pattern")
});

/// Checks one `call_chain` entry: the token pattern, then the personal-data screen.
///
/// The screen refuses a token that holds a run of seven or more digits (a phone,
/// card, account or national identity number, allowing `-`, `.` or `_`
/// between the digits; a time's `:` ends a run), an IPv4 or IPv6 address anywhere in it, or a personal-data label followed by a
/// value (`email:`, `phone-`, `user.` and the like). It is a screen, not a
/// guarantee: it refuses the shapes such data usually takes.
pub fn check_call_chain_entry(index: usize, token: &str) -> Result<(), Invalid> {
    if !CALL_CHAIN_TOKEN.is_match(token) {
        return Err(Invalid::new(
            "INVALID_VALUE",
            format!(
                "template.call_chain[{index}] must be a tool identifier token (1-64 of A-Z a-z 0-9 _ . : -, starting with a letter or digit)"
            ),
        ));
    }
    if looks_personal(token) {
        return Err(Invalid::new(
            "PII_DETECTED",
            format!("template.call_chain[{index}] looks like personal data; send tool identifiers only"),
        ));
    }
    Ok(())
}

fn looks_personal(token: &str) -> bool {
    let mut run = 0usize;
    let mut longest = 0usize;
    for c in token.chars() {
        if c.is_ascii_digit() {
            run += 1;
            longest = longest.max(run);
        } else if !matches!(c, '-' | '.' | '_') {
            run = 0;
        }
    }
    // An IPv6 address anywhere in the token (`2001:db8::1` holds no long run of digits).
    longest >= 7 || IPV4.is_match(token) || crate::screen::contains_ipv6(token) || PII_LABEL.is_match(token)
}

pub fn check_scale_unit(unit: &str) -> Result<(), Invalid> {
    if SCALE_UNIT.is_match(unit) {
        Ok(())
    } else {
        Err(Invalid::new(
            "INVALID_VALUE",
            "template.decision_scale_unit must be a short unit code (1-20 of A-Z a-z 0-9 _ . / % -, no spaces)",
        ))
    }
}

/// The longest text a decision scale value may have, as sent. The JSON
/// reader writes an exponent with its sign (`1e2` is kept as `1e+2`), so a
/// `+` after the `e` is not counted.
pub const SCALE_VALUE_MAX_CHARS: usize = 40;

/// A decision scale value is a number a 64-bit float can hold: finite
/// (within ±1.7976931348623157e308, so no report can ever show an infinity)
/// and, unless it is zero, not so small that it reads as zero (below about
/// 4.9e-324), written in at most [`SCALE_VALUE_MAX_CHARS`] characters. The
/// value decides, not how its exponent is written: `0e-401` is zero,
/// `1e-401` and `0.00001e-399` are both below the smallest float.
///
/// Within these bounds an accepted value's decimal exponent stays within
/// ±400, so exact reports over such values never raise ten to more.
pub fn check_scale_value(text: &str) -> Result<(), Invalid> {
    let written = text.len() - usize::from(text.contains("e+") || text.contains("E+"));
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    let zero = !mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
    let holds = text.parse::<f64>().is_ok_and(|v| v.is_finite() && (v != 0.0 || zero));
    if written <= SCALE_VALUE_MAX_CHARS && holds {
        Ok(())
    } else {
        Err(Invalid::new(
            "INVALID_VALUE",
            format!(
                "template.decision_scale_value must be a number a 64-bit float holds (finite, within \
                 ±1.7976931348623157e308, and zero or at least about 4.9e-324 in size), written in at most \
                 {SCALE_VALUE_MAX_CHARS} characters; got {}",
                crate::brief(text)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_values_are_finite_numbers() {
        let forty_with_exponent = format!("{}e+1", "9".repeat(38));
        for ok in ["0", "-3", "157.5", "1e308", "-1.7976931348623157e308", "2.5E-10", "0e-401", "-0e-401", "1e-323", &forty_with_exponent] {
            assert!(check_scale_value(ok).is_ok(), "{ok}");
        }
        let forty_one = format!("{}e-1", "9".repeat(38));
        for refused in
            ["1e400", "-1e400", "1e309", &"9".repeat(41), "NaN", "inf", "1e-500", "1e-401", "10e-401", "0.00001e-399", "1e-324", &forty_one]
        {
            assert_eq!(check_scale_value(refused).unwrap_err().code, "INVALID_VALUE", "{refused}");
        }
    }

    #[test]
    fn tool_tokens_pass_and_personal_shapes_do_not() {
        for ok in ["search_api", "tool:v2", "mcp.fs.read", "gpt-4o", "step-12"] {
            check_call_chain_entry(0, ok).unwrap();
        }
        for ok in ["fs::read", "crate::module", "a:b:c", "dead::beef", "abc::def", "step::12", "run:10:00:00:00"] {
            check_call_chain_entry(0, ok).unwrap();
        }
        let pii = ["010-1234-5678", "4111111111111111", "192.168.0.1", "email:bob", "user.alice", "900101-1234567"];
        let ipv6 = [
            "2001:db8::1",
            "fe80::1",
            "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
            "1::",
            "0::ffff:a00:1",
            "fetch:2001:db8::1",
            "host-fe80::1",
        ];
        for pii in pii.into_iter().chain(ipv6) {
            assert_eq!(check_call_chain_entry(0, pii).unwrap_err().code, "PII_DETECTED", "{pii}");
        }
        assert_eq!(check_call_chain_entry(0, "has space").unwrap_err().code, "INVALID_VALUE");
    }
}
