//! Hostile components against the real `anchor` binary, with its resident
//! memory watched from outside: a run that grows its table by 2^31 - 1
//! elements, one that grows its memory without end, components whose
//! instances together are over a run's memory (a hundred of 128 MiB, twenty that
//! grow when instantiated), and a large component uploaded again and again.
//! Each fails only itself, with a JSON error; another agent's tool keeps
//! running; the server's resident memory stays under 512 MiB throughout
//! (its peak, `VmHWM`, read from /proc). On SQLite, and on PostgreSQL when
//! `ANCHOR_TEST_POSTGRES_URL` is set.

mod common;

#[path = "../../../tests/support/hostile.rs"]
#[allow(dead_code)]
mod hostile;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, free_port, wait_healthy};
use serde_json::{Value, json};

const RSS_LIMIT_KIB: u64 = 512 * 1024;

/// The server's peak resident memory so far, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status of the server");
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmHWM")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join(format!("{}.wasm", name.replace('-', "_")))).unwrap()
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn agent(&self) -> String {
        let agent: Value =
            self.http.post(format!("{}/v1/agent/register", self.base)).json(&json!({})).send().await.unwrap().json().await.unwrap();
        agent["auth_token"].as_str().unwrap().to_string()
    }

    async fn tool(&self, token: &str, name: &str) -> String {
        let body = json!({ "tool_name": name, "price_dac": 1, "ara_connections": [{ "observation_type": "agent_profile" }] });
        let tool: Value = self
            .http
            .post(format!("{}/v1/tsl/tool/register", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tool["tool_id"].as_str().unwrap_or_else(|| panic!("{tool}")).to_string()
    }

    async fn upload(&self, token: &str, tool: &str, wasm: Vec<u8>) -> (u16, Value) {
        let reply = self
            .http
            .put(format!("{}/v1/tsl/tool/{tool}/component", self.base))
            .bearer_auth(token)
            .header("content-type", "application/wasm")
            .body(wasm)
            .send()
            .await
            .unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.expect("a JSON answer"))
    }

    async fn run(&self, token: &str, tool: &str) -> (u16, Value) {
        let reply =
            self.http.post(format!("{}/v1/tsl/tool/{tool}/run", self.base)).bearer_auth(token).json(&json!({})).send().await.unwrap();
        let status = reply.status().as_u16();
        (status, reply.json().await.expect("a JSON answer"))
    }

    /// One confirmed declaration of the agent's, folded into what ARA shows
    /// (a tool reads the runner's own profile).
    async fn declare(&self, token: &str) {
        let body = json!({
            "request_id": uuid::Uuid::new_v4(),
            "dd": { "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                    "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" },
            "ee": { "ee_preset": "EE_basic" },
        });
        let created: Value = self
            .http
            .post(format!("{}/v1/dd/create", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let dd = created["dd_id"].as_str().unwrap();
        let confirmed =
            self.http.post(format!("{}/v1/dd/confirm", self.base)).bearer_auth(token).json(&json!({ "dd_id": dd })).send().await.unwrap();
        assert_eq!(confirmed.status().as_u16(), 200);
    }
}

async fn attack(database: Option<&str>, name: &str) {
    let port = free_port();
    let data = std::env::temp_dir().join(format!("anchor-hostile-{name}-{}-{port}", std::process::id()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_anchor"));
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "1000000", "--data-dir"])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match database {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let server = Server(command.spawn().unwrap());
    let pid = server.0.id();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    wait_healthy(&http, &base).await;
    let c = Client { http, base };

    // Another agent's ordinary tool, which must keep running.
    let victim = c.agent().await;
    let example = c.tool(&victim, "example").await;
    assert_eq!(c.upload(&victim, &example, fixture("tool-example")).await.0, 201);
    c.declare(&victim).await;
    let attacker = c.agent().await;
    c.declare(&attacker).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.run(&victim, &example).await.0 != 200 {
        assert!(Instant::now() < deadline, "the victim's tool never ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let baseline = peak_rss_kib(pid);

    // Runs that grow a table or a memory past the budget: refused at the budget.
    for (label, wasm) in [("table", hostile::table_grower()), ("memory", hostile::memory_grower()), ("grow", fixture("tool-grow"))] {
        let tool = c.tool(&attacker, label).await;
        let (status, body) = c.upload(&attacker, &tool, wasm).await;
        assert_eq!(status, 201, "{label}: {body}");
        for _ in 0..3 {
            let (status, body) = c.run(&attacker, &tool).await;
            assert_eq!((status, body["error_code"].clone()), (422, json!("TOOL_OUT_OF_MEMORY")), "{label}: {body}");
            assert_eq!(c.run(&victim, &example).await.0, 200, "the victim's tool after {label}");
        }
    }
    // Instances over a run's memory together: refused at upload.
    for (label, wasm) in [("a hundred", hostile::with_hogs(100, 2048, 0)), ("twenty", hostile::with_hogs(20, 1, 127))] {
        let tool = c.tool(&attacker, label).await;
        let (status, body) = c.upload(&attacker, &tool, wasm).await;
        assert_eq!((status, body["error_code"].clone()), (400, json!("COMPONENT_OVER_LIMITS")), "{label}: {body}");
        assert_eq!(c.run(&victim, &example).await.0, 200);
    }
    // A large component, then the same bytes again: compiled once.
    let big = hostile::big_tool(20_000);
    let tool = c.tool(&attacker, "big").await;
    let compiled = Instant::now();
    let (status, body) = c.upload(&attacker, &tool, big.clone()).await;
    assert_eq!(status, 201, "{body}");
    let first = compiled.elapsed();
    for _ in 0..5 {
        let again = Instant::now();
        let (status, body) = c.upload(&attacker, &tool, big.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            again.elapsed() < first / 2 + Duration::from_millis(500),
            "the same bytes took {:?} (the first {first:?})",
            again.elapsed()
        );
    }
    assert_eq!(c.run(&victim, &example).await.0, 200);
    let peak = peak_rss_kib(pid);
    eprintln!(
        "{name}: resident memory peak {} MiB (baseline {} MiB); {} byte component compiled in {first:?}",
        peak / 1024,
        baseline / 1024,
        big.len()
    );
    assert!(peak < RSS_LIMIT_KIB, "{name}: the server's resident memory reached {} MiB", peak / 1024);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_components_fail_only_themselves_within_512_mib_on_sqlite() {
    attack(None, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_components_fail_only_themselves_within_512_mib_on_postgres() {
    let Some(url) = common::postgres_or_skip("hostile::hostile_components_fail_only_themselves_within_512_mib_on_postgres") else {
        return;
    };
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let name = format!("hostile_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {name}"))).execute(&admin).await.unwrap();
    let (server, _) = url.rsplit_once('/').unwrap();
    attack(Some(&format!("{server}/{name}")), "postgres").await;
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database {name} with (force)"))).execute(&admin).await;
}
