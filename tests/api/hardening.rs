//! Hostile input: every refusal is a JSON body with its error_code, limits on
//! secrets hold under parallel attempts, and slow clients cannot hold
//! connections open. Each test names the defect it guards against.

use std::time::{Duration, Instant};

use anchor_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

both_backends!(
    nul_characters_in_owner_text_are_refused_on_every_backend,
    parallel_wrong_passwords_cannot_pass_the_login_limit,
    parallel_password_confirmations_share_the_limit,
    attempt_reservations_hold_under_concurrency,
    wrong_recovery_keys_cannot_lock_the_right_key_out,
    a_stranger_cannot_lock_an_owner_out_of_its_own_client,
    guessing_from_many_clients_never_locks_the_owner_out_of_its_own_browser,
    out_of_range_numbers_are_refused_and_no_report_shows_an_infinity,
    parallel_session_ends_are_one_payment_not_a_used_nonce,
);

/// Sends raw bytes and reads the whole answer until the server closes or
/// `wait` passes.
async fn raw(t: &TestServer, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(t.base.trim_start_matches("http://")).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn json_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// A client that closes its sending side once the request is out
/// (`shutdown(SHUT_WR)`) still gets the answer, on a read and on a write.
#[tokio::test]
async fn a_client_that_half_closes_gets_its_answer() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    let body = create_body(json!({ "ee_preset": "EE_basic" })).to_string();
    let create = format!(
        "POST /v1/dd/create HTTP/1.1\r\nHost: anchor\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        agent.token,
        body.len()
    );
    for (request, status) in [("GET /v1/log/key HTTP/1.1\r\nHost: anchor\r\n\r\n".to_string(), "200"), (create, "201")] {
        let mut stream = TcpStream::connect(t.base.trim_start_matches("http://")).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{answer}");
    }
    assert_eq!(t.scalar("select count(*) from declaration").await, 1);
}

/// Defect 1: a tile width of 0 or a level of 64 or more reached an assertion.
#[tokio::test]
async fn tile_paths_out_of_range_answer_404_json() {
    let t = TestServer::start(Backend::Sqlite).await;
    for path in ["0/000.p/0", "64/000", "200/000.p/5", "0/000.p/256", "entries/000.p/0", "0/x999/000", "63/000.p/0"] {
        let reply = t.get(&format!("/v1/log/tile/{path}"), None).await;
        reply.assert_error(404, "NOT_FOUND");
    }
    // The server is still up and the log still answers.
    assert_eq!(t.get("/v1/log/key", None).await.status, StatusCode::OK);
}

/// Defect 2: a multibyte last character split the period on a byte index.
/// Defect 8: the documented maximum (100 years) was refused as `100y` and `1200m`.
#[tokio::test]
async fn access_periods_are_read_by_character_up_to_a_hundred_years() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    let with_period = |period: &str| {
        let mut ee = basic_axes();
        ee["ee_direct_access_period"] = json!(period);
        create_body(ee)
    };
    for bad in ["30é", "é", "1🦀", "30\u{65e5}", "101y", "1201m", "36501d"] {
        let reply = t.post("/v1/dd/create", Some(&agent.token), &with_period(bad)).await;
        reply.assert_error(400, "INVALID_VALUE");
    }
    for good in ["100y", "1200m", "36500d"] {
        let reply = t.post("/v1/dd/create", Some(&agent.token), &with_period(good)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{good}: {}", reply.text);
    }
}

/// Defect 8: the scale value passed through a float before it was hashed.
/// So did a decimal whose text a float writes the same (`0.0000004`), which
/// came back as `4e-7`.
#[tokio::test]
async fn the_scale_value_keeps_its_json_text_in_the_hashed_record() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    for (at, (value, not)) in [("18446744073709551616", "e+19"), ("0.0000004", "e-7"), ("0.5", "5e-1")].into_iter().enumerate() {
        let text = r#"{"request_id":"REQ","dd":DD,"ee":{"ee_preset":"EE_basic"},"content_inclusion_flag":1,
                       "template":{"decision_class":"payment","decision_scale_value":VALUE}}"#
            .replace("REQ", &uuid::Uuid::new_v4().to_string())
            .replace("DD", &dd().to_string())
            .replace("VALUE", value);
        let reply = t
            .http
            .post(t.url("/v1/dd/create"))
            .bearer_auth(&agent.token)
            .header("content-type", "application/json")
            .body(text)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::CREATED);
        let created: Value = reply.json().await.unwrap();
        let dd_id = created["dd_id"].as_str().unwrap();
        assert_eq!(t.confirm(&agent, dd_id).await.status, StatusCode::OK);
        t.wait_for_log(at as i64 + 1).await;
        let receipt = t.get(&format!("/v1/dd/{dd_id}/receipt"), Some(&agent.token)).await;
        let record = receipt.json["canonical_record"].as_str().expect("canonical record");
        // The value's own line (an id elsewhere may hold `e-7`).
        let line = record.lines().find(|line| line.starts_with("template.decision_scale_value=")).expect("the value's line");
        assert_eq!(line, format!("template.decision_scale_value={value}"), "{record}");
        assert!(!line.contains(not), "{value}: {record}");
    }
}

