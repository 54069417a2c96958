//! The official x402 client from npm (`@x402/fetch`, `@x402/evm`, viem; pinned
//! in tests/e2e/x402/package-lock.json) pays a running `anchor` over loopback
//! in local settlement mode. `scripts/test` runs `npm ci` there first.

mod common;

use std::path::Path;
use std::process::Command;

#[tokio::test]
async fn the_official_client_pays_and_confirms() {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/x402");
    assert!(
        e2e.join("node_modules/@x402/fetch").exists(),
        "the x402 client is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    let (server, base, data) = common::serve_sqlite("x402", &["--pay-to", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]).await;
    let evidence = data.join("evidence.json");
    let output = Command::new("node")
        .args(["--test", "paid.test.mjs"])
        .current_dir(&e2e)
        .env("ANCHOR_BASE_URL", &base)
        .env("ANCHOR_EVIDENCE_OUT", &evidence)
        .output()
        .expect("node runs");
    let key: serde_json::Value = reqwest::get(format!("{base}/v1/log/key")).await.unwrap().json().await.unwrap();
    drop(server);
    assert!(
        output.status.success(),
        "node test failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // Both node tests ran: the wrapped fetch, and the X-PAYMENT retry of the published SDK.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("# pass 2") && stdout.contains("# fail 0"), "{stdout}");

    // The bundle of the declaration the official client paid verifies
    // offline, says what it proves and what it cannot, and each tampering is
    // refused with its check named.
    let vkey = key["public_key"].as_str().unwrap();
    let verify =
        |file: &Path| Command::new(env!("CARGO_BIN_EXE_anchor")).args(["verify", "--key", vkey, "--evidence"]).arg(file).output().unwrap();
    let checked = verify(&evidence);
    let said = String::from_utf8_lossy(&checked.stdout).to_string();
    assert!(checked.status.success(), "{said}{}", String::from_utf8_lossy(&checked.stderr));
    for line in [
        "ok (scope): record",
        "ok (proof): leaf",
        "ok (order): payment",
        "ok (payment): 0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
        "proves: ",
        "cannot prove: anything about the decision's content",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }
    let bundle: serde_json::Value = serde_json::from_slice(&std::fs::read(&evidence).unwrap()).unwrap();
    type Tamper = fn(&mut serde_json::Value);
    let tampered: [(&str, Tamper); 3] = [
        ("scope", |b| b["scope"]["decision_type"] = "internal_service".into()),
        ("proof", |b| b["receipt"]["inclusion_proof"][0] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into()),
        ("payment", |b| b["payments"][0]["amount"] = "147".into()),
    ];
    for (check, tamper) in tampered {
        let mut copy = bundle.clone();
        tamper(&mut copy);
        let file = data.join(format!("evidence-{check}.json"));
        std::fs::write(&file, serde_json::to_vec(&copy).unwrap()).unwrap();
        let refused = verify(&file);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{check}: {stderr}");
        assert!(stderr.contains(&format!("FAILED ({check} check)")), "{check}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&data);
}
