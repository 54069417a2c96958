//! The deployment of deploy/README.md on one machine (scripts/cluster): a
//! pg_auto_failover formation with a synchronous standby, three hosts and
//! HAProxy in front. Agents anchor through HAProxy without pause while one
//! host is killed, then while the primary is switched over, then while the
//! primary node dies without warning. Nothing acknowledged is lost, every
//! confirmed declaration gets a verifying receipt, the log stays one log
//! (consistency proofs across each fault) and the service answers again
//! within 15 s of each fault. Then a rolling upgrade across a migration
//! (`scripts/cluster upgrade`) under the same load: every request answered.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

const WORKERS: usize = 8;
/// How long the load runs between two faults.
const BETWEEN_FAULTS: Duration = Duration::from_secs(12);
/// The most a fault may keep the service from answering.
const ERROR_WINDOW: Duration = Duration::from_secs(15);

/// One formation at a time: each test here brings up its own.
static FORMATION: Mutex<()> = Mutex::const_new(());

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cluster")
}

/// Stops the cluster, whatever happened to the test.
struct Cluster {
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl Cluster {
    /// `scripts/cluster up` with `env` for the hosts it starts.
    fn up(dir: &Path, hosts: usize, env: &[(&str, &str)]) -> Cluster {
        let out = Command::new(script())
            .args(["up", dir.to_str().unwrap(), "--hosts", &hosts.to_string(), "--anchor", env!("CARGO_BIN_EXE_anchor")])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let mut cluster = Cluster { dir: dir.to_path_buf(), env: HashMap::new() };
        assert!(out.status.success(), "scripts/cluster up failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(dir.join("cluster.env")).unwrap();
        cluster.env =
            text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string())).collect();
        cluster
    }

    fn get(&self, key: &str) -> &str {
        self.env.get(key).unwrap_or_else(|| panic!("cluster.env has no {key}"))
    }

    fn run(&self, command: &str) -> String {
        let out = Command::new(script()).args([command, self.dir.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "scripts/cluster {command} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", self.dir.to_str().unwrap()]).output();
    }
}

fn dd() -> Value {
    json!({
        "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
        "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED",
    })
}

/// What the load saw: every answer that was not one (a dropped connection,
/// a 5xx), and what the service acknowledged.
#[derive(Default)]
struct Seen {
    errors: Vec<Instant>,
    successes: Vec<Instant>,
    /// (token, dd_id) of every 201 to a create.
    created: Vec<(String, String)>,
    /// (token, dd_id) of every 200 to a confirm.
    confirmed: Vec<(String, String)>,
}

