//! The integrity hash of a declaration: `sha256:` and the hex SHA-256 of its
//! canonical encoding.
//!
//! # The canonical encoding, `anchor-dd/1`
//!
//! UTF-8 text, one `key=value` line per field, each line ending in `\n`, in
//! exactly the order [`canonical_encoding`] writes them; the first line is the
//! literal `anchor-dd/1`. Values are the API's wire names (enums as sent,
//! `SELECTED` in upper case), UUIDs in lower-case hyphenated form, times in
//! RFC 3339 UTC with exactly six fractional digits and a `Z`, the salt as 64
//! lower-case hex digits, amounts as integer milli-DAC, `call_chain` joined with
//! `,`. An absent optional value is an empty string after the `=`. Fields added
//! after the first records were hashed come after `dac_amount_milli`, each
//! line present only when its value is (`excluded_option_count`), so that
//! every earlier record's encoding, and its hash, are unchanged. No value can
//! contain `\n` or `,` (every field is an enum, a token, a number or an id), so
//! the encoding is unambiguous.
//!
//! The salt is 32 random bytes per record, readable only by the declaring agent
//! (for a record linked to a trace, derived from 32 random bytes and the trace
//! id, see [`crate::trace`]).
//! Without it, a record made only of enums could be found by hashing every
//! combination; with it, the hash reveals nothing until the agent discloses the
//! salt together with the record.

use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};

use crate::declarations::Declaration;
use crate::declarations::dd::CORE_SCHEMA_VERSION;

pub const ENCODING_NAME: &str = "anchor-dd/1";

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The bytes that are hashed.
pub fn canonical_encoding(d: &Declaration) -> String {
    let opt = |v: Option<String>| v.unwrap_or_default();
    let t = d.template.as_ref();
    let lines: Vec<(&str, String)> = vec![
        ("salt", hex::encode(d.salt)),
        ("dd_id", d.dd_id.to_string()),
        ("agent_id", d.agent_id.to_string()),
        ("ee_id", d.ee_id.to_string()),
        ("core_schema_version", CORE_SCHEMA_VERSION.to_string()),
        ("dd_unit_type", d.dd.unit_type.to_string()),
        ("dd_declaration_mode", d.dd.declaration_mode.to_string()),
        ("decision_type", d.dd.decision_type.to_string()),
        ("decision_action_type", d.dd.action_type.to_string()),
        ("origin_context_type", d.dd.origin_context.to_string()),
        ("selection_state", d.dd.selection_state.to_string()),
        ("selection_scope", opt(d.dd.selection_scope.map(|s| s.to_string()))),
        ("decision_at", opt(d.dd.decision_at.map(time))),
        ("parent_dd_id", opt(d.dd.parent_dd_id.map(|u| u.to_string()))),
        ("anchored_at", time(d.anchored_at)),
        ("ee_retention_period", d.ee.scope.retention.to_string()),
        ("ee_integrity_verification_level", d.ee.scope.integrity.to_string()),
        ("ee_disclosure_format_policy", d.ee.scope.disclosure.to_string()),
        ("ee_responsibility_scope", d.ee.scope.responsibility.to_string()),
        ("content_disclosure_scope", d.ee.scope.content_scope.to_string()),
        ("delegation_state", d.ee.scope.delegation.to_string()),
        ("ee_direct_access_period", d.ee.direct_access_period.to_string()),
        ("ee_direct_access_quota", d.ee.direct_access_quota.to_string()),
        ("access_class", d.ee.access_class.to_string()),
        ("content_inclusion_flag", if d.content_inclusion { "1" } else { "0" }.to_string()),
        ("template.decision_class", opt(t.and_then(|t| t.decision_class).map(|v| v.to_string()))),
        ("template.decision_scale_value", opt(t.and_then(|t| t.decision_scale_value.clone()))),
        ("template.decision_scale_unit", opt(t.and_then(|t| t.decision_scale_unit.clone()))),
        ("template.target_class", opt(t.and_then(|t| t.target_class).map(|v| v.to_string()))),
        ("template.call_chain", opt(t.and_then(|t| t.call_chain.as_ref()).map(|c| c.join(",")))),
        ("template.self_classification", opt(t.and_then(|t| t.self_classification.clone()))),
        ("template.decision_trigger", opt(t.and_then(|t| t.decision_trigger).map(|v| v.to_string()))),
        ("template.human_involvement", opt(t.and_then(|t| t.human_involvement).map(|v| v.to_string()))),
        ("pricing_version", d.pricing_version.clone()),
        ("pricing_component_sha256", d.pricing_sha256.clone()),
        ("dac_amount_milli", d.dac_amount.milli().to_string()),
    ];
    let mut lines = lines;
    if let Some(count) = d.dd.excluded_option_count {
        lines.push(("excluded_option_count", count.to_string()));
    }
    let mut out = String::with_capacity(1024);
    out.push_str(ENCODING_NAME);
    out.push('\n');
    for (key, value) in lines {
        out.push_str(key);
        out.push('=');
        out.push_str(&value);
        out.push('\n');
    }
    out
}

/// `sha256:` followed by 64 lower-case hex digits.
pub fn integrity_hash(d: &Declaration) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(canonical_encoding(d).as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declarations::{dd::*, ee::*};
    use chrono::TimeZone;
    use uuid::Uuid;

    fn sample() -> Declaration {
        Declaration {
            dd_id: Uuid::from_u128(1),
            ee_id: Uuid::from_u128(2),
            agent_id: Uuid::from_u128(3),
            dd: DdFields::BASIC,
            ee: EeFields::basic(),
            content_inclusion: false,
            template: None,
            anchored_at: Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap(),
            lineage_group_id: Uuid::from_u128(1),
            pricing_version: "v1.3.0".into(),
            pricing_sha256: "00".repeat(32),
            dac_amount: crate::MilliDac(10_000),
            salt: [7; 32],
            trace_key: None,
        }
    }

    #[test]
    fn encoding_is_stable() {
        let enc = canonical_encoding(&sample());
        assert!(enc.starts_with("anchor-dd/1\nsalt=0707"));
        assert!(enc.contains("\nanchored_at=2026-11-21T12:00:00.000000Z\n"));
        assert!(enc.ends_with("dac_amount_milli=10000\n"));
        // A fixed vector: if this changes, every stored hash stops verifying.
        assert_eq!(integrity_hash(&sample()), "sha256:b3e7a8ba7916c42f938564a03c2ac4c8f8595c23db7eff16cb29ed31e353ed64");
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = integrity_hash(&sample());
        let mut salted = sample();
        salted.salt[0] = 8;
        let mut scoped = sample();
        scoped.ee.scope.retention = Retention::Long;
        let mut later = sample();
        later.anchored_at += chrono::Duration::microseconds(1);
        for other in [salted, scoped, later] {
            assert_ne!(integrity_hash(&other), base);
        }
    }
}
