//! RFC 3161 time-stamp tokens over checkpoints.
//!
//! A time-stamping authority (TSA) signs, with a certificate the verifier
//! trusts, that a digest existed at a time. The log asks for one over
//! SHA-256 of a checkpoint's note body (the exact bytes the log's signature
//! covers, final newline included), so the checkpoint, and every record it
//! commits to, is bound to a time the log's operator does not control.
//!
//! The ASN.1 is read and written by RustCrypto's `x509-tsp`, `cms` and
//! `x509-cert`; this module only checks what they decode: the imprint, the
//! nonce, the CMS signature over the signed attributes, and the chain from
//! the signing certificate (which must be for time stamping) to a root the
//! caller gives. A token is the DER of a CMS `ContentInfo`, as
//! `openssl ts -verify -token_in` reads it.

use cms::content_info::ContentInfo;
use cms::signed_data::{EncapsulatedContentInfo, SignerIdentifier, SignerInfo};
use der::asn1::{Int, OctetString};
use der::oid::ObjectIdentifier;
use der::oid::db::{rfc5280, rfc5911, rfc5912};
use der::{Any, Decode, Encode, Reader, SliceReader, Tag, TagNumber, Tagged};
use sha2::{Digest, Sha256, Sha384, Sha512};
pub use x509_cert::Certificate;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, SubjectKeyIdentifier};
use x509_cert::spki::{AlgorithmIdentifier, SubjectPublicKeyInfoOwned};
use x509_tsp::{MessageImprint, TimeStampReq, TimeStampResp, TspVersion, TstInfo};

use crate::Failure;

/// `id-ct-TSTInfo`, the content type of a time-stamp token.
const ID_CT_TST_INFO: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.16.1.4");

/// How deep a chain from the signing certificate to a root may be.
const MAX_CHAIN: usize = 8;

fn fail(why: impl Into<String>) -> Failure {
    Failure::Timestamp(why.into())
}

/// The bytes a checkpoint's token is over: the note's text, which the
/// log's signature covers, final newline included (everything before the
/// blank line that opens the signature lines).
pub fn checkpoint_body(note: &str) -> Result<&str, Failure> {
    note.split_once("\n\n").map(|(text, _)| &note[..text.len() + 1]).ok_or_else(|| fail("the checkpoint is not a signed note"))
}

/// What a checked token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamped {
    /// The TSA's time, POSIX seconds.
    pub gen_time: u64,
    /// The signing certificate's subject.
    pub tsa: String,
    /// The token's serial number, hex.
    pub serial: String,
}

/// A `TimeStampReq` (DER) for SHA-256 of `body`, with `nonce` and the
/// signing certificate asked for.
pub fn request(body: &[u8], nonce: &[u8]) -> Result<Vec<u8>, Failure> {
    let request = TimeStampReq {
        version: TspVersion::V1,
        message_imprint: MessageImprint {
            hash_algorithm: AlgorithmIdentifier { oid: rfc5912::ID_SHA_256, parameters: Some(Any::null()) },
            hashed_message: OctetString::new(Sha256::digest(body).to_vec()).map_err(|e| fail(e.to_string()))?,
        },
        req_policy: None,
        nonce: Some(Int::new(nonce).map_err(|e| fail(e.to_string()))?),
        cert_req: true,
        extensions: None,
    };
    request.to_der().map_err(|e| fail(e.to_string()))
}

/// The token of a `TimeStampResp` (DER), when its status grants one.
pub fn token_of_reply(reply: &[u8]) -> Result<Vec<u8>, Failure> {
    let reply = TimeStampResp::from_der(reply).map_err(|e| fail(format!("the reply is not a TimeStampResp: {e}")))?;
    let status = reply.status.status as u8;
    // granted (0) or grantedWithMods (1); anything else is a refusal.
    if status > 1 {
        let text = reply.status.status_string.as_ref().map(|s| format!("{s:?}")).unwrap_or_default();
        return Err(fail(format!("the TSA refused (status {status}) {text}")));
    }
    let token = reply.time_stamp_token.ok_or_else(|| fail("the reply grants no token"))?;
    token.to_der().map_err(|e| fail(e.to_string()))
}