/// Defect 4: on PostgreSQL a NUL in owner text answered 500.
async fn nul_characters_in_owner_text_are_refused_on_every_backend(backend: Backend) {
    let t = TestServer::start(backend).await;
    let base = json!({ "email": "nul@example.com", "password": OWNER_PASSWORD, "terms_agreed": true, "privacy_agreed": true });
    for (field, value) in [("email", "n\u{0}ul@example.com"), ("timezone", "Europe/\u{0}Paris"), ("browser_language", "\u{0}")] {
        let mut body = base.clone();
        body[field] = json!(value);
        t.post("/dap/register", None, &body).await.assert_error(400, "INVALID_VALUE");
    }
    assert!(t.store.owner_by_email("nul@example.com").await.unwrap().is_none(), "a refused registration was stored");
    let owner = t.owner("nul@example.com").await;
    let create = |body: Value| {
        let (t, owner) = (&t, &owner);
        async move { t.as_owner(owner, "POST", "/dap/classification", Some(&body)).await }
    };
    create(json!({ "classification_key": "k_one", "classification_label": "a\u{0}b" })).await.assert_error(400, "INVALID_VALUE");
    create(json!({ "classification_key": "k_one", "classification_label": "ok", "description": "x\u{0}" }))
        .await
        .assert_error(400, "INVALID_VALUE");
    let created = create(json!({ "classification_key": "k_one", "classification_label": "ok" })).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.json["classification_id"].as_str().unwrap().to_string();
    let patch = t.as_owner(&owner, "PATCH", &format!("/dap/classification/{id}"), Some(&json!({ "description": "\u{0}" }))).await;
    patch.assert_error(400, "INVALID_VALUE");
    // A NUL in a field name and in a query value too.
    t.as_owner(&owner, "PUT", "/dap/account/residence", Some(&json!({ "residence\u{0}": "KR" }))).await.assert_error(400, "INVALID_VALUE");
    t.as_owner(&owner, "GET", "/dap/classification?include_inactive=tr%00ue", None).await.assert_error(400, "INVALID_VALUE");
    // Nothing changed.
    let list = t.as_owner(&owner, "GET", "/dap/classification", None).await;
    let mine: Vec<&Value> = list.json["classifications"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["classification_key"] == "k_one").collect())
        .unwrap_or_default();
    assert_eq!(mine.len(), 1, "{}", list.text);
    assert_eq!(mine[0]["classification_label"], "ok");
    assert!(mine[0]["description"].is_null(), "{}", list.text);
}

