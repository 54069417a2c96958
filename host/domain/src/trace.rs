//! Links between an anchored declaration and the trace of the run that made it.
//!
//! An agent observed with OpenTelemetry sends its W3C trace context
//! (`traceparent`) with the create. The record does not keep the trace id: its
//! salt, which every record has and which its integrity hash covers, becomes a
//! commitment to it:
//!
//! `salt = SHA-256("anchor-trace/1\n" ‖ trace_key ‖ trace_id)`
//!
//! where `trace_key` is 32 random bytes kept beside the record (outside the
//! hashed text) and `trace_id` the trace id's 16 bytes. The receipt carries
//! the record (salt included) and the key, under the log's signature through
//! the hash; whoever also holds the trace id can show the link, and only they:
//! the trace id is stored, logged and exported nowhere, a vendor who holds
//! trace ids cannot find the record (its salt is readable only by the
//! declaring agent), and the receipt alone says nothing of the trace. Two
//! records of one trace have unrelated salts (each has its own key).
//!
//! The record's encoding is unchanged (`anchor-dd/1`): a build that predates
//! trace links hashes, confirms and serves such a record exactly as any other.

use sha2::{Digest, Sha256};

pub const COMMITMENT_FORMAT: &str = "anchor-trace/1";

/// A W3C Trace Context trace id: 16 bytes, not all zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

impl TraceId {
    /// Reads 32 lower-case hex digits, not all zero (the W3C form). Upper-case
    /// digits are read too, as a person copying an id from a trace viewer may
    /// write them.
    pub fn parse(text: &str) -> Option<TraceId> {
        let text = text.trim();
        if text.len() != 32 {
            return None;
        }
        let mut id = [0u8; 16];
        hex::decode_to_slice(text, &mut id).ok()?;
        (id != [0; 16]).then_some(TraceId(id))
    }

    /// Reads the trace id of a `traceparent` value
    /// (`version-traceid-parentid-flags`, version 00 or a later one read as
    /// 00 prescribes). A value that does not parse gives `None`: a receiver
    /// of trace context ignores a malformed header rather than failing the
    /// request.
    pub fn from_traceparent(value: &str) -> Option<TraceId> {
        let value = value.trim_matches([' ', '\t']);
        let mut parts = value.split('-');
        let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let lower_hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !lower_hex(version, 2) || version == "ff" || !lower_hex(trace, 32) || !lower_hex(parent, 16) || !lower_hex(flags, 2) {
            return None;
        }
        // Version 00 has exactly four fields; a later version may add more.
        if version == "00" && parts.next().is_some() {
            return None;
        }
        if parent == "0000000000000000" {
            return None;
        }
        TraceId::parse(trace)
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

/// The salt of a record linked to `trace` by `key`.
pub fn salt(key: &[u8; 32], trace: TraceId) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(COMMITMENT_FORMAT.as_bytes());
    hash.update(b"\n");
    hash.update(key);
    hash.update(trace.0);
    hash.finalize().into()
}

/// Whether a record's `salt` commits to `trace` under `key`.
pub fn links(salt_of_record: &[u8; 32], key: &[u8; 32], trace: TraceId) -> bool {
    salt(key, trace) == *salt_of_record
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn a_traceparent_gives_its_trace_id() {
        let id = TraceId::from_traceparent(&format!("00-{ID}-00f067aa0ba902b7-01")).unwrap();
        assert_eq!(id.to_hex(), ID);
        // A later version may carry more fields.
        assert_eq!(TraceId::from_traceparent(&format!("01-{ID}-00f067aa0ba902b7-00-extra")), Some(id));
    }

    #[test]
    fn a_malformed_traceparent_gives_none() {
        for bad in [
            String::new(),
            format!("00-{ID}-00f067aa0ba902b7"),
            format!("00-{ID}-00f067aa0ba902b7-01-extra"),
            format!("ff-{ID}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{ID}-0000000000000000-01"),
            format!("00-{}-00f067aa0ba902b7-01", ID.to_uppercase()),
            format!("00-{ID}x-00f067aa0ba902b7-01"),
            format!("00-{}é-00f067aa0ba902b7-01", &ID[..30]),
            format!("00-{ID}\0-00f067aa0ba902b7-01"),
        ] {
            assert_eq!(TraceId::from_traceparent(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_salt_binds_key_and_trace() {
        let id = TraceId::parse(ID).unwrap();
        let other = TraceId::parse("4bf92f3577b34da6a3ce929d0e0e4737").unwrap();
        let key = [7u8; 32];
        let c = salt(&key, id);
        assert_ne!(c, salt(&key, other));
        assert_ne!(c, salt(&[8u8; 32], id));
        assert!(links(&c, &key, id));
        assert!(!links(&c, &key, other));
        let mut expected = Sha256::new();
        expected.update(b"anchor-trace/1\n");
        expected.update(key);
        expected.update(hex::decode(ID).unwrap());
        assert_eq!(c, <[u8; 32]>::from(expected.finalize()));
        assert_eq!(TraceId::parse(&ID.to_uppercase()), Some(id));
        assert_eq!(TraceId::parse(&"0".repeat(32)), None);
    }
}
