//! The Python client (clients/python, installed with pip) against a running
//! `anchor`: its own pytest suite (register, anchor, confirm, receipts
//! verified in Python, declarations, an ARA observation and a tool purchase
//! paid with the official `x402` package, a tool uploaded and run, the worked
//! example and the MCP one with the official `mcp` SDK, the models against
//! the served document) on SQLite and, with
//! ANCHOR_TEST_POSTGRES_URL, on PostgreSQL. `scripts/test` makes the virtual
//! environment (`pip install ./clients/python[dev]`) and names its Python in
//! ANCHOR_PYTHON.

mod common;

use std::path::Path;
use std::process::Command;

fn python() -> String {
    let python = std::env::var("ANCHOR_PYTHON").ok().filter(|p| !p.is_empty());
    python.unwrap_or_else(|| panic!("ANCHOR_PYTHON names a Python with `pip install ./clients/python[dev]` done (scripts/test makes one)"))
}

/// Local settlement to this address: the tests pay with a public test key.
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn pytest(base: &str) {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/python");
    let output = Command::new(python())
        // -P: the installed package, not the source beside the tests.
        .args(["-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&client)
        .env("ANCHOR_BASE_URL", base)
        // The example tool the seller in the tests uploads.
        .env("ANCHOR_TOOL_WASM", Path::new(anchor_plugins::PLUGINS_DIR).join("tool_example.wasm"))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "pytest failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(" passed") && !stdout.contains("failed") && !stdout.contains("skipped"), "{stdout}");
}

#[tokio::test]
async fn the_python_client_on_sqlite() {
    let (server, base, data) = common::serve_sqlite("python", &["--rate-limit", "1000000", "--pay-to", PAY_TO]).await;
    pytest(&base);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn the_python_client_on_postgres() {
    let Some(url) = common::postgres_or_skip("python_client::the_python_client_on_postgres") else {
        return;
    };
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let database = format!("anchor_python_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {database}"))).execute(&admin).await.unwrap();
    let (prefix, _) = url.rsplit_once('/').unwrap();
    let db_url = format!("{prefix}/{database}");
    let (server, base, data) =
        common::serve("python-pg", &["--rate-limit", "1000000", "--pay-to", PAY_TO, "--database-url", &db_url]).await;
    pytest(&base);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database if exists {database} with (force)"))).execute(&admin).await;
}
