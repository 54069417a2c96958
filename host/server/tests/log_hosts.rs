//! The log through the `anchor` binary: `anchor verify` checks a receipt offline,
//! two hosts on one PostgreSQL keep one log when the integrator is killed,
//! three hosts sharing a peer key commit through the commit lease's holder
//! (and go on when it is killed), and either of two hosts answers any
//! request of a 2026-07-28 MCP client.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{free_port, wait_healthy};

struct Host {
    child: Child,
    base: String,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("anchor-{name}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn start(data: &Path, env: &[(&str, &str)]) -> Host {
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_anchor"));
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "1000000", "--data-dir"])
        .arg(data)
        .env_remove("DATABASE_URL")
        .env_remove("ANCHOR_LOG_SIGNING_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let host = Host { child: command.spawn().unwrap(), base: format!("http://127.0.0.1:{port}") };
    wait_healthy(&reqwest::Client::new(), &host.base).await;
    host
}

fn anchor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap()
}

async fn register(http: &reqwest::Client, base: &str) -> String {
    register_agent(http, base).await.1
}

/// Registers an agent at `base`: its agent_id and token.
async fn register_agent(http: &reqwest::Client, base: &str) -> (String, String) {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    (agent["agent_id"].as_str().unwrap().to_string(), agent["auth_token"].as_str().unwrap().to_string())
}

/// Creates and confirms one declaration; `None` if the host was unreachable.
async fn anchor_one(http: &reqwest::Client, base: &str, token: &str) -> Option<String> {
    let body = json!({
        "request_id": uuid::Uuid::new_v4(),
        "dd": {
            "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
            "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED",
        },
        "ee": { "ee_preset": "EE_basic" },
    });
    let created: Value = http.post(format!("{base}/v1/dd/create")).bearer_auth(token).json(&body).send().await.ok()?.json().await.ok()?;
    let dd_id = created["dd_id"].as_str()?.to_string();
    let confirmed = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(token).json(&json!({ "dd_id": dd_id })).send().await.ok()?;
    (confirmed.status().as_u16() == 200).then_some(dd_id)
}

