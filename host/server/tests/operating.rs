//! Running the `anchor` binary as an operator does: SIGTERM under load,
//! the integrator handing over at shutdown, backup / restore / check of the
//! embedded database, checking a PostgreSQL copy, and JSON logs.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{PgDatabase, free_port, wait_healthy};

struct Host {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// Waits for the process to end by itself, up to `limit`.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not stop within {limit:?}; its log:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("anchor-op-{name}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `anchor serve` on `data` with its log (stdout and stderr) in
/// `data/../<port>.log`, once its log says it serves on its own port. A
/// port free when asked may be bound by another test's host first (that
/// host would then answer this one's health checks): the host is started
/// again on another port.
async fn start(data: &Path, env: &[(&str, &str)], extra: &[&str]) -> Host {
    for _ in 0..5 {
        let mut host = spawn_host(data, env, extra);
        let listen = host.base.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let said = host.log_text();
            if said.lines().any(|line| line.contains("anchor is serving") && line.contains(&listen)) {
                wait_healthy(&reqwest::Client::new(), &host.base).await;
                return host;
            }
            if host.child.try_wait().unwrap().is_some() {
                assert!(said.contains("Address already in use"), "the host stopped as it started:\n{said}");
                break;
            }
            assert!(Instant::now() < deadline, "the host did not start within 60 s:\n{said}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("five hosts in a row found their port taken");
}

fn spawn_host(data: &Path, env: &[(&str, &str)], extra: &[&str]) -> Host {
    let port = free_port();
    let log = data.with_extension(format!("{port}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_anchor"));
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "1000000", "--data-dir"])
        .arg(data)
        .args(extra)
        .env_remove("DATABASE_URL")
        .env_remove("ANCHOR_LOG_SIGNING_KEY")
        .env("RUST_LOG", "info,sqlx=warn")
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file));
    for (k, v) in env {
        command.env(k, v);
    }
    Host { child: command.spawn().unwrap(), base: format!("http://127.0.0.1:{port}"), log }
}

/// A database of its own on the test PostgreSQL (`ANCHOR_TEST_POSTGRES_URL`),
/// named `<prefix>_<random>`; `None`, said loudly, when there is no URL.
/// Two hosts on one fresh PostgreSQL database, signing one log with a shared
/// key: the database, the hosts' data directory, and the hosts. `None` (the
/// test then returns, saying so) when no PostgreSQL is configured.
async fn two_hosts_on_postgres(name: &str) -> Option<(PgDatabase, PathBuf, Vec<Host>)> {
    let pg = PgDatabase::create("operating", &format!("anchor_{name}")).await?;
    let data = scratch(name);
    let skey = shared_key(&data, &format!("{name}.test/log"));
    let env = [("DATABASE_URL", pg.url.as_str()), ("ANCHOR_LOG_SIGNING_KEY", skey.trim())];
    let hosts = vec![start(&data.join("a"), &env, &[]).await, start(&data.join("b"), &env, &[]).await];
    Some((pg, data, hosts))
}
/// A log signing key for hosts that share a database (`anchor log keygen`), written under `data`.
fn shared_key(data: &Path, origin: &str) -> String {
    let file = data.join("shared.key");
    let keygen = anchor(&["log", "keygen", "--origin", origin, file.to_str().unwrap()]);
    assert!(keygen.status.success(), "{}", text(&keygen));
    std::fs::read_to_string(file).unwrap()
}

fn anchor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).env_remove("DATABASE_URL").output().unwrap()
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// One connection per request: a failure can only be a refused connection
/// (the request never left) or a connection cut under a request (what a
/// graceful stop must never do). Kept-alive connections add a race of HTTP
/// itself, a request sent as the server closes an idle connection, that
/// clients settle by retrying on a fresh one.
fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(30)).build().unwrap()
}

async fn register(http: &reqwest::Client, base: &str) -> String {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    agent["auth_token"].as_str().unwrap().to_string()
}