/// Defect 3: the failure count was read before the hash and written after it.
async fn parallel_wrong_passwords_cannot_pass_the_login_limit(backend: Backend) {
    let t = TestServer::start(backend).await;
    t.owner("race@example.com").await;
    let attempts = (0..40).map(|i| {
        let password = if i == 20 { OWNER_PASSWORD.to_string() } else { format!("wrong guess {i}") };
        let t = &t;
        async move { t.post("/dap/login", None, &json!({ "email": "race@example.com", "password": password })).await }
    });
    let replies = futures_util::future::join_all(attempts).await;
    let mut checked = 0;
    for reply in &replies {
        match reply.status.as_u16() {
            200 | 401 => checked += 1,
            429 => reply.assert_error(429, "RATE_LIMITED"),
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    // t.owner signed in once (and gave its attempt back); at most five
    // passwords of the forty were checked.
    assert!(checked <= 5, "{checked} passwords were checked");
    assert!(checked >= 1);
}

/// Defect 3, for password confirmations (unlink).
async fn parallel_password_confirmations_share_the_limit(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("confirm@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let attempts = (0..30).map(|i| {
        let (t, owner, id) = (&t, &owner, agent.id.clone());
        async move {
            t.as_owner(owner, "DELETE", "/dap/agent/unlink", Some(&json!({ "agent_id": id, "password": format!("wrong guess {i}") }))).await
        }
    });
    let replies = futures_util::future::join_all(attempts).await;
    let wrong = replies.iter().filter(|r| r.status == StatusCode::UNAUTHORIZED).count();
    let limited = replies.iter().filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS).count();
    assert_eq!(wrong + limited, 30, "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
    assert_eq!(wrong, 5, "five wrong passwords are checked, no more");
    // The agent is still linked.
    let agents = t.as_owner(&owner, "GET", "/dap/agents", None).await;
    assert!(agents.text.contains(&agent.id), "{}", agents.text);
}

/// The store primitive itself: fifty parallel reservations, exactly five pass.
async fn attempt_reservations_hold_under_concurrency(backend: Backend) {
    let t = TestServer::start(backend).await;
    let limit = anchor_ports::AttemptLimit { scope: "owner_password", window: chrono::Duration::minutes(15), max: 5 };
    let now = anchor_domain::Clock::now(&*t.clock);
    let tries = (0..50).map(|_| {
        let store = t.store.clone();
        tokio::spawn(async move { store.reserve_attempt(limit, "subject@example.com", now).await.unwrap() })
    });
    let mut reserved = 0;
    for outcome in tries {
        if outcome.await.unwrap() == anchor_ports::Attempt::Reserved {
            reserved += 1;
        }
    }
    assert_eq!(reserved, 5);
    // Giving one back opens one place; a new window opens them all.
    t.store.release_attempt(limit, "subject@example.com", now).await.unwrap();
    assert_eq!(t.store.reserve_attempt(limit, "subject@example.com", now).await.unwrap(), anchor_ports::Attempt::Reserved);
    assert!(matches!(t.store.reserve_attempt(limit, "subject@example.com", now).await.unwrap(), anchor_ports::Attempt::Spent { .. }));
    let later = now + chrono::Duration::minutes(15);
    assert_eq!(t.store.reserve_attempt(limit, "subject@example.com", later).await.unwrap(), anchor_ports::Attempt::Reserved);
    // Another subject and another scope count apart.
    assert_eq!(t.store.reserve_attempt(limit, "other@example.com", now).await.unwrap(), anchor_ports::Attempt::Reserved);
}

/// Defect 6: five wrong keys against a public agent_id locked the holder out.
async fn wrong_recovery_keys_cannot_lock_the_right_key_out(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let guesses = (0..12).map(|i| {
        let (t, id) = (&t, agent.id.clone());
        async move { t.post("/v1/agent/token/recover", None, &json!({ "agent_id": id, "recovery_key": format!("da_rk_{i:064}") })).await }
    });
    let replies = futures_util::future::join_all(guesses).await;
    assert_eq!(replies.iter().filter(|r| r.status == StatusCode::UNAUTHORIZED).count(), 5);
    assert_eq!(replies.iter().filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS).count(), 7);
    // The holder of the real key still recovers, at once.
    let recovered = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": agent.recovery })).await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text);
    assert_eq!(recovered.headers.get("cache-control").unwrap(), "no-store");
}

