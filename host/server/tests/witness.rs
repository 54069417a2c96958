//! Witnesses of the log, end to end: `anchor witness serve` processes
//! cosigning the checkpoints of a running `anchor serve`, receipts that carry
//! their cosignatures, `anchor verify --witness … --quorum`, an independent
//! verifier of the note and cosignature formats (Go's sumdb/note, when Go is
//! installed), RFC 3161 time stamps from OpenSSL's own TSA (`openssl ts
//! -reply`, under a CA the test makes) checked by `openssl ts -verify` and
//! `anchor verify --tsa-ca`, and the witness protocol's answers, one by one.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anchor_server::listener::HttpLimits;
use anchor_store::witness_state::WitnessState;
use anchor_verify::cosignature::{WitnessKey, WitnessSigner, add_checkpoint_request};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use common::{Server, free_port};
use serde_json::{Value, json};
use signed_note::{Note, StandardSigner};
use tlog_tiles::{Checkpoint, Hash};

/// A directory of its own: tests run at once in this process, and a port
/// the kernel hands out twice must not give two of them one directory
/// (one's clean-up would delete the other's state).
fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("anchor-witness-{name}-{}-{n}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn anchor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap()
}

/// `anchor log keygen` in `dir`: the log's signing key and its verifier key
/// (the last line it prints).
fn log_key(dir: &Path, origin: &str) -> (String, String) {
    let file = dir.join("log.key");
    let out = anchor(&["log", "keygen", "--origin", origin, file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let vkey = String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim().to_owned();
    (std::fs::read_to_string(&file).unwrap().trim().to_owned(), vkey)
}

/// `anchor witness keygen`; the verifier key is the last line it prints.
fn witness_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let file = dir.join(format!("{}.key", name.replace('/', "_")));
    let out = anchor(&["witness", "keygen", "--name", name, file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let vkey = String::from_utf8_lossy(&out.stdout).lines().last().unwrap().trim().to_owned();
    WitnessKey::parse(&vkey).expect("keygen prints a cosignature/v1 verifier key");
    (file, vkey)
}

/// An `anchor witness serve` process on `port`.
fn witness_process(dir: &Path, name: &str, key_file: &Path, log_vkey: &str, port: u16) -> Server {
    Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["witness", "serve", "--listen", &format!("127.0.0.1:{port}"), "--name", name, "--key-file"])
            .arg(key_file)
            .args(["--log", log_vkey, "--data-dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn wait_up(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{url}/health")).send().await.is_err() {
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn register(http: &reqwest::Client, base: &str) -> String {
    register_agent(http, base).await.1
}

/// A new agent's id and token.
async fn register_agent(http: &reqwest::Client, base: &str) -> (String, String) {
    let agent: Value = http.post(format!("{base}/v1/agent/register")).send().await.unwrap().json().await.unwrap();
    (agent["agent_id"].as_str().unwrap().to_owned(), agent["auth_token"].as_str().unwrap().to_owned())
}

/// Creates and confirms one declaration (integrity level `level`); its id
/// and the create answer.
async fn anchor_one(http: &reqwest::Client, base: &str, token: &str, level: &str) -> (String, Value) {
    let (dd_id, created) = declare(http, base, token, level).await;
    let confirmed = http.post(format!("{base}/v1/dd/confirm")).bearer_auth(token).json(&json!({ "dd_id": dd_id })).send().await.unwrap();
    assert_eq!(confirmed.status().as_u16(), 200);
    (dd_id, created)
}

/// Creates one declaration (integrity level `level`), unconfirmed; its id
/// and the create answer.
async fn declare(http: &reqwest::Client, base: &str, token: &str, level: &str) -> (String, Value) {
    let created = http
        .post(format!("{base}/v1/dd/create"))
        .bearer_auth(token)
        .json(&json!({
            "request_id": uuid::Uuid::new_v4(),
            "dd": { "dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                    "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED" },
            "ee": { "ee_retention_period": "short", "ee_integrity_verification_level": level, "ee_disclosure_format_policy": "internal",
                    "ee_responsibility_scope": "standard" },
        }))
        .send()
        .await
        .unwrap();
    let status = created.status().as_u16();
    let created: Value = created.json().await.unwrap();
    assert_eq!(status, 201, "{created}");
    (created["dd_id"].as_str().unwrap().to_owned(), created)
}

/// Polls the receipt until `done` accepts it, or panics after `within`.
async fn receipt_when(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    dd_id: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let reply = http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await.unwrap();
        if reply.status().is_success() {
            let receipt: Value = reply.json().await.unwrap();
            if done(&receipt) {
                return receipt;
            }
        }
        assert!(Instant::now() < deadline, "the receipt of {dd_id} did not become what was waited for within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn verify(receipt: &Path, log_vkey: &str, witnesses: &[&str], quorum: usize) -> Output {
    verify_with(receipt, log_vkey, witnesses, quorum, &[])
}

fn verify_with(receipt: &Path, log_vkey: &str, witnesses: &[&str], quorum: usize, more: &[&str]) -> Output {
    let mut args = vec!["verify".to_owned(), receipt.to_str().unwrap().to_owned(), "--key".into(), log_vkey.into()];
    args.extend(more.iter().map(|a| (*a).to_owned()));
    for witness in witnesses {
        args.push("--witness".into());
        args.push((*witness).into());
    }
    args.push("--quorum".into());
    args.push(quorum.to_string());
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(&args).output().unwrap()
}

/// The pycose check of a COSE receipt (tests/e2e/scitt/verify_receipt.py),
/// with the Python of the client's test environment (`ANCHOR_PYTHON`, which
/// scripts/test sets); `None` when there is none, outside CI.
fn pycose_verify(receipt: &Path, keys: &Path, out: &Path) -> Option<Output> {
    pycose_verify_of(receipt, keys, out, None)
}

/// The pycose check of a COSE receipt, of a signed statement when one is given.
fn pycose_verify_of(receipt: &Path, keys: &Path, out: &Path, statement: Option<&Path>) -> Option<Output> {
    let python = python()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/scitt/verify_receipt.py");
    let mut command = Command::new(python);
    command.arg(script).arg(receipt).arg(keys).arg(out);
    if let Some(statement) = statement {
        command.arg(statement);
    }
    Some(command.output().unwrap())
}

/// The Python of the client's test environment (`ANCHOR_PYTHON`, which
/// scripts/test sets, with pycose and cbor2); `None` outside CI when unset.
fn python() -> Option<String> {
    let Ok(python) = std::env::var("ANCHOR_PYTHON") else {
        let required = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
            || std::env::var("ANCHOR_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(!required, "the pycose check needs ANCHOR_PYTHON (scripts/test sets it); under CI it must run");
        eprintln!("SKIPPED the pycose checks: ANCHOR_PYTHON is not set (scripts/test sets it)");
        return None;
    };
    Some(python)
}

/// Go's sumdb/tlog check of the path pycose found (tests/e2e/scitt/inclusion.go).
fn go_inclusion(found: &Path, log_vkey: &str) -> Option<Output> {
    let gopath = Path::new("/usr/share/gocode");
    if !gopath.join("src/golang.org/x/mod/sumdb/tlog").is_dir() || Command::new("go").arg("version").output().is_err() {
        let required = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
            || std::env::var("ANCHOR_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(!required, "the Go tlog check needs golang-go and golang-golang-x-mod-dev; under CI it must run");
        eprintln!("SKIPPED the Go tlog check: install golang-go and golang-golang-x-mod-dev");
        return None;
    }
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/scitt/inclusion.go");
    Some(
        Command::new("go")
            .args(["run", program])
            .arg(found)
            .arg(log_vkey)
            .env("GO111MODULE", "off")
            .env("GOPATH", gopath)
            .env("GOFLAGS", "")
            .output()
            .unwrap(),
    )
}

/// The Go verifier (tests/e2e/witness), when Go and golang.org/x/mod are
/// installed (scripts/test installs them): `None` when they are not.
fn go_verify(note: &Path, log_vkey: &str, quorum: usize, witnesses: &[&str]) -> Option<Output> {
    let gopath = Path::new("/usr/share/gocode");
    if !gopath.join("src/golang.org/x/mod/sumdb/note").is_dir() || Command::new("go").arg("version").output().is_err() {
        let required = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
            || std::env::var("ANCHOR_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(!required, "the independent verifier needs Debian's golang-go and golang-golang-x-mod-dev; under CI it must run");
        eprintln!("SKIPPED the Go verifier: install golang-go and golang-golang-x-mod-dev");
        return None;
    }
    let program = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/witness/cosigverify.go");
    Some(
        Command::new("go")
            .args(["run", program])
            .arg(note)
            .arg(log_vkey)
            .arg(quorum.to_string())
            .args(witnesses)
            .env("GO111MODULE", "off")
            .env("GOPATH", gopath)
            .env("GOFLAGS", "")
            .output()
            .unwrap(),
    )
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A time-stamping authority that is OpenSSL's (`openssl ts -reply`), over
/// HTTP, with a CA of its own: an EC P-384 root that certifies an RSA
/// time-stamping key (critical extended key usage timeStamping).
struct TestTsa {
    url: String,
    ca: PathBuf,
    tsa_cert: PathBuf,
    _task: tokio::task::JoinHandle<()>,
}

async fn test_tsa(dir: &Path) -> TestTsa {
    let dir = dir.join("tsa");
    std::fs::create_dir_all(&dir).unwrap();
    openssl(&dir, &["ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out", "ca.key"]);
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-sha384",
            "-days",
            "30",
            "-subj",
            "/CN=anchor test root",
            "-out",
            "ca.pem",
            "-addext",
            "basicConstraints=critical,CA:true",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    openssl(
        &dir,
        &["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "tsa.key", "-subj", "/CN=anchor test TSA", "-out", "tsa.csr"],
    );
    std::fs::write(
        dir.join("tsa.ext"),
        "basicConstraints=critical,CA:false\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=critical,timeStamping\nsubjectKeyIdentifier=hash\n",
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "tsa.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-sha256",
            "-extfile",
            "tsa.ext",
            "-out",
            "tsa.pem",
        ],
    );
    std::fs::write(dir.join("tsaserial"), "01\n").unwrap();
    std::fs::write(
        dir.join("tsa.cnf"),
        format!(
            "[ tsa ]\ndefault_tsa = tsa1\n[ tsa1 ]\ndir = {}\nserial = $dir/tsaserial\ncrypto_device = builtin\nsigner_cert = $dir/tsa.pem\n\
             certs = $dir/tsa.pem\nsigner_key = $dir/tsa.key\nsigner_digest = sha256\ndefault_policy = 1.2.3.4.1\n\
             digests = sha256, sha384, sha512\naccuracy = secs:1\nordering = no\ntsa_name = yes\ness_cert_id_chain = no\ness_cert_id_alg = sha256\n",
            dir.display()
        ),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tsa", listener.local_addr().unwrap());
    let lock = Arc::new(tokio::sync::Mutex::new(0u64));
    let served = dir.clone();
    let app = axum::Router::new().route(
        "/tsa",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (lock, dir) = (lock.clone(), served.clone());
            async move {
                // openssl ts -reply keeps its serial in a file: one at a time.
                let mut count = lock.lock().await;
                *count += 1;
                let (query, reply) = (dir.join(format!("q{count}.tsq")), dir.join(format!("r{count}.tsr")));
                std::fs::write(&query, &body).unwrap();
                let out = tokio::process::Command::new("openssl")
                    .args(["ts", "-reply", "-config"])
                    .arg(dir.join("tsa.cnf"))
                    .arg("-queryfile")
                    .arg(&query)
                    .arg("-out")
                    .arg(&reply)
                    .output()
                    .await
                    .unwrap();
                assert!(out.status.success(), "openssl ts -reply: {}", String::from_utf8_lossy(&out.stderr));
                ([(axum::http::header::CONTENT_TYPE, "application/timestamp-reply")], std::fs::read(&reply).unwrap())
            }
        }),
    );
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    TestTsa { url, ca: dir.join("ca.pem"), tsa_cert: dir.join("tsa.pem"), _task: task }
}

/// `openssl ts -verify` of a token (DER) over `body`.
fn openssl_ts_verify(dir: &Path, token: &[u8], body: &str, tsa: &TestTsa) -> Output {
    let (token_file, body_file) = (dir.join("token.der"), dir.join("checkpoint-body.txt"));
    std::fs::write(&token_file, token).unwrap();
    std::fs::write(&body_file, body).unwrap();
    Command::new("openssl")
        .args(["ts", "-verify", "-token_in", "-in"])
        .arg(&token_file)
        .arg("-data")
        .arg(&body_file)
        .arg("-CAfile")
        .arg(&tsa.ca)
        .arg("-untrusted")
        .arg(&tsa.tsa_cert)
        .output()
        .unwrap()
}

/// Changes one byte inside the base64 of the signature line of `name`.
fn tamper_line(note: &str, name: &str) -> String {
    note.lines()
        .map(|line| {
            if let Some(encoded) = line.strip_prefix(&format!("\u{2014} {name} ")) {
                let mut bytes = B64.decode(encoded).unwrap();
                let last = bytes.len() - 1;
                bytes[last] ^= 0x01;
                format!("\u{2014} {name} {}\n", B64.encode(bytes))
            } else if line.is_empty() {
                "\n".to_owned()
            } else {
                format!("{line}\n")
            }
        })
        .collect()
}

async fn two_witnesses_cosign_receipts(database_url: Option<&str>) {
    let dir = scratch("e2e");
    let http = reqwest::Client::new();
    // The log's key, made first so the witnesses can be told of it.
    let (skey, log_vkey) = log_key(&dir, "witnessed.test/log");
    let (key_a, vkey_a) = witness_key(&dir, "witness.test/a");
    let (key_b, vkey_b) = witness_key(&dir, "witness.test/b");
    let (port_a, port_b) = (free_port(), free_port());
    let mut witness_a = Some(witness_process(&dir.join("wa"), "witness.test/a", &key_a, &log_vkey, port_a));
    let _witness_b = witness_process(&dir.join("wb"), "witness.test/b", &key_b, &log_vkey, port_b);
    wait_up(&http, &format!("http://127.0.0.1:{port_a}")).await;
    wait_up(&http, &format!("http://127.0.0.1:{port_b}")).await;
    let tsa = test_tsa(&dir).await;
    // Two issuers of signed statements: one whose key and statement
    // `anchor statement` makes, one whose pycose makes (when Python is here).
    let issuer_key = dir.join("issuer.key");
    let made = anchor(&["statement", "keygen", issuer_key.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let payload = dir.join("payload.json");
    std::fs::write(&payload, br#"{"artifact":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}"#).unwrap();
    let signed = Command::new(env!("CARGO_BIN_EXE_anchor"))
        .args(["statement", "sign", "--key", issuer_key.to_str().unwrap(), "--iss", "https://issuer.test", "--sub", "pkg:demo@1"])
        .args(["--content-type", "application/json", payload.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(signed.status.success(), "{}", String::from_utf8_lossy(&signed.stderr));
    let mut statements = vec![(dir.join("statement.cose"), "anchor statement sign")];
    std::fs::write(&statements[0].0, &signed.stdout).unwrap();
    let mut issuers = vec![format!("https://issuer.test={}", dir.join("issuer.pub.cbor").display())];
    if let Some(python) = python() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/scitt/statement.py");
        let (key, statement) = (dir.join("pycose-issuer.cbor"), dir.join("pycose-statement.cose"));
        let out = Command::new(python).arg(script).arg(&key).arg(&statement).args(["https://pycose.test", "pkg:other@2"]).output().unwrap();
        assert!(out.status.success(), "statement.py: {}", String::from_utf8_lossy(&out.stderr));
        issuers.push(format!("https://pycose.test={}", key.display()));
        statements.push((statement, "pycose"));
    }

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_anchor"));
    serve
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.join("data"))
        .args(["--log-signing-key", skey.trim()])
        .args(["--witness", &format!("{vkey_a}=http://127.0.0.1:{port_a}")])
        .args(["--witness", &format!("{vkey_b}=http://127.0.0.1:{port_b}/")])
        .args(["--tsa-url", &tsa.url, "--tsa-ca"])
        .arg(&tsa.ca)
        .args(["--metrics-on-api", "--rate-limit", "100000"])
        .args(issuers.iter().flat_map(|issuer| ["--scitt-issuer", issuer.as_str()]))
        .env("RUST_LOG", "warn")
        .stdout(std::fs::File::create(dir.join("serve.log")).unwrap())
        .stderr(Stdio::null());
    match database_url {
        Some(url) => serve.env("DATABASE_URL", url),
        None => serve.env_remove("DATABASE_URL"),
    };
    let _server = Server(serve.spawn().unwrap());
    common::wait_healthy(&http, &base).await;

    let (agent_id, token) = register_agent(&http, &base).await;
    let (dd_id, created) = anchor_one(&http, &base, &token, "certifiable").await;
    assert!(created.get("integrity_level").is_none(), "with witnesses and a TSA, certifiable is reachable: {created}");
    let receipt = receipt_when(&http, &base, &token, &dd_id, Duration::from_secs(30), |r| {
        r["witnessed"] == json!(true) && r["timestamp_token"].is_string()
    })
    .await;
    assert_eq!(receipt["cosigned_by"], json!(["witness.test/a", "witness.test/b"]), "{receipt}");
    assert_eq!(receipt["integrity_level"], json!({ "declared": "certifiable", "reached": "certifiable", "met": true }));
    let checkpoint = receipt["checkpoint"].as_str().unwrap();
    assert_eq!(checkpoint.matches("\u{2014} witness.test/").count(), 2, "{checkpoint}");
    // The public checkpoint carries them too.
    let size = receipt["tree_size"].as_u64().unwrap();
    let public = http.get(format!("{base}/v1/log/checkpoints/{size}")).send().await.unwrap().text().await.unwrap();
    assert_eq!(public, checkpoint);

    // anchor verify: the quorum of the given keys, then each tampering named.
    let file = dir.join("receipt.json");
    std::fs::write(&file, receipt.to_string()).unwrap();
    let ok = verify(&file, &log_vkey, &[&vkey_a, &vkey_b], 2);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{stdout}{}", String::from_utf8_lossy(&ok.stderr));
    assert!(
        stdout.contains("ok: cosigned by witness.test/a") && stdout.contains("ok: 2 of the 2 witness cosignatures required"),
        "{stdout}"
    );
    // The time stamp: anchor verify --tsa-ca, and OpenSSL on its own.
    let stamped = verify_with(&file, &log_vkey, &[&vkey_a, &vkey_b], 2, &["--tsa-ca", tsa.ca.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&stamped.stdout);
    assert!(stamped.status.success(), "{stdout}{}", String::from_utf8_lossy(&stamped.stderr));
    assert!(stdout.contains("ok: the checkpoint was time-stamped at") && stdout.contains("anchor test TSA"), "{stdout}");
    let tsa_token = B64.decode(receipt["timestamp_token"].as_str().unwrap()).unwrap();
    let body = checkpoint.split_once("\n\n").unwrap().0.to_owned() + "\n";
    let out = openssl_ts_verify(&dir, &tsa_token, &body, &tsa);
    assert!(out.status.success(), "openssl ts -verify: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Verification: OK"));
    let mut altered_token = tsa_token.clone();
    let last = altered_token.len() - 1;
    altered_token[last] ^= 0x01;
    assert!(!openssl_ts_verify(&dir, &altered_token, &body, &tsa).status.success(), "OpenSSL refuses an altered token");
    let mut altered = receipt.clone();
    altered["timestamp_token"] = json!(B64.encode(&altered_token));
    let altered_file = dir.join("altered-token.json");
    std::fs::write(&altered_file, altered.to_string()).unwrap();
    let refused = verify_with(&altered_file, &log_vkey, &[&vkey_a, &vkey_b], 2, &["--tsa-ca", tsa.ca.to_str().unwrap()]);
    assert!(!refused.status.success(), "an altered token is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("timestamp check"), "{}", String::from_utf8_lossy(&refused.stderr));
    // A token under another CA is not trusted.
    let other = test_tsa(&dir.join("other")).await;
    let untrusted = verify_with(&file, &log_vkey, &[&vkey_a], 1, &["--tsa-ca", other.ca.to_str().unwrap()]);
    assert!(!untrusted.status.success(), "a token that does not chain to the given CA is refused");

    let (_, vkey_c) = witness_key(&dir, "witness.test/c");
    let short = verify(&file, &log_vkey, &[&vkey_a, &vkey_c], 2);
    assert!(!short.status.success() && String::from_utf8_lossy(&short.stderr).contains("witness check"), "a witness that did not cosign");
    let mut altered = receipt.clone();
    altered["checkpoint"] = json!(tamper_line(checkpoint, "witness.test/b"));
    let altered_file = dir.join("altered.json");
    std::fs::write(&altered_file, altered.to_string()).unwrap();
    let refused = verify(&altered_file, &log_vkey, &[&vkey_a, &vkey_b], 2);
    assert!(!refused.status.success(), "an altered cosignature is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("witness check"), "{}", String::from_utf8_lossy(&refused.stderr));
    // A line of a key the verifier was given that fails is refused even when
    // the others make the quorum; a line of a key it was not given is not
    // its to judge (signed notes carry signatures of unknown keys).
    let refused = verify(&altered_file, &log_vkey, &[&vkey_a, &vkey_b], 1);
    assert!(!refused.status.success(), "a failing line of a given key is refused even when the quorum is met without it");
    let ignored = verify(&altered_file, &log_vkey, &[&vkey_a], 1);
    assert!(ignored.status.success(), "{}", String::from_utf8_lossy(&ignored.stderr));

    // An implementation that is not ours agrees, and refuses the altered note.
    let note_file = dir.join("checkpoint.note");
    std::fs::write(&note_file, checkpoint).unwrap();
    if let Some(out) = go_verify(&note_file, &log_vkey, 2, &[&vkey_a, &vkey_b]) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("ok: cosigned by witness.test/a") && stdout.contains("ok: cosigned by witness.test/b"), "{stdout}");
        std::fs::write(&note_file, tamper_line(checkpoint, "witness.test/a")).unwrap();
        let out = go_verify(&note_file, &log_vkey, 2, &[&vkey_a, &vkey_b]).unwrap();
        assert!(!out.status.success(), "Go refuses an altered cosignature");
    }

    // The same proof as a COSE Receipt (RFC 9942, vds 1), checked by code
    // that is not ours. Its inclusion path has at least one hash: a second
    // record makes a tree of two, witnessed and stamped.
    let (second, _) = anchor_one(&http, &base, &token, "certifiable").await;
    let stamped = |r: &Value| r["witnessed"] == json!(true) && r["timestamp_token"].is_string() && r["tree_size"].as_u64() >= Some(2);
    receipt_when(&http, &base, &token, &second, Duration::from_secs(30), stamped).await;
    let receipt = receipt_when(&http, &base, &token, &dd_id, Duration::from_secs(30), stamped).await;
    let cose = http.get(format!("{base}/v1/dd/{dd_id}/receipt.cose")).bearer_auth(&token).send().await.unwrap();
    assert_eq!((cose.status().as_u16(), cose.headers()["content-type"].to_str().unwrap()), (200, "application/cose"));
    let cose = cose.bytes().await.unwrap().to_vec();
    assert_eq!(cose[0], 0xd2, "a tagged COSE_Sign1");
    let negotiated =
        http.get(format!("{base}/v1/dd/{dd_id}/receipt")).bearer_auth(&token).header("accept", "application/cose").send().await.unwrap();
    assert_eq!(negotiated.bytes().await.unwrap().to_vec(), cose, "Accept: application/cose serves the same receipt");
    let keys = http.get(format!("{base}/.well-known/scitt-keys")).send().await.unwrap();
    assert_eq!(keys.headers()["content-type"], "application/cbor");
    let keys = keys.bytes().await.unwrap().to_vec();
    let key_set = anchor_verify::cose::parse_keys(&keys).unwrap();
    let kid = key_set[0].thumbprint();
    let one = http.get(format!("{base}/.well-known/scitt-keys/{}", B64URL.encode(kid))).send().await.unwrap();
    assert_eq!(one.status().as_u16(), 200);
    let missing = http.get(format!("{base}/.well-known/scitt-keys/{}", B64URL.encode([0u8; 32]))).send().await.unwrap();
    assert_eq!(
        (missing.status().as_u16(), missing.headers()["content-type"].to_str().unwrap()),
        (404, "application/concise-problem-details+cbor")
    );
    let keys_file = dir.join("keys.cbor");
    std::fs::write(&keys_file, &keys).unwrap();
    let cose_file = dir.join("receipt.cose");
    std::fs::write(&cose_file, &cose).unwrap();
    let cose_args = ["--receipt-key", keys_file.to_str().unwrap(), "--tsa-ca", tsa.ca.to_str().unwrap()];
    let ok = verify_with(&cose_file, &log_vkey, &[&vkey_a, &vkey_b], 2, &cose_args);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{stdout}{}", String::from_utf8_lossy(&ok.stderr));
    assert!(
        stdout.contains("ok: the COSE receipt (RFC 9942) is signed by receipt key")
            && stdout.contains("ok: 2 of the 2 witness cosignatures required")
            && stdout.contains("ok: the checkpoint was time-stamped at"),
        "the integrity level survives the envelope: {stdout}"
    );
    // pycose verifies the signature over the root its own RFC 9162 code
    // recomputes, which is the witnessed, stamped checkpoint's; Go's tlog
    // checks the same path against that checkpoint.
    let found = dir.join("found.json");
    if let Some(out) = pycose_verify(&cose_file, &keys_file, &found) {
        assert!(out.status.success(), "pycose: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let found_json: Value = serde_json::from_str(&std::fs::read_to_string(&found).unwrap()).unwrap();
        assert_eq!((found_json["signature"].clone(), found_json["root_is_the_checkpoints"].clone()), (json!(true), json!(true)));
        assert_eq!(found_json["checkpoint"], receipt["checkpoint"], "the witnessed, stamped checkpoint travels in the receipt");
        if let Some(out) = go_inclusion(&found, &log_vkey) {
            assert!(out.status.success(), "Go tlog: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
    }
    // Each tampering refused, by anchor verify and by pycose.
    let path_hash = B64.decode(receipt["inclusion_proof"][0].as_str().unwrap()).unwrap();
    let size = receipt["tree_size"].as_u64().unwrap() as u8;
    let at = |needle: &[u8]| cose.windows(needle.len()).position(|w| w == needle).unwrap_or_else(|| panic!("{needle:?} in the receipt"));
    let tamperings: Vec<(&str, Vec<u8>)> = vec![
        ("signature", {
            let mut t = cose.clone();
            let n = t.len() - 1;
            t[n] ^= 1;
            t
        }),
        ("kid", {
            let mut t = cose.clone();
            let i = at(&kid);
            t[i] ^= 1;
            t
        }),
        ("path", {
            let mut t = cose.clone();
            let i = at(&path_hash);
            t[i] ^= 1;
            t
        }),
        ("leaf", {
            let mut t = cose.clone();
            let i = at(b"anchored_at=") + 12;
            t[i] = if t[i] == b'2' { b'3' } else { b'2' };
            t
        }),
        ("size", {
            let mut t = cose.clone();
            let i = at(&[0x83, size]) + 1;
            t[i] = size + 1;
            t
        }),
        ("header", {
            let mut t = cose.clone();
            let i = at(b"127.0.0.1");
            t[i] = b'8';
            t
        }),
    ];
    for (what, altered) in tamperings {
        let file = dir.join(format!("tampered-{what}.cose"));
        std::fs::write(&file, &altered).unwrap();
        let refused = verify_with(&file, &log_vkey, &[&vkey_a, &vkey_b], 2, &cose_args);
        assert!(!refused.status.success(), "anchor verify refuses a receipt with its {what} altered");
        if let Some(out) = pycose_verify(&file, &keys_file, &dir.join("tampered.json")) {
            assert!(!out.status.success(), "pycose refuses a receipt with its {what} altered");
        }
    }
    let stranger = anchor_app::receipt_key::ReceiptKey::generate().public().clone();
    let other_keys = dir.join("other-keys.cbor");
    std::fs::write(&other_keys, anchor_verify::cose::key_set(&[stranger])).unwrap();
    let refused = verify_with(&cose_file, &log_vkey, &[], 0, &["--receipt-key", other_keys.to_str().unwrap()]);
    assert!(!refused.status.success(), "a key the receipt's kid does not name verifies nothing");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("signature check"), "{}", String::from_utf8_lossy(&refused.stderr));
    // A COSE consistency receipt between the log's first checkpoint and this one.
    let first = http.get(format!("{base}/v1/log/checkpoints/1")).send().await.unwrap().status().as_u16();
    let consistent = http.get(format!("{base}/v1/log/consistency.cose?from=1&to={size}")).send().await.unwrap();
    if first == 200 {
        assert_eq!((consistent.status().as_u16(), consistent.headers()["content-type"].to_str().unwrap()), (200, "application/cose"));
        assert_eq!(consistent.bytes().await.unwrap()[0], 0xd2);
    } else {
        assert_eq!(consistent.status().as_u16(), 404, "no checkpoint of one leaf was signed");
    }
    let same = http.get(format!("{base}/v1/log/consistency.cose?from={size}&to={size}")).send().await.unwrap();
    assert_eq!(same.status().as_u16(), 400, "0 < from < to");

    // Signed statements registered through SCRAPI get a receipt of the same
    // kind from the same log, under the same witnessed, stamped checkpoint:
    // pycose and anchor verify check it against the statement itself.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut statement_receipts = Vec::new();
    for (statement, made_by) in &statements {
        let posted = no_redirects
            .post(format!("{base}/entries"))
            .header("content-type", "application/cose")
            .body(std::fs::read(statement).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status().as_u16(), 303, "the statement made by {made_by} is registered and waits");
        let location = posted.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with(&format!("{base}/entries/")), "{location}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let receipt = loop {
            let reply = no_redirects.get(&location).send().await.unwrap();
            if reply.status().as_u16() == 200 {
                let bytes = reply.bytes().await.unwrap().to_vec();
                let read = anchor_verify::cose::parse_receipt(&bytes).unwrap();
                let witnessed = read.checkpoint.as_deref().is_some_and(|c| c.matches("\u{2014} witness.test/").count() == 2);
                if witnessed && read.timestamp_token.is_some() {
                    break bytes;
                }
            } else {
                assert_eq!(reply.status().as_u16(), 302, "registration is running");
            }
            assert!(Instant::now() < deadline, "no witnessed, stamped receipt for the statement made by {made_by}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let receipt_file = dir.join(format!("statement-receipt-{}.cose", statement_receipts.len()));
        std::fs::write(&receipt_file, &receipt).unwrap();
        let statement_args = [&cose_args[..], &["--statement", statement.to_str().unwrap()]].concat();
        let ok = verify_with(&receipt_file, &log_vkey, &[&vkey_a, &vkey_b], 2, &statement_args);
        let stdout = String::from_utf8_lossy(&ok.stdout);
        assert!(ok.status.success(), "{made_by}: {stdout}{}", String::from_utf8_lossy(&ok.stderr));
        assert!(
            stdout.contains("ok: statement ")
                && stdout.contains("ok: 2 of the 2 witness cosignatures required")
                && stdout.contains("ok: the checkpoint was time-stamped at"),
            "{stdout}"
        );
        let found = dir.join("statement-found.json");
        if let Some(out) = pycose_verify_of(&receipt_file, &keys_file, &found, Some(statement)) {
            assert!(out.status.success(), "pycose: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            if let Some(out) = go_inclusion(&found, &log_vkey) {
                assert!(out.status.success(), "Go tlog: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            }
        }
        statement_receipts.push(receipt_file);
    }
    // A receipt checked against another statement (or a declaration's record) is refused.
    if statements.len() == 2 {
        let other = ["--statement", statements[1].0.to_str().unwrap()];
        let refused = verify_with(&statement_receipts[0], &log_vkey, &[], 0, &[&cose_args[..], &other].concat());
        assert!(!refused.status.success(), "the receipt of one statement does not prove another");
        let refused = pycose_verify_of(&statement_receipts[0], &keys_file, &dir.join("x.json"), Some(&statements[1].0)).unwrap();
        assert!(!refused.status.success(), "pycose refuses it too");
    }
    let refused = verify_with(&statement_receipts[0], &log_vkey, &[], 0, &cose_args);
    assert!(!refused.status.success(), "a statement's receipt without the statement proves nothing");

    // anchor monitor, from outside: the first run keeps what it checked.
    let monitor_state = dir.join("monitor.json");
    let monitor = |state: &Path| {
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["monitor", &base, "--key", &log_vkey, "--witness", &vkey_a, "--witness", &vkey_b, "--state"])
            .arg(state)
            .output()
            .unwrap()
    };
    let first = monitor(&monitor_state);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{stdout}{}", String::from_utf8_lossy(&first.stderr));
    assert!(stdout.contains("ok: the hash tiles hash to the root") && stdout.contains("(2 of 2 required)"), "{stdout}");

    // One witness down: anchoring goes on; receipts of new records wait
    // (quorum 2) on the last witnessed checkpoint's older ones.
    drop(witness_a.take());
    let started = Instant::now();
    let mut anchored = Vec::new();
    // (The Trial's 500 DAC pays 20 declarations of 25 DAC.)
    for _ in 0..12 {
        anchored.push(anchor_one(&http, &base, &token, "basic").await.0);
    }
    assert!(started.elapsed() < Duration::from_secs(10), "anchoring does not wait for a witness: {:?}", started.elapsed());
    // Wait until the host has tried the missing witness and failed.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        if metrics.contains("anchor_log_witness_failures_total{witness=\"witness.test/a\",reason=\"unavailable\"}") {
            break;
        }
        assert!(Instant::now() < deadline, "no failed attempt on the stopped witness is counted: {metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waiting = receipt_when(&http, &base, &token, anchored.last().unwrap(), Duration::from_secs(10), |_| true).await;
    assert_eq!(waiting["witnessed"], json!(false), "not witnessed while the quorum is missing: {waiting}");
    assert_eq!(waiting["integrity_level"]["met"], json!(true), "basic was asked for, and basic is met");

    // Restarted with no memory of the log, the witness is brought back by
    // the 409 exchange, and the new records are witnessed within 30 s.
    std::fs::remove_dir_all(dir.join("wa")).unwrap();
    let _witness_a = witness_process(&dir.join("wa"), "witness.test/a", &key_a, &log_vkey, port_a);
    let back =
        receipt_when(&http, &base, &token, anchored.last().unwrap(), Duration::from_secs(30), |r| r["witnessed"] == json!(true)).await;
    assert_eq!(back["cosigned_by"], json!(["witness.test/a", "witness.test/b"]));
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("anchor_log_witness_cosigned_size{witness=\"witness.test/a\"}"), "{metrics}");
    assert!(metrics.contains("anchor_log_witnessed_lag_seconds_count"), "{metrics}");
    assert!(metrics.contains("anchor_log_timestamped_size "), "{metrics}");
    // The certifiable record, witnessed and stamped, is not counted as below its level.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        if metrics.contains("anchor_log_records_below_declared_level{declared=\"certifiable\"} 0\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the certifiable record still counts as below its level: {metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The owner portal's report says how far each record's proof reaches.
    let email = format!("witnessed-{}@example.com", uuid::Uuid::new_v4().simple());
    let password = "a long owner passphrase 42";
    let registered = http
        .post(format!("{base}/dap/register"))
        .json(&json!({ "email": email, "password": password, "terms_agreed": true, "privacy_agreed": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status().as_u16(), 201, "{}", registered.text().await.unwrap());
    let login = http.post(format!("{base}/dap/login")).json(&json!({ "email": email, "password": password })).send().await.unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let linked = http
        .post(format!("{base}/dap/agent/link"))
        .header("cookie", &cookie)
        .json(&json!({ "agent_id": agent_id, "auth_token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(linked.status().as_u16(), 200);
    let report: Value =
        http.get(format!("{base}/dap/agent/{agent_id}/report")).header("cookie", &cookie).send().await.unwrap().json().await.unwrap();
    let first = report["recent_dds"].as_array().unwrap().iter().find(|d| d["dd_id"] == json!(dd_id)).expect("the first record");
    assert_eq!(first["proof"]["witnessed"], json!(true), "{first}");
    assert_eq!(first["proof"]["cosigned_by"], json!(["witness.test/a", "witness.test/b"]));
    assert_eq!(first["proof"]["integrity_reached"], json!("certifiable"));
    assert_eq!(first["proof"]["timestamped_by"], json!(tsa.url));
    assert!(first["proof"]["timestamped_at"].is_string());

    // The monitor's next run sees the log grow consistently...
    let again = monitor(&monitor_state);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{stdout}{}", String::from_utf8_lossy(&again.stderr));
    assert!(stdout.contains("extends size"), "{stdout}");
    // ...and raises the alarm when what it saw before is not a prefix of what
    // it sees now (a history signed with the log's own key that the log no
    // longer serves), or when the log shrank.
    let signer = StandardSigner::new(skey.trim()).unwrap();
    let forged = |size: u64| {
        let body = Checkpoint::new("witnessed.test/log", size, Hash([7; 32]), "").unwrap();
        let mut note = Note::new(&body.to_bytes(), &[]).unwrap();
        note.add_sigs(&[&signer]).unwrap();
        let state = json!({ "origin": "witnessed.test/log", "size": size, "root": B64.encode([7u8; 32]),
                            "checkpoint": String::from_utf8(note.to_bytes()).unwrap() });
        let file = dir.join(format!("forged-{size}.json"));
        std::fs::write(&file, state.to_string()).unwrap();
        file
    };
    let fork = monitor(&forged(2));
    assert_eq!(fork.status.code(), Some(1), "{}", String::from_utf8_lossy(&fork.stderr));
    assert!(String::from_utf8_lossy(&fork.stderr).contains("FORK"), "{}", String::from_utf8_lossy(&fork.stderr));
    let rollback = monitor(&forged(1_000_000));
    assert_eq!(rollback.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&rollback.stderr).contains("ROLLBACK"), "{}", String::from_utf8_lossy(&rollback.stderr));
    let unreachable = Command::new(env!("CARGO_BIN_EXE_anchor"))
        .args(["monitor", &format!("http://127.0.0.1:{}", free_port()), "--key", &log_vkey, "--state"])
        .arg(dir.join("never.json"))
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(2), "could not check is not an alarm");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_witnesses_cosign_receipts_on_sqlite() {
    two_witnesses_cosign_receipts(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_witnesses_cosign_receipts_on_postgres() {
    let Some(url) = common::postgres_or_skip("witness::two_witnesses_cosign_receipts_on_postgres") else {
        return;
    };
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let database = format!("anchor_witness_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {database}"))).execute(&admin).await.unwrap();
    let (prefix, _) = url.rsplit_once('/').unwrap();
    two_witnesses_cosign_receipts(Some(&format!("{prefix}/{database}"))).await;
    // The server has stopped: its database goes, so runs leave none behind.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database {database} with (force)"))).execute(&admin).await.unwrap();
}

/// A witness that answers 200 with a cosignature line of the right name and
/// key id whose signature does not verify: the host keeps nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_answering_a_bad_cosignature_is_not_believed() {
    let dir = scratch("liar");
    let http = reqwest::Client::new();
    let (skey, log_vkey) = log_key(&dir, "liar.test/log");
    let (_, vkey_a) = witness_key(&dir, "witness.test/a");
    let (key_b, vkey_b) = witness_key(&dir, "witness.test/b");
    // The liar: the line names witness a and carries its key id, then a
    // timestamp and 64 bytes that are no signature.
    let key_id = u32::from_str_radix(vkey_a.split('+').nth(1).unwrap(), 16).unwrap();
    let mut forged = key_id.to_be_bytes().to_vec();
    forged.extend_from_slice(&1_700_000_000u64.to_be_bytes());
    forged.extend_from_slice(&[7u8; 64]);
    let line = format!("\u{2014} witness.test/a {}\n", B64.encode(forged));
    let liar = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let liar_url = format!("http://{}", liar.local_addr().unwrap());
    let app = axum::Router::new().route("/add-checkpoint", axum::routing::post(move || std::future::ready(line.clone())));
    let _liar = tokio::spawn(async move { axum::serve(liar, app).await.unwrap() });
    let port_b = free_port();
    let _witness_b = witness_process(&dir.join("wb"), "witness.test/b", &key_b, &log_vkey, port_b);
    wait_up(&http, &format!("http://127.0.0.1:{port_b}")).await;

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.join("data"))
            .args(["--log-signing-key", skey.trim()])
            .args(["--witness", &format!("{vkey_a}={liar_url}"), "--witness", &format!("{vkey_b}=http://127.0.0.1:{port_b}")])
            .args(["--witness-quorum", "1", "--metrics-on-api", "--rate-limit", "100000"])
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_healthy(&http, &base).await;
    let token = register(&http, &base).await;
    let (dd_id, _) = anchor_one(&http, &base, &token, "enhanced").await;
    let receipt = receipt_when(&http, &base, &token, &dd_id, Duration::from_secs(30), |r| r["witnessed"] == json!(true)).await;
    assert_eq!(receipt["cosigned_by"], json!(["witness.test/b"]), "only the honest witness: {receipt}");
    assert!(!receipt["checkpoint"].as_str().unwrap().contains("witness.test/a"), "the forged line is not served");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        if metrics.contains("anchor_log_witness_failures_total{witness=\"witness.test/a\",reason=\"bad_cosignature\"}") {
            break;
        }
        assert!(Instant::now() < deadline, "the bad cosignature is not counted: {metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let public = http.get(format!("{base}/v1/log/checkpoint")).send().await.unwrap().text().await.unwrap();
    assert!(!public.contains("witness.test/a"), "{public}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn without_witnesses_a_declared_enhanced_level_is_said_to_be_out_of_reach() {
    let (_server, base, data) = common::serve_sqlite("witness-none", &["--metrics-on-api"]).await;
    let http = reqwest::Client::new();
    let token = register(&http, &base).await;
    let (dd_id, created) = anchor_one(&http, &base, &token, "certifiable").await;
    assert_eq!(created["integrity_level"]["declared"], "certifiable", "{created}");
    assert_eq!(created["integrity_level"]["reachable"], "basic", "{created}");
    let (_, basic) = anchor_one(&http, &base, &token, "basic").await;
    assert!(basic.get("integrity_level").is_none(), "basic is always reachable: {basic}");
    let receipt = receipt_when(&http, &base, &token, &dd_id, Duration::from_secs(30), |_| true).await;
    assert_eq!(receipt["witnessed"], json!(false));
    assert_eq!(receipt["integrity_level"], json!({ "declared": "certifiable", "reached": "basic", "met": false }));
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("anchor_declarations_beyond_reach_total{declared=\"certifiable\"} 1\n"), "the operator sees it: {metrics}");
    let _ = std::fs::remove_dir_all(&data);
}

// ---- the witness protocol, answer by answer ----

/// A test log: its key, and leaves to build trees (and forks) from.
struct TestLog {
    signer: StandardSigner,
    vkey: String,
    origin: String,
}

impl TestLog {
    fn new(origin: &str, seed: u8) -> TestLog {
        let (skey, vkey) = anchor_verify::signing_key_from_seed(origin, &[seed; 32]);
        TestLog { signer: StandardSigner::new(&skey).unwrap(), vkey, origin: origin.to_owned() }
    }

    fn leaves(tag: &str, n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect()
    }

    fn signed(&self, leaves: &[Vec<u8>]) -> String {
        let root = anchor_verify::root_of(leaves).unwrap();
        let body = Checkpoint::new(&self.origin, leaves.len() as u64, Hash(root), "").unwrap();
        let mut note = Note::new(&body.to_bytes(), &[]).unwrap();
        note.add_sigs(&[&self.signer]).unwrap();
        String::from_utf8(note.to_bytes()).unwrap()
    }
}

/// A consistency proof between two prefixes of `leaves`.
fn proof(leaves: &[Vec<u8>], from: usize, to: usize) -> Vec<[u8; 32]> {
    struct Memory(std::collections::HashMap<u64, Hash>);
    impl tlog_tiles::HashReader for Memory {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
            indexes.iter().map(|i| self.0.get(i).copied().ok_or(tlog_tiles::Error::IndexesNotInTree)).collect()
        }
    }
    let mut memory = Memory(std::collections::HashMap::new());
    for (n, leaf) in leaves[..to].iter().enumerate() {
        let stored = tlog_tiles::stored_hashes(n as u64, leaf, &memory).unwrap();
        let first = tlog_tiles::stored_hash_index(0, n as u64);
        for (k, hash) in stored.into_iter().enumerate() {
            memory.0.insert(first + k as u64, hash);
        }
    }
    tlog_tiles::prove_tree(to as u64, from as u64, &memory).unwrap().into_iter().map(|h| h.0).collect()
}

async fn in_process_witness(log: &TestLog) -> (String, WitnessKey, PathBuf) {
    in_process_witness_with(log, HttpLimits::default()).await
}

/// A witness served in this process as `anchor witness serve` serves it, with these limits.
async fn in_process_witness_with(log: &TestLog, limits: HttpLimits) -> (String, WitnessKey, PathBuf) {
    let dir = scratch("protocol");
    let signer = WitnessSigner::from_seed("witness.test/in-process", &[9; 32]).unwrap();
    let key = signer.public().clone();
    let state = WitnessState::open(&dir.join("witness.db")).await.unwrap();
    let witness = Arc::new(anchor_server::witness_server::Witness::new(signer, std::slice::from_ref(&log.vkey), state, 10_000).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(anchor_server::witness_server::serve_on(listener, witness, limits, std::future::pending()));
    (url, key, dir)
}

/// Sends `request` on a new connection and reads until the witness closes
/// it or `wait` passes; says whether it closed, and what it answered.
async fn raw(addr: &str, request: &[u8], wait: Duration) -> (bool, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(wait, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await
    .is_ok();
    (closed, String::from_utf8_lossy(&answer).into_owned())
}

/// The witness is served by the service's own listener: a client past its
/// connections is refused, a connection that sends no head is closed, a body
/// declared over 64 KiB is refused before it is read; and the protocol still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_witness_holds_its_clients_to_the_listeners_limits() {
    let log = TestLog::new("limits.test/log", 6);
    let limits = HttpLimits { max_connections_per_client: 3, header_read_timeout: Duration::from_secs(4), ..HttpLimits::default() };
    let (url, _key, dir) = in_process_witness_with(&log, limits).await;
    let addr = url.trim_start_matches("http://").to_owned();

    // Three idle connections are this client's all; a fourth is refused.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let (_, answer) = raw(&addr, b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n", Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 429") && answer.contains("TOO_MANY_CONNECTIONS"), "{answer}");
    drop(held);
    // Served again once they are closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, answer) = raw(&addr, b"GET /health HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "not served again: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A connection that never sends its head is closed at the head timeout
    // (4 s; a refused one would close after 2 s), not left open.
    let started = Instant::now();
    let (closed, answer) = raw(&addr, b"", Duration::from_secs(15)).await;
    let after = started.elapsed();
    assert!(closed && after >= Duration::from_secs(3) && after < Duration::from_secs(12), "closed {closed} after {after:?}: {answer}");
    assert!(!answer.contains("429"), "closed for its silence, not refused: {answer}");

    // A body declared over the witness's 64 KiB: 413 before it is sent.
    let head = format!("POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: {}\r\n\r\n", 1 << 20);
    let (_, answer) = raw(&addr, head.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // And the protocol answers as before.
    let http = reqwest::Client::new();
    let (status, _, body) = submit(&http, &url, add_checkpoint_request(0, &[], &log.signed(&TestLog::leaves("l", 3)))).await;
    assert_eq!(status, 200, "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn submit(http: &reqwest::Client, url: &str, body: String) -> (u16, String, String) {
    let reply = http.post(format!("{url}/add-checkpoint")).body(body).send().await.unwrap();
    let status = reply.status().as_u16();
    let content_type = reply.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, content_type, reply.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_witness_answers_as_the_protocol_says() {
    let log = TestLog::new("protocol.test/log", 1);
    let (url, key, dir) = in_process_witness(&log).await;
    let http = reqwest::Client::new();
    let leaves = TestLog::leaves("a", 20);

    // First contact: old 0, no proof.
    let (status, _, body) = submit(&http, &url, add_checkpoint_request(0, &[], &log.signed(&leaves[..5]))).await;
    assert_eq!(status, 200, "{body}");
    let note = log.signed(&leaves[..5]);
    let text = note.split_once("\n\n").unwrap().0.to_owned() + "\n";
    let (line, _) = anchor_verify::cosignature::find_cosignature(text.as_bytes(), &body, &key).expect("a valid cosignature");
    assert!(body.ends_with('\n') && line.starts_with("\u{2014} witness.test/in-process "));

    // A stale old size: 409 with the size it holds, as text/x.tlog.size.
    let (status, content_type, body) = submit(&http, &url, add_checkpoint_request(0, &[], &log.signed(&leaves[..8]))).await;
    assert_eq!((status, content_type.as_str(), body.as_str()), (409, "text/x.tlog.size", "5\n"));
    // From 5 with a proof: cosigned.
    let (status, _, body) = submit(&http, &url, add_checkpoint_request(5, &proof(&leaves, 5, 8), &log.signed(&leaves[..8]))).await;
    assert_eq!(status, 200, "{body}");
    // The same size again, same root: cosigned again; another root: 422.
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(8, &[], &log.signed(&leaves[..8]))).await;
    assert_eq!(status, 200);
    let fork = [&leaves[..7], &TestLog::leaves("fork", 1)[..]].concat();
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(8, &[], &log.signed(&fork))).await;
    assert_eq!(status, 422, "two roots for one size");
    // A fork that grows: the proof from 8 cannot verify.
    let fork = [&leaves[..7], &TestLog::leaves("fork", 5)[..]].concat();
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(8, &proof(&fork, 8, 12), &log.signed(&fork))).await;
    assert_eq!(status, 422, "a forked history");
    // A proof sent with old 0 while the witness holds 8: 409 comes first.
    let (status, _, body) = submit(&http, &url, add_checkpoint_request(0, &proof(&leaves, 5, 8), &log.signed(&leaves[..9]))).await;
    assert_eq!((status, body.as_str()), (409, "8\n"));
    // Old size above the new size: 400.
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(9, &[], &log.signed(&leaves[..8]))).await;
    assert_eq!(status, 400);
    // Malformed bodies: 400.
    for bad in ["", "old 8\n", "old 08\n\nx\n", "old 8\nnot base64\n\n", &format!("old 8\n\n{}", "junk\n")] {
        let (status, _, _) = submit(&http, &url, bad.to_owned()).await;
        assert_eq!(status, 400, "{bad:?}");
    }
    // A log it does not follow: 404. A checkpoint of its log signed by another key: 403.
    let stranger = TestLog::new("stranger.test/log", 2);
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(0, &[], &stranger.signed(&leaves[..3]))).await;
    assert_eq!(status, 404);
    let impostor = TestLog::new("protocol.test/log", 3);
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(8, &proof(&leaves, 8, 10), &impostor.signed(&leaves[..10]))).await;
    assert_eq!(status, 403, "signed by a key of the same name the witness does not trust");
    let genuine = log.signed(&leaves[..10]);
    let mut broken = genuine.clone().into_bytes();
    let at = broken.len() - 5;
    broken[at] = if broken[at] == b'A' { b'B' } else { b'A' };
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(8, &proof(&leaves, 8, 10), &String::from_utf8(broken).unwrap())).await;
    assert_eq!(status, 403, "the log's key, a signature that does not verify");

    // The race the protocol warns of: two submissions from 8 at once, to 12
    // and to 15. One is cosigned; the other sees the first's size. The
    // witness never goes back.
    let (a, b) = tokio::join!(
        submit(&http, &url, add_checkpoint_request(8, &proof(&leaves, 8, 12), &log.signed(&leaves[..12]))),
        submit(&http, &url, add_checkpoint_request(8, &proof(&leaves, 8, 15), &log.signed(&leaves[..15]))),
    );
    let statuses = [a.0, b.0];
    assert!(statuses.contains(&200) && statuses.contains(&409), "{a:?} {b:?}");
    let winner = if a.0 == 200 { 12 } else { 15 };
    let loser = if a.0 == 409 { &a } else { &b };
    assert_eq!(loser.2, format!("{winner}\n"));
    // For monitors: the latest cosigned checkpoint, with both signatures.
    let origin_hash = hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(sha2::Sha256::default(), b"protocol.test/log")));
    let latest = http.get(format!("{url}/{origin_hash}/checkpoint")).send().await.unwrap().text().await.unwrap();
    assert!(latest.starts_with(&format!("protocol.test/log\n{winner}\n")), "{latest}");
    assert_eq!(anchor_verify::cosignature::verify_quorum(&latest, &[key], 1).unwrap().len(), 1);
    assert_eq!(http.get(format!("{url}/{}/checkpoint", "0".repeat(64))).send().await.unwrap().status().as_u16(), 404);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_zero_checkpoint_must_have_the_empty_root() {
    let log = TestLog::new("zero.test/log", 5);
    let (url, _key, dir) = in_process_witness(&log).await;
    let http = reqwest::Client::new();
    let empty = log.signed(&[]);
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(0, &[], &empty)).await;
    assert_eq!(status, 200, "the empty tree");
    // A size-0 checkpoint with another root.
    let body = Checkpoint::new("zero.test/log", 0, Hash([7; 32]), "").unwrap();
    let mut note = Note::new(&body.to_bytes(), &[]).unwrap();
    note.add_sigs(&[&log.signer]).unwrap();
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(0, &[], &String::from_utf8(note.to_bytes()).unwrap())).await;
    assert_eq!(status, 422);
    // Old 0 with a proof: 422.
    let leaves = TestLog::leaves("z", 4);
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(0, &[[1; 32]], &log.signed(&leaves))).await;
    assert_eq!(status, 422);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A checkpoint of 2^63 leaves or more, signed by the log, is a malformed
/// request (400), not a failure of the witness's state (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_past_the_largest_size_is_refused_as_malformed() {
    let log = TestLog::new("huge.test/log", 6);
    let (url, _key, dir) = in_process_witness(&log).await;
    let http = reqwest::Client::new();
    for size in [1u64 << 63, u64::MAX] {
        let body = Checkpoint::new("huge.test/log", size, Hash([9; 32]), "").unwrap();
        let mut note = Note::new(&body.to_bytes(), &[]).unwrap();
        note.add_sigs(&[&log.signer]).unwrap();
        let (status, _, text) = submit(&http, &url, add_checkpoint_request(0, &[], &String::from_utf8(note.to_bytes()).unwrap())).await;
        assert_eq!(status, 400, "size {size}: {text}");
        assert!(text.contains("2^63"), "{text}");
    }
    let leaves = TestLog::leaves("h", 3);
    let (status, _, _) = submit(&http, &url, add_checkpoint_request(0, &[], &log.signed(&leaves))).await;
    assert_eq!(status, 200, "the witness still serves");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- MCP Tasks: confirm, and wait until witnessed ----

/// One JSON-RPC request of the 2026-07-28 revision (no session: the
/// version, the client and its capabilities, Tasks included, in `_meta`).
async fn mcp_2026(http: &reqwest::Client, base: &str, id: u64, method: &str, name: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "raw-json-rpc", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
    });
    let reply = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 200, "{method} {name}");
    reply.json().await.unwrap()
}

/// Decision 0071: over MCP 2026-07-28 with the Tasks extension, a confirm
/// whose scope declared `enhanced` comes back as a task; the client polls
/// `tasks/get` on either of two hosts (one PostgreSQL, nothing of the task
/// stored) until the receipt is witnessed, and gets it, cosigned, verified
/// offline. An id the service did not give is unknown (-32602), and a
/// client that does not hold tasks is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_held_as_a_task_returns_the_witnessed_receipt() {
    let Some(pg) = common::PgDatabase::create("witness::a_confirm_held_as_a_task_returns_the_witnessed_receipt", "anchor_tasks").await
    else {
        return;
    };
    let dir = scratch("tasks");
    let http = reqwest::Client::new();
    let (skey, log_vkey) = log_key(&dir, "tasks.test/log");
    let (key, vkey) = witness_key(&dir, "witness.test/tasks");
    let witness_port = free_port();
    let _witness = witness_process(&dir.join("w"), "witness.test/tasks", &key, &log_vkey, witness_port);
    wait_up(&http, &format!("http://127.0.0.1:{witness_port}")).await;
    let host = |name: &str| {
        let port = free_port();
        let server = Command::new(env!("CARGO_BIN_EXE_anchor"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "100000", "--data-dir"])
            .arg(dir.join(name))
            .args(["--log-signing-key", skey.trim()])
            .args(["--witness", &format!("{vkey}=http://127.0.0.1:{witness_port}")])
            .env("DATABASE_URL", &pg.url)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (Server(server), format!("http://127.0.0.1:{port}"))
    };
    let ((_a, a), (_b, b)) = (host("a"), host("b"));
    common::wait_healthy(&http, &a).await;
    common::wait_healthy(&http, &b).await;

    let token = register(&http, &a).await;
    let (dd_id, _) = declare(&http, &a, &token, "enhanced").await;
    let confirm = json!({ "name": "confirm_decision", "arguments": { "auth_token": token, "dd_id": dd_id } });
    let answered = mcp_2026(&http, &a, 1, "tools/call", "confirm_decision", confirm).await;
    let result = &answered["result"];
    assert_eq!(result["resultType"], "task", "{answered}");
    assert_eq!(result["status"], "working", "{answered}");
    assert_eq!(result["_meta"]["io.github.anchor/confirmation"]["dd_id"], json!(dd_id), "the confirmation's answer travels along");
    let task_id = result["taskId"].as_str().unwrap().to_owned();

    // Poll, alternating hosts, until the receipt is witnessed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = 0u64;
    let done = loop {
        let base = if polls.is_multiple_of(2) { &b } else { &a };
        polls += 1;
        let got = mcp_2026(&http, base, 100 + polls, "tasks/get", &task_id, json!({ "taskId": task_id })).await;
        let task = &got["result"];
        assert_eq!(task["taskId"], json!(task_id), "{got}");
        match task["status"].as_str() {
            Some("working") => assert!(task["pollIntervalMs"].is_u64(), "{got}"),
            Some("completed") => break task["result"].clone(),
            other => panic!("unexpected task status {other:?}: {got}"),
        }
        assert!(Instant::now() < deadline, "the task never completed: {got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(polls >= 1);
    assert_eq!(done["isError"], json!(false), "{done}");
    let receipt = &done["structuredContent"]["receipt"];
    assert_eq!(receipt["witnessed"], json!(true), "{done}");
    assert_eq!(receipt["cosigned_by"], json!(["witness.test/tasks"]));
    assert_eq!(receipt["integrity_level"], json!({ "declared": "enhanced", "reached": "enhanced", "met": true }));
    let file = dir.join("task-receipt.json");
    std::fs::write(&file, receipt.to_string()).unwrap();
    let checked = verify(&file, &log_vkey, &[&vkey], 1);
    assert!(checked.status.success(), "{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));

    // An id this service did not give: the tag of another declaration, or made up.
    let (other, _) = declare(&http, &a, &token, "basic").await;
    let forged = task_id.replace(&dd_id, &other);
    for unknown in [forged.as_str(), "witnessed-nothing", "anything"] {
        let got = mcp_2026(&http, &a, 900, "tasks/get", unknown, json!({ "taskId": unknown })).await;
        assert_eq!(got["error"]["code"], json!(-32602), "{unknown}: {got}");
    }
    // Cancelling a wait stops nothing: the confirmation stands.
    let cancelled = mcp_2026(&http, &b, 901, "tasks/cancel", &task_id, json!({ "taskId": task_id })).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");

    // A client without Tasks gets the confirmation's answer at once.
    let plain = http
        .post(format!("{a}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": { "name": "confirm_decision", "arguments": { "auth_token": token, "dd_id": other } } }))
        .send()
        .await
        .unwrap();
    let plain: Value = plain.json().await.unwrap();
    assert_eq!(plain["result"]["structuredContent"]["dd_id"], json!(other), "{plain}");
    assert!(plain["result"].get("taskId").is_none(), "{plain}");
    drop((_a, _b));
    pg.drop_now().await;
    let _ = std::fs::remove_dir_all(&dir);
}
