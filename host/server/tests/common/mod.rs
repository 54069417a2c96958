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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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