/// Defect 7: protocol-level refusals were text/plain, empty, or 400 for 413.
#[tokio::test]
async fn protocol_refusals_are_json_with_their_status() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    // Over the body limit: 413.
    let big = format!("{{\"region_code\":\"{}\"}}", "a".repeat(anchor_server::listener::HttpLimits::default().max_body_bytes));
    let reply = t.http.post(t.url("/v1/agent/register")).header("content-type", "application/json").body(big.clone()).send().await.unwrap();
    assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The unread body ends the connection, and the answer says so, so that a
    // client never reuses it for its next request (which would be cut).
    assert_eq!(reply.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error_code"], "PAYLOAD_TOO_LARGE");
    for round in 0..20 {
        let over = t
            .http
            .post(t.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(big.clone())
            .send()
            .await;
        assert_eq!(over.unwrap_or_else(|e| panic!("round {round}: {e}")).status(), StatusCode::PAYLOAD_TOO_LARGE);
        let next = t.http.get(t.url("/health")).send().await.unwrap_or_else(|e| panic!("round {round}: the next request was cut: {e}"));
        assert_eq!(next.status(), StatusCode::OK);
    }
    // A path parameter that is not UTF-8 once decoded: 400 JSON.
    t.get("/v1/dd/%FF%FE", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    t.get("/v1/payment/%C3%28/status", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    // A query parameter given twice: 400 JSON.
    t.get("/v1/dd/list?limit=1&limit=2", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    // An over-long URL: 414 JSON.
    t.get(&format!("/v1/dd/list?from={}", "9".repeat(20_000)), Some(&agent.token)).await.assert_error(414, "URI_TOO_LONG");
    // Over-large headers: 431 JSON.
    let headers = [("x-filler", "f".repeat(40_000))];
    let reply = t.call_with("GET", "/health", &headers.iter().map(|(n, v)| (*n, v.as_str())).collect::<Vec<_>>(), None).await;
    reply.assert_error(431, "HEADERS_TOO_LARGE");
    // OPTIONS lists the methods; another method is 405 with Allow.
    let options = t.call("OPTIONS", "/v1/dd/create", None, None).await;
    assert_eq!(options.status, StatusCode::NO_CONTENT);
    let allow = options.headers.get("allow").expect("Allow on OPTIONS").to_str().unwrap().to_string();
    assert!(allow.contains("POST") && allow.contains("OPTIONS"), "{allow}");
    let put = t.call("PUT", "/v1/dd/create", None, None).await;
    put.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(put.headers.get("allow").unwrap().to_str().unwrap(), allow);
    // Bytes that are not HTTP: 400 JSON without a handler, and the server stays up.
    let answer = raw(&t, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert_eq!(json_of(&answer)["error_code"], "BAD_REQUEST", "{answer:?}");
    assert_eq!(t.get("/health", None).await.status, StatusCode::OK);
}

/// Defect 9: secrets in cacheable responses; whole inputs echoed in messages.
#[tokio::test]
async fn secrets_are_not_cached_and_messages_do_not_echo_inputs() {
    let t = TestServer::start(Backend::Sqlite).await;
    let register = t.post("/v1/agent/register", None, &json!({})).await;
    assert_eq!(register.headers.get("cache-control").unwrap(), "no-store");
    let mut agent = Agent {
        id: register.json["agent_id"].as_str().unwrap().into(),
        token: register.json["auth_token"].as_str().unwrap().into(),
        recovery: register.json["recovery_key"].as_str().unwrap().into(),
    };
    let rotated = t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": agent.id })).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
    assert_eq!(rotated.headers.get("cache-control").unwrap(), "no-store");
    agent.token = rotated.json["auth_token"].as_str().unwrap().into();
    let owner = t.owner("cache@example.com").await;
    let link = t.as_owner(&owner, "POST", "/dap/agent/link", Some(&json!({ "agent_id": agent.id, "auth_token": agent.token }))).await;
    assert_eq!(link.status, StatusCode::OK, "{}", link.text);
    assert_eq!(link.headers.get("cache-control").unwrap(), "no-store");

    let huge = "x".repeat(900_000);
    let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
    body["dd"]["dd_unit_type"] = json!(huge);
    let agent = t.register().await;
    let reply = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    reply.assert_error(400, "INVALID_ENUM");
    assert!(reply.text.len() < 1_000, "the message is {} bytes", reply.text.len());
    let reply = t.post("/v1/dd/create", Some(&agent.token), &json!({ "request_id": uuid::Uuid::new_v4(), huge.as_str(): 1 })).await;
    reply.assert_error(400, "MISSING_FIELD");
    assert!(reply.text.len() < 1_000, "the message is {} bytes", reply.text.len());
    // The key left out is named, shortened, in a header a client can read.
    let named = reply.headers["anchor-ignored-fields"].to_str().unwrap();
    assert!(named.len() < 300 && named.starts_with("xxxx"), "{} bytes", named.len());
}

/// Defect 5: idle and half-sent connections stayed open without limit.
/// With a one-second header timeout and a one-second body timeout, idle
/// connections, heads sent a line at a time and bodies sent a byte at a time
/// are all closed within the timeout (plus scheduling slack), while ordinary
/// requests keep being answered throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_while_others_are_served() {
    let limits = anchor_server::listener::HttpLimits {
        header_read_timeout: Duration::from_secs(1),
        body_read_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let t = TestServer::with(Backend::Sqlite, Options { http: limits, ..Options::default() }).await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let slack = Duration::from_millis(1500);

    // Each slow client reports how long the server kept it (until the server
    // closed its side, read concurrently with the writes), and what it answered.
    async fn slow(addr: String, kind: usize) -> (usize, Duration, String) {
        let started = Instant::now();
        let (mut reader, mut writer) = TcpStream::connect(&addr).await.unwrap().into_split();
        let trickle = tokio::spawn(async move {
            let (head, piece): (&[u8], &[u8]) = match kind {
                // Idle: connects and sends nothing.
                0 => return,
                // A header line every 300 ms, never finishing the head.
                1 => (b"GET /health HTTP/1.1\r\nHost: x\r\n", b"X-Slow: y\r\n"),
                // A whole head, then a body a byte at a time.
                _ => {
                    (b"POST /v1/agent/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", b" ")
                }
            };
            let _ = writer.write_all(head).await;
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if writer.write_all(piece).await.is_err() {
                    break;
                }
            }
        });
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), reader.read_to_end(&mut answer)).await;
        let held = started.elapsed();
        trickle.abort();
        (kind, held, String::from_utf8_lossy(&answer).into_owned())
    }
    let attackers: Vec<_> = (0..150).map(|i| tokio::spawn(slow(addr.clone(), i % 3))).collect();

    // Meanwhile, ordinary requests are answered.
    let mut served = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let reply = t.get("/health", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        served += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served >= 20, "only {served} ordinary requests were answered");

    for attacker in attackers {
        let (kind, held, answer) = attacker.await.unwrap();
        assert!(held < Duration::from_secs(1) + slack, "a slow client of kind {kind} was held {held:?}");
        if kind == 2 {
            assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
            assert_eq!(json_of(&answer)["error_code"], "REQUEST_TIMEOUT", "{answer:?}");
        }
    }
    // A kept-alive connection that goes idle after a request is closed too.
    let started = Instant::now();
    let answer = raw(&t, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(1) + slack, "an idle kept-alive connection was held {:?}", started.elapsed());
}

/// A client from `from` (a loopback address), for limits counted per client.
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder().local_address(std::net::IpAddr::from(from)).build().unwrap()
}

async fn login_from(t: &TestServer, client: &reqwest::Client, email: &str, password: &str) -> (u16, Value) {
    let reply = client.post(t.url("/dap/login")).json(&json!({ "email": email, "password": password })).send().await.unwrap();
    let status = reply.status().as_u16();
    (status, reply.json().await.unwrap_or(Value::Null))
}

/// LOW: five wrong passwords for an email from anywhere locked its owner out
/// everywhere. Now they lock that email out from that client only; the owner
/// signs in from its own, and a client trying many emails is held too.
async fn a_stranger_cannot_lock_an_owner_out_of_its_own_client(backend: Backend) {
    let t = TestServer::start(backend).await;
    t.owner("locked@example.com").await;
    let stranger = client_from([127, 0, 0, 50]);
    let own = client_from([127, 0, 0, 51]);
    for i in 0..5 {
        assert_eq!(login_from(&t, &stranger, "locked@example.com", &format!("guess {i}")).await.0, 401);
    }
    let (status, body) = login_from(&t, &stranger, "locked@example.com", OWNER_PASSWORD).await;
    assert_eq!((status, body["error_code"].clone()), (429, json!("RATE_LIMITED")), "the stranger's client is held: {body}");
    let (status, body) = login_from(&t, &own, "locked@example.com", OWNER_PASSWORD).await;
    assert_eq!(status, 200, "the owner signs in from its own client: {body}");
    // After the window, a day's backoff: 20 failures from a client for one email.
    for round in 0..3 {
        t.clock.advance(chrono::Duration::minutes(16));
        for i in 0..5 {
            let (status, _) = login_from(&t, &stranger, "locked@example.com", &format!("round {round} guess {i}")).await;
            assert_eq!(status, 401, "round {round}, guess {i}");
        }
    }
    t.clock.advance(chrono::Duration::minutes(16));
    let (status, body) = login_from(&t, &stranger, "locked@example.com", "yet another").await;
    assert_eq!(status, 429, "twenty failures in a day hold the pair for the day: {body}");
    // One client spraying many emails is held after 30, whatever the emails.
    let sprayer = client_from([127, 0, 0, 52]);
    let mut refused = 0;
    for i in 0..35 {
        if login_from(&t, &sprayer, &format!("nobody{i}@example.com"), "guess").await.0 == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 5, "30 failures a client in 15 minutes");
    assert_eq!(login_from(&t, &own, "locked@example.com", OWNER_PASSWORD).await.0, 200);
}

/// A sign-in from `client` carrying the device cookie `device`, with the
/// device cookie the answer sets, if any.
async fn login_with_device(
    t: &TestServer,
    client: &reqwest::Client,
    email: &str,
    password: &str,
    device: Option<&str>,
) -> (u16, Value, Option<String>) {
    let mut request = client.post(t.url("/dap/login")).json(&json!({ "email": email, "password": password }));
    if let Some(device) = device {
        request = request.header("cookie", format!("anchor.device={device}"));
    }
    let reply = request.send().await.unwrap();
    let status = reply.status().as_u16();
    let set = reply
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("anchor.device=").map(|rest| rest.split(';').next().unwrap().to_string()));
    (status, reply.json().await.unwrap_or(Value::Null), set)
}

