//! The `anchor` binary itself: started the way the README starts it, with
//! `--listen` and `--data-dir` (and with their environment variables), it
//! serves the register -> create -> confirm -> detail walk-through.

mod common;

use std::process::{Command, Stdio};

use common::{Server, free_port, wait_healthy};

use serde_json::{Value, json};

async fn walk_through(http: &reqwest::Client, base: &str) {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    let token = agent["auth_token"].as_str().unwrap();
    let created = http
        .post(format!("{base}/v1/dd/create"))
        .bearer_auth(token)
        .json(&json!({
            "request_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "dd": {
                "dd_unit_type": "single", "dd_declaration_mode": "self_declared",
                "decision_type": "internal_service", "decision_action_type": "execute",
                "origin_context_type": "internal", "selection_state": "SELECTED",
            },
            "ee": { "ee_preset": "EE_basic" },
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["status"], "trial_paid");
    assert_eq!(created["pricing_version"], "v1.3.0");
    assert!(created["cost_breakdown"].is_object());
    let dd_id = created["dd_id"].as_str().unwrap();
    let confirmed: Value = http
        .post(format!("{base}/v1/dd/confirm"))
        .bearer_auth(token)
        .json(&json!({ "dd_id": dd_id }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(confirmed["integrity_hash"].as_str().unwrap().starts_with("sha256:"));
    let detail: Value = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(token).send().await.unwrap().json().await.unwrap();
    assert_eq!(detail["dd"]["integrity_hash"], confirmed["integrity_hash"]);
}

#[tokio::test]
async fn serve_with_flags_walks_through_the_readme() {
    let (_server, base, data) = common::serve_sqlite("bin", &[]).await;
    let http = reqwest::Client::new();
    let health = wait_healthy(&http, &base).await;
    assert_eq!(health["storage"], "sqlite");
    walk_through(&http, &base).await;
    assert!(data.join("anchor.db").exists(), "the database lives in --data-dir");
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn serve_reads_its_environment_variables() {
    let data = std::env::temp_dir().join(format!("anchor-bin-env-{}", std::process::id()));
    let port = free_port();
    std::fs::create_dir_all(&data).unwrap();
    let log = data.join("serve.log");
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .env("ANCHOR_LISTEN", format!("127.0.0.1:{port}"))
            .env("ANCHOR_DATA_DIR", &data)
            .env("ANCHOR_WORKER_THREADS", "3")
            .env_remove("DATABASE_URL")
            .env_remove("NO_COLOR")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_healthy(&http, &base).await;
    walk_through(&http, &base).await;
    assert!(data.join("anchor.db").exists());
    drop(server);
    // A log written to a file (not a terminal) carries no colour codes.
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(written.contains("INFO") && !written.contains('\u{1b}'), "{written}");
    // The runtime has the workers it was given, not one per core.
    assert!(written.contains("runtime worker threads workers=3"), "{written}");
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn production_refuses_local_settlement_and_facilitator_mode_needs_a_url() {
    let data = std::env::temp_dir().join(format!("anchor-bin-prod-{}", std::process::id()));
    let port = free_port().to_string();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(&data)
            .args(extra)
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    let production = run(&["--production"]);
    assert!(!production.status.success());
    assert!(
        String::from_utf8_lossy(&production.stderr).contains("x402 settlement is local"),
        "{}",
        String::from_utf8_lossy(&production.stderr)
    );
    let no_url = run(&["--x402-mode", "facilitator"]);
    assert!(!no_url.status.success());
    assert!(String::from_utf8_lossy(&no_url.stderr).contains("--facilitator-url"));
    let _ = std::fs::remove_dir_all(&data);
}

/// `anchor tool run`, the tool author's local runner: the example runs on
/// synthetic and on given observations; a hostile tool fails with its
/// reason; a component reaching for the filesystem is refused.
#[test]
fn tool_run_checks_and_runs_a_component_as_the_service_would() {
    let plugins = std::path::Path::new(anchor_plugin_host::PLUGINS_DIR);
    let run = |file: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_anchor")).args(["tool", "run"]).arg(plugins.join(file)).args(extra).output().unwrap()
    };
    let sampled = run("tool_example.wasm", &["--sample", "4", "--repeat", "3"]);
    let stderr = String::from_utf8_lossy(&sampled.stderr);
    assert!(sampled.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&sampled.stdout).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 8, "{report}");
    assert_eq!(report["metrics"][0], json!({ "name": "observations", "value": 4, "scale": 0 }));
    assert!(stderr.contains("instructions (fuel)") && stderr.contains("3 runs"), "{stderr}");

    let input = std::env::temp_dir().join(format!("anchor-tool-input-{}.json", std::process::id()));
    std::fs::write(
        &input,
        json!({ "today": 20500, "observations": [{ "kind": "agent_profile", "resolution_level": 1, "first_day": 20400, "last_day": 20499,
            "cells": [{ "dimension": "action_type", "value": "hold", "count": 3 }, { "dimension": "action_type", "value": "execute", "count": 1 }] }] })
        .to_string(),
    )
    .unwrap();
    let given = run("tool_example.wasm", &["--input", input.to_str().unwrap()]);
    assert!(given.status.success(), "{}", String::from_utf8_lossy(&given.stderr));
    let report: Value = serde_json::from_slice(&given.stdout).unwrap();
    assert_eq!(report["rows"][0], json!({ "label": "agent-profile:action_type=hold", "values": [3, 750000] }));
    std::fs::write(&input, "{\"today\": 1, \"observations\": [{\"kind\": \"weather\"}]}").unwrap();
    let bad = run("tool_example.wasm", &["--input", input.to_str().unwrap()]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("not a tool input"));
    let _ = std::fs::remove_file(&input);

    let spin = run("tool_spin.wasm", &["--sample", "1"]);
    assert_eq!(spin.status.code(), Some(1));
    // The fuel (four billion instructions) runs out first on an idle core;
    // on a loaded one the wall clock, its backstop, can: either way the run
    // fails with its reason named.
    let said = String::from_utf8_lossy(&spin.stderr);
    assert!(said.contains("FAILED (out_of_fuel)") || said.contains("FAILED (deadline)"), "{said}");
    let wasi = run("tool_wasi.wasm", &["--sample", "1"]);
    assert_eq!(wasi.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wasi.stderr).contains("REFUSED") && String::from_utf8_lossy(&wasi.stderr).contains("wasi:filesystem"));
}

/// `anchor pricing diff` between the bundled generation and a test one whose
/// base fee is 20 DAC instead of 10 and which prices no services
/// (`plugins/fixtures/pricing-alt`, of `anchor:pricing@1.0.0`).
#[test]
fn pricing_diff_reports_the_grid_the_presets_and_the_services() {
    let alt = std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join("pricing_alt.wasm");
    let output = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["pricing", "diff", "bundled"]).arg(&alt).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}{}", String::from_utf8_lossy(&output.stderr));
    assert!(text.starts_with("from v1.3.0 ") && text.contains("\nto   v9.0.0-test "), "{text}");
    // 5 retentions x 3^5: all 1,215 combinations are quoted by both.
    assert!(text.contains("EE grid: 1215 combinations of the six axes;"), "{text}");
    assert!(text.contains("  EE_basic: 10 DAC -> 20 DAC (+10, +100.0%)"), "{text}");
    // The test generation prices no services: each bundled one goes.
    assert!(text.contains("  retention monthly: 50 DAC -> not priced"), "{text}");
    assert!(text.contains("  observation agent_other level 1: 3 DAC + surcharge 0 DAC -> not priced"), "{text}");
    assert!(text.contains("0 of "), "no service price stays: {text}");
    // The same generation on both sides changes nothing.
    let same = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["pricing", "diff", "bundled", "bundled", "--all"]).output().unwrap();
    let text = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success());
    assert!(text.contains("; 0 change, 1215 do not"), "{text}");
    assert!(!text.contains("every change"), "{text}");
    assert!(text.contains("(unchanged)") && !text.contains(" -> not priced"), "{text}");
}