/// Reads PEM certificates: the roots a token must chain to.
pub fn roots_from_pem(pem: &[u8]) -> Result<Vec<Certificate>, Failure> {
    let roots = Certificate::load_pem_chain(pem).map_err(|e| fail(format!("reading the CA certificates: {e}")))?;
    if roots.is_empty() {
        return Err(fail("no certificate in the CA file"));
    }
    Ok(roots)
}

/// Checks a token (DER of a CMS `ContentInfo`) over SHA-256 of `body`:
/// the imprint, the nonce when one was sent, the signature over the signed
/// attributes (which hold the digest of the `TSTInfo`), that the signing
/// certificate is for time stamping and valid at the token's time, and its
/// chain to one of `roots`.
pub fn verify_token(token: &[u8], body: &[u8], nonce: Option<&[u8]>, roots: &[Certificate]) -> Result<Stamped, Failure> {
    let info = ContentInfo::from_der(token).map_err(|e| fail(format!("not a CMS ContentInfo: {e}")))?;
    if info.content_type != rfc5911::ID_SIGNED_DATA {
        return Err(fail("the token is not CMS SignedData"));
    }
    let signed = read_signed_data(&info.content).map_err(|e| fail(format!("the SignedData does not decode: {e}")))?;
    if signed.encap.econtent_type != ID_CT_TST_INFO {
        return Err(fail("the signed content is not a TSTInfo"));
    }
    let content = signed.encap.econtent.as_ref().ok_or_else(|| fail("the token carries no TSTInfo"))?;
    let tst_der = OctetString::from_der(&content.to_der().map_err(|e| fail(e.to_string()))?)
        .map_err(|e| fail(format!("the TSTInfo is not in an OCTET STRING: {e}")))?;
    let tst = TstInfo::from_der(tst_der.as_bytes()).map_err(|e| fail(format!("the TSTInfo does not decode: {e}")))?;

    if tst.message_imprint.hash_algorithm.oid != rfc5912::ID_SHA_256 {
        return Err(fail("the token's imprint is not SHA-256"));
    }
    if tst.message_imprint.hashed_message.as_bytes() != &Sha256::digest(body)[..] {
        return Err(fail("the token's imprint is not SHA-256 of the checkpoint"));
    }
    if let Some(nonce) = nonce {
        let sent = Int::new(nonce).map_err(|e| fail(e.to_string()))?;
        if tst.nonce.as_ref() != Some(&sent) {
            return Err(fail("the token's nonce is not the one sent"));
        }
    }
    let gen_time = tst.gen_time.to_unix_duration().as_secs();

    let [signer] = signed.signers.as_slice() else {
        return Err(fail(format!("the token has {} signers, not one", signed.signers.len())));
    };
    let carried: Vec<&Certificate> = signed.certificates.iter().collect();
    let candidates = || carried.iter().copied().chain(roots.iter());
    let leaf = candidates()
        .find(|cert| match &signer.sid {
            SignerIdentifier::IssuerAndSerialNumber(id) => {
                cert.tbs_certificate.issuer == id.issuer && cert.tbs_certificate.serial_number == id.serial_number
            }
            SignerIdentifier::SubjectKeyIdentifier(id) => subject_key_id(cert).as_ref() == Some(id),
        })
        .ok_or_else(|| fail("the signing certificate is neither in the token nor among the CA certificates"))?;

    // The signed attributes: the content type and the TSTInfo's digest.
    let attributes = signer.signed_attrs.as_ref().ok_or_else(|| fail("the signer has no signed attributes"))?;
    let attribute = |oid: ObjectIdentifier| {
        let mut found = attributes.iter().filter(|a| a.oid == oid);
        match (found.next(), found.next()) {
            (Some(a), None) if a.values.len() == 1 => Ok(a.values.get(0).expect("one value")),
            _ => Err(fail(format!("the signed attributes do not hold exactly one {oid}"))),
        }
    };
    let content_type: ObjectIdentifier = attribute(rfc5911::ID_CONTENT_TYPE)?.decode_as().map_err(|e| fail(e.to_string()))?;
    if content_type != ID_CT_TST_INFO {
        return Err(fail("the signed content type is not TSTInfo"));
    }
    let digest: OctetString = attribute(rfc5911::ID_MESSAGE_DIGEST)?.decode_as().map_err(|e| fail(e.to_string()))?;
    if digest.as_bytes() != &hash(signer.digest_alg.oid, tst_der.as_bytes())?[..] {
        return Err(fail("the signed digest is not the TSTInfo's"));
    }
    let signed_bytes = attributes.to_der().map_err(|e| fail(e.to_string()))?;
    let digest_of_attributes = hash(signer.digest_alg.oid, &signed_bytes)?;
    check_signature(
        &leaf.tbs_certificate.subject_public_key_info,
        signer.signature_algorithm.oid,
        &digest_of_attributes,
        signer.signature.as_bytes(),
    )
    .map_err(|why| fail(format!("the TSA's signature does not verify: {why}")))?;

    // The signing certificate: for time stamping, valid at the token's time.
    let extensions = leaf.tbs_certificate.extensions.as_deref().unwrap_or_default();
    let eku = extensions
        .iter()
        .find(|e| e.extn_id == rfc5280::ID_CE_EXT_KEY_USAGE)
        .ok_or_else(|| fail("the signing certificate has no extended key usage"))?;
    let usages = ExtendedKeyUsage::from_der(eku.extn_value.as_bytes()).map_err(|e| fail(e.to_string()))?;
    if !eku.critical || usages.0 != [rfc5280::ID_KP_TIME_STAMPING] {
        return Err(fail("the signing certificate is not one for time stamping only (a critical extended key usage of timeStamping)"));
    }
    let validity = &leaf.tbs_certificate.validity;
    if gen_time < validity.not_before.to_unix_duration().as_secs() || gen_time > validity.not_after.to_unix_duration().as_secs() {
        return Err(fail("the signing certificate was not valid at the token's time"));
    }
    chain_to_root(leaf, &carried, roots)?;

    Ok(Stamped { gen_time, tsa: leaf.tbs_certificate.subject.to_string(), serial: hex::encode(tst.serial_number.as_bytes()) })
}

