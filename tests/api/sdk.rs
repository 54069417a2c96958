//! The JS SDK's ARA and DUR calls, run by node against this server over
//! loopback, with the official x402 client paying what costs something
//! (tests/e2e/x402/sdk.test.mjs; `scripts/test` installs its packages).

use std::path::Path;

use anchor_app::ara::privacy::Privacy;
use anchor_tests::*;
use chrono::{Duration, Utc};
use serde_json::json;

both_backends!(
    the_sdk_declares_with_what_it_sends,
    the_sdk_observes_and_reports_and_pays_with_the_official_client,
    the_sdk_trades_tools_and_reads_earned_dac_paid_with_the_official_client,
    the_sdk_subscribes_stays_simulates_archives_and_agrees
);

async fn the_sdk_observes_and_reports_and_pays_with_the_official_client(backend: Backend) {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/x402");
    assert!(
        e2e.join("node_modules/@x402/fetch").exists(),
        "the x402 client is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    // Exact releases: eleven agents clear k = 10 without depending on noise.
    let t = TestServer::with(backend, Options { privacy: Privacy::Exact, ..Default::default() }).await;
    // The x402 client signs its validity window with the wall clock, so the
    // service clock reads the wall clock too; the agents anchor the day before.
    t.clock.set(Utc::now() - Duration::days(1));
    for _ in 0..9 {
        t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    }
    let other = t.anchored_agent(json!({ "ee_preset": "EE_standard" })).await;
    let disclosed = t.call("PUT", "/v1/agent/disclosure", Some(&other.token), Some(&json!({ "disclosure_level": "full" }))).await;
    assert_eq!(disclosed.status.as_u16(), 200, "{}", disclosed.text);
    let me = t.register().await;
    // A branch-1 declaration, so that the decision reports have something to count.
    let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
    body["content_inclusion_flag"] = json!(1);
    body["template"] =
        json!({ "decision_class": "payment", "decision_scale_value": 2.5, "decision_scale_unit": "USDC", "human_involvement": "approval" });
    let created = t.post("/v1/dd/create", Some(&me.token), &body).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let dd_id = created.json["dd_id"].as_str().expect("dd_id").to_string();
    assert_eq!(t.confirm(&me, &dd_id).await.status.as_u16(), 200);
    t.wait_for_fold(11).await;
    t.clock.set(Utc::now());

    let mut node = tokio::process::Command::new("node");
    node.args(["--test", "sdk.test.mjs"])
        .current_dir(&e2e)
        .env("ANCHOR_BASE_URL", &t.base)
        .env("ANCHOR_TOKEN", &me.token)
        .env("ANCHOR_AGENT_ID", &me.id)
        .env("ANCHOR_DD_ID", &dd_id)
        .env("ANCHOR_OTHER_ID", &other.id);
    let output = node.output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 4\n") && stdout.contains("# fail 0\n"), "{stdout}");

    // What the SDK paid is on record: five paid observations, each with its
    // settled payment and its usage entry, and nothing charged for the rest.
    assert_eq!(t.scalar("select count(*) from ara_observation where payment_id is not null").await, 5);
    assert_eq!(t.scalar("select count(*) from usage_entry where subject_domain = 'ara_observation'").await, 5);
}

/// The SDK's `tsl.*` and `earnedDac.*` calls (tests/e2e/x402/sdk-market.test.mjs):
/// a purchase paid with the official x402 client credits the seller's Earned
/// DAC by its share, and the revenue share's beneficiary by its own.
async fn the_sdk_trades_tools_and_reads_earned_dac_paid_with_the_official_client(backend: Backend) {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/x402");
    assert!(e2e.join("node_modules/@x402/fetch").exists(), "the x402 client is not installed: run `npm ci` in {}", e2e.display());
    let t = TestServer::start(backend).await;
    // The x402 client signs its validity window with the wall clock.
    t.clock.set(Utc::now());
    let mut node = tokio::process::Command::new("node");
    node.args(["--test", "sdk-market.test.mjs"]).current_dir(&e2e).env("ANCHOR_BASE_URL", &t.base);
    let output = node.output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 5\n") && stdout.contains("# fail 0\n"), "{stdout}");
    // Two purchases, each settled once, each shared in Earned DAC with its record.
    assert_eq!(t.scalar("select count(*) from tsl_purchase where status = 'completed'").await, 2);
    assert_eq!(t.scalar("select count(*) from x402_payment where subject_domain = 'tsl_purchase' and status = 'settled'").await, 2);
    assert_eq!(t.scalar("select count(*) from earned_entry where kind = 'credit' and reference_kind = 'tsl_purchase'").await, 3);
}

/// The SDK's `retention.*`, `ise.*`, `sdac.*`, `asa.*` and `bilateral.*`
/// calls (tests/e2e/x402/sdk-services.test.mjs), what costs money paid with
/// the official x402 client.
async fn the_sdk_subscribes_stays_simulates_archives_and_agrees(backend: Backend) {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/x402");
    assert!(e2e.join("node_modules/@x402/fetch").exists(), "the x402 client is not installed: run `npm ci` in {}", e2e.display());
    let t = TestServer::start(backend).await;
    t.clock.set(Utc::now());
    let mut node = tokio::process::Command::new("node");
    node.args(["--test", "sdk-services.test.mjs"]).current_dir(&e2e).env("ANCHOR_BASE_URL", &t.base);
    let output = node.output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 5\n") && stdout.contains("# fail 0\n"), "{stdout}");
    // What was paid is on record, once each.
    assert_eq!(t.scalar("select count(*) from retention_subscription").await, 1);
    assert_eq!(t.scalar("select count(*) from asa_purchase where status = 'completed' and payment_source = 'external'").await, 1);
    assert_eq!(t.scalar("select count(*) from bilateral_agreement where status = 'accepted' and counterparty_dd_id is not null").await, 1);
    assert_eq!(t.scalar("select count(*) from x402_payment where subject_domain = 'declaration' and status = 'settled'").await, 1);
}

/// The SDK's `dd.create({ context })`, `dd.confirm(id, transactionId)` and a
/// create with `excluded_option_count` (tests/e2e/x402/sdk-dd.test.mjs): all
/// accepted; the context is never stored anywhere.
async fn the_sdk_declares_with_what_it_sends(backend: Backend) {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/x402");
    let t = TestServer::start(backend).await;
    let mut node = tokio::process::Command::new("node");
    node.args(["--test", "sdk-dd.test.mjs"]).current_dir(&e2e).env("ANCHOR_BASE_URL", &t.base);
    let output = node.output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 2\n") && stdout.contains("# fail 0\n"), "{stdout}");
    assert_eq!(t.scalar("select count(*) from declaration where confirmed_at is not null").await, 1);
    assert_eq!(t.scalar("select count(*) from declaration where excluded_option_count = 4").await, 1);
    // The scan finds what is stored (the preset's name), and not the context.
    assert!(t.database_holds("EE_basic").await, "the database scan finds nothing at all");
    assert!(!t.database_holds("SDK-CONTEXT-MARKER").await, "the context reached the database");
}
