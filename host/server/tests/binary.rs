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
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .env("ANCHOR_LISTEN", format!("127.0.0.1:{port}"))
            .env("ANCHOR_DATA_DIR", &data)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_healthy(&http, &base).await;
    walk_through(&http, &base).await;
    assert!(data.join("anchor.db").exists());
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
    let plugins = std::path::Path::new(anchor_plugins::PLUGINS_DIR);
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
    assert!(String::from_utf8_lossy(&spin.stderr).contains("FAILED (out_of_fuel)"), "{}", String::from_utf8_lossy(&spin.stderr));
    let wasi = run("tool_wasi.wasm", &["--sample", "1"]);
    assert_eq!(wasi.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wasi.stderr).contains("REFUSED") && String::from_utf8_lossy(&wasi.stderr).contains("wasi:filesystem"));
}

/// `anchor pricing diff` between the bundled generation and a test one whose
/// base fee is 20 DAC instead of 10 and which prices no services
/// (`plugins/fixtures/pricing-alt`, of `anchor:pricing@1.0.0`).
#[test]
fn pricing_diff_reports_the_grid_the_presets_and_the_services() {
    let alt = std::path::Path::new(anchor_plugins::PLUGINS_DIR).join("pricing_alt.wasm");
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
