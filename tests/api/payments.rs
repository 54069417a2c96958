//! x402 v2 in local mode, driven from Rust: the challenge, a paid create that
//! waits for its confirmation, settlement at confirm, replays, tampering,
//! expiry, malformed headers.

use anchor_domain::Clock;
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use base64::Engine;
use serde_json::{Value, json};

/// A POST of `body` to `path` as `agent`, with `header` if any.
fn post(t: &TestServer, path: &str, agent: &Agent, body: &Value, header: Option<(&str, String)>) -> reqwest::RequestBuilder {
    let request = t.http.post(t.url(path)).bearer_auth(&agent.token).header("content-type", "application/json").body(body.to_string());
    match header {
        Some((name, value)) => request.header(name, value),
        None => request,
    }
}

async fn send(t: &TestServer, agent: &Agent, body: &Value, header: Option<(&str, String)>) -> Reply {
    let response = post(t, "/v1/dd/create", agent, body, header).send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    Reply { status, headers, json: serde_json::from_str(&text).unwrap_or(Value::Null), text }
}

/// An agent whose Trial is spent, and the 402 of its next EE_basic create.
async fn spent(t: &TestServer) -> (Agent, Value, Value) {
    let agent = t.register().await;
    t.clock.advance(chrono::Duration::days(31));
    let body = create_body(json!({ "ee_preset": "EE_basic" }));
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
    (agent, body, challenge)
}

/// A connection of its own to `t`'s PostgreSQL schema, as another host's.
async fn connection_beside(t: &TestServer) -> sqlx::PgConnection {
    let (url, schema) = t.postgres_schema().expect("a PostgreSQL schema");
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("url");
    sqlx::ConnectOptions::connect(&options.options([("search_path", schema)])).await.expect("a second connection")
}

/// Waits until some backend is blocked by `conn`'s locks, failing with
/// `never` after `within`. (Inside a transaction PostgreSQL answers
/// pg_stat_activity from the snapshot its first read took: each look takes
/// a new one.)
async fn wait_until_blocked_by(conn: &mut sqlx::PgConnection, within: std::time::Duration, never: &str) {
    let deadline = std::time::Instant::now() + within;
    loop {
        sqlx::query("select pg_stat_clear_snapshot()").execute(&mut *conn).await.unwrap();
        let waiting: i64 = sqlx::query_scalar("select count(*) from pg_stat_activity where pg_backend_pid() = any(pg_blocking_pids(pid))")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{never}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// POSTs `body` to `path` as `agent` (with `header`, if any) on a task of
/// its own, answering its status and body.
fn spawn_post(
    t: &TestServer,
    path: &str,
    agent: &Agent,
    body: &Value,
    header: Option<(&str, String)>,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let request = post(t, path, agent, body, header);
    tokio::spawn(async move {
        let reply = request.send().await.unwrap();
        (reply.status().as_u16(), reply.json::<Value>().await.unwrap())
    })
}

anchor_tests::both_backends!(
    a_paid_create_waits_for_confirm_then_settles,
    an_authorization_is_used_once,
    bad_payments_are_refused_with_their_reason,
    an_unconfirmed_paid_declaration_expires_after_thirty_minutes,
    the_dab_caps_external_spending_but_not_trial,
    facilitator_settles_reconciles_an_unknown_outcome_once_and_reports_failures,
    an_external_premium_is_paid_over_x402_while_trial_pays_the_base_fee,
    trial_pays_the_base_fee_when_it_cannot_pay_the_whole,
    a_payment_signed_before_a_price_switch_is_refused_and_never_charged,
    a_reservation_left_unconfirmed_is_released_by_the_service,
    a_confirmation_whose_client_hangs_up_is_finished,
);

/// The rule at a pricing switch: a request is priced by the generation in
/// force when it arrives, and its payment must be for that price. A payment
/// signed against the previous generation's challenge a moment before the
/// switch names the old amount: it is refused with a fresh challenge at the
/// new price, and nothing is reserved or settled, so the client's retry with
/// the new challenge is the only charge. (Where the switch leaves the route's
/// price as it was, the payment matches and is taken; the record names the
/// generation in force.)
async fn a_payment_signed_before_a_price_switch_is_refused_and_never_charged(backend: Backend) {
    use anchor_domain::pricing::Pricing;
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let wasm = component_bytes("pricing-alt");
    let alt = load_component("pricing-alt");
    let switch_at = t.clock.now() + chrono::Duration::days(31) + chrono::Duration::seconds(10);
    assert!(anchor_app::pricing::publish(t.store.as_ref(), alt.as_ref(), &wasm, switch_at, t.clock.now()).await.unwrap());
    let loader: anchor_app::pricing::Loader = std::sync::Arc::new(|wasm: &[u8]| {
        Ok(anchor_plugin_host::WasmPricing::load(engine(), wasm, anchor_plugin_host::Limits::PRICING)? as std::sync::Arc<dyn Pricing>)
    });
    assert_eq!(t.state.app.schedule.refresh(t.store.as_ref(), &loader).await.unwrap(), 1);
    let (agent, body, old_challenge) = spent(&t).await;
    assert_eq!(old_challenge["accepts"][0]["amount"], "10000", "v1.3.0's base fee");
    let signed_before = pay(&old_challenge, t.clock.now().timestamp(), Twist::default());
    // One second later the switch happened; then the payment arrives.
    t.clock.advance(chrono::Duration::seconds(11));
    let refused = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&signed_before)))).await;
    let new_challenge = challenge_of(&refused);
    assert_eq!(new_challenge["accepts"][0]["amount"], "20000", "a fresh challenge at the new generation's price");
    assert_eq!(new_challenge["error"], "No matching payment requirements");
    assert_eq!(t.scalar("select count(*) from x402_payment").await, 0, "nothing reserved");
    assert_eq!(t.scalar("select count(*) from declaration").await, 0, "nothing recorded");
    // The retry with the new challenge is the one charge.
    let paid =
        send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&pay(&new_challenge, t.clock.now().timestamp(), Twist::default()))))).await;
    assert_eq!(paid.status.as_u16(), 201, "{}", paid.text);
    let dd_id = paid.json["dd_id"].as_str().unwrap().to_string();
    assert_eq!(t.confirm(&agent, &dd_id).await.status.as_u16(), 200);
    assert_eq!(t.scalar("select count(*) from x402_payment").await, 1);
    assert_eq!(t.scalar("select amount_units from x402_payment").await, 20_000);
    assert_eq!(t.strings("select pricing_version from x402_payment").await, vec!["v9.0.0-test".to_string()]);
    let usage = t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0].amount.milli(), 20_000);
    assert_eq!(usage[0].priced_by, Some(anchor_ports::PricedBy { version: "v9.0.0-test".into(), sha256: alt.generation().sha256.clone() }));
}

