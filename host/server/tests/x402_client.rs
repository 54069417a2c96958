//! The official x402 client from npm (`@x402/fetch`, `@x402/evm`, viem; pinned
//! in tests/e2e/x402/package-lock.json) pays a running `anchor` over loopback
//! in local settlement mode. `scripts/test` runs `npm ci` there first.

mod common;

use std::path::Path;
use std::process::Command;

#[tokio::test]
async fn the_official_client_pays_and_confirms() {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/x402");
    assert!(
        e2e.join("node_modules/@x402/fetch").exists(),
        "the x402 client is not installed: run `npm ci` in {} (scripts/test does)",
        e2e.display()
    );
    let (server, base, data) = common::serve_sqlite("x402", &["--pay-to", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]).await;
    let output =
        Command::new("node").args(["--test", "paid.test.mjs"]).current_dir(&e2e).env("ANCHOR_BASE_URL", &base).output().expect("node runs");
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    assert!(
        output.status.success(),
        "node test failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // Both node tests ran: the wrapped fetch, and the X-PAYMENT retry of the published SDK.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("# pass 2") && stdout.contains("# fail 0"), "{stdout}");
}
