//! Witness cosignatures (C2SP `tlog-cosignature`, the Ed25519 `cosignature/v1`
//! type) and the checkpoint requests of the witness protocol (C2SP
//! `tlog-witness`).
//!
//! A cosignature is one more signature line on a signed checkpoint. Its key ID
//! is the first four bytes of SHA-256(name, a newline, 0x04, the 32-byte
//! public key); its signature bytes are a big-endian u64 POSIX time followed by
//! an Ed25519 signature over three parts: the line `cosignature/v1`, the line
//! `time <that time>`, and the checkpoint's note body (final newline included).
//! A witness that cosigns says: at that time, this was the largest tree of the
//! log it had seen, and every tree it saw before is a prefix of it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use signed_note::{Note, NoteError, VerifierList};

use crate::Failure;

/// The signature type byte of an Ed25519 `cosignature/v1` key.
pub const COSIGNATURE_V1: u8 = 0x04;

/// The message a `cosignature/v1` signature covers.
pub fn signed_message(timestamp: u64, body: &[u8]) -> Vec<u8> {
    let mut message = format!("cosignature/v1\ntime {timestamp}\n").into_bytes();
    message.extend_from_slice(body);
    message
}

fn key_id(name: &str, public: &VerifyingKey) -> u32 {
    signed_note::key_id(name, &[&[COSIGNATURE_V1][..], public.as_bytes()].concat())
}

/// A witness's verifier key: `<name>+<key id, 8 hex digits>+<base64 of 0x04 ‖
/// the 32-byte Ed25519 public key>`.
#[derive(Clone, Debug)]
pub struct WitnessKey {
    name: String,
    id: u32,
    key: VerifyingKey,
}

impl WitnessKey {
    pub fn parse(vkey: &str) -> Result<Self, Failure> {
        let bad = |why: &str| Failure::Format(format!("witness key {vkey:?}: {why}"));
        let mut parts = vkey.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("not <name>+<id>+<key>"));
        };
        if !signed_note::is_key_name_valid(name) {
            return Err(bad("the name is empty or holds a space or a plus"));
        }
        if id.len() != 8 {
            return Err(bad("the key ID is not 8 hex digits"));
        }
        let id = u32::from_str_radix(id, 16).map_err(|_| bad("the key ID is not hex"))?;
        let material = B64.decode(material).map_err(|_| bad("the key is not base64"))?;
        let Some((&COSIGNATURE_V1, public)) = material.split_first() else {
            return Err(bad("not a cosignature/v1 key (type 0x04)"));
        };
        let public: [u8; 32] = public.try_into().map_err(|_| bad("not a 32-byte Ed25519 key"))?;
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("not an Ed25519 point"))?;
        if key_id(name, &key) != id {
            return Err(bad("the key ID does not match the name and key"));
        }
        Ok(Self { name: name.to_owned(), id, key })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The key in its text form.
    pub fn vkey(&self) -> String {
        format!("{}+{:08x}+{}", self.name, self.id, B64.encode([&[COSIGNATURE_V1][..], self.key.as_bytes()].concat()))
    }

    /// Checks one cosignature's bytes (time ‖ signature) over a note body and
    /// returns its time.
    pub fn check(&self, body: &[u8], signature: &[u8]) -> Option<u64> {
        let (time, signature) = signature.split_at_checked(8)?;
        let time = u64::from_be_bytes(time.try_into().ok()?);
        if time > i64::MAX as u64 {
            return None;
        }
        let signature = ed25519_dalek::Signature::from_slice(signature).ok()?;
        self.key.verify_strict(&signed_message(time, body), &signature).ok().map(|()| time)
    }
}

impl signed_note::Verifier for WitnessKey {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        self.check(msg, sig).is_some()
    }
}

/// A witness's signing key, in the text form `PRIVATE+KEY+<name>+<id>+<base64
/// of 0x04 ‖ the 32-byte seed>` (the form of a note signer key, with the
/// cosignature type).
pub struct WitnessSigner {
    key: SigningKey,
    public: WitnessKey,
}

impl WitnessSigner {
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, Failure> {
        if !signed_note::is_key_name_valid(name) {
            return Err(Failure::Format(format!("witness name {name:?}: empty, or holds a space or a plus")));
        }
        let key = SigningKey::from_bytes(seed);
        let verifying = key.verifying_key();
        let public = WitnessKey { name: name.to_owned(), id: key_id(name, &verifying), key: verifying };
        Ok(Self { key, public })
    }