/// LOW (probe): 22 addresses x 5 wrong passwords spent the backstop over
/// every client (100 in 15 minutes) and locked the owner's right password
/// out everywhere, renewably. Decision 0064: the browser the owner signed in
/// from before is held to its own limit alone, and still signs in; a new
/// client is held to the backstop; another owner's device cookie counts as
/// no device.
async fn guessing_from_many_clients_never_locks_the_owner_out_of_its_own_browser(backend: Backend) {
    let t = TestServer::start(backend).await;
    t.owner("target@example.com").await;
    t.owner("attacker@example.com").await;
    let own = client_from([127, 0, 0, 60]);
    let devices_before = t.scalar("select count(*) from owner_device").await;
    let (status, _, device) = login_with_device(&t, &own, "target@example.com", OWNER_PASSWORD, None).await;
    assert_eq!(status, 200);
    let device = device.expect("a first sign-in from a browser marks it");
    assert!(device.starts_with("da_dv_") && device.len() == 70, "{device}");
    assert_eq!(t.scalar("select count(*) from owner_device").await, devices_before + 1, "one device kept, by its hash");
    // The attacker's own device, from its own account.
    let attacker = client_from([127, 0, 0, 61]);
    let (_, _, foreign) = login_with_device(&t, &attacker, "attacker@example.com", OWNER_PASSWORD, None).await;
    let foreign = foreign.unwrap();
    for n in 0..22u8 {
        let guesser = client_from([127, 0, 1, 10 + n]);
        for i in 0..5 {
            login_with_device(&t, &guesser, "target@example.com", &format!("guess {n}.{i}"), None).await;
        }
    }
    let fresh = client_from([127, 0, 2, 1]);
    let (status, body, _) = login_with_device(&t, &fresh, "target@example.com", OWNER_PASSWORD, None).await;
    assert_eq!(status, 429, "a new client meets the backstop: {body}");
    let (status, body, _) = login_with_device(&t, &attacker, "target@example.com", OWNER_PASSWORD, Some(&foreign)).await;
    assert_eq!(status, 429, "another owner's device is no device of this one: {body}");
    let (status, body, again) = login_with_device(&t, &own, "target@example.com", OWNER_PASSWORD, Some(&device)).await;
    assert_eq!(status, 200, "the owner's browser signs in: {body}");
    assert!(again.is_none(), "a known device is not marked again");
    // The device's own limit: five wrong passwords from it, then 429 for it too.
    for i in 0..5 {
        assert_eq!(login_with_device(&t, &own, "target@example.com", &format!("typo {i}"), Some(&device)).await.0, 401);
    }
    assert_eq!(login_with_device(&t, &own, "target@example.com", OWNER_PASSWORD, Some(&device)).await.0, 429);
}

