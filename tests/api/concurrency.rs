//! Races: one request_id sent 100 times at once, and 60 creates at once on one
//! fresh agent's 500 Trial DAC.

use std::collections::HashSet;

use anchor_tests::*;
use serde_json::{Value, json};

anchor_tests::both_backends!(
    hundred_parallel_creates_with_one_request_id_make_one_dd,
    sixty_parallel_creates_debit_exactly_the_trial,
    fifty_request_ids_sent_twice_at_once_spend_the_trial_once,
    batched_writes_of_eight_agents_keep_each_trial_and_request_id,
    batched_payments_keep_each_dab_nonce_and_request_id,
    gathered_reads_answer_each_request_with_its_own_agent_and_record,
    entering_and_leaving_idle_state_at_once_is_never_a_server_error
);

async fn fire(t: &TestServer, agent: &Agent, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let calls = bodies.into_iter().map(|body| (agent, "/v1/dd/create", body)).collect();
    fire_all(t, calls).await
}

/// Sends every call (agent, path, body) at once, answers in the same order.
async fn fire_all(t: &TestServer, calls: Vec<(&Agent, &str, Value)>) -> Vec<(u16, Value)> {
    fire_paid(t, calls.into_iter().map(|(agent, path, body)| (agent, path, body, None)).collect()).await
}

async fn hundred_parallel_creates_with_one_request_id_make_one_dd(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let body = create_body(basic_axes());
    let replies = fire(&t, &agent, vec![body; 100]).await;
    let statuses: HashSet<u16> = replies.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, HashSet::from([201]), "{:?}", replies.iter().find(|(s, _)| *s != 201));
    let ids: HashSet<&str> = replies.iter().map(|(_, b)| b["dd_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "every reply names the same record");
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(1));
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(490));
}

async fn sixty_parallel_creates_debit_exactly_the_trial(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let bodies: Vec<Value> = (0..60).map(|_| create_body(basic_axes())).collect();
    let replies = fire(&t, &agent, bodies).await;
    let created: Vec<&Value> = replies.iter().filter(|(s, _)| *s == 201).map(|(_, b)| b).collect();
    let refused = replies.iter().filter(|(s, _)| *s == 402).count();
    assert_eq!((created.len(), refused), (50, 10), "{:?}", replies.iter().find(|(s, _)| *s != 201 && *s != 402));
    let charged: i64 = created.iter().map(|b| (b["dac_amount"].as_f64().unwrap() * 1000.0).round() as i64).sum();
    assert_eq!(charged, 500_000, "exactly 500 DAC debited");
    // Every remaining balance reported is distinct: each debit saw the one before.
    let remainders: HashSet<String> = created.iter().map(|b| b["trial_payment"]["trial_remaining"].to_string()).collect();
    assert_eq!(remainders.len(), 50);
    let status = t.get("/v1/trial/status", Some(&agent.token)).await;
    assert_eq!(status.json["trial_dac_remaining"], json!(0));
    assert_eq!(status.json["trial_dac_used"], json!(500));
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(50));
}

