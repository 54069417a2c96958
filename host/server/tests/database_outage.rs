//! The database goes away under a running host and comes back: while it is
//! down every request is answered 503 with Retry-After (never a 500, never a
//! dropped connection) and the host says it is not ready; once it is back the
//! host serves again within seconds, on its own, with nothing acknowledged
//! lost and a create retried with its request_id recorded once.

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{PrivateCluster, pg_bin, serve};

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
    let (_server, base, data) = serve("outage", &["--rate-limit", "1000000", "--database-url", &cluster.url()]).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
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
        assert!(took < Duration::from_secs(6), "{what} took {took:?} to be answered while the database was down");
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

/// libpq's multi-host URL: the host writes to whichever listed host is the
/// primary. With a synchronous standby, the primary crashes and the standby
/// is promoted: the host follows it by itself, serves writes again within
/// 15 s, and every declaration it acknowledged before is there, confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_follows_the_primary_to_its_promoted_standby() {
    let test = "database_outage::a_host_follows_the_primary_to_its_promoted_standby";
    if common::postgres_or_skip(test).is_none() {
        return;
    }
    let bin = pg_bin().expect("PostgreSQL's server programs (initdb, pg_ctl, pg_basebackup) under /usr/lib/postgresql");
    let primary = PrivateCluster::init(&bin);
    let standby = PrivateCluster::standby_of(&bin, &primary);
    // Synchronous replication: a commit is acknowledged once the standby has it.
    let admin = sqlx::PgPool::connect(&primary.url()).await.unwrap();
    for statement in ["alter system set synchronous_standby_names = '*'", "select pg_reload_conf()"] {
        sqlx::raw_sql(statement).execute(&admin).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sync: Option<String> =
            sqlx::query_scalar("select sync_state from pg_stat_replication limit 1").fetch_optional(&admin).await.unwrap();
        if sync.as_deref() == Some("sync") {
            break;
        }
        assert!(Instant::now() < deadline, "the standby never became synchronous");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin.close().await;

    let url = format!("postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write", standby.port, primary.port);
    let (_server, base, data) = serve("failover", &["--rate-limit", "1000000", "--database-url", &url]).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    // The standby is listed first: the host found the primary all the same.
    assert_eq!(http.get(format!("{base}/ready")).send().await.unwrap().status(), 200);
    let agent: Value = http.post(format!("{base}/v1/agent/register")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let token = agent["auth_token"].as_str().unwrap().to_string();
    let anchor_one = || async {
        let created = http
            .post(format!("{base}/v1/dd/create"))
            .bearer_auth(&token)
            .json(&json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": { "ee_preset": "EE_basic" } }))
            .send()
            .await
            .ok()?;
        if created.status() != 201 {
            return None;
        }
        let dd_id = created.json::<Value>().await.ok()?["dd_id"].as_str()?.to_string();
        let confirmed =
            http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&token).json(&json!({ "dd_id": dd_id })).send().await.ok()?;
        (confirmed.status() == 200).then_some(dd_id)
    };
    let mut acknowledged = Vec::new();
    for _ in 0..20 {
        acknowledged.push(anchor_one().await.expect("anchored on the first primary"));
    }

    // The log as it stood before the fault: a signed checkpoint covering the 20.
    let (size_before, note_before) = common::checkpoint_at_least(&http, &base, 20, Duration::from_secs(30)).await;

    primary.crash();
    standby.promote();
    let promoted = Instant::now();
    loop {
        if let Some(dd_id) = anchor_one().await {
            acknowledged.push(dd_id);
            break;
        }
        assert!(promoted.elapsed() < Duration::from_secs(15), "no write was served within 15 s of the promotion");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("writes served again {:?} after the promotion", promoted.elapsed());
    for dd_id in &acknowledged {
        let read = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(read.status(), 200, "acknowledged {dd_id} is on the new primary");
        let body: Value = read.json().await.unwrap();
        assert_eq!(body["payment"]["settlement_status"], "settled", "{dd_id} confirmed: {body}");
    }
    assert_eq!(http.get(format!("{base}/ready")).send().await.unwrap().status(), 200);

    // The log went on from where it stood: a checkpoint after the fault is
    // consistent with the one before, and every receipt verifies.
    let (size_after, note_after) = common::checkpoint_at_least(&http, &base, acknowledged.len() as u64, Duration::from_secs(30)).await;
    let key: Value = http.get(format!("{base}/v1/log/key")).send().await.unwrap().json().await.unwrap();
    let vkey = key["public_key"].as_str().unwrap().to_string();
    let proof: anchor_verify::ConsistencyProof =
        http.get(format!("{base}/v1/log/consistency?from={size_before}&to={size_after}")).send().await.unwrap().json().await.unwrap();
    anchor_verify::verify_consistency(&note_before, &note_after, &proof, &vkey)
        .unwrap_or_else(|e| panic!("checkpoints {size_before} -> {size_after} across the failover: {e}"));
    let mut leaves = std::collections::HashSet::new();
    for dd_id in &acknowledged {
        let receipt: Value =
            http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        let receipt: anchor_verify::Receipt = serde_json::from_value(receipt).unwrap();
        let verified = anchor_verify::verify_receipt(&receipt, &vkey).unwrap_or_else(|e| panic!("{dd_id}: {e}"));
        assert!(leaves.insert(verified.leaf_index), "one leaf per declaration");
    }
    let _ = std::fs::remove_dir_all(&data);
}