async fn an_external_premium_is_paid_over_x402_while_trial_pays_the_base_fee(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut body = create_body(json!({ "ee_preset": "EE_high" }));
    body["premium_payment_source"] = json!("external");
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
    assert_eq!(challenge["accepts"][0]["amount"], "147500", "the premium alone: 157.5 - 10 DAC");
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    assert_eq!(created.json["status"], "pending_payment");
    assert_eq!(created.json["trial_payment"]["trial_remaining"], json!(490));
    assert_eq!(created.json["payment"]["amount_usdc"], json!(0.1475));
    assert_eq!(created.json["cost_breakdown"]["base_fee_source"], "trial");
    assert_eq!(created.json["cost_breakdown"]["premium_source"], "external");
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    let confirmed = t.confirm(&agent, &dd_id).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    assert_eq!(confirmed.json["payment_sources"], json!(["trial", "external"]), "distinct sources, not collapsed");
    let usage = t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap();
    let rows: Vec<(&str, &str, i64)> = usage.iter().map(|u| (u.cost_component.as_str(), u.source.as_str(), u.amount.milli())).collect();
    assert_eq!(rows, vec![("base_fee", "trial", 10_000), ("premium", "external", 147_500)]);
    // A refused premium payment debits nothing from Trial either.
    let mut again = create_body(json!({ "ee_preset": "EE_high" }));
    again["premium_payment_source"] = json!("external");
    let wrong = pay(&challenge, t.clock.now().timestamp(), Twist { value: Some(1), ..Twist::default() });
    let refused = send(&t, &agent, &again, Some(("PAYMENT-SIGNATURE", b64(&wrong)))).await;
    assert_eq!(refused.status.as_u16(), 402);
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(490));
}

/// Decision 0062: with 40 DAC of Trial left, an EE_standard declaration (45
/// DAC) is not challenged whole: Trial pays its 10 DAC base fee and x402 its
/// 35 DAC premium, and the 402 and the create say so. A split record never
/// confirmed gives its base fee back to Trial; with less than the base fee
/// left, x402 pays the whole.
async fn trial_pays_the_base_fee_when_it_cannot_pay_the_whole(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;

    t.tamper(&format!("update agent set trial_balance_milli = 40000 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    let body = create_body(json!({ "ee_preset": "EE_standard" }));
    let refused = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    let challenge = challenge_of(&refused);
    assert_eq!(challenge["accepts"][0]["amount"], "35000", "the premium alone: {challenge}");
    let description = challenge["resource"]["description"].as_str().unwrap();
    assert!(description.contains("Trial pays its 10 DAC base fee"), "{description}");
    assert_eq!(trial(&t, &agent).await, json!(40), "a challenge debits nothing");
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    assert_eq!(created.json["status"], "pending_payment");
    assert_eq!(
        (created.json["cost_breakdown"]["base_fee_source"].clone(), created.json["cost_breakdown"]["premium_source"].clone()),
        (json!("trial"), json!("external")),
        "{}",
        created.text
    );
    assert_eq!(created.json["trial_payment"]["trial_remaining"], json!(30));
    assert_eq!(created.json["payment"]["amount_usdc"], json!(0.035));
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    // Sent again without its payment (a retry after a timeout): the earlier
    // record, not a second challenge, before and after the confirmation.
    let retried = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!((retried.status.as_u16(), retried.json["dd_id"].as_str()), (201, Some(dd_id.as_str())), "{}", retried.text);
    let confirmed = t.confirm(&agent, &dd_id).await;
    assert_eq!(confirmed.json["payment_sources"], json!(["trial", "external"]), "{}", confirmed.text);
    assert_eq!(trial(&t, &agent).await, json!(30));
    let retried = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!((retried.status.as_u16(), retried.json["dd_id"].as_str()), (201, Some(dd_id.as_str())), "{}", retried.text);
    assert_eq!(trial(&t, &agent).await, json!(30), "a retry debits nothing");

    // Split again, never confirmed: the window passes and the base fee goes back.
    let again = create_body(json!({ "ee_preset": "EE_standard" }));
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &again).await);
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let pending = send(&t, &agent, &again, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    assert_eq!(pending.json["trial_payment"]["trial_remaining"], json!(20), "{}", pending.text);
    let pending_id = pending.json["dd_id"].as_str().unwrap().to_string();
    t.clock.advance(chrono::Duration::minutes(31));
    t.confirm(&agent, &pending_id).await.assert_error(410, "PAYMENT_EXPIRED");
    assert_eq!(trial(&t, &agent).await, json!(30), "the released record's base fee is Trial's again");

    // Under the base fee, x402 pays the whole.
    t.tamper(&format!("update agent set trial_balance_milli = 9000 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    let whole = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_standard" }))).await);
    assert_eq!(whole["accepts"][0]["amount"], "45000", "{whole}");
    assert!(whole["resource"]["description"].as_str().unwrap().contains("Trial holds 9 DAC"), "{whole}");
}

