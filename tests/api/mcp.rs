//! The MCP endpoint: the official MCP client drives it (tests/e2e/mcp,
//! `scripts/test` installs its package), create and confirm over MCP answer
//! exactly what the REST routes answer for the same input, and a foreign
//! Host header is refused.

use std::path::Path;

use anchor_tests::*;
use serde_json::{Map, Value, json};

both_backends!(
    the_official_mcp_client_lists_registers_declares_and_reads,
    create_and_confirm_over_mcp_answer_what_rest_answers,
    a_foreign_host_header_is_refused,
    malformed_mcp_requests_get_clear_refusals_never_5xx,
    initialize_agrees_on_the_current_and_the_previous_protocol_version,
    every_tool_reaches_its_success_path_paying_where_it_costs,
    a_confirmation_over_mcp_reads_its_agent_with_its_record,
);

async fn the_official_mcp_client_lists_registers_declares_and_reads(backend: Backend) {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/mcp");
    assert!(
        e2e.join("node_modules/@modelcontextprotocol/sdk").exists() && e2e.join("node_modules/@modelcontextprotocol/client").exists(),
        "the MCP client is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    let t = TestServer::start(backend).await;
    let mut node = tokio::process::Command::new("node");
    // mcp.test.mjs: the 2025 client (@modelcontextprotocol/sdk 1.x, initialize
    // at 2025-11-25); modern.test.mjs: the 2026-07-28 client (@modelcontextprotocol/client 2.x).
    node.args(["--test", "mcp.test.mjs", "modern.test.mjs"]).current_dir(&e2e).env("ANCHOR_BASE_URL", &t.base);
    let output = node.output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 6\n") && stdout.contains("# fail 0\n"), "{stdout}");
    // What the clients declared over MCP (three declarations, by three agents)
    // is on record like any declaration.
    assert_eq!(t.scalar("select count(*) from declaration where confirmed_at is not null").await, 3);
}

/// One MCP tool call (stateless: no session, no initialize needed), with its result.
async fn tool(t: &TestServer, name: &str, arguments: Value) -> Value {
    let reply = t
        .http
        .post(t.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } }))
        .send()
        .await
        .expect("mcp request");
    assert_eq!(reply.status().as_u16(), 200);
    let body: Value = reply.json().await.expect("JSON-RPC answer");
    let result = body["result"].clone();
    assert_ne!(result["isError"], json!(true), "{name}: {body}");
    result["structuredContent"].clone()
}

/// How many statements the store has run that read the `agent` table alone
/// (a token's lookup).
async fn agent_reads(t: &TestServer) -> f64 {
    t.statements_run("select", "agent").await
}

/// A confirmation over MCP reads its agent beside its record, in one read,
/// as the REST route does: no lookup of the token of its own.
async fn a_confirmation_over_mcp_reads_its_agent_with_its_record(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let agent = t.register().await;
    let over_rest = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    let over_mcp = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    let before = agent_reads(&t).await;
    let confirmed = t.confirm(&agent, over_rest["dd_id"].as_str().unwrap()).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    let after_rest = agent_reads(&t).await;
    let answer = tool(&t, "confirm_decision", json!({ "auth_token": agent.token, "dd_id": over_mcp["dd_id"] })).await;
    assert_eq!(answer["dd_id"], over_mcp["dd_id"], "{answer}");
    let after_mcp = agent_reads(&t).await;
    assert_eq!((after_rest - before, after_mcp - after_rest), (0.0, 0.0), "token lookups of their own: REST, then MCP");
    // A token that is not the agent's is still refused, and a dd_id that
    // does not read still gets its own refusal once the token is known.
    let reply = |arguments: Value| {
        let t = &t;
        async move {
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "confirm_decision", "arguments": arguments } });
            let reply =
                t.http.post(t.url("/mcp")).header("accept", "application/json, text/event-stream").json(&body).send().await.unwrap();
            reply.json::<Value>().await.expect("JSON-RPC answer")
        }
    };
    let foreign = reply(json!({ "auth_token": "da_not_a_token", "dd_id": over_mcp["dd_id"] })).await;
    assert_eq!(foreign["result"]["isError"], json!(true), "{foreign}");
    assert!(foreign.to_string().contains("INVALID_TOKEN"), "a refused token: {foreign}");
    let unreadable = reply(json!({ "auth_token": agent.token, "dd_id": "not-a-uuid" })).await;
    assert_eq!(unreadable["result"]["isError"], json!(true), "{unreadable}");
    let text = unreadable.to_string();
    assert!(!text.contains("INVALID_TOKEN") && text.contains("dd_id"), "the token is good; the dd_id is what is refused: {text}");
}