/// `anchor feedback list`: what agents left over MCP's submit_feedback,
/// newest first with its day, and nothing that names who sent it.
#[tokio::test]
async fn feedback_list_shows_the_notes_agents_left() {
    let (server, base, data) = common::serve_sqlite("feedback", &[]).await;
    let http = reqwest::Client::new();
    for note in ["the first note", "the second note, with a comma"] {
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": { "name": "submit_feedback", "arguments": { "note": note, "tools_used": ["create_decision", "get_decision"] } } });
        let reply =
            http.post(format!("{base}/mcp")).header("accept", "application/json, text/event-stream").json(&call).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 200);
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["result"]["structuredContent"]["received"], json!(true), "{body}");
    }
    drop(server);
    let listed = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["feedback", "list", "--json", "--data-dir"]).arg(&data).output().unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&listed.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["note"], "the second note, with a comma", "newest first");
    assert_eq!(lines[1]["tools_used"], json!(["create_decision", "get_decision"]));
    let day = lines[0]["received_on"].as_str().unwrap();
    assert_eq!(day.len(), 10, "a day, no time: {day}");
    let text = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["feedback", "list", "--data-dir"]).arg(&data).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("note: the first note"));
    let _ = std::fs::remove_dir_all(&data);
}

/// Anvil's public test key #0: never holds real money; the server's default
/// local settlement checks the signature and moves none.
const TEST_WALLET_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

