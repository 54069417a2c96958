//! The suite's logs, and the secrets it made, for the check that no secret
//! is ever logged (`scripts/check-logs`).
//!
//! With `ANCHOR_TEST_LOG_DIR` set, every test server in this process logs
//! as the binary does with `--log-format json`, at debug level for the
//! service's own crates, into `<dir>/suite-<pid>.jsonl`, and every secret a
//! test sends or receives through [`crate::TestServer::call_with`] (agent
//! tokens, recovery keys, owner passwords, session cookies, CSRF tokens,
//! payment signatures) is written to `<dir>/secrets-<pid>.txt`. Without it,
//! server warnings go to the failing test's output, as before.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

pub const LOG_DIR_VAR: &str = "ANCHOR_TEST_LOG_DIR";

/// Request and response fields that carry a secret.
const SECRET_FIELDS: [&str; 9] = [
    "auth_token",
    "new_auth_token",
    "recovery_key",
    "new_recovery_key",
    "password",
    "new_password",
    "current_password",
    "csrf_token",
    "session_token",
];

/// Headers that carry a secret.
const SECRET_HEADERS: [&str; 5] = ["authorization", "cookie", "set-cookie", "payment-signature", "x-payment"];

fn dir() -> Option<PathBuf> {
    std::env::var_os(LOG_DIR_VAR).filter(|d| !d.is_empty()).map(PathBuf::from)
}

fn secrets() -> Option<&'static Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = dir()?;
        std::fs::create_dir_all(&dir).ok()?;
        let path = dir.join(format!("secrets-{}.txt", std::process::id()));
        Some(Mutex::new(File::options().create(true).append(true).open(path).expect("the secrets file opens")))
    })
    .as_ref()
}

/// Installs this process's log subscriber (once).
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(install);
}

fn install() {
    match dir() {
        Some(dir) => {
            std::fs::create_dir_all(&dir).expect("the log directory");
            let file = File::create(dir.join(format!("suite-{}.jsonl", std::process::id()))).expect("the log file");
            let filter =
                "info,anchor_server=debug,anchor_app=debug,anchor_store=debug,anchor_plugin_host=debug,anchor_x402=debug,sqlx=warn";
            let _ = tracing_subscriber::fmt()
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .with_env_filter(filter)
                .with_writer(Mutex::new(file))
                .try_init();
        }
        // Server-side errors show in a failing test's output.
        None => {
            let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("warn,sqlx=error").try_init();
        }
    }
}

/// Writes `secret` down, if it is long enough to be told apart from other text.
pub fn remember(secret: &str) {
    let secret = secret.trim();
    if secret.len() < 12 || secret.contains('\n') {
        return;
    }
    if let Some(file) = secrets() {
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(file, "{secret}");
    }
}

fn remember_fields(value: &Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match value {
                    Value::String(s) if SECRET_FIELDS.contains(&key.as_str()) => remember(s),
                    other => remember_fields(other),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(remember_fields),
        _ => {}
    }
}

fn remember_header(name: &str, value: &str) {
    if !SECRET_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return;
    }
    let value = value.strip_prefix("Bearer ").unwrap_or(value);
    // Cookies: each value, not its name or attributes.
    if name.eq_ignore_ascii_case("cookie") || name.eq_ignore_ascii_case("set-cookie") {
        for pair in value.split(';') {
            if let Some((_, v)) = pair.split_once('=') {
                remember(v);
            }
        }
    } else {
        remember(value);
        // A payment header is base64 JSON: its signature is a secret in its own right.
        use base64::Engine as _;
        if let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(value.trim())
            && let Ok(payment) = serde_json::from_slice::<Value>(&decoded)
            && let Some(signature) = payment["payload"]["signature"].as_str()
        {
            remember(signature);
            remember(signature.trim_start_matches("0x"));
        }
    }
}

/// The secrets of a request about to be sent.
pub fn remember_request(headers: &[(&str, &str)], body: Option<&Value>) {
    if secrets().is_none() {
        return;
    }
    for (name, value) in headers {
        remember_header(name, value);
    }
    if let Some(body) = body {
        remember_fields(body);
    }
}

/// The secrets of a response received.
pub fn remember_response(headers: &reqwest::header::HeaderMap, text: &str) {
    if secrets().is_none() {
        return;
    }
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            remember_header(name.as_str(), value);
        }
    }
    if let Ok(body) = serde_json::from_str::<Value>(text) {
        remember_fields(&body);
    }
}
