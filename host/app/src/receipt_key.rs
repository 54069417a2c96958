//! The key that signs COSE receipts (RFC 9942): ES256 (ECDSA on P-256 with
//! SHA-256), a key of its own beside the log's Ed25519 key, since a key
//! serves one purpose. Its `kid` is its RFC 9679 thumbprint. Hosts sharing a
//! database may share it or each have its own; every key a host has
//! signed with is kept in the database and served with the current one, so
//! receipts signed before a rotation, or by another host with a key of its
//! own, still verify (decision 0065).
//!
//! The secret is one line, `PRIVATE+COSE+ES256+<base64url of the 32-byte
//! scalar>`, from `--receipt-signing-key`, else the file
//! `<data-dir>/receipt-signing.key`, created on first start (mode 0600).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use p256::ecdsa::SigningKey;
use p256::ecdsa::signature::Signer;

use anchor_verify::cose::EcKey;

const PREFIX: &str = "PRIVATE+COSE+ES256+";

/// A receipt signing key and its public half.
pub struct ReceiptKey {
    signing: SigningKey,
    public: EcKey,
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptKey").field("kid", &B64URL.encode(self.kid())).finish_non_exhaustive()
    }
}

impl ReceiptKey {
    fn of(signing: SigningKey) -> ReceiptKey {
        let public = EcKey::from_sec1(signing.verifying_key().to_encoded_point(false).as_bytes()).expect("an uncompressed point");
        ReceiptKey { signing, public }
    }

    /// A new random key.
    pub fn generate() -> ReceiptKey {
        loop {
            let mut scalar = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut scalar);
            // All but about 2^-128 of the 32-byte strings are scalars of P-256.
            if let Ok(signing) = SigningKey::from_slice(&scalar) {
                return ReceiptKey::of(signing);
            }
        }
    }

    /// Reads `PRIVATE+COSE+ES256+<base64url scalar>`.
    pub fn from_skey(text: &str) -> anyhow::Result<ReceiptKey> {
        let encoded = text.trim().strip_prefix(PREFIX).ok_or_else(|| anyhow::anyhow!("a receipt signing key starts with {PREFIX}"))?;
        let scalar = B64URL.decode(encoded).map_err(|_| anyhow::anyhow!("a receipt signing key's scalar is base64url"))?;
        let signing = SigningKey::from_slice(&scalar).map_err(|_| anyhow::anyhow!("the receipt signing key is not a P-256 scalar"))?;
        Ok(ReceiptKey::of(signing))
    }

    /// The key in `path`, or a new one written there (mode 0600) when there is none.
    pub fn load_or_create(path: &Path) -> anyhow::Result<ReceiptKey> {
        match std::fs::read_to_string(path) {
            Ok(text) => ReceiptKey::from_skey(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = ReceiptKey::generate();
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                crate::log::write_private(path, &format!("{}\n", key.skey()))?;
                tracing::info!(file = %path.display(), kid = %B64URL.encode(key.kid()), "created the receipt signing key");
                Ok(key)
            }
            Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
        }
    }

    /// The secret line.
    pub fn skey(&self) -> String {
        format!("{PREFIX}{}", B64URL.encode(self.signing.to_bytes()))
    }

    pub fn public(&self) -> &EcKey {
        &self.public
    }

    /// The RFC 9679 thumbprint receipts name it by.
    pub fn kid(&self) -> [u8; 32] {
        self.public.thumbprint()
    }

    /// An ES256 signature of `bytes`: r || s, 64 bytes, as COSE wants it
    /// (deterministic, RFC 6979).
    pub fn sign(&self, bytes: &[u8]) -> Vec<u8> {
        let signature: p256::ecdsa::Signature = self.signing.sign(bytes);
        signature.to_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_from_its_line_and_signs_what_its_public_half_verifies() {
        let key = ReceiptKey::generate();
        let again = ReceiptKey::from_skey(&key.skey()).unwrap();
        assert_eq!(again.kid(), key.kid());
        let claims = anchor_verify::cose::Claims { iss: "x".into(), sub: "y".into(), iat: 0 };
        let root = [5u8; 32];
        let message = coset::CoseSign1Builder::new()
            .protected(coset::HeaderBuilder::new().algorithm(coset::iana::Algorithm::ES256).build())
            .create_detached_signature(&root, b"", |tbs| key.sign(tbs))
            .build();
        let verifying = {
            let point = p256::EncodedPoint::from_affine_coordinates(&key.public().x.into(), &key.public().y.into(), false);
            p256::ecdsa::VerifyingKey::from_encoded_point(&point).unwrap()
        };
        message
            .verify_detached_signature(&root, b"", |sig, tbs| {
                use p256::ecdsa::signature::Verifier;
                verifying.verify(tbs, &p256::ecdsa::Signature::from_slice(sig).map_err(|_| ())?).map_err(|_| ())
            })
            .unwrap();
        let _ = claims;
        assert!(ReceiptKey::from_skey("PRIVATE+KEY+x").is_err());
    }
}