/// `value` without what differs between two records by nature: their ids,
/// salts and hashes.
fn comparable(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !(k.ends_with("_id") || matches!(k.as_str(), "salt" | "integrity_hash" | "payment_instructions")))
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

async fn create_and_confirm_over_mcp_answer_what_rest_answers(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (rest_agent, mcp_agent) = (t.register().await, t.register().await);
    let dd = json!({
        "dd_unit_type": "single",
        "dd_declaration_mode": "self_declared",
        "decision_type": "external_interaction",
        "decision_action_type": "approve",
        "origin_context_type": "mixed",
        "selection_state": "SELECTED",
        "selection_scope": "multi_target",
    });
    let ee = json!({
        "ee_retention_period": "long",
        "ee_integrity_verification_level": "enhanced",
        "ee_disclosure_format_policy": "internal",
        "ee_responsibility_scope": "extended",
        "ee_direct_access_quota": 3,
    });
    let rest = t.post("/v1/dd/create", Some(&rest_agent.token), &json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd, "ee": ee })).await;
    assert_eq!(rest.status.as_u16(), 201, "{}", rest.text);
    let mut arguments: Map<String, Value> = dd.as_object().unwrap().clone();
    arguments.remove("dd_declaration_mode");
    arguments.extend(ee.as_object().unwrap().clone());
    arguments.insert("auth_token".into(), json!(mcp_agent.token));
    let over_mcp = tool(&t, "create_decision", Value::Object(arguments)).await;
    assert_eq!(comparable(&over_mcp), comparable(&rest.json), "create: MCP and REST answer the same fields and values");
    assert!(rest.json["dac_amount"].as_f64().unwrap() > 10.0, "a priced EE: {}", rest.text);

    let rest_dd = rest.json["dd_id"].as_str().unwrap();
    let mcp_dd = over_mcp["dd_id"].as_str().unwrap();
    let confirmed = t.confirm(&rest_agent, rest_dd).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    let mcp_confirmed = tool(&t, "confirm_decision", json!({ "auth_token": mcp_agent.token, "dd_id": mcp_dd })).await;
    assert_eq!(comparable(&mcp_confirmed), comparable(&confirmed.json), "confirm: the same fields and values");

    // The records themselves: the same price, pricing version and fields.
    let rest_record = t.get(&format!("/v1/dd/{rest_dd}"), Some(&rest_agent.token)).await;
    let mcp_record = tool(&t, "get_decision", json!({ "auth_token": mcp_agent.token, "dd_id": mcp_dd })).await;
    assert_eq!(comparable(&mcp_record), comparable(&rest_record.json));
    assert_eq!(mcp_record["dac"], rest_record.json["dac"]);
    assert_eq!(mcp_record["dac"]["pricing_version"], rest.json["pricing_version"], "{mcp_record}");

    // A number past 64 bits is read as written, as REST reads it.
    let scale: Value = serde_json::from_str("123456789012345678901234567890").unwrap();
    let created = tool(
        &t,
        "create_decision",
        json!({
            "auth_token": mcp_agent.token, "decision_type": "internal_service", "decision_action_type": "execute",
            "origin_context_type": "internal", "content_inclusion_flag": 1,
            "template": { "decision_class": "payment", "decision_scale_value": scale },
        }),
    )
    .await;
    let read = tool(&t, "get_decision", json!({ "auth_token": mcp_agent.token, "dd_id": created["dd_id"] })).await;
    assert_eq!(read["dd"]["template"]["decision_scale_value"].to_string(), "123456789012345678901234567890", "{read}");
}

