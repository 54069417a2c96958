//! DD create over MCP beside DD create over REST: the same server, the same
//! load, one run. Clients alternate the two fronts request by request, so
//! both see the same machine and the same database at every moment.
//!
//!     mcpbench [REQUESTS_PER_FRONT]        (default: 5000)
//!
//! PostgreSQL when ANCHOR_TEST_POSTGRES_URL is set, else SQLite.
//! MCPBENCH_CLIENTS sets the concurrent clients (default 4). Every request
//! is a Trial-paid create with the same EE; an MCP call is a stateless
//! `tools/call` of create_decision (no session, as the endpoint serves it).

use std::time::{Duration, Instant};

use anchor_domain::MilliDac;
use anchor_tests::*;
use serde_json::{Value, json};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let per_front: usize = std::env::args().nth(1).map_or(5_000, |n| n.parse().expect("REQUESTS_PER_FRONT is a number"));
    let clients: usize = std::env::var("MCPBENCH_CLIENTS").ok().map_or(4, |n| n.parse().expect("MCPBENCH_CLIENTS"));
    let backend = if postgres_url().is_some() { Backend::Postgres } else { Backend::Sqlite };
    let options = Options { rate_limit: u32::MAX, dab_default: MilliDac::from_dac(1_000_000_000), ..Default::default() };
    let t = TestServer::with(backend, options).await;
    let mut tokens = Vec::new();
    for _ in 0..clients {
        tokens.push(t.register().await.token);
    }
    t.tamper("update agent set trial_balance_milli = 1000000000000").await;
    let t = std::sync::Arc::new(t);
    let mut tasks = Vec::new();
    for token in tokens {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let (mut rest, mut mcp) = (Vec::new(), Vec::new());
            for i in 0..(per_front / clients) * 2 {
                let started = Instant::now();
                if i % 2 == 0 {
                    let reply = t.post("/v1/dd/create", Some(&token), &create_body(json!({ "ee_preset": "EE_standard" }))).await;
                    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
                    rest.push(started.elapsed());
                } else {
                    let call = json!({ "jsonrpc": "2.0", "id": i, "method": "tools/call", "params": { "name": "create_decision", "arguments": {
                        "auth_token": token, "ee_preset": "EE_standard", "decision_type": "internal_service",
                        "decision_action_type": "execute", "origin_context_type": "internal",
                    } } });
                    let reply = t.http.post(t.url("/mcp")).header("accept", "application/json, text/event-stream").json(&call).send().await;
                    let body: Value = reply.expect("mcp").json().await.expect("JSON-RPC answer");
                    assert!(body["result"]["structuredContent"]["dd_id"].is_string(), "{body}");
                    mcp.push(started.elapsed());
                }
            }
            (rest, mcp)
        }));
    }
    let started = Instant::now();
    let (mut rest, mut mcp) = (Vec::new(), Vec::new());
    for task in tasks {
        let (r, m) = task.await?;
        rest.extend(r);
        mcp.extend(m);
    }
    let secs = started.elapsed().as_secs_f64();
    let name = if backend == Backend::Postgres { "PostgreSQL" } else { "SQLite" };
    println!("{name}, {clients} clients alternating the two fronts, {:.1} s in all", secs);
    println!("| front | creates | p50 ms | p99 ms | mean ms |");
    println!("|---|---:|---:|---:|---:|");
    for (label, times) in [("POST /v1/dd/create (REST)", &mut rest), ("create_decision (MCP tools/call)", &mut mcp)] {
        times.sort();
        let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1000.0;
        let mean = times.iter().map(Duration::as_secs_f64).sum::<f64>() / times.len() as f64 * 1000.0;
        println!("| {label} | {} | {:.2} | {:.2} | {mean:.2} |", times.len(), at(0.5), at(0.99));
    }
    Ok(())
}