    pub fn parse(skey: &str) -> Result<Self, Failure> {
        let bad = |why: &str| Failure::Format(format!("witness signing key: {why}"));
        let rest = skey.trim().strip_prefix("PRIVATE+KEY+").ok_or_else(|| bad("does not start with PRIVATE+KEY+"))?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("not PRIVATE+KEY+<name>+<id>+<key>"));
        };
        let material = B64.decode(material).map_err(|_| bad("the key is not base64"))?;
        let Some((&COSIGNATURE_V1, seed)) = material.split_first() else {
            return Err(bad("not a cosignature/v1 key (type 0x04)"));
        };
        let seed: [u8; 32] = seed.try_into().map_err(|_| bad("not a 32-byte seed"))?;
        let signer = Self::from_seed(name, &seed)?;
        if format!("{:08x}", signer.public.id) != id {
            return Err(bad("the key ID does not match the name and key"));
        }
        Ok(signer)
    }

    /// The signing key in its text form (keep it secret).
    pub fn skey(&self) -> String {
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.public.name,
            self.public.id,
            B64.encode([&[COSIGNATURE_V1][..], self.key.as_bytes()].concat())
        )
    }

    pub fn public(&self) -> &WitnessKey {
        &self.public
    }

    /// The cosignature line (`— <name> <base64>` and a newline) over a note
    /// body at `timestamp`.
    pub fn cosign(&self, body: &[u8], timestamp: u64) -> String {
        let signature = self.key.sign(&signed_message(timestamp, body));
        let mut bytes = self.public.id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&signature.to_bytes());
        format!("\u{2014} {} {}\n", self.public.name, B64.encode(bytes))
    }
}

/// Finds, among signature lines (`— <name> <base64>`, as a witness answers
/// `add-checkpoint`), a valid cosignature by `key` over the note body `body`:
/// the line (newline-terminated) and its time. Lines of other keys, and lines
/// that do not verify, are passed over.
pub fn find_cosignature(body: &[u8], lines: &str, key: &WitnessKey) -> Option<(String, u64)> {
    for line in lines.lines() {
        let Some((name, encoded)) = line.strip_prefix("\u{2014} ").and_then(|rest| rest.split_once(' ')) else { continue };
        if name != key.name {
            continue;
        }
        let Ok(bytes) = B64.decode(encoded) else { continue };
        let Some((id, signature)) = bytes.split_at_checked(4) else { continue };
        if u32::from_be_bytes(id.try_into().expect("four bytes")) != key.id {
            continue;
        }
        if let Some(timestamp) = key.check(body, signature) {
            return Some((format!("{line}\n"), timestamp));
        }
    }
    None
}

/// One valid cosignature found on a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cosigned {
    pub witness: String,
    pub key_id: u32,
    pub timestamp: u64,
}

/// The cosignatures on a signed checkpoint by the given witnesses, each
/// checked. A line that names one of them but does not verify is a failure
/// (a malformed note); lines of other keys (the log's, unknown witnesses')
/// are ignored. `not_after` (POSIX seconds), when given, refuses a
/// cosignature dated later.
pub fn cosignatures(note: &str, witnesses: &[WitnessKey], not_after: Option<u64>) -> Result<Vec<Cosigned>, Failure> {
    let parsed = Note::from_bytes(note.as_bytes()).map_err(|e| Failure::Witness(format!("not a signed note: {e}")))?;
    let verifiers = VerifierList::new(witnesses.iter().map(|w| Box::new(w.clone()) as Box<dyn signed_note::Verifier>).collect());
    let verified = match parsed.verify(&verifiers) {
        Ok((verified, _)) => verified,
        Err(NoteError::UnverifiedNote) => return Ok(Vec::new()),
        Err(e) => return Err(Failure::Witness(format!("a cosignature does not verify: {e}"))),
    };
    let mut found = Vec::new();
    for signature in verified {
        let timestamp = u64::from_be_bytes(signature.signature()[..8].try_into().expect("checked by verify"));
        if let Some(limit) = not_after
            && timestamp > limit
        {
            return Err(Failure::Witness(format!("{}'s cosignature is dated {timestamp}, in the future", signature.name())));
        }
        found.push(Cosigned { witness: signature.name().to_owned(), key_id: signature.id(), timestamp });
    }
    Ok(found)
}

/// Checks that a signed checkpoint carries valid cosignatures from at least
/// `quorum` distinct keys among `witnesses`.
pub fn verify_quorum(note: &str, witnesses: &[WitnessKey], quorum: usize) -> Result<Vec<Cosigned>, Failure> {
    let found = cosignatures(note, witnesses, None)?;
    if found.len() < quorum {
        let names: Vec<&str> = found.iter().map(|c| c.witness.as_str()).collect();
        return Err(Failure::Witness(format!(
            "{} of the {quorum} cosignatures asked for ({})",
            found.len(),
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        )));
    }
    Ok(found)
}

/// The body of an `add-checkpoint` request: the old size line, the
/// consistency proof lines, an empty line, the signed checkpoint.
pub fn add_checkpoint_request(old_size: u64, proof: &[[u8; 32]], checkpoint: &str) -> String {
    let mut body = format!("old {old_size}\n");
    for hash in proof {
        body.push_str(&B64.encode(hash));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(checkpoint);
    body
}

/// An `add-checkpoint` request, read.
#[derive(Debug, PartialEq, Eq)]
pub struct AddCheckpoint<'a> {
    pub old_size: u64,
    pub proof: Vec<[u8; 32]>,
    pub checkpoint: &'a str,
}