async fn a_foreign_host_header_is_refused(backend: Backend) {
    let t = TestServer::start(backend).await;
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let send = |host: &'static str| {
        t.http.post(t.url("/mcp")).header("host", host).header("accept", "application/json, text/event-stream").json(&list).send()
    };
    let foreign = send("evil.example").await.expect("answer");
    assert_eq!(foreign.status().as_u16(), 403, "a foreign Host is refused");
    let own = send("127.0.0.1").await.expect("answer");
    assert_eq!(own.status().as_u16(), 200, "the public URL's host is served");
    let listed: Value = own.json().await.unwrap();
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(30));
    // Which hosts are the public URL's: its host, with or without its port.
    let hosts = anchor_server::mcp::allowed_hosts("https://anchor.example.org:8443");
    assert!(hosts.contains(&"anchor.example.org".to_string()) && hosts.contains(&"anchor.example.org:8443".to_string()));
    assert!(!hosts.iter().any(|h| h.contains("evil")));
}

async fn malformed_mcp_requests_get_clear_refusals_never_5xx(backend: Backend) {
    let t = TestServer::start(backend).await;
    let accept = "application/json, text/event-stream";
    let post = |body: Vec<u8>, content_type: &'static str| {
        t.http.post(t.url("/mcp")).header("accept", accept).header("content-type", content_type).body(body).send()
    };
    let huge = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{{\"x\":\"{}\"}}}}", "a".repeat(2 << 20));
    let cases: Vec<(&str, Vec<u8>, &'static str)> = vec![
        ("not JSON", b"{not json".to_vec(), "application/json"),
        ("not JSON-RPC", b"[1, 2, 3]".to_vec(), "application/json"),
        ("no method", br#"{"jsonrpc":"2.0","id":1}"#.to_vec(), "application/json"),
        ("unknown method", br#"{"jsonrpc":"2.0","id":1,"method":"tools/explode"}"#.to_vec(), "application/json"),
        (
            "a NUL in a tool name",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\\u0000b\"}}".to_vec(),
            "application/json",
        ),
        (
            "arguments not an object",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_decision","arguments":[1]}}"#.to_vec(),
            "application/json",
        ),
        (
            "multibyte junk",
            "{\"jsonrpc\":\"2.0\",\"id\":\"é€😀\",\"method\":\"tools/call\",\"params\":{\"name\":\"😀\"}}".as_bytes().to_vec(),
            "application/json",
        ),
        ("not JSON content", b"hello".to_vec(), "text/plain"),
        ("over the body limit", huge.into_bytes(), "application/json"),
    ];
    for (label, body, content_type) in cases {
        let reply = post(body, content_type).await.unwrap_or_else(|e| panic!("{label}: the connection failed: {e}"));
        let status = reply.status().as_u16();
        let text = reply.text().await.unwrap_or_default();
        assert!((200..500).contains(&status), "{label}: {status} {}", anchor_domain::brief(&text));
        if status == 200 {
            let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{label}: {text}"));
            assert!(answer["error"]["code"].is_i64(), "{label}: a JSON-RPC error: {text}");
        }
    }
    // The service still answers.
    let list = t
        .http
        .post(t.url("/mcp"))
        .header("accept", accept)
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .send()
        .await;
    assert_eq!(list.expect("answer").status().as_u16(), 200);
}

async fn initialize_agrees_on_the_current_and_the_previous_protocol_version(backend: Backend) {
    let t = TestServer::start(backend).await;
    for version in ["2025-11-25", "2025-06-18"] {
        let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": { "name": "anchor-test", "version": "1.0.0" },
        } });
        let reply = t
            .http
            .post(t.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .expect("answer");
        assert_eq!(reply.status().as_u16(), 200);
        assert!(reply.headers().get("mcp-session-id").is_none(), "stateless: no session is issued");
        let answer: Value = reply.json().await.expect("JSON-RPC answer");
        assert_eq!(answer["result"]["protocolVersion"], json!(version), "{answer}");
        assert_eq!(answer["result"]["serverInfo"]["name"], json!("anchor"));
        assert!(answer["result"]["capabilities"]["tools"].is_object(), "{answer}");
    }
}