/// Decision 0083: a reservation nobody confirms is released by the service
/// fifteen minutes after its window closed, when no authorization can settle
/// any more, not only when a confirmation comes (which may never happen):
/// its DAB share and the base fee Trial paid beside it come back. A record
/// confirmed in its window and one whose settlement is in doubt are left as
/// they are, and the walk goes through the deadlines in order.
async fn a_reservation_left_unconfirmed_is_released_by_the_service(backend: Backend) {
    let options = Options { dab_default: anchor_domain::MilliDac::from_dac(500), jobs: false, ..Options::default() };
    let t = TestServer::with(backend, options).await;
    let agent = t.register().await;
    // 40 DAC of Trial: each EE_standard (45 DAC) is split, Trial 10 and x402 35.
    t.tamper(&format!("update agent set trial_balance_milli = 40000 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let body = create_body(json!({ "ee_preset": "EE_standard" }));
        let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
        let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
        let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
        assert_eq!(created.json["status"], "pending_payment", "{}", created.text);
        ids.push(created.json["dd_id"].as_str().unwrap().to_string());
        t.clock.advance(chrono::Duration::seconds(1));
    }
    assert_eq!(trial(&t, &agent).await, json!(10));
    let spent = || async { t.get("/v1/dab/status", Some(&agent.token)).await.json["spent_dac"].clone() };
    assert_eq!(spent().await, json!(105));
    t.clock.advance(chrono::Duration::minutes(10));
    assert_eq!(t.confirm(&agent, &ids[0]).await.status.as_u16(), 200);
    // The second's settlement outcome is unknown: only reconciliation may end it.
    t.tamper(&format!("update x402_payment set status = 'settle_unknown' where dd_id = {}", t.uuid_sql(&ids[1]))).await;
    let before = spent().await;

    let app = &t.state.app;
    let mut walked = None;
    assert_eq!(anchor_app::declarations::release_lapsed(app, &mut walked, 4).await.unwrap(), (0, false), "inside the window");
    // The window closed 14 minutes ago: a confirmation may still be settling.
    t.clock.advance(chrono::Duration::minutes(34));
    assert_eq!(anchor_app::declarations::release_lapsed(app, &mut walked, 4).await.unwrap(), (0, false), "inside the grace");
    assert_eq!(t.get(&format!("/v1/payment/{}/status", ids[2]), Some(&agent.token)).await.json["x402"]["status"], "reserved");
    t.clock.advance(chrono::Duration::minutes(2));
    assert_eq!(anchor_app::declarations::release_lapsed(app, &mut walked, 4).await.unwrap(), (1, false));
    assert_eq!(walked.map(|w| w.dd_id.to_string()), Some(ids[2].clone()), "the walk reached the last deadline");
    assert_eq!(anchor_app::declarations::release_lapsed(app, &mut walked, 4).await.unwrap(), (0, false), "once");
    let mut fresh = None;
    assert_eq!(anchor_app::declarations::release_lapsed(app, &mut fresh, 4).await.unwrap(), (0, false), "a new walk, once too");

    let status = t.get(&format!("/v1/payment/{}/status", ids[2]), Some(&agent.token)).await;
    assert_eq!((&status.json["settlement_status"], &status.json["x402"]["status"]), (&json!("released"), &json!("released")));
    assert_eq!(trial(&t, &agent).await, json!(20), "the released record's base fee is Trial's again");
    let after = spent().await;
    assert_eq!(before.as_f64().unwrap() - after.as_f64().unwrap(), 35.0, "{before} -> {after}");
    t.confirm(&agent, &ids[2]).await.assert_error(410, "PAYMENT_EXPIRED");
    let doubtful = t.get(&format!("/v1/payment/{}/status", ids[1]), Some(&agent.token)).await;
    assert_eq!((&doubtful.json["settlement_status"], &doubtful.json["x402"]["status"]), (&json!("pending"), &json!("settle_unknown")));
    let confirmed = t.get(&format!("/v1/payment/{}/status", ids[0]), Some(&agent.token)).await;
    assert_eq!(confirmed.json["settlement_status"], "settled");
}

async fn trial(t: &TestServer, agent: &Agent) -> Value {
    t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].clone()
}

async fn the_dab_caps_external_spending_but_not_trial(backend: Backend) {
    let t = TestServer::with(backend, Options { dab_default: anchor_domain::MilliDac::from_dac(100), ..Options::default() }).await;
    let agent = t.register().await;
    for _ in 0..3 {
        t.create(&agent, json!({ "ee_preset": "EE_high" })).await; // 472.5 of 500 Trial DAC
    }
    let now = t.clock.now().timestamp();
    // No Trial left to split with: each declaration is paid externally, whole.
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    for _ in 0..2 {
        // EE_standard costs 45 DAC, paid externally.
        let body = create_body(json!({ "ee_preset": "EE_standard" }));
        let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
        let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&pay(&challenge, now, Twist::default()))))).await;
        assert_eq!(created.json["status"], "pending_payment", "{}", created.text);
    }
    let dab = t.get("/v1/dab/status", Some(&agent.token)).await.json;
    assert_eq!(
        (&dab["budget_limit_dac"], &dab["spent_dac"], &dab["remaining_dac"], &dab["limit_source"]),
        (&json!(100), &json!(90), &json!(10), &json!("operator_default"))
    );
    // A third would reach 135 DAC: refused before any challenge, naming the cap and the reset.
    let refused = t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_standard" }))).await;
    refused.assert_error(403, "DAB_LIMIT_REACHED");
    assert!(refused.json["message"].as_str().unwrap().contains("100 DAC per month"));
    assert!(refused.json["message"].as_str().unwrap().contains("2026-12-01T00:00:00Z"), "{}", refused.text);
    // Trial-covered work is outside the cap.
    t.tamper(&format!("update agent set trial_balance_milli = 20000 where agent_id = {}", t.uuid_sql(&agent.id))).await;
    let trial = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    assert_eq!(trial["status"], "trial_paid");
}

