//! The owner portal end to end in a real browser: headless Chromium (Debian's
//! `chromium`) driven by playwright-core (pinned in
//! tests/e2e/portal/package-lock.json) against a running `anchor` over
//! loopback. `scripts/test` runs `npm ci` there first; `.ci/run` installs
//! Chromium. Screenshots land in tests/artifacts/.

mod common;

use std::path::Path;
use std::process::Command;

#[tokio::test]
async fn an_owner_uses_the_portal_in_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let e2e = root.join("tests/e2e/portal");
    assert!(
        e2e.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    let chromium = std::env::var("CHROMIUM_PATH").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(Path::new(&chromium).exists(), "Chromium is not installed at {chromium} (apt-get install chromium; .ci/run does)");
    let artifacts = root.join("tests/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let _ = std::fs::remove_file(artifacts.join("portal-result.json"));

    // Browser, seeding and checks all come from 127.0.0.1: more than the
    // default 100 requests a minute, which this test is not about.
    let (server, base, data) = common::serve_sqlite("portal", &["--rate-limit", "100000"]).await;
    let http = reqwest::Client::new();
    // A tool sale, paid with the official x402 client, for the market section.
    let x402 = root.join("tests/e2e/x402");
    assert!(x402.join("node_modules/@x402/fetch").exists(), "the x402 client is not installed: run `npm ci` in {}", x402.display());
    let seeded = Command::new("node").arg("seed-sale.mjs").current_dir(&x402).env("ANCHOR_BASE_URL", &base).output().expect("node runs");
    assert!(seeded.status.success(), "seeding a sale failed: {}", String::from_utf8_lossy(&seeded.stderr));
    let sale: serde_json::Value = serde_json::from_slice(&seeded.stdout).expect("the seeded sale");
    let output = Command::new("node")
        .args(["--test", "portal.test.mjs"])
        .current_dir(&e2e)
        .env("ANCHOR_BASE_URL", &base)
        .env("ANCHOR_SELLER_ID", sale["seller_id"].as_str().unwrap())
        .env("ANCHOR_SELLER_TOKEN", sale["seller_token"].as_str().unwrap())
        .env("ANCHOR_TOOL_ID", sale["tool_id"].as_str().unwrap())
        .env("ANCHOR_ARTIFACTS", &artifacts)
        .env("CHROMIUM_PATH", &chromium)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "browser test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 1"), "{stdout}");

    // What the page showed is what the agent's side reports.
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(artifacts.join("portal-result.json")).expect("result written")).unwrap();
    let dab: serde_json::Value = http
        .get(format!("{base}/v1/dab/status"))
        .bearer_auth(result["new_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(dab["budget_limit_dac"], result["ui_dab"]);
    assert_eq!(dab["limit_source"], "owner");
    for shot in [
        "02-signed-up",
        "03-linked",
        "04-dab",
        "05-classification",
        "06-usage-chart",
        "07-ara-dur",
        "07-market",
        "07-subscriptions",
        "08-signed-out",
    ] {
        let path = artifacts.join(format!("portal-{shot}.png"));
        assert!(std::fs::metadata(&path).map(|m| m.len() > 1000).unwrap_or(false), "{} missing", path.display());
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}