/// One tool call; a payment requirement is paid (signed as the official
/// client signs) and the call made again with `payment_signature`. The
/// result's structured content and whether it was paid, or the tool error.
async fn tool_paying(t: &TestServer, name: &str, mut arguments: Value) -> Result<(Value, bool), Value> {
    let mut offered_resource = None;
    for _ in 0..2 {
        let reply = t
            .http
            .post(t.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } }))
            .send()
            .await
            .expect("mcp request");
        assert_eq!(reply.status().as_u16(), 200, "{name}");
        let body: Value = reply.json().await.expect("JSON-RPC answer");
        let result = &body["result"];
        if result["isError"] != json!(true) {
            let paid = arguments.get("payment_signature").is_some();
            // A payment settled with the call comes back as x402's MCP
            // transport returns it, with the receipt signed for the
            // resource the offer named (a proposal settles at its confirm).
            if paid && name != "propose_bilateral" {
                let settled = &result["_meta"]["x402/payment-response"];
                assert_eq!(settled["success"], json!(true), "{name}: {body}");
                let jws = settled["extensions"]["offer-receipt"]["info"]["receipt"]["signature"].as_str().expect("a signed receipt");
                let receipt = jws_payload(jws);
                assert_eq!(receipt["resourceUrl"], json!(offered_resource), "{name}: the receipt names the offer's resource");
                assert_eq!((&receipt["transaction"], &receipt["payer"]), (&settled["transaction"], &settled["payer"]), "{name}");
            }
            return Ok((result["structuredContent"].clone(), paid));
        }
        let error = result["structuredContent"].clone();
        let Some(challenge) = error.get("payment_required").filter(|_| error["status"] == 402) else { return Err(error) };
        if arguments.get("payment_signature").is_some() {
            return Err(error);
        }
        let offer = challenge["extensions"]["offer-receipt"]["info"]["offers"][0]["signature"].as_str().expect("a signed offer");
        offered_resource = Some(jws_payload(offer)["resourceUrl"].clone());
        let payment = anchor_tests::x402::pay(challenge, anchor_domain::Clock::now(t.clock.as_ref()).timestamp(), Default::default());
        arguments["payment_signature"] = json!(anchor_tests::x402::b64(&payment));
    }
    unreachable!("two rounds at most")
}

