//! The Python client (clients/python, installed with pip) against a running
//! `anchor`: its own pytest suite (register, anchor, confirm, receipts
//! verified in Python with the witness's cosignature, declarations, an ARA
//! observation and a tool purchase paid with the official `x402` package, a
//! tool uploaded and run, the worked example and the MCP one with the
//! official `mcp` SDK, the models against the served document) on SQLite
//! and, with ANCHOR_TEST_POSTGRES_URL, on PostgreSQL. Each server has one
//! witness (`anchor witness serve`). `scripts/test` makes the virtual
//! environment and names its Python in ANCHOR_PYTHON.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Local settlement to this address: the tests pay with a public test key.
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn python() -> String {
    let python = std::env::var("ANCHOR_PYTHON").ok().filter(|p| !p.is_empty());
    python.unwrap_or_else(|| panic!("ANCHOR_PYTHON names a Python with `pip install ./clients/python[dev]` done (scripts/test makes one)"))
}

/// The last line `anchor ARGS` prints (a keygen's verifier key).
fn last_line(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim().to_owned()
}

/// A log key and a witness of that log, running: the server's extra flags
/// and the witness's verifier key.
async fn witnessed(dir: &Path) -> (common::Server, Vec<String>, String) {
    std::fs::create_dir_all(dir).unwrap();
    let log_key = dir.join("log.key");
    let log_vkey = last_line(&["log", "keygen", "--origin", "python.test/log", log_key.to_str().unwrap()]);
    let witness_key = dir.join("witness.key");
    let witness_vkey = last_line(&["witness", "keygen", "--name", "witness.python.test", witness_key.to_str().unwrap()]);
    let port = common::free_port();
    let witness = common::Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["witness", "serve", "--listen", &format!("127.0.0.1:{port}"), "--name", "witness.python.test", "--key-file"])
            .arg(&witness_key)
            .args(["--log", &log_vkey, "--data-dir"])
            .arg(dir.join("witness"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reqwest::get(format!("http://127.0.0.1:{port}/health")).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the witness did not come up");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let skey = std::fs::read_to_string(&log_key).unwrap().trim().to_owned();
    // The issuer whose signed statements the tests register (SCRAPI).
    let issuer_key = dir.join("issuer.key");
    last_line(&["statement", "keygen", issuer_key.to_str().unwrap()]);
    let flags = vec![
        "--scitt-issuer".into(),
        format!("{ISSUER}={}", dir.join("issuer.pub.cbor").display()),
        "--log-signing-key".into(),
        skey,
        "--witness".into(),
        format!("{witness_vkey}=http://127.0.0.1:{port}"),
        "--rate-limit".into(),
        "1000000".into(),
        "--pay-to".into(),
        PAY_TO.into(),
    ];
    (witness, flags, witness_vkey)
}

/// The issuer the tests' signed statements name.
const ISSUER: &str = "https://issuer.python.test";

/// Runs the Python client's tests against `base`; with `second`, the MCP
/// example sends half its calls to that other host of the same database.
fn pytest(base: &str, second: Option<&str>, witness_vkey: &str, issuer_key: &Path) {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/python");
    let mut command = Command::new(python());
    if let Some(second) = second {
        command.env("ANCHOR_SECOND_BASE_URL", second);
    }
    let output = command
        // -P: the installed package, not the source beside the tests.
        .args(["-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&client)
        .env("ANCHOR_BASE_URL", base)
        .env("ANCHOR_WITNESS_KEY", witness_vkey)
        .env("ANCHOR_ISSUER", ISSUER)
        .env("ANCHOR_ISSUER_KEY", issuer_key)
        // The service's own verifier, which must accept the receipts the client saves.
        .env("ANCHOR_BIN", env!("CARGO_BIN_EXE_anchor"))
        // The example tool the seller in the tests uploads.
        .env("ANCHOR_TOOL_WASM", Path::new(anchor_plugin_host::PLUGINS_DIR).join("tool_example.wasm"))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "pytest failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(" passed") && !stdout.contains("failed") && !stdout.contains("skipped"), "{stdout}");
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("anchor-{name}-{}-{}", std::process::id(), common::free_port()))
}

#[tokio::test]
async fn the_python_client_on_sqlite() {
    let dir = scratch("python-witness");
    let (witness, flags, witness_vkey) = witnessed(&dir).await;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (server, base, data) = common::serve_sqlite("python", &flags).await;
    pytest(&base, None, &witness_vkey, &dir.join("issuer.key"));
    drop(server);
    drop(witness);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_python_client_on_postgres() {
    let Some(pg) = common::PgDatabase::create("python_client::the_python_client_on_postgres", "anchor_python").await else {
        return;
    };
    let dir = scratch("python-pg-witness");
    let (witness, mut flags, witness_vkey) = witnessed(&dir).await;
    flags.extend(["--database-url".to_string(), pg.url.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (server, base, data) = common::serve("python-pg", &flags).await;
    // A second host of the same database and log key: the MCP example's
    // official Python SDK talks to both (either answers any request).
    let (second, second_base, second_data) = common::serve("python-pg-second", &flags).await;
    pytest(&base, Some(&second_base), &witness_vkey, &dir.join("issuer.key"));
    drop(second);
    let _ = std::fs::remove_dir_all(&second_data);
    drop(server);
    drop(witness);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&dir);
    pg.drop_now().await;
}