/// The parts of a CMS SignedData a token check reads.
struct Signed {
    encap: EncapsulatedContentInfo,
    certificates: Vec<Certificate>,
    signers: Vec<SignerInfo>,
}

/// Reads a SignedData field by field. `cms::SignedData` decodes its
/// certificate set as strict DER, which refuses a certificate given twice,
/// and TSAs do send their signing certificate twice (OpenSSL's, when its
/// chain file holds it); here the certificates are read one by one.
fn read_signed_data(content: &Any) -> der::Result<Signed> {
    let mut reader = SliceReader::new(content.value())?;
    let _version: Int = reader.decode()?;
    let _digest_algorithms: Any = reader.decode()?;
    let encap: EncapsulatedContentInfo = reader.decode()?;
    let mut next: Any = reader.decode()?;
    let mut certificates = Vec::new();
    if next.tag() == (Tag::ContextSpecific { constructed: true, number: TagNumber::N0 }) {
        let mut set = SliceReader::new(next.value())?;
        while !set.is_finished() {
            let choice: Any = set.decode()?;
            // Other certificate formats ([1] to [3]) are not ours to use.
            if choice.tag() == Tag::Sequence {
                certificates.push(Certificate::from_der(&choice.to_der()?)?);
            }
        }
        next = reader.decode()?;
    }
    if next.tag() == (Tag::ContextSpecific { constructed: true, number: TagNumber::N1 }) {
        next = reader.decode()?;
    }
    next.tag().assert_eq(Tag::Set)?;
    let mut set = SliceReader::new(next.value())?;
    let mut signers = Vec::new();
    while !set.is_finished() {
        signers.push(set.decode()?);
    }
    reader.finish(())?;
    Ok(Signed { encap, certificates, signers })
}

