//! Connection-level defences: one client (an IPv4 address, or an IPv6 /64)
//! holds a bounded number of connections; slow unauthenticated bodies are
//! answered 408 within the body timeout and never keep others out; every
//! answer the HTTP stack itself gives (400, 408, 413, 414, 431) is JSON.
//!
//! Clients come from several loopback addresses (127.0.0.0/8 is all
//! loopback), bound before connecting, so the per-client limit sees them as
//! the different clients they would be.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anchor_tests::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap_or_else(|e| panic!("connecting from {from:?}: {e}"))
}

fn addr_of(t: &TestServer) -> SocketAddr {
    t.base.trim_start_matches("http://").parse().unwrap()
}

/// A client whose connections come from `from`.
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder().local_address(IpAddr::from(from)).timeout(Duration::from_secs(10)).build().unwrap()
}

/// The status line and the JSON body of a raw answer.
fn split(answer: &str) -> (&str, Value) {
    let status = answer.lines().next().unwrap_or("");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Sends `request` from `from` and reads one answer: its head and as much
/// body as its Content-Length says (or until the server closes, or `wait`).
async fn raw_from(from: [u8; 4], to: SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut stream = connect_from(from, to).await;
    let _ = stream.write_all(request).await;
    read_answer(&mut stream, wait).await
}

/// 1,100 unauthenticated `POST /mcp` heads whose bodies drip a byte at a
/// time, from five addresses: each is answered 408 with a JSON body within
/// the body timeout, and meanwhile `/health` from another client answers
/// every time, long before any slow body times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_mcp_bodies_do_not_hold_the_listener() {
    // Long enough that a held listener (answering /health only once the
    // slow bodies time out) is far from a free one on a loaded machine (a CI
    // run saw a free one take 3.5 s); the bodies drip for 40 s.
    let limits = anchor_server::listener::HttpLimits { body_read_timeout: Duration::from_secs(12), ..Default::default() };
    anchor_server::listener::raise_open_files(&limits);
    let t = TestServer::with(Backend::Sqlite, Options { http: limits, ..Options::default() }).await;
    let addr = addr_of(&t);
    let started = Arc::new(AtomicUsize::new(0));
    const SLOW: usize = 1_100;
    let body_timeout = limits.body_read_timeout;
    let slow: Vec<_> = (0..SLOW)
        .map(|i| {
            let started = started.clone();
            tokio::spawn(async move {
                let from = [127, 0, 0, 2 + (i % 5) as u8];
                let stream = connect_from(from, addr).await;
                let (mut reader, mut writer) = stream.into_split();
                let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                            Accept: application/json, text/event-stream\r\nContent-Length: 400\r\n\r\n{";
                writer.write_all(head.as_bytes()).await.unwrap();
                let sent = Instant::now();
                started.fetch_add(1, Ordering::Relaxed);
                let drip = tokio::spawn(async move {
                    for _ in 0..100 {
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        if writer.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                });
                let mut answer = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(30), reader.read_to_end(&mut answer)).await;
                drip.abort();
                (sent.elapsed(), String::from_utf8_lossy(&answer).into_owned())
            })
        })
        .collect();
    while started.load(Ordering::Relaxed) < SLOW {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another client, while every slow body is under way.
    let other = client_from([127, 0, 0, 9]);
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let asked = Instant::now();
        let health = other.get(format!("{}/health", t.base)).send().await.expect("health answers");
        assert_eq!(health.status().as_u16(), 200);
        worst = worst.max(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Held, the listener would answer only once the slow bodies time out;
    // free, it answers at once (well under a second on an idle machine; the
    // bound leaves room for a loaded one and still tells the two apart).
    assert!(worst < body_timeout / 2, "/health took {worst:?} beside {SLOW} slow bodies");
    for task in slow {
        let (held, answer) = task.await.unwrap();
        let (status, body) = split(&answer);
        assert!(status.starts_with("HTTP/1.1 408"), "{answer:?}");
        assert_eq!(body["error"]["data"]["error_code"], "REQUEST_TIMEOUT", "{answer:?}");
        assert_eq!(body["jsonrpc"], "2.0", "{answer:?}");
        assert!(held < body_timeout + Duration::from_secs(6), "a slow body was answered after {held:?}");
    }
}

/// Past its limit, a client's new connection is answered 429 JSON
/// `TOO_MANY_CONNECTIONS` (with Retry-After) and closed; other clients are
/// served, and the client is served again once its connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_a_bounded_number_of_connections() {
    let limits = anchor_server::listener::HttpLimits { max_connections_per_client: 20, ..Default::default() };
    let t = TestServer::with(Backend::Sqlite, Options { http: limits, ..Options::default() }).await;
    let addr = addr_of(&t);
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(connect_from([127, 0, 0, 20], addr).await);
    }
    // Let the listener take them all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = raw_from([127, 0, 0, 20], addr, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(5)).await;
    let (status, body) = split(&answer);
    assert!(status.starts_with("HTTP/1.1 429"), "{answer:?}");
    assert_eq!(body["error_code"], "TOO_MANY_CONNECTIONS", "{answer:?}");
    assert!(answer.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"), "{answer:?}");
    let health = client_from([127, 0, 0, 21]).get(format!("{}/health", t.base)).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200, "another client is served");
    drop(idle);
    let again = Instant::now();
    loop {
        let answer =
            raw_from([127, 0, 0, 20], addr, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(again.elapsed() < Duration::from_secs(5), "the client was not served again once its connections closed: {answer:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A trusted balancer carries many clients' connections: it is not held to
/// the per-client limit (the shipped HAProxy opens up to 512 to a host),
/// while a peer that is not trusted still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_balancer_is_not_held_to_one_clients_connections() {
    let limits = anchor_server::listener::HttpLimits { max_connections_per_client: 5, ..Default::default() };
    let trusted = anchor_server::proxies::TrustedProxies::parse("127.0.0.30").unwrap();
    let t = TestServer::with(Backend::Sqlite, Options { http: limits, trusted_proxies: trusted, ..Options::default() }).await;
    let addr = addr_of(&t);
    let mut idle = Vec::new();
    for from in [[127, 0, 0, 30], [127, 0, 0, 31]] {
        for _ in 0..5 {
            idle.push(connect_from(from, addr).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let request = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.9\r\nConnection: close\r\n\r\n";
    for n in 0..10 {
        let answer = raw_from([127, 0, 0, 30], addr, request, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "the balancer's connection {} past five: {answer:?}", n + 6);
    }
    let answer = raw_from([127, 0, 0, 31], addr, request, Duration::from_secs(5)).await;
    let (status, body) = split(&answer);
    assert!(status.starts_with("HTTP/1.1 429") && body["error_code"] == "TOO_MANY_CONNECTIONS", "{answer:?}");
    drop(idle);
}

/// What the HTTP parser answers by itself is JSON too, and a body declared
/// over the limit is refused at once, before any of it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_stacks_own_answers_are_json() {
    let t = TestServer::start(Backend::Sqlite).await;
    let addr = addr_of(&t);
    let wait = Duration::from_secs(5);
    let from = [127, 0, 0, 30];
    // A 100 KB path: past the parser's own limit.
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(100_000));
    let answer = raw_from(from, addr, long.as_bytes(), wait).await;
    assert!(answer.starts_with("HTTP/1.1 414"), "{}", anchor_domain::brief(&answer));
    assert_eq!(split(&answer).1["error_code"], "URI_TOO_LONG", "{answer:?}");
    // More than a hundred header fields.
    let mut many = String::from("GET /health HTTP/1.1\r\nHost: x\r\n");
    for i in 0..120 {
        many.push_str(&format!("X-Field-{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    let answer = raw_from(from, addr, many.as_bytes(), wait).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_eq!(split(&answer).1["error_code"], "HEADERS_TOO_LARGE", "{answer:?}");
    // A request line that is not HTTP.
    for bad in [&b"GARBAGE\r\n\r\n"[..], b"GET / HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"] {
        let answer = raw_from(from, addr, bad, wait).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
        let (_, body) = split(&answer);
        assert_eq!(body["error_code"], "BAD_REQUEST", "{answer:?}");
        assert!(answer.to_ascii_lowercase().contains("content-type: application/json"), "{answer:?}");
    }
    // 20 MB declared and dripped: 413 at once, not 408 after the body timeout.
    for (path, head) in [
        ("/v1/agent/register", "POST /v1/agent/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"),
        (
            "/v1/tsl/tool/x/component",
            "PUT /v1/tsl/tool/6f9f7f4e-0000-4000-8000-000000000000/component HTTP/1.1\r\nHost: x\r\nContent-Type: application/wasm\r\n",
        ),
    ] {
        let declared = if path.ends_with("component") { 100_000_000 } else { 20_000_000 };
        let asked = Instant::now();
        let answer = raw_from(from, addr, format!("{head}Content-Length: {declared}\r\n\r\n{{").as_bytes(), wait).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer:?}");
        assert_eq!(split(&answer).1["error_code"], "PAYLOAD_TOO_LARGE", "{answer:?}");
        assert!(asked.elapsed() < Duration::from_secs(2), "{path}: answered after {:?}", asked.elapsed());
    }
    // The server is fine, and an ordinary request on the same client too.
    assert_eq!(t.get("/health", None).await.status.as_u16(), 200);
    let _ = json!(null);
}

/// MCP answers what is not JSON-RPC as JSON-RPC errors, and its HTTP-level
/// refusals as JSON; nothing of a client's making is a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_answers_malformed_input_with_json_rpc_errors() {
    let t = TestServer::start(Backend::Sqlite).await;
    let send = |body: &'static str, accept: &'static str, content_type: &'static str| {
        t.http.post(t.url("/mcp")).header("content-type", content_type).header("accept", accept).body(body).send()
    };
    let both = "application/json, text/event-stream";
    for (body, status, rpc, code) in [
        ("{not json", 400, -32700, "INVALID_INPUT"),
        ("", 400, -32700, "INVALID_INPUT"),
        (r#"{"foo": 1}"#, 400, -32600, "INVALID_INPUT"),
        (r#"{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}"#, 400, -32600, "INVALID_INPUT"),
        ("[1, 2, 3]", 400, -32600, "INVALID_INPUT"),
        // A tool call with params that do not fit is a call with invalid params, not an unknown method.
        (
            r#"{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_trial_status", "arguments": [1, 2]}}"#,
            200,
            -32602,
            "INVALID_INPUT",
        ),
        (r#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"arguments": {}}}"#, 200, -32602, "INVALID_INPUT"),
        (r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call"}"#, 200, -32602, "INVALID_INPUT"),
        // So is an initialize without params, or without a protocol version.
        (r#"{"jsonrpc": "2.0", "id": 9, "method": "initialize"}"#, 200, -32602, "INVALID_INPUT"),
        (r#"{"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": {"capabilities": {}}}"#, 200, -32602, "INVALID_INPUT"),
        // An id past 64 bits is no request this server can answer.
        (r#"{"jsonrpc": "2.0", "id": 123456789012345678901234567890, "method": "tools/list"}"#, 400, -32600, "INVALID_INPUT"),
        // A method or a tool the server does not know carries its code as every refusal does.
        (r#"{"jsonrpc": "2.0", "id": 12, "method": "no/such"}"#, 200, -32601, "NOT_FOUND"),
        (
            r#"{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}"#,
            200,
            -32602,
            "INVALID_INPUT",
        ),
        // A key named twice, in a tool's arguments or in the envelope, is refused whole.
        (
            r#"{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "get_trial_status", "arguments": {"auth_token": "da_tk_a", "auth_token": "da_tk_b"}}}"#,
            400,
            -32600,
            "INVALID_INPUT",
        ),
        (r#"{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "method": "tools/call"}"#, 400, -32600, "INVALID_INPUT"),
    ] {
        let reply = send(body, both, "application/json").await.unwrap();
        assert_eq!(reply.status().as_u16(), status, "{body}");
        assert_eq!(reply.headers()["cache-control"], "no-store");
        let json: Value = reply.json().await.unwrap_or_else(|e| panic!("{body}: not JSON: {e}"));
        assert_eq!((json["jsonrpc"].clone(), json["error"]["code"].clone()), (json!("2.0"), json!(rpc)), "{body}: {json}");
        assert_eq!(json["error"]["data"]["error_code"], code, "{body}: {json}");
        // The status a REST route would answer, even where HTTP says 200.
        assert!(json["error"]["data"]["status"].as_u64().is_some_and(|s| (400..500).contains(&s)), "{body}: {json}");
        // The request's id, where it had one this server can answer with.
        let sent: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if let Some(id) = sent.get("id").filter(|id| id.is_i64()) {
            assert_eq!(&json["id"], id, "{body}: {json}");
        }
    }
    let list = r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}"#;
    for (accept, content_type, status, code) in
        [("application/json", "application/json", 406, "NOT_ACCEPTABLE"), (both, "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE")]
    {
        let reply = send(list, accept, content_type).await.unwrap();
        assert_eq!(reply.status().as_u16(), status);
        let json: Value = reply.json().await.expect("a JSON body");
        assert_eq!(json["error"]["data"]["error_code"], code, "{json}");
    }
    let get = t.http.get(t.url("/mcp")).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(get.status().as_u16(), 405);
    assert!(get.headers().get("allow").is_some());
    let json: Value = get.json().await.expect("a JSON body");
    assert_eq!(json["error"]["data"]["error_code"], "METHOD_NOT_ALLOWED", "{json}");
    // The same request, well formed, is answered.
    let ok = send(list, both, "application/json").await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(ok.headers()["cache-control"], "no-store");
    let json: Value = ok.json().await.unwrap();
    assert!(json["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{json}");
}

#[test]
fn a_client_is_an_ipv4_address_or_an_ipv6_slash_64() {
    use anchor_server::listener::client_key;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(client_key(ip("2001:db8:1:2::1")), client_key(ip("2001:db8:1:2:ffff:eeee:dddd:cccc")));
    assert_ne!(client_key(ip("2001:db8:1:2::1")), client_key(ip("2001:db8:1:3::1")));
    assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    assert_ne!(client_key(ip("192.0.2.7")), client_key(ip("192.0.2.8")));
}