/// LOW: `1e400` was accepted as a decision scale value and DUR then
/// reported ±1e+400. Non-finite numbers are refused with 400 INVALID_VALUE,
/// on REST and MCP alike; finite ones are kept as sent.
async fn out_of_range_numbers_are_refused_and_no_report_shows_an_infinity(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let create = |value: &'static str| {
        let text = format!(
            r#"{{"request_id":"{}","dd":{{"dd_unit_type":"single","dd_declaration_mode":"self_declared","decision_type":"internal_service","decision_action_type":"execute","origin_context_type":"internal","selection_state":"SELECTED"}},"ee":{{"ee_preset":"EE_basic"}},"content_inclusion_flag":1,"template":{{"decision_scale_value":{value},"decision_scale_unit":"USD"}}}}"#,
            uuid::Uuid::new_v4()
        );
        let request = t.http.post(t.url("/v1/dd/create")).bearer_auth(&agent.token).header("content-type", "application/json").body(text);
        async move {
            let reply = request.send().await.unwrap();
            (reply.status().as_u16(), reply.json::<Value>().await.unwrap())
        }
    };
    // Past what a float holds either way, whatever the exponent's text says:
    // `0.00001e-399` is as far below the smallest float as `1e-404`.
    let refused = ["1e400", "-1e400", "1e309", "123456789012345678901234567890123456789012345", "1e-401", "10e-401", "0.00001e-399"];
    for value in refused {
        let (status, body) = create(value).await;
        assert_eq!((status, body["error_code"].as_str()), (400, Some("INVALID_VALUE")), "{value}: {body}");
    }
    assert_eq!(t.scalar("select count(*) from declaration").await, 0);
    // Zero is zero however its exponent is written; it counts in the report.
    let mut anchored = Vec::new();
    for value in ["0e-401", "1.5e300"] {
        let (status, body) = create(value).await;
        assert_eq!(status, 201, "{value}: {body}");
        anchored.push(body["dd_id"].as_str().unwrap().to_string());
    }
    for dd_id in &anchored {
        assert_eq!(t.confirm(&agent, dd_id).await.status.as_u16(), 200);
    }
    let report = t.get("/v1/dur/decision-scale", Some(&agent.token)).await;
    assert!(!report.text.contains("e+400") && !report.text.to_ascii_lowercase().contains("inf"), "{}", report.text);
    let units = report.json["units"].as_array().unwrap();
    let usd = units.iter().find(|u| u["unit"] == "USD").unwrap_or_else(|| panic!("{}", report.text));
    assert_eq!((usd["count"].as_i64(), usd["min"].as_f64()), (Some(2), Some(0.0)), "{}", report.text);
}