fn subject_key_id(cert: &Certificate) -> Option<SubjectKeyIdentifier> {
    let extensions = cert.tbs_certificate.extensions.as_ref()?;
    let extension = extensions.iter().find(|e| e.extn_id == rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER)?;
    SubjectKeyIdentifier::from_der(extension.extn_value.as_bytes()).ok()
}

/// Follows issuers from `leaf` until a certificate of `roots`, checking each
/// signature; certificates in between must be CAs.
fn chain_to_root(leaf: &Certificate, carried: &[&Certificate], roots: &[Certificate]) -> Result<(), Failure> {
    let mut current = leaf;
    for _ in 0..MAX_CHAIN {
        if roots.iter().any(|root| root == current) {
            return Ok(());
        }
        let tbs = current.tbs_certificate.to_der().map_err(|e| fail(e.to_string()))?;
        let signature = current.signature.as_bytes().ok_or_else(|| fail("a certificate's signature is not whole bytes"))?;
        let issued_by = |issuer: &Certificate| {
            issuer.tbs_certificate.subject == current.tbs_certificate.issuer
                && hash_of_signature(current.signature_algorithm.oid)
                    .and_then(|digest| hash(digest, &tbs))
                    .and_then(|digest| {
                        check_signature(
                            &issuer.tbs_certificate.subject_public_key_info,
                            current.signature_algorithm.oid,
                            &digest,
                            signature,
                        )
                        .map_err(fail)
                    })
                    .is_ok()
        };
        if roots.iter().any(issued_by) {
            return Ok(());
        }
        let Some(issuer) = carried.iter().copied().find(|c| *c != current && issued_by(c)) else {
            return Err(fail(format!("no CA certificate given issued {}", current.tbs_certificate.subject)));
        };
        let is_ca = issuer
            .tbs_certificate
            .extensions
            .iter()
            .flatten()
            .find(|e| e.extn_id == rfc5280::ID_CE_BASIC_CONSTRAINTS)
            .and_then(|e| BasicConstraints::from_der(e.extn_value.as_bytes()).ok())
            .is_some_and(|b| b.ca);
        if !is_ca {
            return Err(fail(format!("{} signs certificates but is not a CA", issuer.tbs_certificate.subject)));
        }
        current = issuer;
    }
    Err(fail("the certificate chain is too long"))
}

fn hash(algorithm: ObjectIdentifier, data: &[u8]) -> Result<Vec<u8>, Failure> {
    match algorithm {
        rfc5912::ID_SHA_256 => Ok(Sha256::digest(data).to_vec()),
        rfc5912::ID_SHA_384 => Ok(Sha384::digest(data).to_vec()),
        rfc5912::ID_SHA_512 => Ok(Sha512::digest(data).to_vec()),
        other => Err(fail(format!("digest algorithm {other} is not supported (SHA-256, SHA-384, SHA-512 are)"))),
    }
}

/// The digest a signature algorithm names (certificate signatures).
fn hash_of_signature(algorithm: ObjectIdentifier) -> Result<ObjectIdentifier, Failure> {
    match algorithm {
        rfc5912::SHA_256_WITH_RSA_ENCRYPTION | rfc5912::ECDSA_WITH_SHA_256 => Ok(rfc5912::ID_SHA_256),
        rfc5912::SHA_384_WITH_RSA_ENCRYPTION | rfc5912::ECDSA_WITH_SHA_384 => Ok(rfc5912::ID_SHA_384),
        rfc5912::SHA_512_WITH_RSA_ENCRYPTION | rfc5912::ECDSA_WITH_SHA_512 => Ok(rfc5912::ID_SHA_512),
        other => Err(fail(format!("signature algorithm {other} is not supported"))),
    }
}