async fn a_paid_create_waits_for_confirm_then_settles(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, body, challenge) = spent(&t).await;
    assert_eq!(challenge["accepts"][0]["amount"], "10000", "10 DAC = 0.01 USDC");
    assert_eq!(challenge["accepts"][0]["asset"], "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
    assert_eq!(challenge["accepts"][0]["extra"], json!({ "name": "USD Coin", "version": "2" }));
    let now = t.clock.now().timestamp();
    let payment = pay(&challenge, now, Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    assert_eq!(created.json["status"], "pending_payment");
    assert_eq!(created.json["settlement_status"], "pending");
    assert_eq!(created.json["payment"]["amount_usdc"], json!(0.01));
    assert_eq!(created.json["payment"]["payment_address"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
    assert!(created.json.get("trial_payment").is_none());
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();

    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["settlement_status"], "pending");
    assert_eq!(status.json["x402"]["status"], "reserved");
    assert_eq!(status.json["x402"]["payer"], "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266");

    t.clock.advance(chrono::Duration::minutes(29));
    let confirmed = t.confirm(&agent, &dd_id).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    assert_eq!(confirmed.json["payment_sources"], json!(["external"]));
    assert_eq!(confirmed.json["settlement_currency"], "USDC");
    // The estimates' rate is dated and sourced, the fixed indicative one too.
    assert!(confirmed.json["exchange_rate_timestamp"].as_str().is_some_and(|t| t.starts_with("2026-11-01T00:00:00")), "{}", confirmed.text);
    assert!(
        confirmed.json["exchange_rate_source"].as_str().is_some_and(|s| s.starts_with("a fixed indicative rate")),
        "{}",
        confirmed.text
    );
    let receipt: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD.decode(confirmed.headers["payment-response"].to_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["success"], json!(true));
    assert_eq!(receipt["network"], "eip155:8453");
    assert!(receipt["transaction"].as_str().unwrap().starts_with("local:0x"));
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["settlement_status"], "settled");
    let history: Vec<&str> = status.json["x402"]["history"].as_array().unwrap().iter().map(|h| h["status"].as_str().unwrap()).collect();
    assert_eq!(history, vec!["reserved", "settled"]);
    let usage = t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap();
    assert_eq!(usage.iter().map(|u| u.source.as_str()).collect::<Vec<_>>(), vec!["external"]);
    t.confirm(&agent, &dd_id).await.assert_error(409, "ALREADY_CONFIRMED");
}

async fn an_authorization_is_used_once(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, body, challenge) = spent(&t).await;
    let now = t.clock.now().timestamp();
    let header = b64(&pay(&challenge, now, Twist::default()));
    assert_eq!(send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", header.clone()))).await.status.as_u16(), 201);
    // The same request again is the same request: its earlier result.
    let again = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", header.clone()))).await;
    assert_eq!(again.status.as_u16(), 201);
    // The same authorization on another request is a replay.
    let replay = send(&t, &agent, &create_body(json!({ "ee_preset": "EE_basic" })), Some(("PAYMENT-SIGNATURE", header))).await;
    assert_eq!(challenge_of(&replay)["error"], "invalid_exact_evm_nonce_already_used");

    // Two concurrent uses of one fresh authorization: exactly one succeeds.
    let header = b64(&pay(&challenge, now, Twist::default()));
    let (first, second) = (create_body(json!({ "ee_preset": "EE_basic" })), create_body(json!({ "ee_preset": "EE_basic" })));
    let (a, b) = tokio::join!(
        send(&t, &agent, &first, Some(("PAYMENT-SIGNATURE", header.clone()))),
        send(&t, &agent, &second, Some(("PAYMENT-SIGNATURE", header.clone()))),
    );
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [201, 402], "{} / {}", a.text, b.text);
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(2));
}

async fn bad_payments_are_refused_with_their_reason(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, body, challenge) = spent(&t).await;
    let now = t.clock.now().timestamp();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "tampered accepted amount",
            {
                let mut p = pay(&challenge, now, Twist::default());
                p["accepted"]["amount"] = json!("1");
                p
            },
            "No matching payment requirements",
        ),
        (
            "tampered authorization value",
            pay(&challenge, now, Twist { value: Some(1), ..Twist::default() }),
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ),
        (
            "wrong payTo",
            pay(&challenge, now, Twist { to: Some("0x000000000000000000000000000000000000dEaD"), ..Twist::default() }),
            "invalid_exact_evm_recipient_mismatch",
        ),
        (
            "wrong EIP-712 domain",
            pay(&challenge, now, Twist { domain_name: Some("USDC"), ..Twist::default() }),
            "invalid_exact_evm_signature",
        ),
        (
            "expired authorization",
            pay(&challenge, now, Twist { valid_before_in: Some(3), ..Twist::default() }),
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            "wrong signer",
            pay(&challenge, now, Twist { claim_from: Some("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), ..Twist::default() }),
            "invalid_exact_evm_signature",
        ),
        (
            "x402 version 1",
            {
                let mut p = pay(&challenge, now, Twist::default());
                p["x402Version"] = json!(1);
                p
            },
            "invalid_x402_version",
        ),
    ];
    for (name, payment, reason) in cases {
        let reply = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
        assert_eq!(reply.status.as_u16(), 402, "{name}: {}", reply.text);
        assert_eq!(challenge_of(&reply)["error"], reason, "{name}");
    }
    send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", "%%%not base64%%%".into()))).await.assert_error(400, "INVALID_PAYLOAD");
    send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", base64::engine::general_purpose::STANDARD.encode("{not json"))))
        .await
        .assert_error(400, "INVALID_PAYLOAD");
    // A bad request gets its 400 before any payment is looked at.
    let mut invalid = body.clone();
    invalid["dd"]["selection_state"] = json!("maybe");
    send(&t, &agent, &invalid, Some(("PAYMENT-SIGNATURE", b64(&pay(&challenge, now, Twist::default())))))
        .await
        .assert_error(400, "INVALID_ENUM");
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(0), "nothing was recorded");
    // Both headers with different payments are refused; X-PAYMENT alone (the
    // header the published JS SDK retries with) pays like PAYMENT-SIGNATURE.
    let reply = t
        .call_with(
            "POST",
            "/v1/dd/create",
            &[
                ("authorization", &format!("Bearer {}", agent.token)),
                ("payment-signature", &b64(&pay(&challenge, now, Twist::default()))),
                ("x-payment", &b64(&pay(&challenge, now, Twist::default()))),
            ],
            Some(&body),
        )
        .await;
    reply.assert_error(400, "INVALID_PAYLOAD");
    let legacy = send(&t, &agent, &body, Some(("X-PAYMENT", b64(&pay(&challenge, now, Twist::default()))))).await;
    assert_eq!(legacy.status.as_u16(), 201, "{}", legacy.text);
    assert_eq!(legacy.json["status"], "pending_payment");
}

async fn an_unconfirmed_paid_declaration_expires_after_thirty_minutes(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, body, challenge) = spent(&t).await;
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    t.clock.advance(chrono::Duration::minutes(31));
    t.confirm(&agent, &dd_id).await.assert_error(410, "PAYMENT_EXPIRED");
    t.confirm(&agent, &dd_id).await.assert_error(410, "PAYMENT_EXPIRED");
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["settlement_status"], "released");
    assert_eq!(status.json["x402"]["status"], "released");
    assert!(
        t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap().is_empty(),
        "released records leave no usage entry"
    );
    t.get(&format!("/v1/dd/{dd_id}/receipt"), Some(&agent.token)).await.assert_error(409, "NOT_CONFIRMED");
}

