//! The tool market (TSL): interpretation tools agents register and sell to
//! each other, what a purchase costs and how its price is shared.
//!
//! A tool reads ARA observations (its connections, declared at registration)
//! and is sold for a price in DAC, paid over x402 with the service's fee on
//! top. The price is shared in Earned DAC: each revenue share of the tool
//! gets its rate of the price, the seller's owner accrues its human share,
//! and the seller gets the rest. Rates are parts per million, so every split
//! is exact integer arithmetic and the parts add up to the price.

use std::sync::LazyLock;

use regex::Regex;

use crate::declarations::wire_enum;
use crate::{Invalid, MilliDac};

wire_enum!(
    /// Layer 1 tools re-arrange ARA observations; layer 2 tools build on layer 1 output.
    Layer { Layer1 = "layer1", Layer2 = "layer2" }
);

wire_enum!(
    /// Where a tool stands. Only `active` tools sell; `suspended` and
    /// `deprecated` are set by the operator, `defunct` by a retirement.
    ToolStatus { Active = "active", Suspended = "suspended", Deprecated = "deprecated", Defunct = "defunct" }
);

wire_enum!(
    /// The ARA observations a tool may read, by the interface's names.
    ObservationType {
        AgentEePattern = "agent_ee_pattern",
        AgentProfile = "agent_profile",
        AgentTimeline = "agent_timeline",
        AnomalyCompare = "anomaly_compare",
        DecisionMetadata = "decision_metadata",
        EnvironmentAnomaly = "environment_anomaly",
        EnvironmentDensity = "environment_density",
        EnvironmentSummary = "environment_summary",
        EnvironmentTsl = "environment_tsl",
        EvidenceReport = "evidence_report",
        PatternActionType = "pattern_action_type",
        PatternCompare = "pattern_compare",
        PatternEeDistribution = "pattern_ee_distribution",
    }
);

wire_enum!(
    /// What a transfer declaration does once it takes effect.
    TransferAction { Transfer = "transfer", Retire = "retire" }
);

wire_enum!(
    /// Where a transfer declaration stands.
    TransferStatus { Pending = "pending", Cancelled = "cancelled", Executed = "executed" }
);

wire_enum!(
    /// Where a purchase stands: `pending` while its payment settles.
    PurchaseStatus { Pending = "pending", Completed = "completed", Failed = "failed" }
);

wire_enum!(
    /// Who a part of a sale's price went to.
    ShareKind { Seller = "seller", RevenueShare = "revenue_share", HumanShare = "human_share" }
);

impl ObservationType {
    /// The highest resolution level the observation is offered at: agent-level
    /// observations 3, the pattern comparison 2, the rest 1.
    pub fn max_level(self) -> u8 {
        match self {
            ObservationType::AgentEePattern | ObservationType::AgentProfile | ObservationType::AgentTimeline => 3,
            ObservationType::PatternCompare => 2,
            _ => 1,
        }
    }
}

/// A transfer or retirement takes effect this many days after its declaration.
pub const TRANSFER_DELAY_DAYS: i64 = 7;
/// The most a tool's name may hold, in characters.
pub const NAME_MAX_CHARS: usize = 100;
/// The most a tool's description may hold, in characters.
pub const DESCRIPTION_MAX_CHARS: usize = 1000;
/// The most connections a tool may declare.
pub const CONNECTIONS_MAX: usize = 13;
/// The highest price a tool may ask.
pub const PRICE_MAX: MilliDac = MilliDac::from_dac(1_000_000);
/// A rate of one: the whole price.
pub const PPM_ONE: u32 = 1_000_000;
/// The highest human share an owner may take.
pub const HUMAN_SHARE_MAX_PPM: u32 = 500_000;

/// `rate_ppm` of `amount`, rounded down.
pub fn part(amount: MilliDac, rate_ppm: u32) -> MilliDac {
    MilliDac(((i128::from(amount.milli()) * i128::from(rate_ppm)) / i128::from(PPM_ONE)) as i64)
}

/// How a sale's price is shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split<K> {
    /// Each revenue share's part, in the order given.
    pub shares: Vec<(K, MilliDac)>,
    /// The seller's owner's accrual.
    pub human: MilliDac,
    /// What is left for the seller.
    pub seller: MilliDac,
}