/// Checks `signature` over a message whose digest is `digest`, under the key
/// of `key`: RSA PKCS #1 v1.5, or ECDSA on P-256 or P-384.
fn check_signature(key: &SubjectPublicKeyInfoOwned, algorithm: ObjectIdentifier, digest: &[u8], signature: &[u8]) -> Result<(), String> {
    use p256::ecdsa::signature::hazmat::PrehashVerifier;
    let raw = key.subject_public_key.as_bytes().ok_or("the public key is not whole bytes")?;
    match key.algorithm.oid {
        rfc5912::RSA_ENCRYPTION => {
            let scheme = match digest.len() {
                32 => rsa::Pkcs1v15Sign::new::<Sha256>(),
                48 => rsa::Pkcs1v15Sign::new::<Sha384>(),
                64 => rsa::Pkcs1v15Sign::new::<Sha512>(),
                _ => return Err("unsupported digest length".into()),
            };
            if !matches!(
                algorithm,
                rfc5912::RSA_ENCRYPTION
                    | rfc5912::SHA_256_WITH_RSA_ENCRYPTION
                    | rfc5912::SHA_384_WITH_RSA_ENCRYPTION
                    | rfc5912::SHA_512_WITH_RSA_ENCRYPTION
            ) {
                return Err(format!("an RSA key with signature algorithm {algorithm}"));
            }
            use rsa::pkcs1::DecodeRsaPublicKey;
            let key = rsa::RsaPublicKey::from_pkcs1_der(raw).map_err(|e| e.to_string())?;
            key.verify(scheme, digest, signature).map_err(|e| e.to_string())
        }
        rfc5912::ID_EC_PUBLIC_KEY => {
            if !matches!(algorithm, rfc5912::ECDSA_WITH_SHA_256 | rfc5912::ECDSA_WITH_SHA_384 | rfc5912::ECDSA_WITH_SHA_512) {
                return Err(format!("an EC key with signature algorithm {algorithm}"));
            }
            let curve: ObjectIdentifier =
                key.algorithm.parameters.as_ref().ok_or("an EC key without its curve")?.decode_as().map_err(|e| e.to_string())?;
            match curve {
                rfc5912::SECP_256_R_1 => {
                    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(raw).map_err(|e| e.to_string())?;
                    let signature = p256::ecdsa::Signature::from_der(signature).map_err(|e| e.to_string())?;
                    key.verify_prehash(digest, &signature).map_err(|e| e.to_string())
                }
                rfc5912::SECP_384_R_1 => {
                    let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(raw).map_err(|e| e.to_string())?;
                    let signature = p384::ecdsa::Signature::from_der(signature).map_err(|e| e.to_string())?;
                    key.verify_prehash(digest, &signature).map_err(|e| e.to_string())
                }
                other => Err(format!("curve {other} is not supported (P-256 and P-384 are)")),
            }
        }
        other => Err(format!("key algorithm {other} is not supported (RSA and EC are)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_the_checkpoints_digest_and_the_nonce() {
        let body = b"example.com/log\n3\nAAAA\n";
        let der = request(body, &[0x42, 1, 2, 3, 4, 5, 6, 7]).unwrap();
        let read = TimeStampReq::from_der(&der).unwrap();
        assert_eq!(read.message_imprint.hashed_message.as_bytes(), &Sha256::digest(body)[..]);
        assert_eq!(read.message_imprint.hash_algorithm.oid, rfc5912::ID_SHA_256);
        assert_eq!(read.nonce.unwrap().as_bytes(), [0x42, 1, 2, 3, 4, 5, 6, 7]);
        assert!(read.cert_req);
    }

    #[test]
    fn what_is_not_a_token_or_a_reply_is_named() {
        assert!(matches!(verify_token(b"\x30\x03\x02\x01\x01", b"x", None, &[]), Err(Failure::Timestamp(_))));
        assert!(matches!(token_of_reply(b"not der"), Err(Failure::Timestamp(_))));
        assert!(roots_from_pem(b"no pem here").is_err());
    }
}