async fn receipt(http: &reqwest::Client, base: &str, token: &str, dd_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap();
        if reply.status().as_u16() == 200 {
            return reply.json().await.unwrap();
        }
        assert_eq!(reply.status().as_u16(), 409, "unexpected receipt answer");
        assert!(Instant::now() < deadline, "{dd_id} never reached the log");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn anchor_verify_checks_a_receipt_offline() {
    let data = scratch("verify");
    let host = start(&data, &[]).await;
    let http = reqwest::Client::new();
    let token = register(&http, &host.base).await;
    let first = anchor_one(&http, &host.base, &token).await.unwrap();
    let early = receipt(&http, &host.base, &token, &first).await;
    let early_size = early["tree_size"].as_u64().unwrap();
    for _ in 0..5 {
        anchor_one(&http, &host.base, &token).await.unwrap();
    }
    let last = anchor_one(&http, &host.base, &token).await.unwrap();
    let receipt = receipt(&http, &host.base, &token, &last).await;
    let key: Value = http.get(format!("{}/v1/log/key", host.base)).send().await.unwrap().json().await.unwrap();
    let vkey = key["public_key"].as_str().unwrap();
    // The key file the first start created is the one the host signs with.
    let skey = std::fs::read_to_string(data.join("log-signing.key")).unwrap();
    assert!(skey.starts_with("PRIVATE+KEY+"));
    drop(host); // offline from here on

    let receipt_file = data.join("receipt.json");
    std::fs::write(&receipt_file, receipt.to_string()).unwrap();
    let ok = anchor(&["verify", receipt_file.to_str().unwrap(), "--key", vkey]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("is in the tree"));

    // With an earlier checkpoint the verifier saved, and the proof between them.
    let previous = data.join("previous.checkpoint");
    std::fs::write(&previous, early["checkpoint"].as_str().unwrap()).unwrap();
    let size = receipt["tree_size"].as_u64().unwrap();
    let host = start(&data, &[]).await;
    let proof: Value =
        http.get(format!("{}/v1/log/consistency?from={early_size}&to={size}", host.base)).send().await.unwrap().json().await.unwrap();
    drop(host);
    let proof_file = data.join("consistency.json");
    std::fs::write(&proof_file, proof.to_string()).unwrap();
    let consistent = anchor(&[
        "verify",
        receipt_file.to_str().unwrap(),
        "--key",
        vkey,
        "--previous",
        previous.to_str().unwrap(),
        "--consistency",
        proof_file.to_str().unwrap(),
    ]);
    assert!(consistent.status.success(), "{}", String::from_utf8_lossy(&consistent.stderr));
    assert!(String::from_utf8_lossy(&consistent.stdout).contains("prefix"));

    // One changed character of the record fails the record check.
    let mut forged = receipt.clone();
    forged["canonical_record"] = json!(receipt["canonical_record"].as_str().unwrap().replace("execute", "approve"));
    std::fs::write(&receipt_file, forged.to_string()).unwrap();
    let refused = anchor(&["verify", receipt_file.to_str().unwrap(), "--key", vkey]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("record check"), "{}", String::from_utf8_lossy(&refused.stderr));
    let _ = std::fs::remove_dir_all(&data);
}

/// Two hosts share one PostgreSQL database and one log key. Load goes to both;
/// the host holding the integrator lease is killed mid-run; the other takes
/// over. Every confirmed declaration ends up in the log exactly once and every
/// pair of consecutive checkpoints is consistent.
#[tokio::test]
async fn two_hosts_on_one_postgres_survive_the_integrator_dying() {
    let Some(url) = common::postgres_or_skip("log_hosts::two_hosts_on_one_postgres_survive_the_integrator_dying") else {
        return;
    };
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let database = format!("anchor_two_hosts_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {database}"))).execute(&admin).await.unwrap();
    let (prefix, _) = url.rsplit_once('/').unwrap();
    let db_url = format!("{prefix}/{database}");

    let data = scratch("two-hosts");
    let keygen = anchor(&["log", "keygen", "--origin", "two-hosts.test/log", data.join("shared.key").to_str().unwrap()]);
    assert!(keygen.status.success());
    let skey = std::fs::read_to_string(data.join("shared.key")).unwrap();
    let env = [("DATABASE_URL", db_url.as_str()), ("ANCHOR_LOG_SIGNING_KEY", skey.trim())];
    let (dir_a, dir_b) = (data.join("a"), data.join("b"));
    let mut hosts = vec![start(&dir_a, &env).await, start(&dir_b, &env).await];
    let http = reqwest::Client::new();

    // Ten agents, each sending 30 declarations alternately to both hosts.
    let mut tokens = Vec::new();
    for _ in 0..10 {
        tokens.push(register(&http, &hosts[0].base).await);
    }
    let bases: Vec<String> = hosts.iter().map(|h| h.base.clone()).collect();
    let mut tasks = Vec::new();
    for token in tokens.clone() {
        let (http, bases) = (http.clone(), bases.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for i in 0..30 {
                let base = &bases[i % 2];
                if let Some(dd_id) = anchor_one(&http, base, &token).await {
                    done.push((token.clone(), dd_id));
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            done
        }));
    }
    // Mid-run: find the lease holder and kill its host without warning.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let db = sqlx::PgPool::connect(&db_url).await.unwrap();
    let holder: Option<uuid::Uuid> = sqlx::query_scalar("select holder from log_lease").fetch_one(&db).await.unwrap();
    let holder = holder.expect("someone holds the lease");
    let mut victim = None;
    for (i, host) in hosts.iter().enumerate() {
        let health: Value = http.get(format!("{}/health", host.base)).send().await.unwrap().json().await.unwrap();
        if health["host_id"] == json!(holder) {
            victim = Some(i);
        }
    }
    let victim = victim.expect("the holder is one of the two hosts");
    let killed = hosts.remove(victim);
    drop(killed);
    let survivor = hosts.pop().unwrap();

    let mut confirmed = Vec::new();
    for task in tasks {
        confirmed.extend(task.await.unwrap());
    }
    assert!(confirmed.len() >= 150, "most declarations went through: {}", confirmed.len());
    // More work after the kill, which only a new integrator can take in.
    let late = register(&http, &survivor.base).await;
    for _ in 0..20 {
        confirmed.push((late.clone(), anchor_one(&http, &survivor.base, &late).await.expect("the survivor serves")));
    }

    // Everything confirmed in the database is in the log exactly once.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pending: i64 = sqlx::query_scalar("select count(*) from log_pending").fetch_one(&db).await.unwrap();
        let confirmed_rows: i64 =
            sqlx::query_scalar("select count(*) from declaration where confirmed_at is not null").fetch_one(&db).await.unwrap();
        let published: Option<i64> = sqlx::query_scalar("select max(size) from log_checkpoint").fetch_one(&db).await.unwrap();
        if pending == 0 && published == Some(confirmed_rows) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the survivor did not take over: pending {pending}, published {published:?}, confirmed {confirmed_rows}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let survivor_health: Value = http.get(format!("{}/health", survivor.base)).send().await.unwrap().json().await.unwrap();
    let new_holder: Option<uuid::Uuid> = sqlx::query_scalar("select holder from log_lease").fetch_one(&db).await.unwrap();
    assert_eq!(json!(new_holder), survivor_health["host_id"], "the surviving host took the lease over");
    let entries: i64 = sqlx::query_scalar("select count(distinct dd_id) from log_entry").fetch_one(&db).await.unwrap();
    let max_index: i64 = sqlx::query_scalar("select max(leaf_index) from log_entry").fetch_one(&db).await.unwrap();
    let confirmed_rows: i64 =
        sqlx::query_scalar("select count(*) from declaration where confirmed_at is not null").fetch_one(&db).await.unwrap();
    assert_eq!((entries, max_index + 1), (confirmed_rows, confirmed_rows), "dense indices, one per confirmed declaration");

    // Every receipt the clients got verifies; every pair of checkpoints is consistent.
    let key: Value = http.get(format!("{}/v1/log/key", survivor.base)).send().await.unwrap().json().await.unwrap();
    let vkey = key["public_key"].as_str().unwrap().to_string();
    let mut leaves = HashSet::new();
    for (token, dd_id) in &confirmed {
        let receipt: anchor_verify::Receipt = serde_json::from_value(receipt(&http, &survivor.base, token, dd_id).await).unwrap();
        let verified = anchor_verify::verify_receipt(&receipt, &vkey).unwrap_or_else(|e| panic!("{dd_id}: {e}"));
        assert!(leaves.insert(verified.leaf_index));
    }
    let notes: Vec<(i64, String)> = sqlx::query_as("select size, note from log_checkpoint order by size").fetch_all(&db).await.unwrap();
    assert!(notes.len() >= 2, "checkpoints were published before and after the takeover");
    for pair in notes.windows(2) {
        let (from, to) = (pair[0].0, pair[1].0);
        let proof: anchor_verify::ConsistencyProof =
            http.get(format!("{}/v1/log/consistency?from={from}&to={to}", survivor.base)).send().await.unwrap().json().await.unwrap();
        anchor_verify::verify_consistency(&pair[0].1, &pair[1].1, &proof, &vkey).unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    }
    drop(survivor);
    db.close().await;
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database {database} with (force)"))).execute(&admin).await;
    let _ = std::fs::remove_dir_all(&data);
}

