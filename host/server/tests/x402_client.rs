//! The official x402 client from npm (`@x402/fetch`, `@x402/evm`, viem; pinned
//! in tests/e2e/x402/package-lock.json) pays a running `anchor` over loopback
//! in local settlement mode. `scripts/test` runs `npm ci` there first.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn the_official_client_pays_and_confirms() {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/x402");
    assert!(
        e2e.join("node_modules/@x402/fetch").exists(),
        "the x402 client is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let data = std::env::temp_dir().join(format!("anchor-x402-{}-{port}", std::process::id()));
    let mut server = Command::new(env!("CARGO_BIN_EXE_anchor"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&data)
        .args(["--pay-to", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while http.get(format!("{base}/health")).send().await.is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = Command::new("node")
        .args(["--test", "paid.test.mjs"])
        .current_dir(&e2e)
        .env("ANCHOR_BASE_URL", &base)
        .output()
        .expect("node runs");
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&data);
    assert!(
        output.status.success(),
        "node test failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("# pass 1"));
}
