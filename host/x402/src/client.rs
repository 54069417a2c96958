//! Paying a challenge the way the official x402 client does: an EIP-3009
//! `TransferWithAuthorization` for the amount, payee and asset the challenge
//! asks, signed under USDC's EIP-712 domain on Base, wrapped in an x402 v2
//! payment payload for the `PAYMENT-SIGNATURE` header.

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct};
use base64::Engine;
use serde_json::{Value, json};

use crate::{NETWORK, TransferWithAuthorization};

/// What a challenge asks, read from its first `accepts` entry of the exact
/// scheme on Base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// USDC base units (six decimals).
    pub amount_units: u64,
    pub pay_to: Address,
    pub asset: Address,
    pub max_timeout_secs: u64,
    /// The entry itself, echoed as `accepted` in the payment.
    pub accepted: Value,
}

/// Reads what `challenge` (an x402 v2 PaymentRequired object) asks.
pub fn asked(challenge: &Value) -> Result<Asked, String> {
    let accepted = challenge["accepts"]
        .as_array()
        .and_then(|all| all.iter().find(|a| a["scheme"] == "exact" && a["network"] == NETWORK))
        .ok_or("the challenge offers no exact payment on Base")?;
    let field = |name: &str| accepted[name].as_str().ok_or(format!("the challenge's {name} is missing"));
    Ok(Asked {
        amount_units: field("amount")?.parse().map_err(|_| "the challenge's amount is not a whole number of base units")?,
        pay_to: field("payTo")?.parse().map_err(|_| "the challenge's payTo is not an address")?,
        asset: field("asset")?.parse().map_err(|_| "the challenge's asset is not an address")?,
        max_timeout_secs: accepted["maxTimeoutSeconds"].as_u64().ok_or("the challenge's maxTimeoutSeconds is missing")?,
        accepted: accepted.clone(),
    })
}

/// The EIP-712 domain of the asset the challenge names (its `extra` gives the
/// token's name and version, as USDC's is "USD Coin", "2").
fn domain(asked: &Asked) -> Eip712Domain {
    let extra = &asked.accepted["extra"];
    Eip712Domain {
        name: Some(extra["name"].as_str().unwrap_or("USD Coin").to_string().into()),
        version: Some(extra["version"].as_str().unwrap_or("2").to_string().into()),
        chain_id: Some(U256::from(8453u64)),
        verifying_contract: Some(asked.asset),
        salt: None,
    }
}

/// Signs a payment of what `challenge` asks, valid from now for the
/// challenge's timeout, with a fresh random nonce.
pub fn pay(challenge: &Value, signer: &PrivateKeySigner, now: i64) -> Result<Value, String> {
    let asked = asked(challenge)?;
    let valid_before = now.max(0) as u64 + asked.max_timeout_secs;
    let nonce = B256::from(rand::random::<[u8; 32]>());
    let from = signer.address();
    let message = TransferWithAuthorization {
        from,
        to: asked.pay_to,
        value: U256::from(asked.amount_units),
        validAfter: U256::ZERO,
        validBefore: U256::from(valid_before),
        nonce,
    };
    let signature = signer.sign_hash_sync(&message.eip712_signing_hash(&domain(&asked))).map_err(|e| format!("signing failed: {e}"))?;
    Ok(json!({
        "x402Version": 2,
        "resource": challenge["resource"],
        "accepted": asked.accepted,
        "payload": {
            "authorization": {
                "from": format!("{from:#x}"),
                "to": format!("{:#x}", asked.pay_to),
                "value": asked.amount_units.to_string(),
                "validAfter": "0",
                "validBefore": valid_before.to_string(),
                "nonce": format!("{nonce:#x}"),
            },
            "signature": format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes())),
        },
    }))
}

/// A payment as the `PAYMENT-SIGNATURE` header carries it: base64 of its JSON.
pub fn header(payment: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(payment.to_string())
}

/// The challenge a 402 answer carries in its `PAYMENT-REQUIRED` header.
pub fn challenge_of(header: &str) -> Result<Value, String> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(header.trim()).map_err(|_| "the PAYMENT-REQUIRED header is not base64")?;
    serde_json::from_slice(&bytes).map_err(|_| "the PAYMENT-REQUIRED header is not JSON".to_string())
}

/// A wallet's signer, from the hex private key a file holds (`0x` optional).
/// A new random wallet key: its hex (`0x` and 64 digits) and its address.
pub fn new_key() -> (String, String) {
    let signer = PrivateKeySigner::random();
    (format!("0x{}", alloy_primitives::hex::encode(signer.credential().to_bytes())), signer.address().to_string())
}

pub fn signer_from_key(text: &str) -> Result<PrivateKeySigner, String> {
    text.trim()
        .trim_start_matches("0x")
        .parse::<PrivateKeySigner>()
        .map_err(|_| "the wallet key is not a hex secp256k1 private key".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payment signed here passes the service's own verification.
    #[test]
    fn a_signed_payment_verifies() {
        let signer = signer_from_key("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80").unwrap();
        let requirement = crate::requirement("0x209693Bc6afc0C5328bA36FaF03C514EF312287C", 10_500, 1800);
        let challenge =
            serde_json::to_value(crate::challenge("http://x/v1/dd/create", "a declaration", requirement.clone(), None)).unwrap();
        let now = 1_790_000_000;
        let payment = pay(&challenge, &signer, now).unwrap();
        let verified = crate::verify(&payment, &requirement.to_value(), now).expect("verifies");
        assert_eq!(format!("{:#x}", signer.address()), verified.payer.to_lowercase());
        assert_eq!(challenge_of(&header(&challenge)).unwrap(), challenge);
        assert!(signer_from_key("not a key").is_err());
    }
}