/// Reads an `add-checkpoint` request body; the error says what is malformed.
pub fn parse_add_checkpoint(body: &str) -> Result<AddCheckpoint<'_>, String> {
    let (head, checkpoint) = body.split_once("\n\n").ok_or("no empty line before the checkpoint")?;
    let mut lines = head.split('\n');
    let old = lines.next().and_then(|line| line.strip_prefix("old ")).ok_or("the first line is not `old <size>`")?;
    if old.is_empty() || (old.len() > 1 && old.starts_with('0')) || !old.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the old size is not a decimal without leading zeroes".into());
    }
    let old_size: u64 = old.parse().map_err(|_| "the old size is out of range")?;
    let mut proof = Vec::new();
    for line in lines {
        if proof.len() == 63 {
            return Err("more than 63 consistency proof lines".into());
        }
        let hash = B64.decode(line).map_err(|_| format!("{line:?} is not base64"))?;
        proof.push(hash.try_into().map_err(|_| format!("{line:?} is not a 32-byte hash"))?);
    }
    Ok(AddCheckpoint { old_size, proof, checkpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cosignature_verifies_under_its_key_and_not_another() {
        let signer = WitnessSigner::from_seed("witness.example/w1", &[7; 32]).unwrap();
        let again = WitnessSigner::parse(&signer.skey()).unwrap();
        assert_eq!(again.public().vkey(), signer.public().vkey());
        let key = WitnessKey::parse(&signer.public().vkey()).unwrap();
        let body = "example.com/log\n3\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        let (log_skey, _log_vkey) = crate::signing_key_from_seed("example.com/log", &[1; 32]);
        let log = signed_note::StandardSigner::new(&log_skey).unwrap();
        let mut note = Note::new(body.as_bytes(), &[]).unwrap();
        note.add_sigs(&[&log]).unwrap();
        let signed = String::from_utf8(note.to_bytes()).unwrap();
        let cosigned = format!("{signed}{}", signer.cosign(body.as_bytes(), 1_679_315_147));
        let found = verify_quorum(&cosigned, std::slice::from_ref(&key), 1).unwrap();
        assert_eq!(found, vec![Cosigned { witness: "witness.example/w1".into(), key_id: key.id(), timestamp: 1_679_315_147 }]);
        // Not enough, in the future, altered, or someone else's.
        assert!(verify_quorum(&signed, std::slice::from_ref(&key), 1).is_err());
        assert!(cosignatures(&cosigned, std::slice::from_ref(&key), Some(1_679_315_146)).is_err());
        let line = signer.cosign(body.as_bytes(), 1_679_315_147);
        let mut bytes = B64.decode(line.trim_end().rsplit(' ').next().unwrap()).unwrap();
        bytes[20] ^= 1;
        let altered = format!("{signed}\u{2014} witness.example/w1 {}\n", B64.encode(&bytes));
        assert_eq!(verify_quorum(&altered, std::slice::from_ref(&key), 1).unwrap_err().check(), "witness");
        let other = WitnessSigner::from_seed("witness.example/w1", &[8; 32]).unwrap();
        let by_other = format!("{signed}{}", other.cosign(body.as_bytes(), 1_679_315_147));
        assert!(verify_quorum(&by_other, std::slice::from_ref(&key), 1).is_err());
    }

    #[test]
    fn keys_that_lie_about_their_id_or_type_are_refused() {
        let signer = WitnessSigner::from_seed("w", &[3; 32]).unwrap();
        let vkey = signer.public().vkey();
        assert!(WitnessKey::parse(&vkey).is_ok());
        let (name, rest) = vkey.split_once('+').unwrap();
        assert!(WitnessKey::parse(&format!("{name}+00000000+{}", rest.split_once('+').unwrap().1)).is_err());
        let (_, log_vkey) = crate::signing_key_from_seed("w", &[3; 32]);
        assert!(WitnessKey::parse(&log_vkey).is_err(), "a note (0x01) key is not a cosigner key");
    }

    #[test]
    fn add_checkpoint_requests_round_trip_and_malformed_ones_are_named() {
        let proof = [[1u8; 32], [2u8; 32]];
        let body = add_checkpoint_request(12, &proof, "log\n14\nroot=\n\n\u{2014} log sig\n");
        let parsed = parse_add_checkpoint(&body).unwrap();
        assert_eq!(parsed, AddCheckpoint { old_size: 12, proof: proof.to_vec(), checkpoint: "log\n14\nroot=\n\n\u{2014} log sig\n" });
        assert_eq!(parse_add_checkpoint("old 0\n\nlog\n").unwrap().old_size, 0);
        for bad in ["old 01\n\nx", "old -1\n\nx", "new 1\n\nx", "old 1\nnot base64!\n\nx", "old 1\n", "old \n\nx"] {
            assert!(parse_add_checkpoint(bad).is_err(), "{bad:?}");
        }
        let many = format!("old 1\n{}\nx", format!("{}\n", B64.encode([0u8; 32])).repeat(64));
        assert!(parse_add_checkpoint(&many).is_err());
    }
}