/// Sends `request` until the service answers it: a transport error or a 5xx
/// is retried with the same body (a create carries its request_id), after
/// 100 ms. `None` once `stop` is set.
async fn until_answered(seen: &Mutex<Seen>, stop: &AtomicBool, request: impl Fn() -> reqwest::RequestBuilder) -> Option<(u16, Value)> {
    loop {
        match request().send().await {
            Ok(reply) if reply.status().as_u16() < 500 => {
                let status = reply.status().as_u16();
                let body = reply.json().await.unwrap_or(Value::Null);
                seen.lock().await.successes.push(Instant::now());
                return Some((status, body));
            }
            _ => seen.lock().await.errors.push(Instant::now()),
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn agent_loop(http: reqwest::Client, base: String, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let mut token: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(current) = token.clone() else {
            let Some((201, agent)) = until_answered(&seen, &stop, || http.post(format!("{base}/v1/agent/register")).json(&json!({}))).await
            else {
                continue;
            };
            token = agent["auth_token"].as_str().map(str::to_string);
            continue;
        };
        let body = json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": { "ee_preset": "EE_basic" } });
        let Some((status, created)) =
            until_answered(&seen, &stop, || http.post(format!("{base}/v1/dd/create")).bearer_auth(&current).json(&body)).await
        else {
            break;
        };
        if status == 402 {
            token = None; // this agent's Trial is spent: a new agent goes on
            continue;
        }
        assert_eq!(status, 201, "create: {created}");
        let dd_id = created["dd_id"].as_str().unwrap().to_string();
        seen.lock().await.created.push((current.clone(), dd_id.clone()));
        let Some((status, answer)) = until_answered(&seen, &stop, || {
            http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&current).json(&json!({ "dd_id": dd_id }))
        })
        .await
        else {
            break;
        };
        match status {
            200 => seen.lock().await.confirmed.push((current.clone(), dd_id)),
            // A confirm cut after its commit, retried: confirmed all the same.
            409 if answer["error_code"] == "ALREADY_CONFIRMED" => {}
            _ => panic!("confirm {dd_id}: {status} {answer}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads back an acknowledged create; if its confirm was acknowledged too,
/// checks it is settled and returns the log leaf its verified receipt names.
async fn check_acknowledged(http: &reqwest::Client, base: &str, vkey: &str, token: &str, dd_id: &str, confirmed: bool) -> Option<u64> {
    let read = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(token).send().await.unwrap();
    assert_eq!(read.status(), 200, "acknowledged create {dd_id} is gone");
    if !confirmed {
        return None;
    }
    let body: Value = read.json().await.unwrap();
    assert_eq!(body["payment"]["settlement_status"], "settled", "acknowledged confirm {dd_id}: {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let receipt = loop {
        let reply = http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap();
        if reply.status() == 200 {
            break reply.json::<Value>().await.unwrap();
        }
        assert!(Instant::now() < deadline, "{dd_id} has no receipt");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let receipt: anchor_verify::Receipt = serde_json::from_value(receipt).unwrap();
    let verified = anchor_verify::verify_receipt(&receipt, vkey).unwrap_or_else(|e| panic!("{dd_id}: {e}"));
    Some(verified.leaf_index)
}

/// Connections the hosts hold on the primary now (0 while none answers).
async fn primary_connections(nodes: &str) -> i64 {
    for node in nodes.split_whitespace() {
        let url = format!("postgres://postgres@{node}/anchor");
        let Ok(pool) = sqlx::postgres::PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(1)).connect(&url).await
        else {
            continue;
        };
        // The hosts' connections: over TCP as postgres (pg_auto_failover's
        // keeper uses the socket, its monitor a user of its own).
        let count: Result<Option<i64>, _> = sqlx::query_scalar(
            "select count(*) filter (where usename = 'postgres' and client_addr is not null and backend_type = 'client backend' \
             and pid <> pg_backend_pid()) from pg_stat_activity where not pg_is_in_recovery()",
        )
        .fetch_one(&pool)
        .await;
        pool.close().await;
        if let Ok(Some(n)) = count
            && n > 0
        {
            return n;
        }
    }
    0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_through_haproxy_survives_a_host_kill_a_switchover_and_a_lost_primary() {
    let test = "cluster::load_through_haproxy_survives_a_host_kill_a_switchover_and_a_lost_primary";
    let _one = FORMATION.lock().await;
    // The formation is PostgreSQL's: it runs where the PostgreSQL tests run.
    if common::postgres_or_skip(test).is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("anchor-cluster-{}-{}", std::process::id(), common::free_port()));
    let started = Instant::now();
    let cluster = Cluster::up(&dir, 3, &[]);
    eprintln!("cluster up in {:?}", started.elapsed());
    let base = cluster.get("BASE").to_string();
    let host_pids: Vec<i32> = cluster.get("HOST_PIDS").split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(host_pids.len(), 3);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).pool_max_idle_per_host(WORKERS).build().unwrap();

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS).map(|_| tokio::spawn(agent_loop(http.clone(), base.clone(), seen.clone(), stop.clone()))).collect();

    let mut checkpoints = Vec::new();
    let mut faults: Vec<(&str, Instant)> = Vec::new();
    let mut peak_connections = 0;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before_any = seen.lock().await.created.len() as u64;
    assert!(before_any > 0, "nothing was anchored before the faults");
    checkpoints.push(common::checkpoint_at_least(&http, &base, 1, Duration::from_secs(60)).await);

    for fault in ["host killed", "planned switchover", "primary node lost"] {
        let at = Instant::now();
        match fault {
            "host killed" => {
                // The first host, without warning; HAProxy takes it out.
                let killed = Command::new("kill").args(["-KILL", &host_pids[0].to_string()]).status().unwrap();
                assert!(killed.success());
            }
            "planned switchover" => eprintln!("switchover: new primary {}", cluster.run("failover")),
            _ => eprintln!("lost primary: new primary {}", cluster.run("crash-primary")),
        }
        faults.push((fault, at));
        let until = at + BETWEEN_FAULTS;
        while Instant::now() < until {
            peak_connections = peak_connections.max(primary_connections(cluster.get("PG_NODES")).await);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let created = seen.lock().await.created.len() as u64;
        assert!(created > before_any, "nothing was anchored since the faults began");
        checkpoints.push(common::checkpoint_at_least(&http, &base, before_any, Duration::from_secs(60)).await);
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner();
    eprintln!(
        "{} creates and {} confirms acknowledged, {} answers, {} errors; peak connections on the primary: {peak_connections} (2 hosts)",
        seen.created.len(),
        seen.confirmed.len(),
        seen.successes.len(),
        seen.errors.len()
    );

    // The service answered again within 15 s of each fault.
    for (i, (fault, at)) in faults.iter().enumerate() {
        let end = faults.get(i + 1).map(|f| f.1).unwrap_or(*at + BETWEEN_FAULTS);
        let last_error = seen.errors.iter().filter(|e| **e >= *at && **e < end).max();
        let window = last_error.map(|e| e.duration_since(*at)).unwrap_or_default();
        let answered_after = seen.successes.iter().filter(|s| **s < end && last_error.is_none_or(|e| *s > e)).count();
        eprintln!("{fault}: errors for {window:?}, then {answered_after} answers");
        assert!(window <= ERROR_WINDOW, "{fault}: errors went on for {window:?}");
        assert!(answered_after > 0, "{fault}: the service did not answer again");
    }
    // At most one host per connection pool size: two hosts left, 24 each.
    assert!(peak_connections <= 2 * 24 + 4, "the hosts held {peak_connections} connections");

    // One log throughout: each checkpoint is consistent with the one before it
    // and with the first, and every acknowledged confirm's receipt verifies.
    let key: Value = http.get(format!("{base}/v1/log/key")).send().await.unwrap().json().await.unwrap();
    let vkey = key["public_key"].as_str().unwrap().to_string();
    assert_eq!(vkey, cluster.get("LOG_VERIFY_KEY"), "the hosts sign with the key the cluster made");
    let (last_size, _) = common::checkpoint_at_least(&http, &base, seen.confirmed.len() as u64, Duration::from_secs(60)).await;
    checkpoints.push(common::checkpoint_at_least(&http, &base, last_size, Duration::from_secs(60)).await);
    let first = &checkpoints[0];
    for pair in checkpoints.windows(2) {
        for (from, to) in [(&pair[0], &pair[1]), (first, &pair[1])] {
            if from.0 == to.0 {
                assert_eq!(from.1.lines().nth(2), to.1.lines().nth(2), "two trees of size {}", from.0);
                continue;
            }
            let proof: anchor_verify::ConsistencyProof =
                http.get(format!("{base}/v1/log/consistency?from={}&to={}", from.0, to.0)).send().await.unwrap().json().await.unwrap();
            anchor_verify::verify_consistency(&from.1, &to.1, &proof, &vkey)
                .unwrap_or_else(|e| panic!("checkpoints {} -> {} across the faults: {e}", from.0, to.0));
        }
    }
    check_nothing_lost(&http, &base, &vkey, &seen).await;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing acknowledged is lost: every create is there, every confirm
/// settled with a receipt that verifies, one leaf per declaration.
async fn check_nothing_lost(http: &reqwest::Client, base: &str, vkey: &str, seen: &Seen) {
    let checking = Instant::now();
    let confirmed: HashSet<String> = seen.confirmed.iter().map(|(_, dd_id)| dd_id.clone()).collect();
    let mut checks = tokio::task::JoinSet::new();
    for chunk in seen.created.chunks(seen.created.len().div_ceil(WORKERS).max(1)) {
        let (http, base, vkey, chunk, confirmed) = (http.clone(), base.to_string(), vkey.to_string(), chunk.to_vec(), confirmed.clone());
        checks.spawn(async move {
            let mut leaves = Vec::new();
            for (token, dd_id) in chunk {
                if let Some(leaf) = check_acknowledged(&http, &base, &vkey, &token, &dd_id, confirmed.contains(&dd_id)).await {
                    leaves.push(leaf);
                }
            }
            leaves
        });
    }
    let mut leaves = HashSet::new();
    while let Some(chunk) = checks.join_next().await {
        for leaf in chunk.unwrap() {
            assert!(leaves.insert(leaf), "leaf {leaf} holds two declarations");
        }
    }
    assert_eq!(leaves.len(), confirmed.len());
    eprintln!("{} creates and {} receipts checked in {:?}", seen.created.len(), leaves.len(), checking.elapsed());
}

/// The migration the rolling upgrade crosses: the previous release is played
/// by this build carrying its migrations only up to the one before
/// (`ANCHOR_TEST_MIGRATIONS_UP_TO`), the new release is this build whole.
const CROSSED: i64 = 40;

/// What each host's own /ready answered while the hosts were replaced:
/// (host, status or none when nothing answered, its body).
async fn watch_readiness(bases: Vec<String>, stop: Arc<AtomicBool>) -> Vec<(usize, Option<u16>, Value)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let mut seen = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for (host, base) in bases.iter().enumerate() {
            let answer = match http.get(format!("{base}/ready")).send().await {
                Ok(reply) => {
                    let status = reply.status().as_u16();
                    (Some(status), reply.json().await.unwrap_or(Value::Null))
                }
                Err(_) => (None, Value::Null),
            };
            seen.push((host, answer.0, answer.1));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_across_a_migration_answers_every_request() {
    let test = "cluster::a_rolling_upgrade_across_a_migration_answers_every_request";
    let _one = FORMATION.lock().await;
    if common::postgres_or_skip(test).is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("anchor-upgrade-{}-{}", std::process::id(), common::free_port()));
    let previous = (CROSSED - 1).to_string();
    let cluster = Cluster::up(&dir, 3, &[("ANCHOR_TEST_MIGRATIONS_UP_TO", previous.as_str())]);
    let base = cluster.get("BASE").to_string();
    let bases: Vec<String> = cluster.get("HOST_BASES").split_whitespace().map(str::to_string).collect();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).pool_max_idle_per_host(WORKERS).build().unwrap();
    let ready: Value = http.get(format!("{}/ready", bases[0])).send().await.unwrap().json().await.unwrap();
    assert_eq!((ready["status"].as_str(), ready["schema_ahead"].as_bool()), (Some("ready"), Some(false)), "{ready}");

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS).map(|_| tokio::spawn(agent_loop(http.clone(), base.clone(), seen.clone(), stop.clone()))).collect();
    let watching = tokio::spawn(watch_readiness(bases.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = seen.lock().await.created.len();
    assert!(before > 0, "nothing was anchored before the upgrade");

    // The hosts are replaced one by one by the whole build, which migrates.
    let started = Instant::now();
    let (script, dir_arg) = (script(), dir.clone());
    let upgrade = tokio::task::spawn_blocking(move || {
        Command::new(script)
            .args(["upgrade", dir_arg.to_str().unwrap(), "--anchor", env!("CARGO_BIN_EXE_anchor")])
            .env_remove("ANCHOR_TEST_MIGRATIONS_UP_TO")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(upgrade.status.success(), "scripts/cluster upgrade failed:\n{}", String::from_utf8_lossy(&upgrade.stderr));
    let took = started.elapsed();
    let during = seen.lock().await.created.len() - before;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let readiness = watching.await.unwrap();
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner();
    eprintln!(
        "upgrade of 3 hosts in {took:?}: {during} creates acknowledged meanwhile; {} creates, {} confirms, {} answers, {} errors in all",
        seen.created.len(),
        seen.confirmed.len(),
        seen.successes.len(),
        seen.errors.len()
    );
    assert!(seen.errors.is_empty(), "{} requests were not answered (a dropped connection or a 5xx)", seen.errors.len());
    assert!(during > 0, "nothing was anchored while the hosts were replaced");
    // No host ever found the schema unfit: the old ones served beside the
    // newer one (and said so); a host only left while it was replaced.
    let unfit: Vec<_> = readiness.iter().filter(|(_, _, body)| body["migrations_applied"] == false).collect();
    assert!(unfit.is_empty(), "hosts found the schema unfit for their build: {unfit:?}");
    let beside = readiness.iter().filter(|(_, status, body)| *status == Some(200) && body["schema_ahead"] == true).count();
    assert!(beside > 0, "no host of the previous build served beside the newer schema");
    for base in &bases {
        let ready: Value = http.get(format!("{base}/ready")).send().await.unwrap().json().await.unwrap();
        assert_eq!((ready["status"].as_str(), ready["schema_ahead"].as_bool()), (Some("ready"), Some(false)), "{base}: {ready}");
    }
    let key: Value = http.get(format!("{base}/v1/log/key")).send().await.unwrap().json().await.unwrap();
    let vkey = key["public_key"].as_str().unwrap().to_string();
    common::checkpoint_at_least(&http, &base, seen.confirmed.len() as u64, Duration::from_secs(60)).await;
    check_nothing_lost(&http, &base, &vkey, &seen).await;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