/// The payload of a compact JWS (its signature is checked where the
/// official x402 package checks the same signer's offers and receipts).
fn jws_payload(jws: &str) -> Value {
    use base64::Engine;
    let payload = jws.split('.').nth(1).expect("header.payload.signature");
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

/// Every one of the 30 tools reaches its success path over MCP, the paid
/// ones paid with `payment_signature`: observations of the environment and
/// of patterns, another agent's profile, anomaly comparison and evidence,
/// a bilateral proposal, a tool purchase; and submit_feedback keeps a note.
async fn every_tool_reaches_its_success_path_paying_where_it_costs(backend: Backend) {
    use chrono::{Duration, Utc};
    let t = TestServer::with(backend, Options { privacy: anchor_app::ara::privacy::Privacy::Exact, ..Default::default() }).await;
    // Yesterday at noon, ten agents anchor two branch-1 decisions each, with
    // shared templates: releases and anomaly bands need ten agents behind
    // every figure.
    let yesterday = (Utc::now() - Duration::days(1)).date_naive().and_hms_opt(12, 0, 0).unwrap().and_utc();
    t.clock.set(yesterday);
    let mut agents = Vec::new();
    for i in 0..10 {
        let agent = t.register().await;
        for scale in [10, 10 + i] {
            let mut body = create_body(json!({ "ee_preset": "EE_basic", "content_disclosure_scope": "public" }));
            body["content_inclusion_flag"] = json!(1);
            body["template"] = json!({ "decision_class": "payment", "decision_scale_value": scale, "decision_scale_unit": "USDC" });
            let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
            assert_eq!(created.status.as_u16(), 201, "{}", created.text);
            assert_eq!(t.confirm(&agent, created.json["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
            t.clock.advance(Duration::seconds(1));
        }
        agents.push(agent);
    }
    let other = agents.remove(0);
    t.call("PUT", "/v1/agent/disclosure", Some(&other.token), Some(&json!({ "disclosure_level": "full" }))).await;
    // The caller: one of the ten, with its own branch-1 history.
    let me = agents.remove(0);
    t.wait_for_fold(20).await;
    t.clock.set(Utc::now());
    let mut reached = std::collections::BTreeSet::new();
    let mut paid = std::collections::BTreeSet::new();
    let mut ok = async |name: &str, arguments: Value| -> Value {
        let (result, was_paid) = tool_paying(&t, name, arguments).await.unwrap_or_else(|error| panic!("{name}: {error}"));
        reached.insert(name.to_string());
        if was_paid {
            paid.insert(name.to_string());
        }
        result
    };
    let registered = ok("register_agent", json!({})).await;
    assert!(registered["auth_token"].is_string(), "{registered}");
    let token = me.token.clone();
    let created = ok(
        "create_decision",
        json!({ "auth_token": token, "decision_type": "external_interaction", "decision_action_type": "execute", "origin_context_type": "external",
                "ee_preset": "EE_basic", "content_inclusion_flag": 1,
                "template": { "decision_class": "payment", "decision_scale_value": 11, "decision_scale_unit": "USDC" } }),
    )
    .await;
    let dd_id = created["dd_id"].as_str().unwrap().to_string();
    ok("confirm_decision", json!({ "auth_token": token, "dd_id": dd_id })).await;
    ok("get_decision", json!({ "auth_token": token, "dd_id": dd_id })).await;
    ok("list_decisions", json!({ "auth_token": token })).await;
    ok("get_trial_status", json!({ "auth_token": token })).await;
    ok("list_classifications", json!({ "auth_token": token })).await;
    ok("get_documentation", json!({})).await;
    ok("get_dac_balance", json!({ "auth_token": token })).await;
    ok("get_dac_ur", json!({ "auth_token": token })).await;
    let profile = ok("get_agent_profile", json!({ "auth_token": token, "agent_id": other.id })).await;
    assert_eq!(profile["agent_id"], json!(other.id), "another agent's profile, paid: {profile}");
    let environment = ok("observe_environment", json!({ "auth_token": token })).await;
    assert!(environment.is_object() && !environment.as_object().unwrap().is_empty(), "{environment}");
    ok("observe_pattern", json!({ "auth_token": token, "type": "ee-distribution" })).await;
    ok("get_environment_anomaly", json!({ "auth_token": token, "period_days": 30 })).await;
    ok("compare_anomaly", json!({ "auth_token": token, "dd_id": dd_id })).await;
    ok("get_evidence_report", json!({ "auth_token": token, "dd_id": dd_id })).await;
    ok("get_decision_metadata_distribution", json!({ "auth_token": token })).await;
    ok("get_self_classification_distribution", json!({ "auth_token": token })).await;
    let proposal = ok(
        "propose_bilateral",
        json!({ "auth_token": token, "counterparty_agent_id": other.id, "decision_type": "external_interaction",
                "decision_action_type": "approve", "origin_context_type": "external" }),
    )
    .await;
    assert!(proposal["agreement_id"].is_string(), "{proposal}");
    let tool = ok(
        "register_tool",
        json!({ "auth_token": other.token, "tool_name": "profile reader", "price_dac": 5, "ara_connections": [{ "observation_type": "agent_profile" }] }),
    )
    .await;
    ok("list_tools", json!({ "limit": 5 })).await;
    let bought = ok("purchase_tool", json!({ "auth_token": token, "tool_id": tool["tool_id"] })).await;
    assert!(bought["purchase_id"].is_string(), "{bought}");
    ok("create_ise_session", json!({ "auth_token": token })).await;
    ok("get_ise_status", json!({ "auth_token": token })).await;
    ok("exit_ise_session", json!({ "auth_token": token })).await;
    let session = ok("create_sdac_session", json!({ "auth_token": token })).await;
    let session_id = session["session_id"].clone();
    ok(
        "run_sdac_trial",
        json!({ "auth_token": token, "session_id": session_id, "ee_retention_period": "short", "ee_integrity_verification_level": "basic",
                "ee_disclosure_format_policy": "internal", "ee_responsibility_scope": "minimal" }),
    )
    .await;
    ok("get_sdac_session", json!({ "auth_token": token, "session_id": session_id })).await;
    ok("end_sdac_session", json!({ "auth_token": token, "session_id": session_id })).await;
    let thanks = ok("submit_feedback", json!({ "note": "MCP-FEEDBACK-MARKER worked well", "tools_used": ["create_decision"] })).await;
    assert_eq!(thanks["received"], json!(true));
    let listed: Value = t
        .http
        .post(t.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let all: std::collections::BTreeSet<String> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(all.len(), 30);
    let missing: Vec<&String> = all.difference(&reached).collect();
    assert!(missing.is_empty(), "tools that never reached their success path: {missing:?}");
    // What costs something was paid over MCP with payment_signature.
    let expected: std::collections::BTreeSet<String> = [
        "get_agent_profile",
        "observe_environment",
        "observe_pattern",
        "get_environment_anomaly",
        "compare_anomaly",
        "get_evidence_report",
        "propose_bilateral",
        "purchase_tool",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(paid, expected);
    assert_eq!(t.scalar("select count(*) from x402_payment where status in ('settled', 'reserved')").await, 8);
    // The note is kept, and nothing that names who sent it.
    assert_eq!(t.scalar("select count(*) from feedback").await, 1);
    assert!(t.database_holds("MCP-FEEDBACK-MARKER").await);
}

/// `server.json`, the service's MCP Registry entry (schema 2025-12-11, one
/// remote `streamable-http` at `/mcp` of the operator's host), passes the
/// registry's rules as an independent linter checks them (skillsaw, pinned
/// in tests/registry, which bundles the registry's schema byte for byte);
/// a copy that breaks them does not.
#[test]
fn the_registry_entry_passes_the_registry_linter() {
    let lint = std::env::var("ANCHOR_REGISTRY_LINT")
        .unwrap_or_else(|_| panic!("ANCHOR_REGISTRY_LINT names skillsaw (tests/registry/requirements.txt; scripts/test installs it)"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("server.json")).unwrap();
    let entry: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(entry["$schema"], "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json");
    assert_eq!(entry["version"], env!("CARGO_PKG_VERSION"), "the entry names this release");
    let remote = &entry["remotes"][0];
    assert_eq!(remote["type"], "streamable-http");
    assert!(remote["url"].as_str().unwrap().ends_with("/mcp"), "the route this service serves MCP at: {remote}");
    let run = |name: &str, body: &str| {
        let dir = std::env::temp_dir().join(format!("anchor-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("server.json"), body).unwrap();
        let out = std::process::Command::new(&lint).arg("lint").arg(&dir).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (passed, said) = run("ours", &text);
    assert!(passed && said.contains("Repo type: mcp-registry") && said.contains("Errors:   0"), "{said}");
    let mut broken = entry.clone();
    broken["description"] = json!("x".repeat(101));
    broken["remotes"][0]["url"] = json!("not a url");
    let (passed, said) = run("broken", &broken.to_string());
    assert!(!passed && said.contains("mcp-registry-server-json-valid"), "{said}");
}