/// A stand-in facilitator on loopback: the x402 facilitator HTTP API, with
/// settle behaviour the test sets, counting settlements that "moved money".
mod stub {
    use std::sync::Arc;

    use serde_json::{Value, json};

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Settle {
        Succeed,
        /// Moves the money, then answers too late.
        SucceedSlowly,
        /// Moves the money, then answers 400 ms later (in time).
        SucceedAfterAWhile,
        Refuse,
    }

    pub struct Facilitator {
        pub url: String,
        pub behaviour: Arc<std::sync::Mutex<Settle>>,
        /// Authorizations the chain saw settle (by nonce).
        pub moved: Arc<std::sync::Mutex<Vec<String>>>,
        pub auth_seen: Arc<std::sync::Mutex<Vec<String>>>,
    }

    pub async fn start() -> Facilitator {
        use axum::routing::{get, post};
        let behaviour = Arc::new(std::sync::Mutex::new(Settle::Succeed));
        let moved = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let auth_seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (b, m, a) = (behaviour.clone(), moved.clone(), auth_seen.clone());
        let app = axum::Router::new()
            .route("/supported", get(|| async { axum::Json(json!({ "kinds": [{ "x402Version": 2, "scheme": "exact", "network": "eip155:8453" }] })) }))
            .route("/verify", post(|axum::Json(_body): axum::Json<Value>| async { axum::Json(json!({ "isValid": true })) }))
            .route(
                "/settle",
                post(move |headers: axum::http::HeaderMap, axum::Json(body): axum::Json<Value>| {
                    let (b, m, a) = (b.clone(), m.clone(), a.clone());
                    async move {
                        if let Some(key) = headers.get("x-api-key") {
                            a.lock().unwrap().push(key.to_str().unwrap().to_string());
                        }
                        let nonce = body["paymentPayload"]["payload"]["authorization"]["nonce"].as_str().unwrap().to_string();
                        let payer = body["paymentPayload"]["payload"]["authorization"]["from"].clone();
                        if m.lock().unwrap().contains(&nonce) {
                            // The chain refuses a used nonce: nothing moves twice.
                            return axum::Json(json!({ "success": false, "errorReason": "invalid_exact_evm_nonce_already_used", "transaction": "", "network": "eip155:8453", "payer": payer }));
                        }
                        let behaviour = *b.lock().unwrap();
                        match behaviour {
                            Settle::Refuse => axum::Json(json!({ "success": false, "errorReason": "invalid_exact_evm_insufficient_balance", "transaction": "", "network": "eip155:8453", "payer": payer })),
                            Settle::Succeed | Settle::SucceedSlowly | Settle::SucceedAfterAWhile => {
                                m.lock().unwrap().push(nonce);
                                if behaviour == Settle::SucceedSlowly {
                                    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                                }
                                if behaviour == Settle::SucceedAfterAWhile {
                                    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
                                }
                                axum::Json(json!({ "success": true, "transaction": "0xfeedbeef", "network": "eip155:8453", "payer": payer }))
                            }
                        }
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Facilitator { url, behaviour, moved, auth_seen }
    }
}

async fn with_facilitator(backend: Backend) -> (TestServer, stub::Facilitator) {
    use anchor_x402::settlement::{FacilitatorSettler, StaticHeader};
    let facilitator = stub::start().await;
    let settler = FacilitatorSettler::connect(
        &facilitator.url,
        std::sync::Arc::new(StaticHeader(Some(("x-api-key".into(), "test-key".into())))),
        std::time::Duration::from_secs(2),
        std::time::Duration::from_millis(500),
    )
    .await
    .expect("the stub lists exact on Base");
    // No jobs loop: the test runs the reconciler itself, and a loop doing it
    // too would race the confirmation that is to reconcile (a CI run saw the
    // loop confirm first, and the test's confirmation answered 409).
    let options = Options { settler: Some(std::sync::Arc::new(settler)), jobs: false, ..Options::default() };
    let t = TestServer::with(backend, options).await;
    (t, facilitator)
}

/// A client that closes its connection while its confirmation is settling
/// (a timeout, a crash) does not stop it half-way: the money moved, so the
/// record is anchored and the payment settled, as if the client had waited.
/// Dropped with the connection, the confirmation left the payment reserved
/// after the money moved, and the next confirmation, settling it again, was
/// refused for the used nonce and failed the record.
async fn a_confirmation_whose_client_hangs_up_is_finished(backend: Backend) {
    use tokio::io::AsyncWriteExt;
    let (t, facilitator) = with_facilitator(backend).await;
    let (agent, body, challenge) = spent(&t).await;
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    *facilitator.behaviour.lock().unwrap() = stub::Settle::SucceedAfterAWhile;

    let address = t.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let confirm = json!({ "dd_id": dd_id }).to_string();
    let request = format!(
        "POST /v1/dd/confirm HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{confirm}",
        agent.token,
        confirm.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    drop(stream);
    // The settlement answers 400 ms after it began (within the settler's
    // 500 ms); the record follows it.
    let mut status = Value::Null;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await.json;
        if status["settlement_status"] != "pending" {
            break;
        }
    }
    assert_eq!(facilitator.moved.lock().unwrap().len(), 1, "the money moved once");
    assert_eq!((&status["settlement_status"], &status["x402"]["status"]), (&json!("settled"), &json!("settled")), "{status}");
    t.confirm(&agent, &dd_id).await.assert_error(409, "ALREADY_CONFIRMED");
}

async fn facilitator_settles_reconciles_an_unknown_outcome_once_and_reports_failures(backend: Backend) {
    let (t, facilitator) = with_facilitator(backend).await;
    let (agent, _, challenge) = spent(&t).await;
    let now = t.clock.now().timestamp();
    let paid = |body: &Value| {
        let header = b64(&pay(&challenge, now, Twist::default()));
        (body.clone(), header)
    };

    // 1. Settles through the facilitator, with the configured auth header.
    let (body, header) = paid(&create_body(json!({ "ee_preset": "EE_basic" })));
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", header))).await;
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    let confirmed = t.confirm(&agent, &dd_id).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    assert_eq!(facilitator.auth_seen.lock().unwrap().first().map(String::as_str), Some("test-key"));
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["x402"]["settlement_ref"], "0xfeedbeef");

    // 2. A settle that times out leaves the payment unknown; confirming again
    //    reconciles it; the money moved exactly once.
    *facilitator.behaviour.lock().unwrap() = stub::Settle::SucceedSlowly;
    let (body, header) = paid(&create_body(json!({ "ee_preset": "EE_basic" })));
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", header))).await;
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    t.confirm(&agent, &dd_id).await.assert_error(503, "SETTLEMENT_PENDING");
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["x402"]["status"], "settle_unknown");
    assert_eq!(status.json["settlement_status"], "pending", "nothing anchored while unknown");
    // Its money may have moved: it counts against the DAB, as both payments do.
    let kept = t.scalar("select cast(coalesce(sum(spent_units), 0) as bigint) from dab_spent").await;
    let paid_in_all = t.scalar("select cast(coalesce(sum(amount_units), 0) as bigint) from x402_payment").await;
    assert!(paid_in_all > 0);
    assert_eq!(kept, paid_in_all, "the DAB's running total counts the unknown payment");
    *facilitator.behaviour.lock().unwrap() = stub::Settle::Succeed;
    // Even past the window: an unknown outcome is reconciled, not released.
    t.clock.advance(chrono::Duration::minutes(40));
    let reconciled = t.confirm(&agent, &dd_id).await;
    assert_eq!(reconciled.status.as_u16(), 200, "{}", reconciled.text);
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["x402"]["status"], "settled");
    let history: Vec<&str> = status.json["x402"]["history"].as_array().unwrap().iter().map(|h| h["status"].as_str().unwrap()).collect();
    assert_eq!(history, vec!["reserved", "settle_unknown", "settled"]);
    assert_eq!(facilitator.moved.lock().unwrap().len(), 2, "two payments moved money, each once");
    t.confirm(&agent, &dd_id).await.assert_error(409, "ALREADY_CONFIRMED");

    // 2b. An unknown outcome whose agent never confirms again: the reconciler
    //     settles it once and anchors the declaration.
    *facilitator.behaviour.lock().unwrap() = stub::Settle::SucceedSlowly;
    let now = t.clock.now().timestamp();
    let body = create_body(json!({ "ee_preset": "EE_basic" }));
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&pay(&challenge, now, Twist::default()))))).await;
    let abandoned = created.json["dd_id"].as_str().unwrap().to_string();
    t.confirm(&agent, &abandoned).await.assert_error(503, "SETTLEMENT_PENDING");
    *facilitator.behaviour.lock().unwrap() = stub::Settle::Succeed;
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 0, "nothing left to do");
    let status = t.get(&format!("/v1/payment/{abandoned}/status"), Some(&agent.token)).await;
    assert_eq!((status.json["settlement_status"].as_str(), status.json["x402"]["status"].as_str()), (Some("settled"), Some("settled")));
    assert_eq!(facilitator.moved.lock().unwrap().len(), 3, "three payments, each moved once");
    t.confirm(&agent, &abandoned).await.assert_error(409, "ALREADY_CONFIRMED");

    // 3. A refused settlement: 402 with PAYMENT-RESPONSE success false; nothing kept.
    *facilitator.behaviour.lock().unwrap() = stub::Settle::Refuse;
    let now = t.clock.now().timestamp();
    let header = b64(&pay(&challenge, now, Twist::default()));
    let body = create_body(json!({ "ee_preset": "EE_basic" }));
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", header))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    let failed = t.confirm(&agent, &dd_id).await;
    assert_eq!(failed.status.as_u16(), 402, "{}", failed.text);
    let response: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD.decode(failed.headers["payment-response"].to_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(response["success"], json!(false));
    assert_eq!(response["errorReason"], "invalid_exact_evm_insufficient_balance");
    assert!(t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap().is_empty());
    t.confirm(&agent, &dd_id).await.assert_error(409, "PAYMENT_FAILED");
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(
        (status.json["settlement_status"].as_str(), status.json["x402"]["status"].as_str()),
        (Some("failed"), Some("settle_failed"))
    );
}