/// Shares `price`: each revenue share gets its rate of the price (rounded
/// down), the human share likewise, the seller the remainder; `None` when
/// the rates add up to more than one.
pub fn split<K: Copy>(price: MilliDac, shares: &[(K, u32)], human_ppm: u32) -> Option<Split<K>> {
    let total: u64 = shares.iter().map(|(_, r)| u64::from(*r)).sum::<u64>() + u64::from(human_ppm);
    if total > u64::from(PPM_ONE) {
        return None;
    }
    let shares: Vec<(K, MilliDac)> = shares.iter().map(|(k, r)| (*k, part(price, *r))).collect();
    let human = part(price, human_ppm);
    let given = shares.iter().fold(human, |sum, (_, a)| sum + *a);
    Some(Split { shares, human, seller: price - given })
}

/// What personal data in free text usually looks like: an e-mail address,
/// a run of seven or more digits (a phone, card or account number, with
/// separators allowed), an IPv4 address; an IPv6 address is
/// [`crate::screen::contains_ipv6`].
static EMAIL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[^\s@＠﹫]+[@＠﹫][^\s@＠﹫]+[.．。][^\s@＠﹫]+").expect("static pattern"));
static IPV4: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b").expect("static pattern"));
static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\d(?:[\s().+_-]*\d){6,}").expect("static pattern"));

/// Checks a tool's name or description: not blank (a name), within its
/// length, no control characters, and nothing that looks like personal data
/// (400 `PII_DETECTED`). A screen of the shapes such data takes, not a guarantee.
pub fn check_text(field: &str, text: &str, max_chars: usize, required: bool) -> Result<(), Invalid> {
    if required && text.trim().is_empty() {
        return Err(Invalid::new("INVALID_INPUT", format!("{field} must not be empty")));
    }
    let chars = text.chars().count();
    if chars > max_chars {
        return Err(Invalid::new("INVALID_INPUT", format!("{field} holds at most {max_chars} characters; got {chars}")));
    }
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(Invalid::new("INVALID_INPUT", format!("{field} must not contain control characters")));
    }
    if EMAIL.is_match(text) || IPV4.is_match(text) || DIGITS.is_match(text) || crate::screen::contains_ipv6(text) {
        return Err(Invalid::new(
            "PII_DETECTED",
            format!(
                "{field} looks like it holds personal data (an e-mail address, a long number or an IP address); describe the tool only"
            ),
        ));
    }
    Ok(())
}

/// Checks a tool's price: above zero, at most [`PRICE_MAX`].
pub fn check_price(price: MilliDac) -> Result<(), Invalid> {
    if price <= MilliDac::ZERO || price > PRICE_MAX {
        return Err(Invalid::new("INVALID_INPUT", format!("price_dac must be above 0 and at most {PRICE_MAX}; got {price}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_adds_up_to_the_price_and_rounds_toward_the_seller() {
        let price = MilliDac(10_001);
        let split = split(price, &[("a", 333_333), ("b", 250_000)], 100_000).unwrap();
        assert_eq!(split.shares, vec![("a", MilliDac(3_333)), ("b", MilliDac(2_500))]);
        assert_eq!(split.human, MilliDac(1_000));
        assert_eq!(split.seller, MilliDac(3_168));
        let given = split.shares.iter().fold(split.human + split.seller, |s, (_, a)| s + *a);
        assert_eq!(given, price);
        // Rates of exactly one leave the seller nothing; more than one is refused.
        assert_eq!(super::split(price, &[("a", 600_000)], 400_000).unwrap().seller, MilliDac(1));
        assert!(super::split(price, &[("a", 600_001)], 400_000).is_none());
        assert!(super::split::<&str>(price, &[], 1_000_001).is_none());
    }

    #[test]
    fn personal_data_is_screened_out_of_names() {
        for text in [
            "call me at +1 (555) 123-4567",
            "mail bob@example.com",
            "ａ＠ｂ．ｃｏｍ",
            "from 10.0.0.12",
            "card 4111 1111 1111 1111",
            "reach me at 2001:db8::1",
        ] {
            assert_eq!(check_text("tool_name", text, 100, true).unwrap_err().code, "PII_DETECTED", "{text}");
        }
        for text in [
            "ee-mix v2",
            "retention over 30 days, 2026 edition",
            "outlier ratio 1.5x",
            "runs at 10:30, uses std::io and dead::beef",
            "timecode 01:02:03:04 at 12:30:45.5",
        ] {
            assert!(check_text("tool_name", text, 100, true).is_ok(), "{text}");
        }
        assert_eq!(check_text("tool_name", "  ", 100, true).unwrap_err().code, "INVALID_INPUT");
        assert_eq!(check_text("tool_name", "a\0b", 100, true).unwrap_err().code, "INVALID_INPUT");
        assert_eq!(check_text("tool_name", &"é".repeat(101), 100, true).unwrap_err().code, "INVALID_INPUT");
        assert!(check_text("tool_name", &"é".repeat(100), 100, true).is_ok());
    }
}