/// 50 request_ids, each sent twice at once, on an agent whose Trial pays
/// exactly 50: every reply is a 201, each pair names one record, and Trial is
/// spent once per record. A copy that arrives when Trial is empty is still
/// answered with its record: a replay is looked for before any refusal.
async fn fifty_request_ids_sent_twice_at_once_spend_the_trial_once(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut bodies: Vec<Value> = (0..50).map(|_| create_body(basic_axes())).collect();
    bodies.extend(bodies.clone());
    let replies = fire(&t, &agent, bodies.clone()).await;
    assert!(replies.iter().all(|(s, _)| *s == 201), "{:?}", replies.iter().find(|(s, _)| *s != 201));
    for (n, body) in bodies.iter().enumerate().take(50) {
        let (first, second) = (&replies[n].1, &replies[n + 50].1);
        assert_eq!(first["dd_id"], second["dd_id"], "request {} answered with one record", body["request_id"]);
    }
    let ids: HashSet<&str> = replies.iter().map(|(_, b)| b["dd_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 50);
    let status = t.get("/v1/trial/status", Some(&agent.token)).await;
    assert_eq!((status.json["trial_dac_remaining"].clone(), status.json["trial_dac_used"].clone()), (json!(0), json!(500)));
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(50));
    // Sent again now, with Trial empty, each is still its record.
    let again = fire(&t, &agent, bodies[..10].to_vec()).await;
    for (n, (status, body)) in again.iter().enumerate() {
        assert_eq!((*status, &body["dd_id"]), (201, &replies[n].1["dd_id"]));
    }
}

/// The group committer's variant: eight agents, each sending 60 creates at
/// once (the first ten request_ids twice) on a Trial that pays 50, then every
/// record confirmed twice at once. Many writes share each commit; still each
/// agent's Trial pays exactly 50 records, both copies of a request_id get
/// the same answer, and each record is confirmed once, with one log leaf and
/// one usage row.
async fn batched_writes_of_eight_agents_keep_each_trial_and_request_id(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut agents = Vec::new();
    for _ in 0..8 {
        agents.push(t.register().await);
    }
    let shared_before = t.store.metrics().shared_batches.get();
    let mut calls = Vec::new();
    for agent in &agents {
        let bodies: Vec<Value> = (0..60).map(|_| create_body(basic_axes())).collect();
        for body in bodies.iter().chain(&bodies[..10]) {
            calls.push((agent, "/v1/dd/create", body.clone()));
        }
    }
    let replies = fire_all(&t, calls.clone()).await;
    let mut records = Vec::new();
    for (a, agent) in agents.iter().enumerate() {
        let mine = &replies[a * 70..(a + 1) * 70];
        let created: HashSet<&str> = mine.iter().filter(|(s, _)| *s == 201).map(|(_, b)| b["dd_id"].as_str().unwrap()).collect();
        assert_eq!(created.len(), 50, "agent {a}: {:?}", mine.iter().find(|(s, _)| *s != 201 && *s != 402));
        assert!(mine.iter().all(|(s, _)| *s == 201 || *s == 402), "{:?}", mine.iter().find(|(s, _)| *s != 201 && *s != 402));
        for n in 0..10 {
            let (first, copy) = (&mine[n], &mine[60 + n]);
            assert_eq!((first.0, &first.1["dd_id"]), (copy.0, &copy.1["dd_id"]), "agent {a}, request {n}: both copies answered alike");
        }
        let status = t.get("/v1/trial/status", Some(&agent.token)).await;
        assert_eq!((status.json["trial_dac_remaining"].clone(), status.json["trial_dac_used"].clone()), (json!(0), json!(500)));
        assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(50));
        records.extend(created.into_iter().map(|id| (agent, id.to_string())));
    }
    let mut confirms = Vec::new();
    for (agent, dd_id) in records.iter().chain(&records) {
        confirms.push((*agent, "/v1/dd/confirm", json!({ "dd_id": dd_id })));
    }
    let replies = fire_all(&t, confirms).await;
    let (first, second) = replies.split_at(records.len());
    for (n, (dd_id_reply, copy)) in first.iter().zip(second).enumerate() {
        let mut statuses = [dd_id_reply.0, copy.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "record {}: one confirmation, one ALREADY_CONFIRMED: {:?} {:?}", records[n].1, dd_id_reply, copy);
    }
    let one_each = |table: &str| format!("select count(*) from (select dd_id from {table} group by dd_id having count(*) = 1) x");
    assert_eq!(t.scalar(&one_each("usage_entry")).await, 400, "one usage row per record");
    let leaves = t.scalar("select (select count(*) from log_pending) + (select count(*) from log_entry)").await;
    assert_eq!(leaves, 400, "one log leaf per record");
    assert!(t.store.metrics().shared_batches.get() > shared_before, "some writes shared a commit");
    assert_eq!(t.store.metrics().failed_batches.get(), 0, "no batch failed as a whole (each write would then run alone)");
    closes_once_idle(&t).await;
}

/// Every call (agent, path, body, PAYMENT-SIGNATURE header) at once; answers in order.
async fn fire_paid(t: &TestServer, calls: Vec<(&Agent, &str, Value, Option<String>)>) -> Vec<(u16, Value)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(calls.len()));
    let mut handles = Vec::new();
    for (agent, path, body, payment) in calls {
        let (http, url, token, barrier) = (t.http.clone(), t.url(path), agent.token.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut request = http.post(url).bearer_auth(token).header("content-type", "application/json").body(body.to_string());
            if let Some(payment) = payment {
                request = request.header("PAYMENT-SIGNATURE", payment);
            }
            let response = request.send().await.expect("request");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }));
    }
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("task"));
    }
    out
}