async fn register(http: &reqwest::Client, base: &str) -> String {
    register_with_id(http, base).await.0
}

/// A new agent's token and id.
async fn register_with_id(http: &reqwest::Client, base: &str) -> (String, String) {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    (agent["auth_token"].as_str().unwrap().to_string(), agent["agent_id"].as_str().unwrap().to_string())
}

fn create_body() -> String {
    json!({
        "request_id": uuid::Uuid::new_v4(),
        "dd": { "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" },
        "ee": { "ee_preset": "EE_basic" },
    })
    .to_string()
}

/// `anchor pay`: once Trial is spent, a declaration's 402 is paid from the
/// shell (and confirmed, which settles it); a tool is bought; a challenge
/// over --max-dac is refused with nothing signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anchor_pay_pays_a_declaration_and_buys_a_tool() {
    let (_server, base, data) = common::serve_sqlite("pay", &["--rate-limit", "100000"]).await;
    let http = reqwest::Client::new();
    let key = data.join("wallet.key");
    std::fs::write(&key, TEST_WALLET_KEY).unwrap();
    let agent = register(&http, &base).await;
    // Trial pays fifty EE_basic declarations.
    for _ in 0..50 {
        let created = http
            .post(format!("{base}/v1/dd/create"))
            .bearer_auth(&agent)
            .header("content-type", "application/json")
            .body(create_body())
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 201);
    }
    let pay = |max: &str, method: &str, url: String, body: String, token: &str| {
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["pay", "--wallet-key"])
            .arg(&key)
            .args(["--max-dac", max, "--token", token, "--", method, &url, &body])
            .output()
            .unwrap()
    };
    // Over the cap: refused, nothing signed, nothing recorded.
    let refused = pay("5", "POST", format!("{base}/v1/dd/create"), create_body(), &agent);
    assert_eq!(refused.status.code(), Some(3), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("more than --max-dac"));
    let paid = pay("10", "POST", format!("{base}/v1/dd/create"), create_body(), &agent);
    assert!(paid.status.success(), "{}", String::from_utf8_lossy(&paid.stderr));
    let created: Value = serde_json::from_slice(&paid.stdout).unwrap();
    assert_eq!(created["status"], "pending_payment", "{created}");
    let confirmed =
        http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&agent).json(&json!({ "dd_id": created["dd_id"] })).send().await.unwrap();
    assert_eq!(confirmed.status().as_u16(), 200);
    let confirmed: Value = confirmed.json().await.unwrap();
    assert_eq!(confirmed["payment_sources"], json!(["external"]), "{confirmed}");

    // A tool bought from the shell.
    let seller = register(&http, &base).await;
    let tool: Value = http
        .post(format!("{base}/v1/tsl/tool/register"))
        .bearer_auth(&seller)
        .json(&json!({ "tool_name": "shares", "price_dac": 5, "ara_connections": [{ "observation_type": "agent_profile" }] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let body = json!({ "tool_id": tool["tool_id"] }).to_string();
    let bought = pay("20", "POST", format!("{base}/v1/tsl/purchase"), body, &agent);
    assert!(bought.status.success(), "{}", String::from_utf8_lossy(&bought.stderr));
    let purchase: Value = serde_json::from_slice(&bought.stdout).unwrap();
    assert!(purchase["purchase_id"].is_string(), "{purchase}");
    assert!(String::from_utf8_lossy(&bought.stderr).contains("paying 15 DAC"), "{}", String::from_utf8_lossy(&bought.stderr));
    let _ = std::fs::remove_dir_all(&data);
}

/// The tools README's "Selling it" block, run as written: the seller
/// registers and uploads the example tool with curl, the buyer buys it with
/// `anchor pay` and runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_readme_sells_and_buys_a_tool_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/tools/README.md")).unwrap();
    let block = readme
        .split("<!-- tested: tools-sell-and-buy -->")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README's tested block");
    let (_server, base, data) = common::serve_sqlite("readme-tools", &[]).await;
    let http = reqwest::Client::new();
    let seller = register(&http, &base).await;
    let (buyer, buyer_id) = register_with_id(&http, &base).await;
    // The buyer's own profile has something to show.
    let created: Value = http
        .post(format!("{base}/v1/dd/create"))
        .bearer_auth(&buyer)
        .header("content-type", "application/json")
        .body(create_body())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&buyer).json(&json!({ "dd_id": created["dd_id"] })).send().await.unwrap();
    std::fs::write(data.join("wallet.key"), TEST_WALLET_KEY).unwrap();
    std::fs::copy(std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join("tool_example.wasm"), data.join("tool.wasm")).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_anchor")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    // The fold (once a second) makes the buyer's declaration visible to ARA:
    // its own profile counts it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let profile = http.get(format!("{base}/v1/ara/agent/{buyer_id}/profile")).bearer_auth(&buyer).send().await.unwrap();
        let counted = match profile.status().is_success() {
            true => profile.json::<Value>().await.unwrap()["dd_count"].as_i64().unwrap_or(0) >= 1,
            false => false,
        };
        if counted {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the buyer's declaration never reached ARA");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(&data)
        .env("PATH", &path)
        .env("BASE", &base)
        .env("TOKEN", &seller)
        .env("BUYER", &buyer)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("\"purchase_id\""), "the purchase: {stdout}");
    assert!(stdout.contains("\"report\"") && stdout.contains("agent-profile:action_type=execute"), "the run: {stdout}");
    let _ = std::fs::remove_dir_all(&data);
}

