//! Tools at start-up: how fast a server with many uploaded tools is ready,
//! with its compiled-tool cache warm and with it gone.
//!
//!     toolbench ANCHOR_BINARY TOOL.wasm [TOOLS]      (default: 100 tools)
//!
//! Starts the binary on a fresh data directory (SQLite), registers TOOLS
//! tools and uploads a distinct component for each (TOOL.wasm with a custom
//! section naming its index, so every upload has its own hash and is
//! compiled on its own), and stops it. Then starts it twice more on the same
//! data: once as it was (every compiled component in `<data-dir>/tool-cache`),
//! once with that directory deleted. Each time it reports how long the
//! process took to answer `/health`, how long until its start-up task had
//! loaded every cached component, and what the first run of each tool cost
//! over HTTP (the seller runs its own tools: free, one agent-level
//! observation each).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server {
    child: Child,
    base: String,
    started: Instant,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start(binary: &Path, data: &Path) -> Server {
    let port = free_port();
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--rate-limit", "1000000000", "--data-dir"])
        .arg(data)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info,sqlx=warn")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().unwrap();
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    Server { child, base: format!("http://127.0.0.1:{port}"), started, lines }
}

async fn healthy(http: &reqwest::Client, server: &Server) -> Duration {
    loop {
        if let Ok(reply) = http.get(format!("{}/health", server.base)).send().await
            && reply.status().is_success()
        {
            return server.started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// How long after the start the server said it had loaded `n` cached tools.
fn preloaded(server: &Server, n: usize) -> Option<Duration> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match server.lines.recv_timeout(Duration::from_millis(100)) {
            Ok((at, line)) if line.contains("loaded compiled tools from the cache") => {
                assert!(line.contains(&format!("tools={n}")), "{line}");
                return Some(at - server.started);
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
    None
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Each seller runs its own tools (`(seller's token, tool id)`).
async fn run_all(http: &reqwest::Client, server: &Server, tools: &[(String, String)]) -> Vec<Duration> {
    let mut times = Vec::with_capacity(tools.len());
    for (token, tool) in tools {
        let begun = Instant::now();
        let reply = http.post(format!("{}/v1/tsl/tool/{tool}/run", server.base)).bearer_auth(token).json(&json!({})).send().await.unwrap();
        let status = reply.status();
        let text = reply.text().await.unwrap();
        assert!(status.is_success(), "run of {tool}: {status} {text}");
        times.push(begun.elapsed());
    }
    times.sort();
    times
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (binary, tool) = match (args.get(1), args.get(2)) {
        (Some(b), Some(t)) => (PathBuf::from(b), PathBuf::from(t)),
        _ => anyhow::bail!("usage: toolbench ANCHOR_BINARY TOOL.wasm [TOOLS]"),
    };
    let count: usize = args.get(3).map_or(100, |n| n.parse().expect("TOOLS is a number"));
    let wasm = std::fs::read(&tool)?;
    let data = std::env::temp_dir().join(format!("anchor-toolbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let http = reqwest::Client::new();

    // Set-up: `count` tools, a distinct component each, 20 tools a seller
    // (a seller makes at most 30 uploads a day).
    let server = start(&binary, &data);
    healthy(&http, &server).await;
    let mut tools = Vec::with_capacity(count);
    let mut token = String::new();
    let uploading = Instant::now();
    for i in 0..count {
        if i % 20 == 0 {
            let agent: Value = http.post(format!("{}/v1/agent/register", server.base)).json(&json!({})).send().await?.json().await?;
            token = agent["auth_token"].as_str().expect("auth_token").to_string();
        }
        let body =
            json!({ "tool_name": format!("bench-{i}"), "price_dac": 1, "ara_connections": [{ "observation_type": "agent_profile" }] });
        let tool: Value =
            http.post(format!("{}/v1/tsl/tool/register", server.base)).bearer_auth(&token).json(&body).send().await?.json().await?;
        let tool_id = tool["tool_id"].as_str().expect("tool_id").to_string();
        let uploaded = http
            .put(format!("{}/v1/tsl/tool/{tool_id}/component", server.base))
            .bearer_auth(&token)
            .header("content-type", "application/wasm")
            .body(anchor_tests::component_variant(&wasm, i))
            .send()
            .await?;
        assert_eq!(uploaded.status().as_u16(), 201, "{}", uploaded.text().await?);
        tools.push((token.clone(), tool_id));
    }
    let upload_time = uploading.elapsed();
    drop(server);
    let cache = data.join("tool-cache");
    let cached = std::fs::read_dir(&cache)?.count();
    println!(
        "{count} tools registered and uploaded ({} bytes each) in {upload_time:.2?}: {:.1?} per upload (compile included); {cached} compiled files in the cache",
        wasm.len(),
        upload_time / count as u32
    );

    println!("| start | ready (/health) | every cached tool loaded | first run of each tool p50 | p99 | all {count} first runs |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, warm) in [("compiled cache warm", true), ("compiled cache deleted", false)] {
        if !warm {
            std::fs::remove_dir_all(&cache)?;
        }
        let server = start(&binary, &data);
        let ready = healthy(&http, &server).await;
        let loaded = if warm { preloaded(&server, count).map_or("never".to_string(), |d| format!("{d:.0?}")) } else { "-".to_string() };
        let begun = Instant::now();
        let times = run_all(&http, &server, &tools).await;
        let all = begun.elapsed();
        println!("| {label} | {ready:.0?} | {loaded} | {:.2?} | {:.2?} | {all:.2?} |", percentile(&times, 0.5), percentile(&times, 0.99));
    }
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