/// The value of a counter in a host's `/metrics`.
async fn counter(http: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|line| line.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{base}/metrics has no {name}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The commit lease's holder and address, once someone holds it.
async fn commit_holder(db: &sqlx::PgPool, not: Option<uuid::Uuid>) -> (uuid::Uuid, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row: Option<(Option<uuid::Uuid>, Option<String>)> =
            sqlx::query_as("select holder, address from commit_lease where expires_at > now()").fetch_optional(db).await.unwrap();
        if let Some((Some(holder), Some(address))) = row
            && Some(holder) != not
        {
            return (holder, address);
        }
        assert!(Instant::now() < deadline, "no host took the commit lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Anchors `per_agent` declarations for each of `agents` new agents, at the
/// hosts in turn, all at once; every one must be acknowledged.
async fn anchor_at(http: &reqwest::Client, bases: &[String], agents: usize, per_agent: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for a in 0..agents {
        let (http, bases) = (http.clone(), bases.to_vec());
        tasks.push(tokio::spawn(async move {
            let token = register(&http, &bases[a % bases.len()]).await;
            let mut done = Vec::new();
            for i in 0..per_agent {
                let base = &bases[(a + i) % bases.len()];
                done.push(anchor_one(&http, base, &token).await.unwrap_or_else(|| panic!("{base} did not anchor")));
            }
            done
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

/// Shared group commit (decision 0075): three hosts on one PostgreSQL with
/// one peer key. The host holding the commit lease commits the writes the
/// other two send it, which its counters and theirs agree on; every
/// declaration acknowledged by any host is stored and confirmed; a batch
/// whose MAC does not verify is refused before it is read. When the holder
/// is killed, the other two go on (committing their own), and one of them
/// takes the lease and commits the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_commit_through_the_commit_lease_holder() {
    let test = "log_hosts::three_hosts_commit_through_the_commit_lease_holder";
    let Some(database) = common::PgDatabase::create(test, "anchor_shared_commit").await else { return };
    let data = scratch("shared-commit");
    let keygen = anchor(&["log", "keygen", "--origin", "shared-commit.test/log", data.join("shared.key").to_str().unwrap()]);
    assert!(keygen.status.success());
    let skey = std::fs::read_to_string(data.join("shared.key")).unwrap();
    let peer_key = "a key the three hosts share, 32+ bytes";
    let mut hosts = Vec::new();
    let mut peer_ports = Vec::new();
    for n in 0..3 {
        let peer_port = free_port();
        let listen = format!("127.0.0.1:{peer_port}");
        let env = [
            ("DATABASE_URL", database.url.as_str()),
            ("ANCHOR_LOG_SIGNING_KEY", skey.trim()),
            ("ANCHOR_PEER_LISTEN", listen.as_str()),
            ("ANCHOR_PEER_KEY", peer_key),
            ("ANCHOR_METRICS_ON_API", "true"),
        ];
        hosts.push(start(&data.join(format!("host{n}")), &env).await);
        peer_ports.push(peer_port);
    }
    let http = reqwest::Client::new();
    let db = sqlx::PgPool::connect(&database.url).await.unwrap();
    let (holder, address) = commit_holder(&db, None).await;
    let at = peer_ports.iter().position(|port| address == format!("http://127.0.0.1:{port}")).expect("the holder is one of the hosts");
    // The others read the lease within a second.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let bases: Vec<String> = hosts.iter().map(|h| h.base.clone()).collect();
    let anchored = anchor_at(&http, &bases, 12, 10).await;
    assert_eq!(anchored.len(), 120);
    let (mut sent, mut failed) = (0.0, 0.0);
    for (n, base) in bases.iter().enumerate() {
        let forwarded = counter(&http, base, "anchor_store_forwarded_writes_total").await;
        let taken = counter(&http, base, "anchor_store_peer_writes_total").await;
        failed += counter(&http, base, "anchor_store_forward_failures_total").await;
        if n == at {
            assert_eq!(forwarded, 0.0, "the holder sends nothing");
            assert!(taken > 0.0, "the holder committed no other host's writes");
        } else {
            assert!(forwarded > 0.0, "{base} sent none of its writes to the holder");
            assert_eq!(taken, 0.0, "{base} holds no lease but committed others' writes");
        }
        sent += forwarded;
    }
    assert_eq!(failed, 0.0, "forwarded writes or reads came back unanswered");
    assert_eq!(sent, counter(&http, &bases[at], "anchor_store_peer_writes_total").await, "what was sent is what the holder took");
    // The token and confirmation reads go to the holder too (shared reads).
    let mut sent_reads = 0.0;
    for (n, base) in bases.iter().enumerate() {
        let forwarded = counter(&http, base, "anchor_store_forwarded_reads_total").await;
        if n == at {
            assert_eq!(forwarded, 0.0, "the holder sends no reads");
        } else {
            assert!(forwarded > 0.0, "{base} sent none of its reads to the holder");
            assert_eq!(counter(&http, base, "anchor_store_peer_reads_total").await, 0.0, "{base} read for others without the lease");
        }
        sent_reads += forwarded;
    }
    assert_eq!(sent_reads, counter(&http, &bases[at], "anchor_store_peer_reads_total").await, "every read sent was read by the holder");
    // A token rotated on one host is refused at once by every host, those
    // whose reads the holder makes among them, and the new one is taken.
    let others: Vec<&String> = bases.iter().enumerate().filter(|(n, _)| *n != at).map(|(_, base)| base).collect();
    let (agent_id, old) = register_agent(&http, others[0]).await;
    let old = old.as_str();
    assert!(anchor_one(&http, others[1], old).await.is_some(), "the new agent anchors through a host that is not the holder");
    let rotated: Value = http
        .post(format!("{}/v1/agent/token/rotate", others[1]))
        .bearer_auth(old)
        .json(&json!({ "agent_id": agent_id }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let new = rotated["auth_token"].as_str().expect("a rotated token");
    for base in &bases {
        let refused = http.get(format!("{base}/v1/trial/status")).bearer_auth(old).send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 401, "{base} took a token rotated away");
        let taken = http.get(format!("{base}/v1/trial/status")).bearer_auth(new).send().await.unwrap();
        assert_eq!(taken.status().as_u16(), 200, "{base} refused the rotated token");
    }
    assert!(anchor_one(&http, others[0], new).await.is_some(), "the rotated token anchors");
    assert!(anchor_one(&http, others[1], old).await.is_none(), "the old token anchors nothing");
    let ids: Vec<uuid::Uuid> = anchored.iter().map(|id| id.parse().unwrap()).collect();
    let stored: i64 = sqlx::query_scalar("select count(*) from declaration where dd_id = any($1) and confirmed_at is not null")
        .bind(&ids)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stored, 120, "every acknowledged declaration is stored and confirmed");

    // Only a host holding the key is heard: a forged batch is refused unread.
    let before: i64 = sqlx::query_scalar("select count(*) from declaration").fetch_one(&db).await.unwrap();
    let forged = http
        .post(format!("http://127.0.0.1:{}/peer/v1/batch", peer_ports[at]))
        .header("x-anchor-peer-time", chrono::Utc::now().timestamp().to_string())
        .header("x-anchor-peer-mac", "00".repeat(32))
        .body(r#"{"creates":[],"confirms":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);
    let unsigned = http.post(format!("http://127.0.0.1:{}/peer/v1/batch", peer_ports[at])).body("{}").send().await.unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    let after: i64 = sqlx::query_scalar("select count(*) from declaration").fetch_one(&db).await.unwrap();
    assert_eq!(before, after);

    // The holder dies without warning: the others commit on their own at
    // once, and under a new holder once its lease runs out.
    drop(hosts.remove(at));
    peer_ports.remove(at);
    let bases: Vec<String> = hosts.iter().map(|h| h.base.clone()).collect();
    let late = anchor_at(&http, &bases, 4, 5).await;
    let (next, next_address) = commit_holder(&db, Some(holder)).await;
    assert_ne!(next, holder);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = anchor_at(&http, &bases, 6, 5).await;
    let next_at =
        peer_ports.iter().position(|port| next_address == format!("http://127.0.0.1:{port}")).expect("the new holder is a survivor");
    for (n, base) in bases.iter().enumerate() {
        let taken = counter(&http, base, "anchor_store_peer_writes_total").await;
        if n == next_at {
            assert!(taken > 0.0, "the new holder committed none of the other survivor's writes");
        } else {
            assert_eq!(taken, 0.0, "{base} holds no lease but committed others' writes");
        }
    }
    let ids: Vec<uuid::Uuid> = late.iter().chain(&later).map(|id| id.parse().unwrap()).collect();
    let stored: i64 = sqlx::query_scalar("select count(*) from declaration where dd_id = any($1) and confirmed_at is not null")
        .bind(&ids)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stored, 50, "every declaration acknowledged after the kill is stored and confirmed");
    drop(hosts);
    db.close().await;
    database.drop_now().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// The official MCP client of the 2026-07-28 revision (tests/e2e/mcp,
/// modern.test.mjs) sends each of its requests to one of two hosts on one
/// PostgreSQL in turn: stateless, either host answers any request, and the
/// reference scenario completes. The 2025 client (mcp.test.mjs, initialize
/// at 2025-11-25) declares on one host and confirms and reads back on the
/// other, a session on each.
#[tokio::test]
async fn the_official_mcp_clients_are_answered_by_either_of_two_hosts() {
    let Some(pg) =
        common::PgDatabase::create("log_hosts::the_official_mcp_clients_are_answered_by_either_of_two_hosts", "anchor_mcp_hosts").await
    else {
        return;
    };
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/mcp");
    assert!(e2e.join("node_modules/@modelcontextprotocol/client").exists(), "run `npm ci` in {} (scripts/test does)", e2e.display());
    let data = scratch("mcp-hosts");
    let keygen = anchor(&["log", "keygen", "--origin", "mcp-hosts.test/log", data.join("shared.key").to_str().unwrap()]);
    assert!(keygen.status.success());
    let skey = std::fs::read_to_string(data.join("shared.key")).unwrap();
    let env = [("DATABASE_URL", pg.url.as_str()), ("ANCHOR_LOG_SIGNING_KEY", skey.trim())];
    let (a, b) = (start(&data.join("a"), &env).await, start(&data.join("b"), &env).await);
    let output = Command::new("node")
        // The 2025 client's scenario too: created on one host, confirmed on the other.
        .args(["--test", "--test-name-pattern", "reference scenario|registers, declares", "modern.test.mjs", "mcp.test.mjs"])
        .current_dir(&e2e)
        .env("ANCHOR_BASE_URL", &a.base)
        .env("ANCHOR_SECOND_BASE_URL", &b.base)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node test failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("# pass 2\n") && stdout.contains("# fail 0\n"), "{stdout}");
    drop((a, b));
    pg.drop_now().await;
    let _ = std::fs::remove_dir_all(&data);
}
