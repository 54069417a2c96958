//! The host and an agent's traces, from outside: `anchor verify --trace-id`
//! proves a receipt's trace link and refuses another id, and the host's own
//! spans reach an OTLP receiver (OpenTelemetry's protobuf definitions read
//! them strictly, tests/otlp/receiver.py) without ever carrying the agent's
//! trace id. `scripts/test` makes the receiver's virtual environment and
//! names its Python in ANCHOR_OTLP_PYTHON.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const OTHER: &str = "0af7651916cd43dd8448eb211c80319c";

/// The receiver, running: its process and port.
fn receiver(output: &Path) -> (common::Server, u16) {
    let python = std::env::var("ANCHOR_OTLP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| panic!("ANCHOR_OTLP_PYTHON names a Python with tests/otlp/requirements.txt installed (scripts/test makes one)"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/otlp/receiver.py");
    let mut child = Command::new(python).arg(script).arg(output).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| panic!("the receiver printed {line:?}, not its port"));
    (common::Server(child), port)
}

/// The spans the receiver read so far (and any body it refused).
fn received(output: &Path) -> Vec<Value> {
    std::fs::read_to_string(output).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn anchor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_link_verifies_offline_and_spans_reach_an_otlp_receiver() {
    let dir = std::env::temp_dir().join(format!("anchor-traces-{}-{}", std::process::id(), common::free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("spans.jsonl");
    let (_receiver, port) = receiver(&output);
    let endpoint = format!("http://127.0.0.1:{port}");
    let (_server, base, data) = common::serve_sqlite("traces", &["--otlp-endpoint", &endpoint]).await;
    let http = reqwest::Client::new();

    // A create that names its trace, over REST; another over MCP.
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    let token = agent["auth_token"].as_str().unwrap().to_string();
    let dd = json!({ "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                     "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" });
    let body = json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd, "ee": { "ee_preset": "EE_basic" } });
    let created = http
        .post(format!("{base}/v1/dd/create"))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{TRACE}-00f067aa0ba902b7-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created: Value = created.json().await.unwrap();
    assert!(created["trace_key"].is_string(), "{created}");
    let dd_id = created["dd_id"].as_str().unwrap().to_string();
    let confirmed = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&token).json(&json!({ "dd_id": dd_id })).send().await.unwrap();
    assert_eq!(confirmed.status().as_u16(), 200);
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "create_decision", "_meta": { "traceparent": format!("00-{OTHER}-b7ad6b7169203331-01") },
        "arguments": { "auth_token": token, "ee_preset": "EE_basic", "decision_type": "internal_service",
                       "decision_action_type": "execute", "origin_context_type": "internal" },
    } });
    let reply = http.post(format!("{base}/mcp")).header("accept", "application/json, text/event-stream").json(&call).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    let missing = http.get(format!("{base}/v1/dd/{}", uuid::Uuid::new_v4())).bearer_auth(&token).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    // The receipt proves the link offline to whoever holds the trace id, and
    // refuses another id, naming the trace check.
    let (file, key) = common::receipt_file(&http, &base, &token, &dd_id, &dir).await;
    let file = file.to_str().unwrap();
    let ok = anchor(&["verify", file, "--key", &key, "--trace-id", TRACE]);
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{said}{}", String::from_utf8_lossy(&ok.stderr));
    assert!(said.contains(&format!("commits to trace {TRACE}")), "{said}");
    let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
    assert!(anchor(&["verify", file, "--key", &key, "--trace-id", &traceparent]).status.success(), "a whole traceparent names the id too");
    let refused = anchor(&["verify", file, "--key", &key, "--trace-id", OTHER]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{why}");
    assert!(why.contains("FAILED (trace check)"), "{why}");

    // The spans: a SERVER span per request, named by method and route
    // template, and the MCP tool call's span under its request's.
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = received(&output);
        let tool_call = spans.iter().any(|s| s["name"] == "tools/call create_decision");
        if tool_call && spans.iter().any(|s| s["attributes"]["http.response.status_code"] == 404) {
            break spans;
        }
        assert!(Instant::now() < deadline, "spans so far: {spans:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(spans.iter().all(|s| s.get("error").is_none()), "the receiver refused a body: {spans:#?}");
    for span in &spans {
        assert_eq!(span["resource"]["service.name"], "anchor", "{span}");
        assert!(span["end"].as_u64() >= span["start"].as_u64(), "{span}");
    }
    let create = spans.iter().find(|s| s["name"] == "POST /v1/dd/create").unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(create["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(create["attributes"]["http.request.method"], "POST");
    assert_eq!(create["attributes"]["http.route"], "/v1/dd/create");
    assert_eq!(create["attributes"]["http.response.status_code"], 201);
    assert_eq!(create["parent_span_id"], "", "a root span: the caller's trace is not continued");
    let not_found = spans.iter().find(|s| s["attributes"]["http.response.status_code"] == 404).unwrap();
    assert_eq!(not_found["attributes"]["http.route"], "/v1/dd/{dd_id}", "the template, not the path: {not_found}");
    assert_eq!(not_found["status_code"], 0, "a 4xx is not the server span's error");
    let tool = spans.iter().find(|s| s["name"] == "tools/call create_decision").unwrap();
    assert_eq!(tool["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "create_decision");
    assert_eq!(tool["attributes"]["mcp.method.name"], "tools/call");
    let mcp = spans
        .iter()
        .find(|s| s["span_id"] == tool["parent_span_id"])
        .unwrap_or_else(|| panic!("the tool span's parent was not exported: {spans:#?}"));
    assert_eq!((mcp["trace_id"].as_str(), mcp["kind"].as_i64()), (tool["trace_id"].as_str(), Some(2)), "{mcp}");
    assert!(mcp["name"].as_str().unwrap().starts_with("POST /mcp"), "{mcp}");
    // Nothing exported names the agent's trace ids, or the record's id.
    let exported = std::fs::read_to_string(&output).unwrap();
    for secret in [TRACE, OTHER, dd_id.as_str(), token.as_str()] {
        assert!(!exported.contains(secret), "an exported span carries {secret}");
    }

    // A collector that is down costs the requests nothing.
    let (_quiet, quiet_base, _) = common::serve_sqlite("traces-down", &["--otlp-endpoint", "http://127.0.0.1:9"]).await;
    for _ in 0..20 {
        let started = Instant::now();
        let reply = http.get(format!("{quiet_base}/health")).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 200);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let refused = anchor(&["serve", "--data-dir", dir.join("never").to_str().unwrap(), "--otlp-endpoint", "ftp://collector"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--otlp-endpoint"), "{}", String::from_utf8_lossy(&refused.stderr));
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&dir);
}
