//! x402 payments signed in Rust the way the official client signs them, for
//! tests and load tools that pay the server.

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct};
use anchor_x402::TransferWithAuthorization;
use base64::Engine;
use serde_json::{Value, json};

use crate::Reply;

/// Anvil's public test key #0: never holds real money.
const TEST_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

pub fn b64(value: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

/// What to change while signing, to make a bad payment.
#[derive(Default)]
pub struct Twist {
    pub domain_name: Option<&'static str>,
    pub valid_before_in: Option<i64>,
    pub value: Option<u64>,
    pub to: Option<&'static str>,
    pub claim_from: Option<&'static str>,
}

/// Signs an authorization for `challenge` the way the official client does.
pub fn pay(challenge: &Value, now: i64, twist: Twist) -> Value {
    let signer: PrivateKeySigner = TEST_KEY.parse().unwrap();
    let accepts = &challenge["accepts"][0];
    let amount: u64 = accepts["amount"].as_str().unwrap().parse().unwrap();
    let to: Address = twist.to.unwrap_or(accepts["payTo"].as_str().unwrap()).parse().unwrap();
    let from: Address = twist.claim_from.map(|a| a.parse().unwrap()).unwrap_or(signer.address());
    let valid_before = now + twist.valid_before_in.unwrap_or(accepts["maxTimeoutSeconds"].as_i64().unwrap());
    let nonce = B256::from(rand_bytes());
    let message = TransferWithAuthorization {
        from,
        to,
        value: U256::from(twist.value.unwrap_or(amount)),
        validAfter: U256::ZERO,
        validBefore: U256::from(valid_before as u64),
        nonce,
    };
    let domain = Eip712Domain {
        name: Some(twist.domain_name.unwrap_or("USD Coin").into()),
        version: Some("2".into()),
        chain_id: Some(U256::from(8453u64)),
        verifying_contract: Some(accepts["asset"].as_str().unwrap().parse().unwrap()),
        salt: None,
    };
    let signature = signer.sign_hash_sync(&message.eip712_signing_hash(&domain)).unwrap();
    json!({
        "x402Version": 2,
        "resource": challenge["resource"],
        "accepted": accepts,
        "payload": {
            "authorization": {
                "from": format!("{from:#x}"),
                "to": format!("{to:#x}"),
                "value": twist.value.unwrap_or(amount).to_string(),
                "validAfter": "0",
                "validBefore": valid_before.to_string(),
                "nonce": format!("{nonce:#x}"),
            },
            "signature": format!("0x{}", hex::encode(signature.as_bytes())),
        },
    })
}

fn rand_bytes() -> [u8; 32] {
    *uuid::Uuid::new_v4().as_bytes().repeat(2).first_chunk::<32>().unwrap()
}

/// Asserts a 402 whose header and body carry the same challenge; returns it.
#[track_caller]
pub fn challenge_of(reply: &Reply) -> Value {
    assert_eq!(reply.status.as_u16(), 402, "{}", reply.text);
    let header = reply.headers["payment-required"].to_str().unwrap();
    let decoded: Value = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap();
    assert_eq!(decoded, reply.json, "header and body differ");
    assert_eq!(reply.headers["cache-control"], "no-store");
    decoded
}

/// A settler that answers from a script (last first), then settles like the
/// local one; it verifies everything. Tests push outcomes onto `0`.
pub struct Scripted(pub std::sync::Mutex<Vec<anchor_x402::settlement::Settled>>);

impl Scripted {
    pub fn new(script: Vec<anchor_x402::settlement::Settled>) -> std::sync::Arc<Scripted> {
        std::sync::Arc::new(Scripted(std::sync::Mutex::new(script)))
    }
}

#[async_trait::async_trait]
impl anchor_x402::settlement::Settler for Scripted {
    fn mode(&self) -> &'static str {
        "scripted"
    }
    async fn verify(&self, _payload: &Value, _requirements: &Value) -> Result<(), String> {
        Ok(())
    }
    async fn settle(&self, _payload: &str, _requirements: Option<&Value>, local: &str) -> anchor_x402::settlement::Settled {
        let next = self.0.lock().unwrap().pop();
        next.unwrap_or_else(|| anchor_x402::settlement::Settled::Yes { reference: local.to_string() })
    }
}