/// A structural check of a JSON value against an OpenAPI 3.0 schema: types,
/// required properties, enums and nested objects/arrays, with `$ref`s
/// resolved in `doc`. Enough for the reference's X402Challenge.
fn conforms(doc: &Value, schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return conforms(doc, doc.pointer(&r.replace("#/", "/")).expect("ref resolves"), value, path, problems);
    }
    let kind_ok = match schema.get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !kind_ok {
        problems.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if value.get(required.as_str().unwrap()).is_none() {
            problems.push(format!("{path}: missing {required}"));
        }
    }
    if let (Some(props), Some(object)) = (schema.get("properties").and_then(Value::as_object), value.as_object()) {
        for (name, sub) in props {
            if let Some(v) = object.get(name) {
                conforms(doc, sub, v, &format!("{path}.{name}"), problems);
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, v) in array.iter().enumerate() {
            conforms(doc, items, v, &format!("{path}[{i}]"), problems);
        }
    }
}

#[tokio::test]
async fn every_challenge_validates_against_the_reference_schema() {
    let reference = reference_interface();
    let schema = &reference["components"]["schemas"]["X402Challenge"];
    let t = TestServer::start(Backend::Sqlite).await;
    let (agent, body, challenge) = spent(&t).await;
    let now = t.clock.now().timestamp();
    // The plain challenge, and the challenges that carry a refusal reason.
    let mut challenges = vec![challenge.clone()];
    let expired = send(
        &t,
        &agent,
        &body,
        Some(("PAYMENT-SIGNATURE", b64(&pay(&challenge, now, Twist { valid_before_in: Some(3), ..Twist::default() })))),
    )
    .await;
    challenges.push(challenge_of(&expired));
    let high = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_high" }))).await);
    assert_eq!(high["accepts"][0]["amount"], "157500");
    challenges.push(high);
    for challenge in &challenges {
        let mut problems = Vec::new();
        conforms(&reference, schema, challenge, "X402Challenge", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        // What the schema leaves optional, the service always sends.
        for key in ["x402Version", "error", "resource", "accepts"] {
            assert!(challenge.get(key).is_some(), "{key}");
        }
        assert_eq!(challenge["accepts"].as_array().unwrap().len(), 1);
    }
    // The check itself can fail: a v1 challenge with a numeric amount does not conform.
    let mut wrong = challenges[0].clone();
    wrong["x402Version"] = json!(1);
    wrong["accepts"][0]["amount"] = json!(10000);
    let mut problems = Vec::new();
    conforms(&reference, schema, &wrong, "X402Challenge", &mut problems);
    assert_eq!(problems.len(), 2, "{problems:?}");
}

/// PostgreSQL: the batch's settling confirmations are one statement, which
/// moves each payment to settled and then confirms its record. A record
/// released by another writer between the two (held here under a row lock
/// while the statement waits for it) makes that statement fail as a whole:
/// the payment it had moved stays reserved, nothing is settled or written
/// for the record, and the confirmation, run again alone, answers that the
/// window closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_racing_a_release_writes_nothing() {
    if postgres_or_skip("payments::a_settlement_racing_a_release_writes_nothing").is_none() {
        return;
    }
    let t = TestServer::start(Backend::Postgres).await;
    let (agent, body, challenge) = spent(&t).await;
    let created =
        send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()))))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    let mut other = connection_beside(&t).await;
    let id = uuid::Uuid::parse_str(&dd_id).unwrap();
    sqlx::query("begin").execute(&mut other).await.unwrap();
    sqlx::query("select 1 from declaration where dd_id = $1 for update").bind(id).execute(&mut other).await.unwrap();

    let confirm = spawn_post(&t, "/v1/dd/confirm", &agent, &json!({ "dd_id": dd_id }), None);
    // The settling statement has moved the payment and waits for the record.
    wait_until_blocked_by(&mut other, std::time::Duration::from_secs(10), "the settling statement never waited for the record's lock")
        .await;
    sqlx::query("update declaration set settlement_status = 'released' where dd_id = $1").bind(id).execute(&mut other).await.unwrap();
    sqlx::query("commit").execute(&mut other).await.unwrap();

    let (status, reply) = confirm.await.unwrap();
    assert_eq!((status, reply["error_code"].as_str()), (410, Some("PAYMENT_EXPIRED")), "{reply}");
    let payment = |column: &str| format!("select count(*) from x402_payment where dd_id = {} and status = '{column}'", t.uuid_sql(&dd_id));
    assert_eq!(t.scalar(&payment("settled")).await, 0, "the payment was not settled");
    assert_eq!(t.scalar(&payment("reserved")).await, 1, "the payment is as the release left it");
    assert_eq!(t.scalar("select count(*) from x402_payment_event where status = 'settled'").await, 0);
    assert_eq!(t.scalar("select count(*) from usage_entry").await, 0, "no usage written");
    assert_eq!(t.scalar("select (select count(*) from log_pending) + (select count(*) from log_entry)").await, 0, "no log leaf queued");
    assert_eq!(t.scalar("select count(*) from declaration where confirmed_at is not null").await, 0);
    assert_eq!(t.store.metrics().failed_batches.get(), 1, "the settling statement failed as a whole, once");
}

