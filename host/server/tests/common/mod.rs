//! Starting the real `anchor` binary for the process-level tests.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `anchor` process; killed when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port no one listens on, for a host to bind next. It is taken
/// below the kernel's ephemeral range, so that no outgoing connection (of
/// this test's clients or another's) can take it before the host binds it,
/// as one did when ports were asked of the kernel; each call of a process
/// starts past the last port it gave, and processes start apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let low = ephemeral_start.saturating_sub(12_000).max(1024);
    let span = ephemeral_start - low;
    if span < 1000 {
        return TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    }
    static START: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let process_start = *START.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        std::process::id().wrapping_mul(7919) ^ nanos
    }) % span;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low + (process_start + step) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {low} and {ephemeral_start}");
}

/// Waits until `/health` answers, and returns its body.
pub async fn wait_healthy(http: &reqwest::Client, base: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(reply) = http.get(format!("{base}/health")).send().await {
            return reply.json().await.unwrap();
        }
        assert!(Instant::now() < deadline, "the server did not come up at {base}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `anchor serve` on a free loopback port with its SQLite file in a fresh
/// temporary directory (`name` tells the directories apart), plus `extra`
/// flags; returns the server, its base URL and the data directory.
pub async fn serve_sqlite(name: &str, extra: &[&str]) -> (Server, String, std::path::PathBuf) {
    serve(name, extra).await
}

/// `anchor serve` as [`serve_sqlite`] starts it, on the database `extra`
/// names if it names one (`--database-url`); the data directory then holds
/// only the host's own files.
pub async fn serve(name: &str, extra: &[&str]) -> (Server, String, std::path::PathBuf) {
    let port = free_port();
    let data = std::env::temp_dir().join(format!("anchor-{name}-{}-{port}", std::process::id()));
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(&data)
            .args(extra)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&reqwest::Client::new(), &base).await;
    (server, base, data)
}

/// The test PostgreSQL's URL, or `None` after saying `test` was skipped (and
/// recording it in `ANCHOR_TEST_SKIP_FILE`, which scripts/test counts). Under
/// CI (`CI=true` or `ANCHOR_TEST_REQUIRE_POSTGRES=1`) a skip is a failure.
pub fn postgres_or_skip(test: &str) -> Option<String> {
    if let Some(url) = std::env::var("ANCHOR_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) {
        return Some(url);
    }
    let required =
        std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") || std::env::var("ANCHOR_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    assert!(!required, "{test} needs ANCHOR_TEST_POSTGRES_URL, and under CI every test must run");
    eprintln!("SKIPPED {test}: ANCHOR_TEST_POSTGRES_URL is not set");
    if let Some(file) = std::env::var_os("ANCHOR_TEST_SKIP_FILE").filter(|f| !f.is_empty()) {
        use std::io::Write;
        if let Ok(mut out) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = writeln!(out, "{test}");
        }
    }
    None
}

/// Says `test` was skipped and why, and records it in `ANCHOR_TEST_SKIP_FILE`
/// (scripts/test counts it as skipped, not passed).
pub fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    if let Some(file) = std::env::var_os("ANCHOR_TEST_SKIP_FILE").filter(|f| !f.is_empty()) {
        use std::io::Write;
        if let Ok(mut out) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = writeln!(out, "{test}");
        }
    }
}