/// The group committer with payments: five agents whose Trial has expired
/// send paid creates at once. Four have a DAB that pays 10 of their 12
/// payments, and send their first three requests twice with the same
/// authorization; the fifth sends six requests, each two of them carrying
/// one authorization. Each DAB is kept exactly, both copies of a request get
/// the same answer, an authorization pays one record; then every record is
/// confirmed twice at once: one confirmation each, its payment settled, one
/// log leaf and one usage row naming the payment.
async fn batched_payments_keep_each_dab_nonce_and_request_id(backend: Backend) {
    use anchor_domain::Clock;
    use anchor_tests::x402::{Twist, b64, challenge_of, pay};
    let t = TestServer::with(backend, Options { dab_default: anchor_domain::MilliDac::from_dac(100), ..Options::default() }).await;
    let mut agents = Vec::new();
    for _ in 0..5 {
        agents.push(t.register().await);
    }
    t.clock.advance(chrono::Duration::days(31));
    let now = t.clock.now().timestamp();
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agents[0].token), &create_body(basic_axes())).await);
    let shared_before = t.store.metrics().shared_batches.get();
    let shared_reads_before = t.store.metrics().shared_reads.get();
    let mut calls = Vec::new();
    for agent in &agents[..4] {
        let requests: Vec<(Value, String)> =
            (0..12).map(|_| (create_body(basic_axes()), b64(&pay(&challenge, now, Twist::default())))).collect();
        for (body, payment) in requests.iter().chain(&requests[..3]) {
            calls.push((agent, "/v1/dd/create", body.clone(), Some(payment.clone())));
        }
    }
    let shared: Vec<String> = (0..3).map(|_| b64(&pay(&challenge, now, Twist::default()))).collect();
    for n in 0..6 {
        calls.push((&agents[4], "/v1/dd/create", create_body(basic_axes()), Some(shared[n / 2].clone())));
    }
    let replies = fire_paid(&t, calls).await;
    let mut records = Vec::new();
    for (a, agent) in agents[..4].iter().enumerate() {
        let mine = &replies[a * 15..(a + 1) * 15];
        let created: HashSet<&str> = mine.iter().filter(|(s, _)| *s == 201).map(|(_, b)| b["dd_id"].as_str().unwrap()).collect();
        let refused = mine[..12].iter().filter(|(s, b)| *s == 403 && b["error_code"] == "DAB_LIMIT_REACHED").count();
        assert_eq!((created.len(), refused), (10, 2), "agent {a}: {:?}", mine.iter().find(|(s, _)| *s != 201 && *s != 403));
        for n in 0..3 {
            let (first, copy) = (&mine[n], &mine[12 + n]);
            assert_eq!((first.0, &first.1["dd_id"]), (copy.0, &copy.1["dd_id"]), "agent {a}, request {n}: both copies answered alike");
        }
        let dab = t.get("/v1/dab/status", Some(&agent.token)).await.json;
        assert_eq!((&dab["spent_dac"], &dab["remaining_dac"]), (&json!(100), &json!(0)), "agent {a}");
        assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(10));
        records.extend(created.into_iter().map(|id| (agent, id.to_string())));
    }
    let fifth = &replies[60..];
    for pair in fifth.chunks(2) {
        let mut statuses = [pair[0].0, pair[1].0];
        statuses.sort();
        assert_eq!(statuses, [201, 402], "one authorization pays one record: {pair:?}");
        let refused = pair.iter().find(|(s, _)| *s == 402).unwrap();
        assert_eq!(refused.1["error"], "invalid_exact_evm_nonce_already_used", "{refused:?}");
        let created = pair.iter().find(|(s, _)| *s == 201).unwrap();
        records.push((&agents[4], created.1["dd_id"].as_str().unwrap().to_string()));
    }
    assert_eq!(t.get("/v1/dd/list", Some(&agents[4].token)).await.json["total"], json!(3));
    let reserved = t.scalar("select count(*) from x402_payment where status = 'reserved' and dd_id is not null").await;
    assert_eq!(reserved, 43, "one reservation per record, each naming its record");
    assert_eq!(t.scalar("select count(*) from x402_payment").await, 43, "nothing reserved for a refused payment");

    let mut confirms = Vec::new();
    for (agent, dd_id) in records.iter().chain(&records) {
        confirms.push((*agent, "/v1/dd/confirm", json!({ "dd_id": dd_id }), None));
    }
    let replies = fire_paid(&t, confirms).await;
    let (first, second) = replies.split_at(records.len());
    for (n, (reply, copy)) in first.iter().zip(second).enumerate() {
        let mut statuses = [reply.0, copy.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "record {}: one confirmation, one ALREADY_CONFIRMED: {reply:?} {copy:?}", records[n].1);
    }
    assert_eq!(t.scalar("select count(*) from x402_payment where status = 'settled'").await, 43, "every payment settled once");
    assert_eq!(t.scalar("select count(*) from x402_payment_event where status = 'settled'").await, 43);
    let paid_usage = "select count(*) from usage_entry u join x402_payment p on p.payment_id = u.payment_id and p.dd_id = u.dd_id";
    assert_eq!(t.scalar(paid_usage).await, 43, "one usage row per record, naming its payment");
    let leaves = t.scalar("select (select count(*) from log_pending) + (select count(*) from log_entry)").await;
    assert_eq!(leaves, 43, "one log leaf per record");
    assert!(t.store.metrics().shared_batches.get() > shared_before, "some writes shared a commit");
    assert_eq!(t.store.metrics().failed_batches.get(), 0, "no batch failed as a whole (each write would then run alone)");
    // On PostgreSQL the creates' reads of their request_id and DAB, and the
    // confirmations' reads of their payment, are gathered: none failed as a
    // whole (each read would then run alone, hiding a broken statement).
    if backend == Backend::Postgres {
        assert!(t.store.metrics().shared_reads.get() > shared_reads_before, "some reads shared a statement");
    }
    assert_eq!(t.store.metrics().failed_reads.get(), 0, "no gathered read failed as a whole (each would then run alone)");
    closes_once_idle(&t).await;
}

