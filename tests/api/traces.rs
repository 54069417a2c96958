//! Trace links: a create that carries W3C trace context (the `traceparent`
//! header over REST, `_meta.traceparent` over MCP) gets a record whose salt
//! commits to the trace id; the receipt proves the link to whoever holds the
//! trace id, refuses any other id, and the trace id itself is stored nowhere.

use anchor_tests::*;
use anchor_verify::{Receipt, verify_receipt, verify_trace};
use serde_json::{Value, json};

anchor_tests::both_backends!(a_record_commits_to_the_trace_its_create_named);

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const OTHER: &str = "0af7651916cd43dd8448eb211c80319c";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-00f067aa0ba902b7-01")
}

/// The receipt of `dd_id` once the log holds it.
async fn receipt(t: &TestServer, token: &str, dd_id: &str) -> Receipt {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let reply = t.get(&format!("/v1/dd/{dd_id}/receipt"), Some(token)).await;
        if reply.status == StatusCode::OK {
            return serde_json::from_value(reply.json).expect("receipt shape");
        }
        assert!(std::time::Instant::now() < deadline, "no receipt: {}", reply.text);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Creates over REST with the given traceparent headers (none, one or
/// several), confirms, and returns the create's answer.
async fn create_with(t: &TestServer, agent: &Agent, traceparents: &[&str]) -> Value {
    let mut request = t.http.post(t.url("/v1/dd/create")).bearer_auth(&agent.token).json(&create_body(json!({ "ee_preset": "EE_basic" })));
    for value in traceparents {
        request = request.header("traceparent", *value);
    }
    let reply = request.send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 201);
    let created: Value = reply.json().await.unwrap();
    assert_eq!(t.confirm(agent, created["dd_id"].as_str().unwrap()).await.status, StatusCode::OK);
    created
}

async fn a_record_commits_to_the_trace_its_create_named(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;

    // REST: one well-formed header links the record.
    let linked = create_with(&t, &agent, &[&traceparent(TRACE)]).await;
    let key = linked["trace_key"].as_str().unwrap_or_else(|| panic!("no trace_key: {linked}")).to_string();
    assert_eq!(key.len(), 64);
    let dd_id = linked["dd_id"].as_str().unwrap();
    let detail = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await.json;
    assert_eq!(detail["integrity"]["trace_key"], json!(key), "{detail}");

    // No header, a malformed one (upper-case hex, a zero parent id, NUL), or
    // two of them: the record is made, unlinked.
    let (upper, zero_parent) = (traceparent(&TRACE.to_uppercase()), format!("00-{TRACE}-0000000000000000-01"));
    let (this, other) = (traceparent(TRACE), traceparent(OTHER));
    for headers in [vec![], vec![upper.as_str()], vec![zero_parent.as_str()], vec![this.as_str(), other.as_str()]] {
        let created = create_with(&t, &agent, &headers).await;
        assert!(created.get("trace_key").is_none(), "{headers:?}: {created}");
    }

    // MCP: `_meta.traceparent` links the record as the header does.
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "create_decision",
            "_meta": { "traceparent": traceparent(OTHER) },
            "arguments": {
                "auth_token": agent.token, "request_id": uuid::Uuid::new_v4(), "ee_preset": "EE_basic",
                "decision_type": "internal_service", "decision_action_type": "execute", "origin_context_type": "internal",
            },
        },
    });
    let reply = t.http.post(t.url("/mcp")).header("accept", "application/json, text/event-stream").json(&call).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    let answer: Value = reply.json().await.unwrap();
    let over_mcp = &answer["result"]["structuredContent"];
    assert!(over_mcp["trace_key"].is_string(), "{answer}");
    let mcp_dd = over_mcp["dd_id"].as_str().unwrap().to_string();
    assert_eq!(t.confirm(&agent, &mcp_dd).await.status, StatusCode::OK);

    // The receipts: each verifies, and proves its own trace only.
    let rest_receipt = receipt(&t, &agent.token, dd_id).await;
    verify_receipt(&rest_receipt, &t.log_key.vkey).expect("the receipt verifies");
    assert_eq!(rest_receipt.trace_key.as_deref(), Some(key.as_str()));
    assert_eq!(verify_trace(&rest_receipt, TRACE), Ok(()));
    assert_eq!(verify_trace(&rest_receipt, OTHER).unwrap_err().check(), "trace");
    let mcp_receipt = receipt(&t, &agent.token, &mcp_dd).await;
    verify_receipt(&mcp_receipt, &t.log_key.vkey).expect("the receipt verifies");
    assert_eq!(verify_trace(&mcp_receipt, OTHER), Ok(()));
    assert_eq!(verify_trace(&mcp_receipt, TRACE).unwrap_err().check(), "trace");

    // A key swapped into the receipt proves nothing; a salt changed to fit
    // another trace breaks the record's hash.
    let mut swapped = rest_receipt.clone();
    swapped.trace_key = mcp_receipt.trace_key.clone();
    assert_eq!(verify_trace(&swapped, TRACE).unwrap_err().check(), "trace");
    let mut resalted = rest_receipt.clone();
    let salt_line = resalted.canonical_record.lines().nth(1).unwrap().to_string();
    let other_salt = mcp_receipt.canonical_record.lines().nth(1).unwrap().to_string();
    resalted.canonical_record = resalted.canonical_record.replace(&salt_line, &other_salt);
    resalted.trace_key = mcp_receipt.trace_key.clone();
    assert_eq!(verify_trace(&resalted, OTHER), Ok(()), "the salt and key of the other record fit the other trace");
    assert_eq!(verify_receipt(&resalted, &t.log_key.vkey).unwrap_err().check(), "record", "but the log's record is not that");

    // Two records linked, and neither trace id kept anywhere.
    assert_eq!(t.scalar("select count(*) from declaration where trace_key is not null").await, 2);
    for trace in [TRACE, OTHER] {
        assert!(!t.database_holds(trace).await, "the database holds trace id {trace}");
    }
}