fn dd_body() -> Value {
    json!({
        "request_id": uuid::Uuid::new_v4(),
        "dd": {
            "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
            "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED",
        },
        "ee": { "ee_preset": "EE_basic" },
    })
}

/// What the load saw.
#[derive(Default, Debug)]
struct Tally {
    /// dd_id -> (token, confirmed) for every 201 of create, and 200 of confirm.
    acknowledged: HashMap<String, (String, bool)>,
    refused: usize,
    /// Anything else: a cut connection, a timeout, a 5xx.
    failures: Vec<String>,
}

/// Files one outcome: the status if the host answered without a server
/// error; a refused connection marks the host down.
fn note(tally: &mut Tally, up: &mut bool, result: Result<reqwest::Response, reqwest::Error>, what: &str) -> Option<u16> {
    match result {
        Ok(reply) if reply.status().is_server_error() => {
            tally.failures.push(format!("{what}: {}", reply.status()));
            None
        }
        Ok(reply) => Some(reply.status().as_u16()),
        Err(error) if error.is_connect() => {
            tally.refused += 1;
            *up = false;
            None
        }
        Err(error) => {
            tally.failures.push(format!("{what}: {error:?}"));
            None
        }
    }
}

/// Sends create + confirm pairs from `clients` agents to `bases` in turn
/// until `stop`; a host that refuses connections is left for the others.
async fn load(bases: Vec<String>, tokens: Vec<String>, stop: Arc<AtomicBool>) -> Tally {
    let mut tasks = Vec::new();
    for (n, token) in tokens.into_iter().enumerate() {
        let (bases, stop) = (bases.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let http = client();
            let mut tally = Tally::default();
            let mut up = vec![true; bases.len()];
            let mut i = n;
            while !stop.load(Ordering::Relaxed) && up.iter().any(|u| *u) {
                i += 1;
                let Some(base) = (0..bases.len()).map(|k| (i + k) % bases.len()).find(|k| up[*k]) else { break };
                let created = http.post(format!("{}/v1/dd/create", bases[base])).bearer_auth(&token).json(&dd_body()).send().await;
                let created = match created {
                    Ok(reply) if reply.status().as_u16() == 201 => match reply.json::<Value>().await {
                        Ok(body) => body,
                        Err(error) => {
                            tally.failures.push(format!("create body: {error:?}"));
                            continue;
                        }
                    },
                    other => {
                        note(&mut tally, &mut up[base], other, "create");
                        continue;
                    }
                };
                let dd_id = created["dd_id"].as_str().unwrap().to_string();
                tally.acknowledged.insert(dd_id.clone(), (token.clone(), false));
                let confirmed =
                    http.post(format!("{}/v1/dd/confirm", bases[base])).bearer_auth(&token).json(&json!({ "dd_id": dd_id })).send().await;
                if note(&mut tally, &mut up[base], confirmed, "confirm") == Some(200) {
                    tally.acknowledged.insert(dd_id, (token.clone(), true));
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await.unwrap();
        all.acknowledged.extend(tally.acknowledged);
        all.refused += tally.refused;
        all.failures.extend(tally.failures);
    }
    all
}

/// Every acknowledged declaration is there; confirmed ones with their hash and a log leaf.
async fn assert_kept(base: &str, tally: &Tally) {
    let http = client();
    for (dd_id, (token, confirmed)) in &tally.acknowledged {
        let reply = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(token).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 200, "acknowledged {dd_id} is missing");
        let record: Value = reply.json().await.unwrap();
        if *confirmed {
            assert!(record.to_string().contains("sha256:") || record["integrity_hash"].is_string(), "{dd_id}: {record}");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let receipt = http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap();
                if receipt.status().as_u16() == 200 {
                    break;
                }
                assert!(Instant::now() < deadline, "{dd_id} never got its log leaf");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// SIGTERM while eight clients create and confirm: the requests under way
/// are answered, later ones are refused at connect, none is cut; the process
/// exits 0; after a restart every acknowledged declaration is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_loses_nothing_on_sqlite() {
    let data = scratch("sigterm");
    let mut host = start(&data, &[], &["--shutdown-grace-secs", "15"]).await;
    let http = client();
    let mut tokens = Vec::new();
    for _ in 0..8 {
        tokens.push(register(&http, &host.base).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(vec![host.base.clone()], tokens, stop.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let signalled = Instant::now();
    host.terminate();
    let status = host.wait_exit(Duration::from_secs(20));
    let stopped_in = signalled.elapsed();
    stop.store(true, Ordering::Relaxed);
    let tally = running.await.unwrap();
    assert!(status.success(), "exit status {status:?}; log:\n{}", host.log_text());
    assert!(tally.failures.is_empty(), "requests failed: {:?}", tally.failures);
    assert!(tally.acknowledged.len() >= 20, "the load ran: {} acknowledged", tally.acknowledged.len());
    assert!(tally.refused >= 1, "the load saw the listener close");
    let log = host.log_text();
    assert!(log.contains("SIGTERM") && log.contains("anchor stopped"), "{log}");
    assert!(stopped_in < Duration::from_secs(10), "stopped in {stopped_in:?}");
    drop(host);

    let host = start(&data, &[], &[]).await;
    assert_kept(&host.base, &tally).await;
    drop(host);
    let _ = std::fs::remove_dir_all(&data);
}

/// Two hosts on one PostgreSQL under load; the integrator's host gets
/// SIGTERM. It drains, gives the lease up, exits 0; the other host holds the
/// lease within a second of that exit; nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_hands_the_log_over_at_once_on_postgres() {
    let Some((pg, data, mut hosts)) = two_hosts_on_postgres("handover").await else { return };
    let db_url = pg.url.clone();
    let http = client();
    let mut tokens = Vec::new();
    for _ in 0..8 {
        tokens.push(register(&http, &hosts[0].base).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(hosts.iter().map(|h| h.base.clone()).collect(), tokens, stop.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let db = sqlx::PgPool::connect(&db_url).await.unwrap();
    let holder = || async { sqlx::query_scalar::<_, Option<uuid::Uuid>>("select holder from log_lease").fetch_one(&db).await.unwrap() };
    let lease = holder().await.expect("a host holds the lease");
    let mut ids = Vec::new();
    for host in &hosts {
        let health: Value = http.get(format!("{}/health", host.base)).send().await.unwrap().json().await.unwrap();
        ids.push(health["host_id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap());
    }
    let victim = ids.iter().position(|id| *id == lease).expect("the holder is one of the hosts");
    let mut stopping = hosts.remove(victim);
    let survivor = hosts.pop().unwrap();
    let survivor_id = ids[1 - victim];
    stopping.terminate();
    let status = stopping.wait_exit(Duration::from_secs(20));
    let exited = Instant::now();
    assert!(status.success(), "exit status {status:?}; log:\n{}", stopping.log_text());
    assert!(stopping.log_text().contains("released the integrator lease"), "{}", stopping.log_text());
    let taken_in = loop {
        if holder().await == Some(survivor_id) {
            break exited.elapsed();
        }
        assert!(exited.elapsed() < Duration::from_secs(5), "the survivor did not take the lease over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(taken_in < Duration::from_secs(1), "the survivor took the lease {taken_in:?} after the exit");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let tally = running.await.unwrap();
    assert!(tally.failures.is_empty(), "requests failed: {:?}", tally.failures);
    assert!(tally.acknowledged.len() >= 20, "{} acknowledged", tally.acknowledged.len());
    assert_kept(&survivor.base, &tally).await;
    eprintln!("lease taken over {taken_in:?} after the exit; {} declarations acknowledged", tally.acknowledged.len());
    drop(survivor);
    drop(stopping);
    db.close().await;
    pg.drop_now().await;
    let _ = std::fs::remove_dir_all(&data);
}

async fn anchor_some(http: &reqwest::Client, base: &str, token: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let created: Value =
            http.post(format!("{base}/v1/dd/create")).bearer_auth(token).json(&dd_body()).send().await.unwrap().json().await.unwrap();
        let dd_id = created["dd_id"].as_str().unwrap().to_string();
        let reply = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(token).json(&json!({ "dd_id": dd_id })).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 200);
        ids.push(dd_id);
    }
    ids
}

async fn wait_integrated(http: &reqwest::Client, base: &str, token: &str, dd_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap().status().as_u16() != 200 {
        assert!(Instant::now() < deadline, "{dd_id} never reached the log");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `anchor backup` copies the serving database and checks the copy; restore
/// refuses while a server runs, puts the copy back once it stopped, and the
/// server then holds what the copy held; a copy whose log was altered fails
/// the check and is not restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restore_and_check_round_trip_on_sqlite() {
    let data = scratch("backup");
    let host = start(&data, &[], &[]).await;
    let http = client();
    let token = register(&http, &host.base).await;
    let before = anchor_some(&http, &host.base, &token, 12).await;
    wait_integrated(&http, &host.base, &token, before.last().unwrap()).await;

    let copy = data.with_extension("backup.db");
    let data_arg = data.to_str().unwrap();
    let made = anchor(&["backup", copy.to_str().unwrap(), "--verify", "--data-dir", data_arg]);
    assert!(made.status.success(), "{}", text(&made));
    let said = text(&made);
    assert!(said.contains("migrations are this build's") && said.contains("each signed by the log's key"), "{said}");
    assert!(said.contains("log of 12 leaves"), "{said}");
    let again = anchor(&["backup", copy.to_str().unwrap(), "--data-dir", data_arg]);
    assert!(!again.status.success() && text(&again).contains("never overwrites"), "{}", text(&again));

    // Work after the backup, which a restore takes back.
    let after = anchor_some(&http, &host.base, &token, 3).await;
    wait_integrated(&http, &host.base, &token, after.last().unwrap()).await;
    let refused = anchor(&["restore", copy.to_str().unwrap(), "--data-dir", data_arg]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("a server is running"), "{}", text(&refused));

    let mut host = host;
    host.terminate();
    assert!(host.wait_exit(Duration::from_secs(20)).success());
    drop(host);
    // The database there published checkpoints past the copy's log: refused unless asked.
    let forking = anchor(&["restore", copy.to_str().unwrap(), "--data-dir", data_arg]);
    assert!(!forking.status.success() && text(&forking).contains("--accept-log-fork"), "{}", text(&forking));
    let restored = anchor(&["restore", copy.to_str().unwrap(), "--data-dir", data_arg, "--accept-log-fork"]);
    assert!(restored.status.success(), "{}", text(&restored));
    assert!(text(&restored).contains("kept as"), "{}", text(&restored));
    let host = start(&data, &[], &[]).await;
    for dd_id in &before {
        let reply = http.get(format!("{}/v1/dd/{dd_id}", host.base)).bearer_auth(&token).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 200, "{dd_id} was in the backup");
    }
    for dd_id in &after {
        let reply = http.get(format!("{}/v1/dd/{dd_id}", host.base)).bearer_auth(&token).send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 404, "{dd_id} came after the backup");
    }
    // The restored server goes on: its log grows from the restored head.
    let next = anchor_some(&http, &host.base, &token, 1).await;
    wait_integrated(&http, &host.base, &token, &next[0]).await;
    drop(host);

    // A copy whose leaf was altered fails the check, and restore refuses it.
    let altered = data.with_extension("altered.db");
    std::fs::copy(&copy, &altered).unwrap();
    {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", altered.display())).await.unwrap();
        sqlx::query("update log_entry set leaf_data = x'00' || leaf_data where leaf_index = 5").execute(&pool).await.unwrap();
        pool.close().await;
    }
    let checked = anchor(&["backup", "--check", altered.to_str().unwrap(), "--data-dir", data_arg]);
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    assert!(text(&checked).contains("is not the root of the first"), "{}", text(&checked));
    let refused = anchor(&["restore", altered.to_str().unwrap(), "--data-dir", data_arg]);
    assert!(!refused.status.success() && text(&refused).contains("not a usable copy"), "{}", text(&refused));
    // A copy from another build's schema is named as such.
    let old = data.with_extension("old.db");
    std::fs::copy(&copy, &old).unwrap();
    {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", old.display())).await.unwrap();
        sqlx::query("delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
    let checked = anchor(&["backup", "--check", old.to_str().unwrap(), "--data-dir", data_arg]);
    assert!(!checked.status.success() && text(&checked).contains("this build has"), "{}", text(&checked));
    for file in [copy, altered, old] {
        let _ = std::fs::remove_file(file);
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// PostgreSQL: `pg_dump` of a serving database restored into another with
/// `psql`, then `anchor backup --check` on it, with the log's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dump_restored_elsewhere_passes_the_check() {
    let Some(source) = PgDatabase::create("operating", "anchor_dump_src").await else { return };
    let Some(target) = PgDatabase::create("operating", "anchor_dump_dst").await else { return };
    let (source_url, target_url) = (source.url.clone(), target.url.clone());
    let data = scratch("pgdump");
    let host = start(&data, &[("DATABASE_URL", source_url.as_str())], &[]).await;
    let http = client();
    let token = register(&http, &host.base).await;
    let ids = anchor_some(&http, &host.base, &token, 6).await;
    wait_integrated(&http, &host.base, &token, ids.last().unwrap()).await;
    let dump = data.with_extension("sql");
    let dumped = Command::new("pg_dump").args(["--no-owner", "-f", dump.to_str().unwrap(), &source_url]).output().unwrap();
    assert!(dumped.status.success(), "{}", text(&dumped));
    let loaded = Command::new("psql").args(["-q", "-v", "ON_ERROR_STOP=1", "-f", dump.to_str().unwrap(), &target_url]).output().unwrap();
    assert!(loaded.status.success(), "{}", text(&loaded));
    // With a password in the URL (trust authentication ignores it), which nothing may print.
    let secret = "pw-never-printed-7";
    let with_password =
        match target_url.split_once("://").and_then(|(scheme, rest)| rest.split_once('@').map(|(user, host)| (scheme, user, host))) {
            Some((scheme, user, host)) => format!("{scheme}://{}:{secret}@{host}", user.split(':').next().unwrap()),
            None => target_url.clone(),
        };
    let checked = anchor(&["backup", "--check", &with_password, "--data-dir", data.to_str().unwrap()]);
    assert!(checked.status.success(), "{}", text(&checked));
    let said = text(&checked);
    assert!(said.contains("log of 6 leaves") && said.contains("each signed by the log's key"), "{said}");
    if with_password.contains(secret) {
        assert!(!said.contains(secret), "the password was printed: {said}");
    }
    // The command refuses to take a PostgreSQL backup itself, and says what to use.
    let refused = anchor(&["backup", data.join("x.db").to_str().unwrap(), "--database-url", &source_url]);
    assert!(!refused.status.success() && text(&refused).contains("pg_dump"), "{}", text(&refused));
    drop(host);
    source.drop_now().await;
    target.drop_now().await;
    let _ = std::fs::remove_file(dump);
    let _ = std::fs::remove_dir_all(&data);
}

/// `--log-format json`: one JSON object per line; every line a request logs
/// carries its request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_name_the_request_on_every_line() {
    let data = scratch("jsonlog");
    let mut host = start(&data, &[("RUST_LOG", "info,anchor_server=debug,sqlx=warn")], &["--log-format", "json"]).await;
    let http = client();
    let reply = http.get(format!("{}/v1/dd/list", host.base)).header("x-request-id", "trace-me-1").send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 401);
    assert_eq!(reply.headers()["x-request-id"], "trace-me-1");
    host.terminate();
    assert!(host.wait_exit(Duration::from_secs(20)).success());
    let log = host.log_text();
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))).collect();
    assert!(lines.iter().any(|l| l["fields"]["message"] == "anchor is serving"));
    let traced: Vec<&Value> = lines.iter().filter(|l| l["span"]["request_id"] == "trace-me-1").collect();
    assert!(!traced.is_empty(), "{log}");
    assert!(traced.iter().all(|l| l["span"]["route"] == "/v1/dd/list"), "{traced:?}");
    assert!(traced.iter().any(|l| l["fields"]["status"] == 401), "the answer is logged with its status: {traced:?}");
    drop(host);
    let _ = std::fs::remove_dir_all(&data);
}

/// `anchor feature off retention` while two hosts on one PostgreSQL serve a
/// steady load of the feature's reads: every answer is a 200 or a 503
/// `FEATURE_NOT_AVAILABLE`, nothing else; from a second after the command on,
/// both hosts answer 503; a second after `anchor feature on`, 200 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_feature_switched_under_load_reaches_every_host_within_a_second() {
    let Some((pg, data, hosts)) = two_hosts_on_postgres("switch").await else { return };
    let db_url = pg.url.clone();
    let http = reqwest::Client::new();
    let token = register(&http, &hosts[0].base).await;

    // 8 clients read the feature's status from both hosts, noting when and what.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..8 {
        let (http, stop, token) = (http.clone(), stop.clone(), token.clone());
        let base = hosts[n % 2].base.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let reply = http.get(format!("{base}/v1/retention/indefinite/status")).bearer_auth(&token).send().await.unwrap();
                let status = reply.status().as_u16();
                let body: Value = reply.json().await.unwrap_or(Value::Null);
                seen.push((started.elapsed(), n % 2, status, body["error_code"].as_str().unwrap_or("").to_string()));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        }));
    }
    // When the command started and when it had written the switch and ended.
    let switch = |on: &str| {
        let before = started.elapsed();
        let output =
            Command::new(env!("CARGO_BIN_EXE_anchor")).args(["feature", on, "retention"]).env("DATABASE_URL", &db_url).output().unwrap();
        assert!(output.status.success(), "{}", text(&output));
        (before, started.elapsed())
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (off_from, off_at) = switch("off");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let (on_from, on_at) = switch("on");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    assert!(seen.len() > 200, "the load ran: {} requests", seen.len());
    for (at, host, status, code) in &seen {
        assert!(*status == 200 || (*status == 503 && code == "FEATURE_NOT_AVAILABLE"), "host {host} at {at:?}: {status} {code}");
        let second = Duration::from_secs(1);
        if *at < off_from || (*at > on_at + second) {
            assert_eq!(*status, 200, "host {host} at {at:?}, switched off at {off_at:?}, on at {on_at:?}");
        }
        if *at > off_at + second && *at < on_from {
            assert_eq!(*status, 503, "host {host} at {at:?}: still on a second after the switch at {off_at:?}");
        }
    }
    for host in 0..2 {
        let first_off = seen.iter().filter(|s| s.1 == host && s.2 == 503).map(|s| s.0).min().expect("each host switched");
        eprintln!("host {host}: off {:?} after the command ended", first_off.saturating_sub(off_at));
    }
    drop(hosts);
    pg.drop_now().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// kill -9 in the middle of a loaded run: after a restart every declaration
/// the load was answered 201 for is there, and every one it was answered 200
/// for on confirm is confirmed, with its hash, and reaches the log.
async fn kill_9_loses_no_acknowledged_declaration(env: &[(&str, &str)], name: &str) {
    let data = scratch(name);
    let mut host = start(&data, env, &[]).await;
    let http = client();
    let mut tokens = Vec::new();
    for _ in 0..8 {
        tokens.push(register(&http, &host.base).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(vec![host.base.clone()], tokens, stop.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    host.child.kill().unwrap(); // SIGKILL: no drain, no lease release, no pool close
    let _ = host.child.wait();
    stop.store(true, Ordering::Relaxed);
    let tally = running.await.unwrap();
    let confirmed = tally.acknowledged.values().filter(|(_, c)| *c).count();
    assert!(confirmed >= 20, "the load ran: {confirmed} confirmed before the kill");
    drop(host);
    let host = start(&data, env, &[]).await;
    assert_kept(&host.base, &tally).await;
    eprintln!("{name}: {} acknowledged ({confirmed} confirmed) all kept across kill -9", tally.acknowledged.len());
    drop(host);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_loses_nothing_acknowledged_on_sqlite() {
    kill_9_loses_no_acknowledged_declaration(&[], "kill9-sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_loses_nothing_acknowledged_on_postgres() {
    let Some(pg) = PgDatabase::create("operating", "anchor_kill9").await else { return };
    let db_url = pg.url.clone();
    kill_9_loses_no_acknowledged_declaration(&[("DATABASE_URL", db_url.as_str())], "kill9-postgres").await;
    pg.drop_now().await;
}

/// A host of the previous build (this build carrying its migrations up to
/// 0039 only, `ANCHOR_TEST_MIGRATIONS_UP_TO`) on a database the whole build
/// migrated: it starts, is ready beside the newer schema (and says so) and
/// anchors. Once that newer migration's rule names builds from 0040 on (a
/// contract migration), the old host is no longer ready and another one
/// refuses to start, saying to upgrade it (decision 0067).
async fn the_previous_build_serves_beside_an_expand_migration(env: &[(&str, &str)], name: &str) {
    let data = scratch(name);
    let mut new = start(&data, env, &[]).await;
    new.terminate();
    assert!(new.wait_exit(Duration::from_secs(30)).success());
    let previous: Vec<(&str, &str)> = env.iter().copied().chain([("ANCHOR_TEST_MIGRATIONS_UP_TO", "39")]).collect();
    let old = start(&data, &previous, &[]).await;
    let http = client();
    let ready = http.get(format!("{}/ready", old.base)).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!((ready["migrations_applied"].as_bool(), ready["schema_ahead"].as_bool()), (Some(true), Some(true)), "{ready}");
    let (token, dd_id) = common::anchor_one(&http, &old.base).await;
    common::receipt_file(&http, &old.base, &token, &dd_id, &data).await;

    let contract = "update migration_rules set runs_beside_builds_from = 40 where version = 40";
    match env.iter().find(|(k, _)| *k == "DATABASE_URL") {
        Some((_, url)) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query(contract).execute(&pool).await.unwrap();
            pool.close().await;
        }
        None => {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(data.join("anchor.db"));
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            sqlx::query(contract).execute(&pool).await.unwrap();
            pool.close().await;
        }
    }
    let ready = http.get(format!("{}/ready", old.base)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["migrations_applied"], false, "{ready}");

    let log = data.with_extension("another.log");
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_anchor"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
        .arg(&data)
        .env_remove("DATABASE_URL")
        .envs(previous.iter().copied())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    let mut another = Host { child, base: String::new(), log };
    let status = another.wait_exit(Duration::from_secs(30));
    let said = another.log_text();
    assert!(!status.success() && said.contains("migration 40") && said.contains("upgrade this host"), "{status}: {said}");
    let _ = std::fs::remove_file(&another.log);
    drop(old);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_build_serves_beside_an_expand_migration_on_sqlite() {
    the_previous_build_serves_beside_an_expand_migration(&[], "beside-sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_build_serves_beside_an_expand_migration_on_postgres() {
    let Some(pg) = PgDatabase::create("operating", "anchor_beside").await else { return };
    let db_url = pg.url.clone();
    the_previous_build_serves_beside_an_expand_migration(&[("DATABASE_URL", db_url.as_str())], "beside-postgres").await;
    pg.drop_now().await;
}

/// `anchor pricing publish` of a generation with another base fee, a few
/// seconds ahead, while two hosts on one PostgreSQL take a steady load of DD
/// creates: every create succeeds; every record carries one generation's
/// version with that generation's price (no mix); records created before the
/// activation (less a request's length) have the old one and those after it
/// the new one, on both hosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_generation_takes_over_on_every_host_at_its_time() {
    let Some((pg, data, hosts)) = two_hosts_on_postgres("publish").await else { return };
    let db_url = pg.url.clone();
    let http = reqwest::Client::new();

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for n in 0..8 {
        let (http, stop) = (http.clone(), stop.clone());
        let base = hosts[n % 2].base.clone();
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::new();
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // A fresh agent every 10 creates: its Trial pays them at either price.
                let token = register(&http, &base).await;
                for _ in 0..10 {
                    let reply = http.post(format!("{base}/v1/dd/create")).bearer_auth(&token).json(&dd_body()).send().await.unwrap();
                    let status = reply.status().as_u16();
                    let body: Value = reply.json().await.unwrap_or(Value::Null);
                    match body["dd_id"].as_str() {
                        Some(id) if status == 201 => made.push((n % 2, id.parse::<uuid::Uuid>().unwrap())),
                        _ => failures.push(format!("{status}: {body}")),
                    }
                }
            }
            (made, failures)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Far enough ahead that the command, which compiles the component before
    // it checks the time (slow in a debug build beside the load), still leaves
    // the hosts their 2 s to load it.
    let at = chrono::Utc::now() + chrono::Duration::seconds(8);
    let alt = std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join("pricing_alt.wasm");
    let published = Command::new(env!("CARGO_BIN_EXE_anchor"))
        .args(["pricing", "publish"])
        .arg(&alt)
        .args(["--activate-at", &at.to_rfc3339(), "--allow-no-services"])
        .env("DATABASE_URL", &db_url)
        .output()
        .unwrap();
    assert!(published.status.success(), "{}", text(&published));
    assert!(text(&published).contains("v9.0.0-test"), "{}", text(&published));
    let listed = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["pricing", "list"]).env("DATABASE_URL", &db_url).output().unwrap();
    assert!(text(&listed).starts_with("scheduled "), "{}", text(&listed));
    // Creates go on until 2.5 s past the activation.
    let left = (at + chrono::Duration::milliseconds(2500) - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left).await;
    stop.store(true, Ordering::Relaxed);
    let mut made = Vec::new();
    for task in tasks {
        let (m, failures) = task.await.unwrap();
        assert!(failures.is_empty(), "creates failed: {failures:?}");
        made.extend(m);
    }
    let listed = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["pricing", "list"]).env("DATABASE_URL", &db_url).output().unwrap();
    assert!(text(&listed).starts_with("in force "), "{}", text(&listed));

    let db = sqlx::PgPool::connect(&db_url).await.unwrap();
    let rows: Vec<(uuid::Uuid, String, String, i64, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("select dd_id, pricing_version, pricing_sha256, dac_amount_milli, anchored_at from declaration")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(rows.len(), made.len(), "one record per 201");
    let host_of: HashMap<uuid::Uuid, usize> = made.iter().map(|(host, id)| (*id, *host)).collect();
    let margin = chrono::Duration::milliseconds(200);
    let mut seen = [[0usize; 2]; 2];
    for (id, version, sha, price, created) in &rows {
        let new = match (version.as_str(), price) {
            ("v1.3.0", 10_000) => false,
            ("v9.0.0-test", 20_000) => true,
            other => panic!("{id}: version and price of different generations: {other:?}"),
        };
        assert_eq!(sha.len(), 64);
        if *created < at - margin {
            assert!(!new, "{id} created at {created}, before the activation at {at}, priced by the new generation");
        }
        if *created > at + margin {
            assert!(new, "{id} created at {created}, after the activation at {at}, priced by the old generation");
        }
        seen[host_of[id]][usize::from(new)] += 1;
    }
    for (host, counts) in seen.iter().enumerate() {
        assert!(counts[0] > 0 && counts[1] > 0, "host {host} priced with both generations: {counts:?}");
    }
    eprintln!("{} creates: old/new per host {seen:?}", rows.len());
    db.close().await;
    drop(hosts);
    pg.drop_now().await;
    let _ = std::fs::remove_dir_all(&data);
}