/// PostgreSQL: a batch of paid creates is one statement that locks its
/// agents, then counts their DAB spending as committed once the locks are
/// held (decision 0090). Another writer of an agent's spending (here a
/// transaction of a second connection, as of another host) holds the
/// agent's row and adds 95 DAC of spending while a paid create of 10 DAC,
/// under a DAB of 100, waits for it: once that commits, the create is
/// refused with DAB_LIMIT_REACHED and reserves nothing. A statement that
/// counted the spending as it stood when it began would have taken the
/// payment past the DAB. Then 5 DAC more of room lets the next one pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_create_waiting_for_its_agent_counts_what_was_spent_meanwhile() {
    if postgres_or_skip("payments::a_paid_create_waiting_for_its_agent_counts_what_was_spent_meanwhile").is_none() {
        return;
    }
    let options = Options { dab_default: anchor_domain::MilliDac::from_dac(100), ..Options::default() };
    let t = TestServer::with(Backend::Postgres, options).await;
    let (agent, body, challenge) = spent(&t).await;
    let price = challenge["accepts"][0]["amount"].as_str().unwrap().parse::<i64>().unwrap();
    assert_eq!(price, 10_000, "EE_basic's base fee, 10 DAC in USDC base units");
    let mut other = connection_beside(&t).await;
    let agent_id = uuid::Uuid::parse_str(&agent.id).unwrap();
    let period = t.clock.now().format("%Y-%m").to_string();
    sqlx::query("begin").execute(&mut other).await.unwrap();
    sqlx::query("select 1 from agent where agent_id = $1 for no key update").bind(agent_id).execute(&mut other).await.unwrap();
    sqlx::query("insert into dab_spent (agent_id, period, spent_units) values ($1, $2, 95000)")
        .bind(agent_id)
        .bind(&period)
        .execute(&mut other)
        .await
        .unwrap();

    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let create = spawn_post(&t, "/v1/dd/create", &agent, &body, Some(("PAYMENT-SIGNATURE", payment)));
    // The paid statement waits for the agent's row.
    wait_until_blocked_by(&mut other, std::time::Duration::from_secs(5), "the paid create never waited for the agent's row").await;
    assert!(!create.is_finished(), "answered while the agent's row was held");
    sqlx::query("commit").execute(&mut other).await.unwrap();
    let (status, reply) = create.await.unwrap();
    assert_eq!((status, reply["error_code"].as_str()), (403, Some("DAB_LIMIT_REACHED")), "{reply}");
    assert_eq!(t.scalar("select count(*) from x402_payment").await, 0, "nothing reserved");
    assert_eq!(t.scalar("select count(*) from declaration").await, 0, "nothing recorded");

    sqlx::query("update dab_spent set spent_units = 90000 where agent_id = $1").bind(agent_id).execute(&mut other).await.unwrap();
    let again = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let created = send(&t, &agent, &create_body(json!({ "ee_preset": "EE_basic" })), Some(("PAYMENT-SIGNATURE", again))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let dab = t.get("/v1/dab/status", Some(&agent.token)).await.json;
    assert_eq!((&dab["spent_dac"], &dab["remaining_dac"]), (&json!(100), &json!(0)));
    assert_eq!(t.store.metrics().failed_batches.get(), 0, "the paid statement never failed as a whole");
}

