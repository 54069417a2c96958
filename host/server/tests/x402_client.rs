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
    let fetched = evidence_over_the_cli(&base, &data).await;
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
    // A Trial-paid declaration's bundle, as `anchor evidence` fetched it: the scope alone.
    let trial = verify(&fetched);
    let said = String::from_utf8_lossy(&trial.stdout).to_string();
    assert!(trial.status.success() && said.contains("no x402 payment is tied"), "{said}{}", String::from_utf8_lossy(&trial.stderr));
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

/// `anchor evidence`: a new agent's Trial-paid declaration's bundle,
/// fetched to a file (never overwritten), and refused with the service's
/// answer for another agent's token. Returns the file.
async fn evidence_over_the_cli(base: &str, data: &Path) -> std::path::PathBuf {
    let http = reqwest::Client::new();
    let register =
        || async { http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json::<serde_json::Value>().await.unwrap() };
    let (owner, stranger) = (register().await, register().await);
    let token = owner["auth_token"].as_str().unwrap();
    let body = serde_json::json!({
        "request_id": uuid::Uuid::new_v4(),
        "dd": { "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" },
        "ee": { "ee_preset": "EE_basic" },
    });
    let created: serde_json::Value =
        http.post(format!("{base}/v1/dd/create")).bearer_auth(token).json(&body).send().await.unwrap().json().await.unwrap();
    let dd_id = created["dd_id"].as_str().unwrap().to_string();
    let confirm = serde_json::json!({ "dd_id": dd_id });
    assert_eq!(http.post(format!("{base}/v1/dd/confirm")).bearer_auth(token).json(&confirm).send().await.unwrap().status().as_u16(), 200);
    let file = data.join("trial-evidence.json");
    let fetch = |token: &str| {
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["evidence", &dd_id, "--url", base, "--token", token, "-o"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = fetch(token);
        if out.status.success() {
            break;
        }
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("NOT_YET_IN_LOG") && std::time::Instant::now() < deadline, "{said}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let kept = std::fs::read(&file).unwrap();
    let again = fetch(token);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("never overwritten"));
    assert_eq!(std::fs::read(&file).unwrap(), kept, "the file was left as it was");
    std::fs::remove_file(&file).unwrap();
    let refused = fetch(stranger["auth_token"].as_str().unwrap());
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("FORBIDDEN") && !file.exists());
    std::fs::write(&file, &kept).unwrap();
    file
}