/// Idle, the hot path's tasks have let their kept connections go, so the
/// store closes (it waits for every connection lent out).
async fn closes_once_idle(t: &TestServer) {
    let closed = tokio::time::timeout(std::time::Duration::from_secs(20), t.store.close()).await;
    assert!(closed.is_ok(), "the store closed once the hot path was idle");
}

/// Eight agents, four of them with a rotated token, send creates at once
/// with their tokens (the rotated four also with the old one), then confirm
/// every record at once, each agent also one record of the next agent's. On
/// PostgreSQL the token lookups and the confirmations' reads share
/// statements; still every request is answered for its own agent: an old
/// token is refused, every record is its creator's, and another agent's
/// record is refused.
async fn gathered_reads_answer_each_request_with_its_own_agent_and_record(backend: Backend) {
    let t = TestServer::start(backend).await;
    let mut agents = Vec::new();
    let mut old_tokens = Vec::new();
    for n in 0..8 {
        let mut agent = t.register().await;
        if n % 2 == 0 {
            let rotated = t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": agent.id })).await;
            assert_eq!(rotated.status.as_u16(), 200, "{}", rotated.text);
            let old = Agent { id: agent.id.clone(), token: agent.token.clone(), recovery: agent.recovery.clone() };
            agent.token = rotated.json["auth_token"].as_str().unwrap().to_string();
            old_tokens.push(old);
        }
        agents.push(agent);
    }
    let shared_before = t.store.metrics().shared_reads.get();
    let direct_before = t.store.metrics().direct_reads.get();
    let remembered_before = t.store.metrics().remembered_records.get();
    let mut calls = Vec::new();
    for agent in &agents {
        calls.extend((0..20).map(|_| (agent, "/v1/dd/create", create_body(basic_axes()))));
    }
    for old in &old_tokens {
        calls.extend((0..10).map(|_| (old, "/v1/dd/create", create_body(basic_axes()))));
    }
    let replies = fire_all(&t, calls).await;
    let (current, old) = replies.split_at(8 * 20);
    assert!(current.iter().all(|(s, _)| *s == 201), "{:?}", current.iter().find(|(s, _)| *s != 201));
    assert!(old.iter().all(|(s, b)| *s == 401 && b["error_code"] == "INVALID_TOKEN"), "{:?}", old.iter().find(|(s, _)| *s != 401));
    let mut records: Vec<Vec<String>> = Vec::new();
    for agent in &agents {
        let list = t.get("/v1/dd/list?limit=100", Some(&agent.token)).await;
        assert_eq!(list.json["total"], json!(20), "{}", list.text);
        records.push(list.json["dds"].as_array().unwrap().iter().map(|d| d["dd_id"].as_str().unwrap().to_string()).collect());
    }
    let created: HashSet<&str> = current.iter().map(|(_, b)| b["dd_id"].as_str().unwrap()).collect();
    let listed: HashSet<&str> = records.iter().flatten().map(String::as_str).collect();
    assert_eq!(created, listed, "every record listed by the agent that created it");
    let mut confirms = Vec::new();
    for (a, agent) in agents.iter().enumerate() {
        confirms.extend(records[a].iter().map(|dd_id| (agent, "/v1/dd/confirm", json!({ "dd_id": dd_id }))));
    }
    for (a, agent) in agents.iter().enumerate() {
        confirms.push((agent, "/v1/dd/confirm", json!({ "dd_id": records[(a + 1) % 8][0] })));
    }
    // A rotated token confirms nothing, not even its own agent's record
    // (read beside the agent only under the agent's current token).
    for (i, old) in old_tokens.iter().enumerate() {
        confirms.push((old, "/v1/dd/confirm", json!({ "dd_id": records[2 * i][1] })));
    }
    let replies = fire_all(&t, confirms).await;
    let (own, rest) = replies.split_at(8 * 20);
    let (foreign, rotated) = rest.split_at(8);
    assert!(rotated.iter().all(|(s, b)| *s == 401 && b["error_code"] == "INVALID_TOKEN"), "{rotated:?}");
    assert!(own.iter().all(|(s, _)| *s == 200), "{:?}", own.iter().find(|(s, _)| *s != 200));
    let asked = records.iter().flatten();
    assert!(own.iter().zip(asked).all(|((_, b), dd_id)| b["dd_id"] == json!(dd_id)), "each confirm answers for the record it named");
    assert!(foreign.iter().all(|(s, b)| *s == 403 && b["error_code"] == "FORBIDDEN"), "{foreign:?}");
    assert_eq!(t.scalar("select count(*) from declaration where confirmed_at is not null").await, 160);
    let confirmations = (8 * 20 + 8 + 4) as u64;
    if backend == Backend::Postgres {
        assert!(t.store.metrics().shared_reads.get() > shared_before, "some reads shared a statement");
        assert_eq!(t.store.metrics().direct_reads.get(), 0, "PostgreSQL has no direct reader connections");
    } else {
        assert_eq!(t.store.metrics().shared_reads.get(), 0, "SQLite reads no gathered statement");
        // Every confirmation's token lookup beside its record (but those of
        // a record its create stored lately, used unread: 0088), and, where
        // the two did not match, the token alone, then (a current token) the
        // record alone; every create under an old token; each current token
        // once at least (a create may use the agent found by it lately: 0086).
        let direct = t.store.metrics().direct_reads.get() - direct_before;
        let remembered = t.store.metrics().remembered_records.get() - remembered_before;
        let least = confirmations - remembered + 2 * 8 + 4 + 4 * 10 + 8;
        assert!(direct >= least, "{direct} direct reads, fewer than {least}");
    }
    assert_eq!(t.store.metrics().failed_reads.get(), 0, "no gathered read failed as a whole (each would then run alone)");
    assert_eq!(t.store.metrics().failed_batches.get(), 0, "no batch failed as a whole");
    closes_once_idle(&t).await;
}