/// LOW: of two parallel ends of one sDAC session paid over x402, the loser
/// was refused as `nonce_already_used` although its nonce was never used.
/// It is the same purchase made twice: 409 DUPLICATE_REQUEST, one payment.
async fn parallel_session_ends_are_one_payment_not_a_used_nonce(backend: Backend) {
    use anchor_tests::x402::{Twist, b64, challenge_of, pay};
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    let session = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await.json["session_id"].as_str().unwrap().to_string();
    let axes = json!({ "ee_retention_period": "short", "ee_integrity_verification_level": "basic", "ee_disclosure_format_policy": "internal", "ee_responsibility_scope": "minimal" });
    t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": axes })).await;
    let bearer = format!("Bearer {}", agent.token);
    let body = json!({ "session_id": session });
    let challenge = challenge_of(&t.call_with("POST", "/v1/sdac/session/end", &[("authorization", &bearer)], Some(&body)).await);
    let now = anchor_domain::Clock::now(t.clock.as_ref()).timestamp();
    // Two payments with their own nonces, sent at once.
    let payments: Vec<String> = (0..2).map(|_| b64(&pay(&challenge, now, Twist::default()))).collect();
    let ends = payments.iter().map(|payment| {
        let (t, bearer, body) = (&t, &bearer, &body);
        async move {
            t.call_with("POST", "/v1/sdac/session/end", &[("authorization", bearer), ("payment-signature", payment)], Some(body)).await
        }
    });
    let replies = futures_util::future::join_all(ends).await;
    let ok = replies.iter().filter(|r| r.status.as_u16() == 200).count();
    assert_eq!(ok, 1, "{:?}", replies.iter().map(|r| &r.text).collect::<Vec<_>>());
    for reply in replies.iter().filter(|r| r.status.as_u16() != 200) {
        assert!(!reply.text.contains("nonce_already_used"), "{}", reply.text);
        assert!(reply.status.as_u16() == 409 || reply.status.as_u16() == 404, "{} {}", reply.status, reply.text);
    }
    assert_eq!(t.scalar("select count(*) from x402_payment where subject_domain = 'sdac_session' and status = 'settled'").await, 1);
}