/// The PostgreSQL server programs (`initdb`, `pg_ctl`) of the newest version installed.
pub fn pg_bin() -> Option<std::path::PathBuf> {
    let mut versions: Vec<std::path::PathBuf> =
        std::fs::read_dir("/usr/lib/postgresql").ok()?.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    versions.sort();
    versions.into_iter().rev().map(|v| v.join("bin")).find(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// A PostgreSQL program, as the `postgres` user when this is root (the server refuses root).
fn pg(bin: &std::path::Path, program: &str, args: &[&str]) -> std::process::Output {
    let path = bin.join(program);
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    command.args(args).output().expect("a PostgreSQL program runs")
}

/// A PostgreSQL cluster of a test's own (initdb under a temporary directory,
/// loopback only, trust authentication), so the test may stop and start the
/// database under a running host; removed when dropped.
pub struct PrivateCluster {
    bin: std::path::PathBuf,
    dir: std::path::PathBuf,
    pub port: u16,
}

impl PrivateCluster {
    pub fn init(bin: &std::path::Path) -> PrivateCluster {
        let dir = std::env::temp_dir().join(format!("anchor-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            assert!(Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]).status().unwrap().success());
        }
        let data = dir.join("data");
        let init = pg(bin, "initdb", &["-D", data.to_str().unwrap(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        assert!(init.status.success(), "initdb: {}{}", String::from_utf8_lossy(&init.stdout), String::from_utf8_lossy(&init.stderr));
        let cluster = PrivateCluster { bin: bin.to_path_buf(), dir, port: free_port() };
        cluster.start();
        cluster
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started.
    pub fn standby_of(bin: &std::path::Path, primary: &PrivateCluster) -> PrivateCluster {
        let dir = std::env::temp_dir().join(format!("anchor-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            assert!(Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]).status().unwrap().success());
        }
        let data = dir.join("data");
        let port = primary.port.to_string();
        let base = pg(
            bin,
            "pg_basebackup",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", data.to_str().unwrap(), "-R", "-X", "stream", "-c", "fast"],
        );
        assert!(base.status.success(), "pg_basebackup: {}", String::from_utf8_lossy(&base.stderr));
        let standby = PrivateCluster { bin: bin.to_path_buf(), dir, port: free_port() };
        standby.start();
        standby
    }

    /// Promotes a standby to primary (`pg_ctl promote`), waiting for it.
    pub fn promote(&self) {
        let data = self.dir.join("data");
        let promoted = pg(&self.bin, "pg_ctl", &["-D", data.to_str().unwrap(), "-w", "-t", "60", "promote"]);
        assert!(promoted.status.success(), "pg_ctl promote: {}", String::from_utf8_lossy(&promoted.stderr));
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn start(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", self.port, self.dir.display());
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let started = pg(
            &self.bin,
            "pg_ctl",
            &["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &options, "-w", "-t", "60", "start"],
        );
        assert!(started.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&started.stderr));
    }

    /// Stops the server at once, as a crash would (`-m immediate`).
    pub fn crash(&self) {
        let data = self.dir.join("data");
        let stopped = pg(&self.bin, "pg_ctl", &["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
        assert!(stopped.status.success(), "pg_ctl stop: {}", String::from_utf8_lossy(&stopped.stderr));
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = pg(&self.bin, "pg_ctl", &["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The latest signed checkpoint once it covers at least `size` leaves (its
/// size and note), polled for at most `within`.
pub async fn checkpoint_at_least(http: &reqwest::Client, base: &str, size: u64, within: Duration) -> (u64, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(reply) = http.get(format!("{base}/v1/log/checkpoint")).send().await
            && reply.status() == 200
        {
            let note = reply.text().await.unwrap();
            let covered: u64 = note.lines().nth(1).and_then(|l| l.parse().ok()).unwrap_or(0);
            if covered >= size {
                return (covered, note);
            }
        }
        assert!(Instant::now() < deadline, "no checkpoint covered {size} leaves within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fresh PostgreSQL database on the test server, for one test: `None`
/// (after saying `test` was skipped) when no PostgreSQL is configured.
pub struct PgDatabase {
    pub admin: sqlx::PgPool,
    pub name: String,
    pub url: String,
}

impl PgDatabase {
    pub async fn create(test: &str, prefix: &str) -> Option<PgDatabase> {
        let url = postgres_or_skip(&format!("{test} (a PostgreSQL database {prefix})"))?;
        let admin = sqlx::PgPool::connect(&url).await.unwrap();
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {name}"))).execute(&admin).await.unwrap();
        let (server, _) = url.rsplit_once('/').unwrap();
        Some(PgDatabase { url: format!("{server}/{name}"), admin, name })
    }

    pub async fn drop_now(self) {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database {} with (force)", self.name))).execute(&self.admin).await;
    }
}

/// Registers an agent at `base` and anchors one declaration (created and
/// confirmed, Trial-paid): the agent's token and the DD's id.
pub async fn anchor_one(http: &reqwest::Client, base: &str) -> (String, String) {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    let token = agent["auth_token"].as_str().unwrap().to_owned();
    let body = serde_json::json!({
        "request_id": uuid::Uuid::new_v4(),
        "dd": { "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" },
        "ee": { "ee_preset": "EE_basic" },
    });
    let created: Value =
        http.post(format!("{base}/v1/dd/create")).bearer_auth(&token).json(&body).send().await.unwrap().json().await.unwrap();
    let dd_id = created["dd_id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let confirm = serde_json::json!({ "dd_id": dd_id });
    let confirmed = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(&token).json(&confirm).send().await.unwrap();
    assert_eq!(confirmed.status().as_u16(), 200);
    (token, dd_id)
}

/// The receipt of `dd_id`, once the log holds it (30 s at most), written to
/// `dir/<dd_id>.json`: that file and the log's public key, for `anchor verify`.
pub async fn receipt_file(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    dd_id: &str,
    dir: &std::path::Path,
) -> (std::path::PathBuf, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let receipt = loop {
        let reply = http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap();
        if reply.status().is_success() {
            break reply.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "no receipt");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let file = dir.join(format!("{dd_id}.json"));
    std::fs::write(&file, receipt).unwrap();
    let key: Value = http.get(format!("{base}/v1/log/key")).send().await.unwrap().json().await.unwrap();
    (file, key["public_key"].as_str().unwrap().to_owned())
}