/// An agent enters and leaves a free idle-state stay at once, again and
/// again: an exit may close the stay between the entry's insert and its
/// answer, and the entry still answers 201 with the stay it opened (it read
/// the stay back, found it closed and answered 500). Every answer is one the
/// interface documents.
async fn entering_and_leaving_idle_state_at_once_is_never_a_server_error(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut entered = 0;
    for _ in 0..40 {
        let calls = vec![(&agent, "/v1/ise/enter", json!({ "payment_mode": "free" })), (&agent, "/v1/ise/exit", json!({}))];
        let replies = fire_all(&t, calls).await;
        let (enter, exit) = (&replies[0], &replies[1]);
        assert!(enter.0 == 201 || (enter.0 == 409 && enter.1["error_code"] == "SESSION_EXISTS"), "enter: {enter:?}");
        assert!(exit.0 == 200 || (exit.0 == 404 && exit.1["error_code"] == "NO_ACTIVE_SESSION"), "exit: {exit:?}");
        if enter.0 == 201 {
            entered += 1;
            assert_eq!(enter.1["payment_mode"], "free", "{enter:?}");
        }
        // Whatever the order was, leave no stay open for the next round.
        let left = t.post("/v1/ise/exit", Some(&agent.token), &json!({})).await;
        assert!(left.status == 200 || left.json["error_code"] == "NO_ACTIVE_SESSION", "{}", left.text);
    }
    assert_eq!(entered, 40, "each round's entry found no stay open");
}