/// LOW: MCP's register_agent and the owner's account export carried a token
/// and personal data without `Cache-Control: no-store`.
#[tokio::test]
async fn secrets_and_personal_data_are_never_cached() {
    let t = TestServer::start(Backend::Sqlite).await;
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "register_agent", "arguments": {} } });
    let reply = t.http.post(t.url("/mcp")).header("accept", "application/json, text/event-stream").json(&call).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    assert_eq!(reply.headers()["cache-control"], "no-store");
    let text = reply.text().await.unwrap();
    assert!(text.contains("auth_token"), "{text}");
    let owner = t.owner("export@example.com").await;
    for path in ["/dap/account/export", "/dap/account/export?format=csv", "/dap/account/me"] {
        let reply = t.as_owner(&owner, "GET", path, None).await;
        assert_eq!(reply.status.as_u16(), 200, "{path}: {}", reply.text);
        assert_eq!(reply.headers.get("cache-control").unwrap(), "no-store", "{path}");
    }
    let agent = t.register().await;
    let dd = t.get("/v1/dd/list", Some(&agent.token)).await;
    assert_eq!(dd.headers.get("cache-control").unwrap(), "no-store", "an agent's own records");
}

/// A body that names a key twice in one object, at any depth, is refused 400
/// INVALID_INPUT: its last value would have been taken silently (a proxy or
/// checker in front may have read the first). Nothing is recorded; the same
/// body without the repetition is taken.
#[tokio::test]
async fn a_key_named_twice_in_one_object_is_refused() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    let send = |text: String| {
        t.http.post(t.url("/v1/tsl/tool/register")).bearer_auth(&agent.token).header("content-type", "application/json").body(text).send()
    };
    let tool = r#""tool_description":"shares","layer":"layer1","ara_connections":[{"observation_type":"pattern_ee_distribution"}]"#;
    for text in [
        format!(r#"{{"tool_name":"first","tool_name":"second","price_dac":1,{tool}}}"#),
        format!(r#"{{"tool_name":"first","price_dac":1,"price_dac":999,{tool}}}"#),
        r#"{"tool_name":"nested","price_dac":1,"tool_description":"shares","layer":"layer1","ara_connections":[{"observation_type":"pattern_ee_distribution","observation_type":"agent_profile"}]}"#.to_string(),
        format!(r#"{{"tool_name":"escaped","tool\u005fname":"same key, written otherwise","price_dac":1,{tool}}}"#),
        // The JSON reader's own key for numbers is no number a client sends.
        format!(r#"{{"tool_name":"magic","price_dac":{{"$serde_json::private::Number":"1"}},{tool}}}"#),
        format!(r#"{{"tool_name":"magic","price_dac":{{"\u0024serde_json::private::Number":"1"}},{tool}}}"#),
        format!(r#"{{"tool_name":"raw","price_dac":{{"$serde_json::private::RawValue":"1"}},{tool}}}"#),
        format!(r#"{{"tool_name":{{"$serde_json::private::RawValue":"\"raw\""}},"price_dac":1,{tool}}}"#),
    ] {
        let reply = send(text.clone()).await.unwrap();
        assert_eq!(reply.status().as_u16(), 400, "{text}");
        let body: Value = reply.json().await.unwrap();
        assert_eq!(body["error_code"], "INVALID_INPUT", "{text}: {body}");
    }
    assert_eq!(t.scalar("select count(*) from tsl_tool").await, 0);
    // Said as what it is, not as the reader's confusion over it.
    let reserved =
        send(format!(r#"{{"tool_name":"magic","price_dac":{{"$serde_json::private::Number":"1","b":2}},{tool}}}"#)).await.unwrap();
    let body: Value = reserved.json().await.unwrap();
    assert!(body["message"].as_str().unwrap_or_default().contains("reserved"), "{body}");
    let taken = send(format!(r#"{{"tool_name":"once","price_dac":1,{tool}}}"#)).await.unwrap();
    assert_eq!(taken.status().as_u16(), 201);
    // The same key in two different objects is no repetition.
    let two = r#"{"tool_name":"two","price_dac":1,"tool_description":"shares","layer":"layer1","ara_connections":[{"observation_type":"pattern_ee_distribution"},{"observation_type":"agent_profile","resolution_level":2}]}"#;
    assert_eq!(send(two.to_string()).await.unwrap().status().as_u16(), 201);
}
