//! Local verification of one x402 payment: decode nothing, match the
//! requirement, check the window, hash the EIP-712 message and recover the
//! signer (secp256k1); beside it, what the service's own signatures add
//! (decision 0069): the signed offer every 402 carries and the signed
//! receipt every settlement carries (canonical JSON, Ed25519, base64url).
//!
//!     cargo bench -p anchor-benches --bench x402_verify

use std::hint::black_box;

use alloy_primitives::{B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::SolStruct;
use anchor_x402::{self as x402, TransferWithAuthorization, usdc_domain};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn verify(c: &mut Criterion) {
    let signer: PrivateKeySigner = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80".parse().unwrap();
    let now = 1_800_000_000i64;
    let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    let requirement = json!({
        "scheme": "exact", "network": "eip155:8453", "amount": "10000",
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": pay_to,
        "maxTimeoutSeconds": 2100, "extra": { "name": "USD Coin", "version": "2" },
    });
    let message = TransferWithAuthorization {
        from: signer.address(),
        to: pay_to.parse().unwrap(),
        value: U256::from(10_000u64),
        validAfter: U256::ZERO,
        validBefore: U256::from((now + 2100) as u64),
        nonce: B256::repeat_byte(7),
    };
    let signature = signer.sign_hash_sync(&message.eip712_signing_hash(&usdc_domain())).unwrap();
    let payload = json!({
        "x402Version": 2,
        "accepted": requirement,
        "payload": {
            "authorization": {
                "from": format!("{:#x}", signer.address()), "to": pay_to, "value": "10000",
                "validAfter": "0", "validBefore": (now + 2100).to_string(), "nonce": format!("{:#x}", B256::repeat_byte(7)),
            },
            "signature": format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes())),
        },
    });
    x402::verify(&payload, &requirement, now).expect("the payment verifies");
    c.bench_function("x402_local_verify", |b| b.iter(|| x402::verify(black_box(&payload), black_box(&requirement), now).unwrap()));
    let log = anchor_app::log::LogKey::generate("bench.example/log").unwrap();
    let signer = anchor_app::offers::OfferSigner::new(&log, "https://bench.example").unwrap();
    let offered = x402::requirement(pay_to, 10_000, 2100);
    let resource = "https://bench.example/v1/dd/create";
    c.bench_function("x402_signed_offer", |b| {
        b.iter(|| x402::offers::signed_offer(&signer, black_box(resource), black_box(&offered), 0, (now + 2100) as u64))
    });
    let (payer, transaction) = (format!("{:#x}", signer_address(&payload)), format!("local:{:#x}", B256::repeat_byte(9)));
    c.bench_function("x402_signed_receipt", |b| {
        b.iter(|| x402::offers::signed_receipt(&signer, black_box(resource), "eip155:8453", &payer, &transaction, now as u64))
    });
}

fn signer_address(payload: &serde_json::Value) -> alloy_primitives::Address {
    payload["payload"]["authorization"]["from"].as_str().unwrap().parse().unwrap()
}

criterion_group!(benches, verify);
criterion_main!(benches);
