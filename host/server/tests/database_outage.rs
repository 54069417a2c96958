//! The database goes away under a running host and comes back: while it is
//! down every request is answered 503 with Retry-After (never a 500, never a
//! dropped connection) and the host says it is not ready; once it is back the
//! host serves again within seconds, on its own, with nothing acknowledged
//! lost and a create retried with its request_id recorded once.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{PrivateCluster, Server, free_port, pg_bin, wait_healthy};

fn dd() -> Value {
    json!({
        "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
        "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_answered_503_and_the_host_recovers_by_itself() {
    let test = "database_outage::a_database_outage_is_answered_503_and_the_host_recovers_by_itself";
    // Under CI the PostgreSQL server programs are there (the suite runs PostgreSQL).
    if common::postgres_or_skip(test).is_none() {
        return;
    }
    let bin = pg_bin().expect("PostgreSQL's server programs (initdb, pg_ctl) under /usr/lib/postgresql");
    let cluster = PrivateCluster::init(&bin);
    let port = free_port();
    let data = std::env::temp_dir().join(format!("anchor-outage-{}-{port}", std::process::id()));
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--rate-limit",
                "1000000",
                "--database-url",
                &cluster.url(),
                "--data-dir",
            ])
            .arg(&data)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    wait_healthy(&http, &base).await;
    let ready = http.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap_or_default());
    let agent: Value = http.post(format!("{base}/v1/agent/register")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let token = agent["auth_token"].as_str().unwrap().to_string();
    let create = |request_id: String| {
        http.post(format!("{base}/v1/dd/create"))
            .bearer_auth(&token)
            .json(&json!({ "request_id": request_id, "dd": dd(), "ee": { "ee_preset": "EE_basic" } }))
            .send()
    };
    let before: Value = create(uuid::Uuid::new_v4().to_string()).await.unwrap().json().await.unwrap();
    let kept = before["dd_id"].as_str().unwrap().to_string();
    let confirmed = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&token).json(&json!({ "dd_id": kept })).send().await.unwrap();
    assert_eq!(confirmed.status(), 200);

    cluster.crash();
    let retried = uuid::Uuid::new_v4().to_string();
    let mut during = Vec::new();
    for what in ["create", "read", "register", "ready"] {
        let asked = Instant::now();
        let reply = match what {
            "create" => create(retried.clone()).await,
            "read" => http.get(format!("{base}/v1/dd/{kept}")).bearer_auth(&token).send().await,
            "register" => http.post(format!("{base}/v1/agent/register")).json(&json!({})).send().await,
            _ => http.get(format!("{base}/ready")).send().await,
        };
        let took = asked.elapsed();
        eprintln!("{what} while the database is down: answered in {took:?}");
        assert!(took < Duration::from_secs(12), "{what} took {took:?} to be answered while the database was down");
        during.push((what, reply));
    }
    for (what, reply) in during {
        let reply = reply.unwrap_or_else(|e| panic!("{what}: the connection was dropped while the database was down: {e}"));
        assert_eq!(reply.status(), 503, "{what} while the database is down");
        assert!(reply.headers().contains_key("retry-after"), "{what}: 503 says when to retry");
        if what != "ready" {
            let body: Value = reply.json().await.unwrap();
            assert_eq!(body["error_code"], "STORAGE_UNAVAILABLE", "{what}: {body}");
        }
    }

    cluster.start();
    let back = Instant::now();
    loop {
        if http.get(format!("{base}/ready")).send().await.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(15), "the host was not ready again within 15 s of the database's return");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What was acknowledged before is there; the create retried with its request_id is recorded once.
    let read = http.get(format!("{base}/v1/dd/{kept}")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(read.status(), 200);
    let first = create(retried.clone()).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let again: Value = create(retried).await.unwrap().json().await.unwrap();
    assert_eq!(again["dd_id"], first["dd_id"], "one record for one request_id");
    let _ = std::fs::remove_dir_all(&data);
}