/// The pricing author's path on the second example generation
/// (plugins/PRICING.md): built with the service, inspected, diffed against
/// the bundled one, published while a server runs, listed, and then the
/// prices agents are told and charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_pricing_generation_is_inspected_diffed_and_published() {
    let file = std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join("pricing_example.wasm");
    assert!(file.exists(), "the build puts every generation of plugins/ in {}", anchor_plugin_host::PLUGINS_DIR);
    let anchor = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap();
    let inspected = anchor(&["pricing", "inspect", file.to_str().unwrap()]);
    assert!(inspected.status.success(), "{}", String::from_utf8_lossy(&inspected.stderr));
    let text = String::from_utf8_lossy(&inspected.stdout);
    assert!(text.contains("v1.4.0-example"), "{text}");
    let diffed = anchor(&["pricing", "diff", "bundled", file.to_str().unwrap()]);
    assert!(diffed.status.success(), "{}", String::from_utf8_lossy(&diffed.stderr));
    let diff = String::from_utf8_lossy(&diffed.stdout);
    assert!(diff.contains("v1.3.0") && diff.contains("v1.4.0-example"), "{diff}");
    assert!(diff.contains("tsl") || diff.contains("TSL"), "the service prices move too: {diff}");

    let (_server, base, data) = common::serve_sqlite("pricing-example", &[]).await;
    let published = anchor(&["pricing", "publish", file.to_str().unwrap(), "--now", "--data-dir", data.to_str().unwrap()]);
    assert!(published.status.success(), "{}", String::from_utf8_lossy(&published.stderr));
    let listed = anchor(&["pricing", "list", "--data-dir", data.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("v1.4.0-example"), "{}", String::from_utf8_lossy(&listed.stdout));
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let current = loop {
        let current: Value = http.get(format!("{base}/v1/pricing/current")).send().await.unwrap().json().await.unwrap();
        if current["pricing_version"] == "v1.4.0-example" {
            break current;
        }
        assert!(std::time::Instant::now() < deadline, "the published generation never came into force: {current}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(current["base_fee"], json!(8), "{current}");
    assert_eq!(current["axes"]["ee_integrity_verification_level"]["certifiable"]["add"], json!(40), "{current}");
    let agent = register(&http, &base).await;
    let created: Value = http
        .post(format!("{base}/v1/dd/create"))
        .bearer_auth(&agent)
        .header("content-type", "application/json")
        .body(create_body())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((created["pricing_version"].clone(), created["dac_amount"].clone()), (json!("v1.4.0-example"), json!(8)), "{created}");
    let _ = std::fs::remove_dir_all(&data);
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap()
}

/// The operator's manual, which holds the configuration reference and the
/// operator commands.
fn operating_manual() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operating.md")).unwrap()
}

/// The first ```sh block after a `<!-- tested: NAME -->` marker.
fn tested_block(text: &str, name: &str) -> String {
    text.split(&format!("<!-- tested: {name} -->"))
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .unwrap_or_else(|| panic!("no tested block {name}"))
        .to_owned()
}

/// The README's curl walk-through, run by bash as written (only the base URL
/// points at this test's server): register, a Trial-paid declaration,
/// confirm, read, and a receipt `anchor verify` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_first_anchor_runs_as_written() {
    let block = tested_block(&readme(), "first-anchor");
    let (_server, base, data) = common::serve_sqlite("readme-first", &[]).await;
    let default_base = "BASE=http://127.0.0.1:8080\n";
    assert!(block.starts_with(default_base), "the block starts by naming the default address");
    let script = block.replacen(default_base, &format!("BASE={base}\n"), 1);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_anchor")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("timeout")
        .args(["60", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(&data)
        .env("PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("\"auth_token\":\"da_tk_"), "registered: {stdout}");
    assert!(stdout.contains("\"status\":\"trial_paid\"") && stdout.contains("\"trial_remaining\":490"), "created: {stdout}");
    assert!(stdout.contains("\"settlement_status\":\"settled\""), "confirmed: {stdout}");
    assert!(stdout.contains("ok: leaf 0 is in the tree of"), "verified: {stdout}");
    let _ = std::fs::remove_dir_all(&data);
}

/// The paying manual's test mode, run by bash as written against a host
/// started with `--trial-dac 0` (only the base URL points at this test's
/// server): a wallet key made by `anchor wallet new`, a 402 on purpose, the
/// payment by `anchor pay`, and the confirm that settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paying_manuals_test_mode_runs_as_written() {
    let manual = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/paying.md")).unwrap();
    let block = tested_block(&manual, "test-payment");
    let (_server, base, data) = common::serve_sqlite("paying-test-mode", &["--trial-dac", "0"]).await;
    let default_base = "BASE=http://127.0.0.1:8080\n";
    assert!(block.starts_with(default_base), "the block starts by naming the default address");
    let script = block.replacen(default_base, &format!("BASE={base}\n"), 1);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_anchor")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("timeout")
        .args(["60", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(&data)
        .env("PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.lines().any(|l| l.trim() == "402"), "a challenge on purpose: {stdout}");
    assert!(stdout.contains("\"status\":\"pending_payment\""), "paid over x402: {stdout}");
    assert!(stdout.contains("\"settlement_status\":\"settled\"") && stdout.contains("\"external\""), "settled: {stdout}");
    let key = std::fs::metadata(data.join("wallet.key")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(key.permissions().mode() & 0o777, 0o600, "the wallet key is its owner's alone");
    let _ = std::fs::remove_dir_all(&data);
}

/// One option of `--help`: its name and the text clap prints for it.
fn help_options(help: &str) -> Vec<(String, String)> {
    let mut options: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--").or_else(|| trimmed.strip_prefix("-h, --").or_else(|| trimmed.strip_prefix("-V, --")))
        {
            let name = rest.split([' ', '<']).next().unwrap().to_owned();
            options.push((name, String::new()));
        } else if let Some((_, text)) = options.last_mut() {
            text.push_str(trimmed);
            text.push(' ');
        }
    }
    options
}

/// The configuration table of docs/operating.md against `anchor serve
/// --help`: every flag of the binary is in the table, every row names a flag
/// the binary has, with its environment variable, and a default the table
/// writes as a value is the binary's default. The operator commands it lists
/// exist.
#[test]
fn the_operating_manuals_configuration_and_commands_are_the_binarys() {
    let manual = operating_manual();
    let help = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["serve", "--help"]).output().unwrap();
    assert!(help.status.success());
    let options = help_options(&String::from_utf8_lossy(&help.stdout));
    assert!(options.len() > 30, "the help lists the options: {options:?}");
    let rows: Vec<Vec<String>> = manual
        .lines()
        .filter(|line| line.starts_with("| `--"))
        .map(|line| line.trim_matches('|').split(" | ").map(|cell| cell.trim().to_owned()).collect())
        .collect();
    let flag_of = |cell: &str| cell.trim_start_matches('`').trim_start_matches("--").split([' ', '`']).next().unwrap().to_owned();
    for (name, text) in &options {
        if name == "help" || name == "version" {
            continue;
        }
        let row =
            rows.iter().find(|row| flag_of(&row[0]) == *name).unwrap_or_else(|| panic!("--{name} is not in docs/operating.md's table"));
        let env = row[1].trim_matches('`');
        assert!(text.contains(&format!("[env: {env}")), "--{name}: docs/operating.md says {env}, the binary: {text}");
        let manual_default = row[2].as_str();
        if let Some(binary_default) = text.split("[default: ").nth(1).and_then(|rest| rest.split(']').next())
            && manual_default.starts_with('`')
            && manual_default.ends_with('`')
            && manual_default.matches('`').count() == 2
        {
            let manual_default = manual_default.trim_matches('`');
            let same = manual_default == binary_default
                || matches!((manual_default.parse::<f64>(), binary_default.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
            assert!(same, "--{name}: docs/operating.md's default is {manual_default}, the binary's {binary_default}");
        }
    }
    for row in &rows {
        let name = flag_of(&row[0]);
        assert!(options.iter().any(|(option, _)| *option == name), "docs/operating.md lists --{name}, which the binary does not have");
    }
    // The operator commands block: each `anchor SUB [SUBSUB]` answers --help.
    let block = manual
        .split("Operator commands")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .unwrap();
    let mut checked = 0;
    for line in block.lines().filter(|line| line.starts_with("anchor ")) {
        let words: Vec<&str> = line
            .split_whitespace()
            .skip(1)
            .take_while(|word| !word.starts_with('-') && word.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .take(2)
            .collect();
        let mut command = Command::new(env!("CARGO_BIN_EXE_anchor"));
        command.args(&words).arg("--help");
        let output = command.output().unwrap();
        assert!(output.status.success(), "`anchor {}` is in docs/operating.md but not in the binary", words.join(" "));
        checked += 1;
    }
    assert!(checked >= 10, "the operator commands block lists the commands: {checked}");
}

/// Figures the documents state that the repository can check: the number of
/// MCP tools served (the README) and the pinned schemathesis version (the
/// map of the tests, tests/README.md).
#[test]
fn the_documents_figures_are_the_repositorys() {
    let readme = readme();
    let tools = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/mcp/tools.json")).unwrap();
    let tools: Value = serde_json::from_str(&tools).unwrap();
    let count = tools.as_array().map(Vec::len).or_else(|| tools["tools"].as_array().map(Vec::len)).expect("a tool list");
    assert!(readme.contains(&format!("(all {count} of them")), "the README's MCP tool count is not {count}");
    let requirements = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fuzz/requirements.txt")).unwrap();
    let version = requirements.lines().find_map(|line| line.strip_prefix("schemathesis==")).expect("schemathesis pinned");
    let tests_map = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/README.md")).unwrap();
    assert!(tests_map.contains(&format!("schemathesis {version}")), "tests/README.md names schemathesis {version}");
}

/// Peak resident memory (KiB) of `anchor` run with `args`, by the kernel's
/// own count (`getrusage` of the child, through Python's standard library),
/// with its exit code and standard error.
fn peak_kib(args: &[&str]) -> (u64, i32, String) {
    let measure = "import resource, subprocess, sys\n\
                   done = subprocess.run(sys.argv[1:], capture_output=True)\n\
                   sys.stderr.buffer.write(done.stderr)\n\
                   print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)";
    let output = Command::new("python3").arg("-c").arg(measure).arg(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut words = stdout.split_whitespace();
    let kib = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no measure: {stdout}"));
    let code = words.next().and_then(|w| w.parse().ok()).unwrap();
    (kib, code, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Crafted inputs of 100 MB (a receipt with millions of proof hashes, a
/// key file, a monitor's state file) are refused having read at most a
/// bounded prefix: `anchor verify` and `anchor monitor` stay under 64 MB of
/// memory and say what was refused. A receipt a client saved with `null`
/// for an empty list is read as it means.
#[test]
fn verify_and_monitor_bound_every_input_before_reading_it() {
    let dir = std::env::temp_dir().join(format!("anchor-bounded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, vkey) = anchor_verify::signing_key_from_seed("bounded.test/log", &[3; 32]);
    let hash = format!("\"{}\"", "A".repeat(43) + "=");
    let hashes = vec![hash.as_str(); 2_300_000].join(",");
    let huge = format!(
        r#"{{"format":"anchor-receipt/1","dd_id":"x","canonical_record":"","integrity_hash":"","anchored_at":"","leaf_index":0,"tree_size":1,"inclusion_proof":[{hashes}],"checkpoint":""}}"#
    );
    assert!(huge.len() > 100_000_000, "{} bytes", huge.len());
    let receipt = dir.join("huge-receipt.json");
    std::fs::write(&receipt, &huge).unwrap();
    drop(huge);
    let (kib, code, stderr) = peak_kib(&["verify", "--key", &vkey, receipt.to_str().unwrap()]);
    assert!(kib < 64 * 1024, "verify peaked at {kib} KiB: {stderr}");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("larger than the 1048576 bytes"), "{stderr}");

    // A proof longer than any tree has, in a small file: refused as such.
    let long = format!(
        r#"{{"format":"anchor-receipt/1","dd_id":"x","canonical_record":"","integrity_hash":"","anchored_at":"","leaf_index":0,"tree_size":1,"inclusion_proof":[{}],"checkpoint":""}}"#,
        vec![hash.as_str(); 65].join(",")
    );
    let long_receipt = dir.join("long-proof.json");
    std::fs::write(&long_receipt, long).unwrap();
    let (_, code, stderr) = peak_kib(&["verify", "--key", &vkey, long_receipt.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("FAILED (inclusion check)") && stderr.contains("65 hashes"), "{stderr}");

    // A key "file" of 100 MB, given to verify and to monitor; a monitor state of 100 MB.
    let big = dir.join("big-file");
    std::fs::write(&big, vec![b'k'; 100 << 20]).unwrap();
    let (kib, code, stderr) = peak_kib(&["verify", "--key", big.to_str().unwrap(), long_receipt.to_str().unwrap()]);
    assert!(kib < 64 * 1024, "verify peaked at {kib} KiB: {stderr}");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("larger than a key file"), "{stderr}");
    let (kib, code, stderr) = peak_kib(&["monitor", "http://127.0.0.1:9", "--key", &vkey, "--state", big.to_str().unwrap()]);
    assert!(kib < 64 * 1024, "monitor peaked at {kib} KiB: {stderr}");
    assert_eq!(code, 2, "{stderr}");
    let (kib, code, stderr) =
        peak_kib(&["monitor", "http://127.0.0.1:9", "--key", big.to_str().unwrap(), "--state", dir.join("none").to_str().unwrap()]);
    assert!(kib < 64 * 1024, "monitor peaked at {kib} KiB: {stderr}");
    assert_eq!(code, 2, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Request bodies held open are counted against one budget (256 MiB): once
/// bodies said to be 1 MiB each fill it, the next is refused unread (503
/// SERVER_BUSY, Retry-After) within seconds instead of being buffered too,
/// and a small request still finds room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_held_open_are_bounded_by_one_budget() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_server, base, data) =
        common::serve_sqlite("body-budget", &["--max-connections-per-client", "0", "--rate-limit", "100000", "--body-timeout-secs", "60"])
            .await;
    let address = base.trim_start_matches("http://").to_string();
    let head = "POST /v1/agent/register HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1048576\r\n\r\n{";
    let mut held = Vec::new();
    for _ in 0..256 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        held.push(stream);
    }
    // The 256 reach their handlers and take the whole budget.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let started = std::time::Instant::now();
    let mut one_more = tokio::net::TcpStream::connect(&address).await.unwrap();
    one_more.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(std::time::Duration::from_secs(15), one_more.read(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("SERVER_BUSY"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after"), "{answer}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "answered after {:?}", started.elapsed());
    drop(held);
    // Room again once they are gone.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let http = reqwest::Client::new();
    let ok = http.post(format!("{base}/v1/agent/register")).json(&json!({})).send().await.unwrap();
    assert_eq!(ok.status().as_u16(), 201);
    let _ = std::fs::remove_dir_all(&data);
}

/// Facilitators are HTTPS: a host in facilitator mode reaches one at an
/// https:// URL (its `/supported` checked at start) when its certificate
/// chains to a trusted root (here a test CA, given as SSL_CERT_FILE), and
/// refuses to start when it does not.
#[tokio::test]
async fn a_facilitator_is_reached_over_https_and_its_certificate_checked() {
    let dir = std::env::temp_dir().join(format!("anchor-bin-tls-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(&dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // The CA that signs the facilitator's certificate, and another that does not.
    for (name, subject) in [("ca", "/CN=test CA"), ("other", "/CN=other")] {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        openssl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &pem, "-days", "2", "-subj", subject]);
    }
    openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    let facilitator_port = free_port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/facilitator/https_supported.py");
    let mut facilitator = Command::new("python3")
        .arg(script)
        .args(["server.pem", "server.key", &facilitator_port.to_string()])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(facilitator.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let facilitator = Server(facilitator);
    let url = format!("https://127.0.0.1:{facilitator_port}");
    let serve = |trusted: bool| {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_anchor"));
        command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.join(if trusted { "trusted" } else { "untrusted" }))
            .args(["--x402-mode", "facilitator", "--facilitator-url", &url])
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command.env("SSL_CERT_FILE", dir.join(if trusted { "ca.pem" } else { "other.pem" }));
        (command.spawn().unwrap(), format!("http://127.0.0.1:{port}"))
    };
    let (child, base) = serve(true);
    let server = Server(child);
    wait_healthy(&reqwest::Client::new(), &base).await;
    drop(server);
    let (child, _) = serve(false);
    let refused = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a facilitator whose certificate is not trusted is refused");
    assert!(said.to_lowercase().contains("certificate"), "{said}");
    drop(facilitator);
    let _ = std::fs::remove_dir_all(&dir);
}