/// PostgreSQL: settling a payment changes its status, its reference and
/// its update time; no index of the payments names one of them (in its
/// key, its expressions or its predicate), so a settlement can rewrite the
/// row on its page without an entry in any index (a HOT update, migration
/// 0034). The subjects paid at most once keep their guard: a second live
/// payment for the same stay is refused by the database itself, and once
/// the first is released a new one is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_touches_no_index_and_a_stay_keeps_one_live_payment() {
    if postgres_or_skip("payments::a_settlement_touches_no_index_and_a_stay_keeps_one_live_payment").is_none() {
        return;
    }
    let t = TestServer::start(Backend::Postgres).await;
    let definitions = t.strings("select pg_get_indexdef(indexrelid) from pg_index where indrelid = 'x402_payment'::regclass").await;
    assert!(definitions.iter().any(|d| d.contains("x402_payment_one_per_stay")), "{definitions:?}");
    for changed in ["status", "settlement_ref", "updated_at", "error_reason"] {
        let naming: Vec<_> = definitions.iter().filter(|d| d.contains(changed)).collect();
        assert!(naming.is_empty(), "an index names {changed}, which a settlement changes: {naming:?}");
    }

    let agent = t.register().await;
    let mut db = connection_beside(&t).await;
    let (agent_id, stay) = (uuid::Uuid::parse_str(&agent.id).unwrap(), uuid::Uuid::new_v4());
    let insert = |nonce: &'static str| {
        sqlx::query(
            "insert into x402_payment (payment_id, network, asset, payer, nonce, amount_units, pay_to, valid_after, valid_before, \
             route, agent_id, payload, status, created_at, updated_at, subject_domain, subject_id) \
             values ($1, 'eip155:8453', '0xa', '0xb', $2, 10, '0xc', 0, 1, 'POST /v1/ise/enter', $3, '{}', 'reserved', now(), now(), \
             'ise_session', $4)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(nonce)
        .bind(agent_id)
        .bind(stay)
    };
    insert("0x01").execute(&mut db).await.expect("the stay's first payment");
    let twice = insert("0x02").execute(&mut db).await.expect_err("a second live payment for the same stay");
    assert!(twice.to_string().contains("x402_payment_one_per_stay"), "{twice}");
    sqlx::query("update x402_payment set status = 'settled' where nonce = '0x01'").execute(&mut db).await.unwrap();
    insert("0x02").execute(&mut db).await.expect_err("a settled payment is live too");
    sqlx::query("update x402_payment set status = 'released' where nonce = '0x01'").execute(&mut db).await.unwrap();
    insert("0x02").execute(&mut db).await.expect("once the first is released, a new payment for the stay");
}

/// A confirmation whose payment settled but whose record was refused (a
/// trigger refuses the declaration's confirming update with a serialization
/// failure while it is in place, tries again included): the payment is left
/// unknown with its settlement's reference, not reserved, so the next
/// confirmation anchors it without settling again (a facilitator asked again
/// might refuse what already went through, as this script does), where it
/// had failed the declaration whose money had moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_confirmation_whose_record_was_refused_is_finished_by_the_next() {
    if postgres_or_skip("payments::a_settled_confirmation_whose_record_was_refused_is_finished_by_the_next").is_none() {
        return;
    }
    use anchor_x402::settlement::Settled;
    // Popped from the end: the first settlement goes through; a second would be refused.
    let script = anchor_tests::x402::Scripted::new(vec![
        Settled::No { reason: "insufficient_funds".into() },
        Settled::Yes { reference: "0xsettled".into() },
    ]);
    let t = TestServer::with(Backend::Postgres, Options { settler: Some(script), jobs: false, ..Default::default() }).await;
    let (agent, body, challenge) = spent(&t).await;
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = send(&t, &agent, &body, Some(("PAYMENT-SIGNATURE", b64(&payment)))).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    t.tamper(
        "create function refuse_confirm() returns trigger language plpgsql as $$ begin \
           if new.confirmed_at is not null and old.confirmed_at is null then \
             raise exception 'refused for the test' using errcode = '40001'; end if; \
           return new; end $$; \
         create trigger refuse_confirm before update on declaration for each row execute function refuse_confirm()",
    )
    .await;
    t.confirm(&agent, &dd_id).await.assert_error(503, "SETTLEMENT_PENDING");
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!(status.json["x402"]["status"], "settle_unknown", "{}", status.text);

    t.tamper("drop trigger refuse_confirm on declaration").await;
    let confirmed = t.confirm(&agent, &dd_id).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    let status = t.get(&format!("/v1/payment/{dd_id}/status"), Some(&agent.token)).await;
    assert_eq!((status.json["settlement_status"].clone(), status.json["x402"]["status"].clone()), (json!("settled"), json!("settled")));
    assert_eq!(t.strings("select settlement_ref from x402_payment").await, ["0xsettled"], "the first settlement's reference");
    assert!(!status.text.contains("refused for the test"), "the database's error stays in the log: {}", status.text);
}
