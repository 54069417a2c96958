//! The service's signature on its x402 terms (decision 0069): every 402
//! carries a signed offer of what it accepts, in x402's `offer-receipt`
//! extension, signed by the log's own Ed25519 key. Whoever trusts the log
//! key (the key every checkpoint and receipt is verified with) so knows the
//! offer is the service's, without a registry of its own; the key is also
//! published as a `did:web` document (`GET /.well-known/did.json`), which is
//! how x402's verifiers resolve a JWS `kid`.
//!
//! One key, two formats: a C2SP note signature covers note text (lines
//! ending in a newline), a JWS signature covers `header.payload` in
//! base64url, which holds no newline, so neither can pass for the other.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{Value, json};

use crate::log::LogKey;

/// The fragment naming the log key in the service's DID document.
pub const KEY_FRAGMENT: &str = "log-key";

/// The log key as the signer of offers and receipts, under the service's DID.
pub struct OfferSigner {
    key: SigningKey,
    did: String,
    kid: String,
}

impl std::fmt::Debug for OfferSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferSigner").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// The `did:web` of the host `public_url` names (its port escaped as `%3A`;
/// a path is not part of it: the document is served at the host's root).
pub fn did_web(public_url: &str) -> String {
    let rest = public_url.split_once("://").map_or(public_url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    format!("did:web:{}", host.to_ascii_lowercase().replace(':', "%3A"))
}

impl OfferSigner {
    pub fn new(log: &LogKey, public_url: &str) -> anyhow::Result<OfferSigner> {
        let key = SigningKey::from_bytes(&log.seed()?);
        let did = did_web(public_url);
        let kid = format!("{did}#{KEY_FRAGMENT}");
        Ok(OfferSigner { key, did, kid })
    }

    /// A 32-byte key for `purpose`, derived from the log key (every host
    /// sharing the log key derives the same one; it reveals nothing of it).
    pub(crate) fn derived_key(&self, purpose: &str) -> [u8; 32] {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        hash.update(b"anchor-derived-key/1\n");
        hash.update(purpose.as_bytes());
        hash.update(b"\n");
        hash.update(self.key.to_bytes());
        hash.finalize().into()
    }

    /// The public key as a JWK (OKP, Ed25519).
    pub fn jwk(&self) -> Value {
        json!({ "kty": "OKP", "crv": "Ed25519", "x": B64URL.encode(self.key.verifying_key().as_bytes()) })
    }

    /// The DID document `GET /.well-known/did.json` serves: the log key, for
    /// assertions (offers and receipts).
    pub fn did_document(&self) -> Value {
        json!({
            "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/jws-2020/v1"],
            "id": self.did,
            "verificationMethod": [{
                "id": self.kid,
                "type": "JsonWebKey2020",
                "controller": self.did,
                "publicKeyJwk": self.jwk(),
            }],
            "assertionMethod": [self.kid],
        })
    }
}

impl anchor_x402::offers::Signer for OfferSigner {
    fn kid(&self) -> &str {
        &self.kid
    }
    fn alg(&self) -> &'static str {
        "EdDSA"
    }
    fn sign(&self, input: &[u8]) -> Vec<u8> {
        self.key.sign(input).to_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_did_names_the_host_and_port() {
        assert_eq!(did_web("http://127.0.0.1:8080"), "did:web:127.0.0.1%3A8080");
        assert_eq!(did_web("https://Anchor.Example.org/base/path?x"), "did:web:anchor.example.org");
        assert_eq!(did_web("https://anchor.example.org:8443/"), "did:web:anchor.example.org%3A8443");
    }

    #[test]
    fn the_document_holds_the_log_key_that_signs() {
        let log = LogKey::generate("example.org/log").unwrap();
        let signer = OfferSigner::new(&log, "https://example.org").unwrap();
        let document = signer.did_document();
        assert_eq!(document["id"], "did:web:example.org");
        assert_eq!(document["verificationMethod"][0]["id"], "did:web:example.org#log-key");
        // The JWK's key is the log's verifier key (C2SP: name+id+base64 of 0x01
        // and the 32 key bytes; the base64 may hold a "+" itself).
        let vkey_bytes = base64::engine::general_purpose::STANDARD.decode(log.vkey.splitn(3, '+').nth(2).unwrap()).unwrap();
        let x = B64URL.decode(document["verificationMethod"][0]["publicKeyJwk"]["x"].as_str().unwrap()).unwrap();
        assert_eq!(&vkey_bytes[1..], x.as_slice());
        use anchor_x402::offers::Signer;
        let signature = ed25519_dalek::Signature::from_slice(&signer.sign(b"a.b")).unwrap();
        let public = ed25519_dalek::VerifyingKey::from_bytes(&x.try_into().unwrap()).unwrap();
        assert!(public.verify_strict(b"a.b", &signature).is_ok());
    }
}
