//! Indefinite retention: every transition of the subscription table with the
//! clock moved (none -> active -> grace -> active again, grace -> expired),
//! the monthly charge from Earned DAC, the demotion of indefinite records on
//! expiry (from the grace's end, for good), the feature switch, and parallel
//! subscribes charging once.

use anchor_domain::Clock;
use anchor_tests::*;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

both_backends!(
    the_subscription_table_with_the_clock_moved,
    months_are_billed_from_earned_and_an_unpaid_one_starts_the_grace,
    parallel_subscribes_charge_once,
    switched_off_it_answers_503,
    the_agents_own_profile_counts_its_demoted_records
);

async fn earned(t: &TestServer, agent: &Agent) -> Value {
    t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json["earned_balance"].clone()
}

async fn status(t: &TestServer, agent: &Agent) -> Value {
    let reply = t.get("/v1/retention/indefinite/status", Some(&agent.token)).await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    reply.json
}

async fn subscribe(t: &TestServer, agent: &Agent) -> Reply {
    t.call("POST", "/v1/retention/indefinite/subscribe", Some(&agent.token), None).await
}

async fn indefinite(t: &TestServer, agent: &Agent) -> Reply {
    let mut ee = basic_axes();
    ee["ee_retention_period"] = json!("indefinite");
    t.post("/v1/dd/create", Some(&agent.token), &create_body(ee)).await
}

async fn detail(t: &TestServer, agent: &Agent, dd_id: &str) -> Value {
    let reply = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
    reply.json["retention"].clone()
}

fn at(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap_or_else(|| panic!("not a time: {value}"))).unwrap().with_timezone(&Utc)
}

async fn jobs(t: &TestServer) -> (anchor_ports::Billed, usize) {
    anchor_app::retention::run_due(&t.state.app).await.unwrap()
}

/// The jobs are driven by the test alone (a background round could run
/// them between a clock move and the test's own call).
async fn server(backend: Backend) -> TestServer {
    TestServer::with(backend, Options { jobs: false, ..Default::default() }).await
}

async fn the_subscription_table_with_the_clock_moved(backend: Backend) {
    let t = server(backend).await;
    let agent = t.register().await;
    let start = t.clock.now();
    assert_eq!(status(&t, &agent).await["status"], "none");
    indefinite(&t, &agent).await.assert_error(403, "INDEFINITE_SUBSCRIPTION_REQUIRED");
    t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");

    // none -> active needs the month from Earned DAC (a plain 402, no challenge).
    let refused = subscribe(&t, &agent).await;
    refused.assert_error(402, "INSUFFICIENT_DAC");
    assert!(refused.headers.get("payment-required").is_none(), "no x402 challenge on this route");
    t.credit_earned(&agent, 120).await;
    let active = subscribe(&t, &agent).await;
    assert_eq!(active.status.as_u16(), 200, "{}", active.text);
    assert_eq!((active.json["status"].clone(), active.json["reactivated"].clone()), (json!("active"), json!(false)));
    assert_eq!((active.json["monthly_dac"].clone(), active.json["charged_dac"].clone()), (json!(50), json!(50)));
    assert_eq!(at(&active.json["next_billing_at"]), start + chrono::Months::new(1));
    assert_eq!(earned(&t, &agent).await, json!(70));
    subscribe(&t, &agent).await.assert_error(409, "ALREADY_SUBSCRIBED");

    // Active: indefinite records are accepted, with no retention end.
    let kept = indefinite(&t, &agent).await;
    assert_eq!(kept.status.as_u16(), 201, "{}", kept.text);
    let kept_id = kept.json["dd_id"].as_str().unwrap().to_string();
    assert_eq!(t.confirm(&agent, &kept_id).await.status.as_u16(), 200);
    assert_eq!(
        detail(&t, &agent, &kept_id).await,
        json!({ "effective_retention_period": "indefinite", "retention_expires_at": null, "retention_demoted_at": null })
    );
    let short = t.create(&agent, basic_axes()).await;
    let short_detail = detail(&t, &agent, short["dd_id"].as_str().unwrap()).await;
    assert_eq!(at(&short_detail["retention_expires_at"]), start + Duration::days(90), "a short record is kept 90 days");

    // active -> grace (cancel); grace does not allow indefinite records.
    t.clock.advance(Duration::days(3));
    let cancelled = t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await;
    assert_eq!(cancelled.status.as_u16(), 200, "{}", cancelled.text);
    assert_eq!(cancelled.json["status"], "grace");
    assert_eq!(at(&cancelled.json["grace_ends_at"]), t.clock.now() + Duration::days(14));
    assert_eq!(status(&t, &agent).await["status"], "grace");
    indefinite(&t, &agent).await.assert_error(403, "INDEFINITE_SUBSCRIPTION_REQUIRED");
    t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");

    // grace -> active within the grace: reactivated, nothing charged (the month runs on).
    t.clock.advance(Duration::days(5));
    let back = subscribe(&t, &agent).await;
    assert_eq!(back.status.as_u16(), 200, "{}", back.text);
    assert_eq!((back.json["reactivated"].clone(), back.json["charged_dac"].clone()), (json!(true), json!(0)));
    assert_eq!(earned(&t, &agent).await, json!(70));
    assert_eq!(status(&t, &agent).await["grace_started_at"], Value::Null);

    // grace -> expired: 14 days after a second cancel; expired before the job runs, demoted when it does.
    t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await;
    let grace_end = t.clock.now() + Duration::days(14);
    t.clock.advance(Duration::days(14) - Duration::seconds(1));
    assert_eq!(jobs(&t).await.1, 0, "a second before the grace ends nothing expires");
    assert_eq!(status(&t, &agent).await["status"], "grace");
    t.clock.advance(Duration::seconds(1));
    let expired = status(&t, &agent).await;
    assert_eq!((expired["status"].clone(), expired["indefinite_dd_count"].clone()), (json!("expired"), json!(1)), "{expired}");
    t.clock.advance(Duration::hours(2));
    assert_eq!(jobs(&t).await.1, 1);
    assert_eq!(jobs(&t).await.1, 0, "expired once");
    let demoted = detail(&t, &agent, &kept_id).await;
    assert_eq!(demoted["effective_retention_period"], "short");
    assert_eq!(at(&demoted["retention_demoted_at"]), grace_end, "demoted at the grace's end, not when the job ran");
    assert_eq!(at(&demoted["retention_expires_at"]), grace_end + Duration::days(90));
    let after = status(&t, &agent).await;
    assert_eq!((after["indefinite_dd_count"].clone(), after["demoted_dd_count"].clone()), (json!(0), json!(1)), "{after}");
    assert_eq!(at(&after["expired_at"]), grace_end);

    // expired -> active: a new subscription, charged; the demotion stays.
    let again = subscribe(&t, &agent).await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.text);
    assert_eq!((again.json["reactivated"].clone(), again.json["charged_dac"].clone()), (json!(false), json!(50)));
    assert_eq!(earned(&t, &agent).await, json!(20));
    assert_eq!(detail(&t, &agent, &kept_id).await["effective_retention_period"], "short", "re-subscribing undoes no demotion");
    let new_kept = indefinite(&t, &agent).await;
    assert_eq!(new_kept.status.as_u16(), 201, "{}", new_kept.text);
    assert_eq!(detail(&t, &agent, new_kept.json["dd_id"].as_str().unwrap()).await["retention_expires_at"], Value::Null);

    // A grace that ran out while no job ran is carried out by the next subscribe before anything else.
    let other = t.register().await;
    t.credit_earned(&other, 200).await;
    assert_eq!(subscribe(&t, &other).await.status.as_u16(), 200);
    let early = indefinite(&t, &other).await.json["dd_id"].as_str().unwrap().to_string();
    t.call("POST", "/v1/retention/indefinite/cancel", Some(&other.token), None).await;
    t.clock.advance(Duration::days(15));
    let fresh = subscribe(&t, &other).await;
    assert_eq!((fresh.json["reactivated"].clone(), fresh.json["charged_dac"].clone()), (json!(false), json!(50)), "{}", fresh.text);
    assert_eq!(detail(&t, &other, &early).await["effective_retention_period"], "short");
    let usage = t
        .scalar(&format!(
            "select count(*) from usage_entry where cost_component = 'retention_sub' and payment_source = 'earned' and agent_id = {}",
            t.uuid_sql(&agent.id)
        ))
        .await;
    assert_eq!(usage, 2, "two months paid, each with its usage entry");
}

async fn months_are_billed_from_earned_and_an_unpaid_one_starts_the_grace(backend: Backend) {
    let t = server(backend).await;
    let agent = t.register().await;
    t.credit_earned(&agent, 130).await;
    let first = subscribe(&t, &agent).await.json;
    let due = at(&first["next_billing_at"]);
    assert_eq!(jobs(&t).await.0, anchor_ports::Billed::default(), "nothing due yet");
    t.clock.advance(due - t.clock.now());
    assert_eq!(jobs(&t).await.0.charged, 1);
    assert_eq!(jobs(&t).await.0.charged, 0, "a month is billed once");
    assert_eq!(earned(&t, &agent).await, json!(30));
    assert_eq!(at(&status(&t, &agent).await["next_billing_at"]), due + chrono::Months::new(1));

    // 30 left: the next month cannot be paid, so the grace starts at the failed charge.
    t.clock.advance(Duration::days(31));
    let billed = jobs(&t).await.0;
    assert_eq!((billed.charged, billed.to_grace), (0, 1));
    let grace = status(&t, &agent).await;
    assert_eq!((grace["status"].clone(), grace["cancelled_at"].clone()), (json!("grace"), Value::Null), "{grace}");
    assert_eq!(earned(&t, &agent).await, json!(30));

    // Reactivating in the grace pays the month that fell due, from now.
    subscribe(&t, &agent).await.assert_error(402, "INSUFFICIENT_DAC");
    t.credit_earned(&agent, 40).await;
    let back = subscribe(&t, &agent).await;
    assert_eq!((back.json["reactivated"].clone(), back.json["charged_dac"].clone()), (json!(true), json!(50)), "{}", back.text);
    assert_eq!(at(&back.json["next_billing_at"]), t.clock.now() + chrono::Months::new(1));
    assert_eq!(earned(&t, &agent).await, json!(20));
}

async fn parallel_subscribes_charge_once(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    t.credit_earned(&agent, 500).await;
    let replies = futures_util::future::join_all((0..10).map(|_| subscribe(&t, &agent))).await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 409, 409, 409, 409, 409, 409, 409, 409, 409]);
    assert_eq!(earned(&t, &agent).await, json!(450));
}

async fn switched_off_it_answers_503(backend: Backend) {
    let features = anchor_app::Features { retention: false, ..Default::default() };
    let t = TestServer::with(backend, Options { features, ..Default::default() }).await;
    let agent = t.register().await;
    t.credit_earned(&agent, 100).await;
    for (method, path) in [
        ("POST", "/v1/retention/indefinite/subscribe"),
        ("GET", "/v1/retention/indefinite/status"),
        ("POST", "/v1/retention/indefinite/cancel"),
    ] {
        t.call(method, path, Some(&agent.token), None).await.assert_error(503, "FEATURE_NOT_AVAILABLE");
    }
    indefinite(&t, &agent).await.assert_error(403, "INDEFINITE_SUBSCRIPTION_REQUIRED");
    assert_eq!(earned(&t, &agent).await, json!(100), "nothing charged");
    let short = t.create(&agent, basic_axes()).await;
    assert!(short["dd_id"].is_string(), "other retentions are unaffected: {short}");
}

async fn the_agents_own_profile_counts_its_demoted_records(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    t.credit_earned(&agent, 100).await;
    assert_eq!(subscribe(&t, &agent).await.status.as_u16(), 200);
    for _ in 0..2 {
        let kept = indefinite(&t, &agent).await;
        assert_eq!(t.confirm(&agent, kept.json["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    }
    t.create(&agent, basic_axes()).await;
    t.wait_for_fold(2).await;
    let path = format!("/v1/ara/agent/{}/profile", agent.id);
    let before = t.get(&path, Some(&agent.token)).await;
    assert_eq!(before.status.as_u16(), 200, "{}", before.text);
    assert_eq!(before.json["demotion_stats"]["demoted_dd_count"], json!(0), "{}", before.text);
    t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await;
    let grace_end = t.clock.now() + Duration::days(14);
    t.clock.advance(Duration::days(15));
    // The job (this test's call, or a background round before it) demotes both records.
    jobs(&t).await;
    let after = t.get(&path, Some(&agent.token)).await.json;
    assert_eq!(after["demotion_stats"]["demoted_dd_count"], json!(2), "{after}");
    assert_eq!(after["demotion_stats"]["last_demoted_on"], json!(grace_end.format("%Y-%m-%d").to_string()), "{after}");

    // The timeline counts them in the bucket they were anchored in, and the
    // EE pattern's effective retention shows them as short ones.
    let timeline = t.get(&format!("/v1/ara/agent/{}/timeline?resolution_level=3", agent.id), Some(&agent.token)).await;
    assert_eq!(timeline.status.as_u16(), 200, "{}", timeline.text);
    let demoted: Vec<i64> = timeline.json["items"]
        .as_array()
        .unwrap_or_else(|| panic!("items: {}", timeline.text))
        .iter()
        .map(|b| b["retention_demotion"]["demoted_dd_count"].as_i64().unwrap_or_else(|| panic!("{b}")))
        .collect();
    assert_eq!(demoted.iter().sum::<i64>(), 2, "{}", timeline.text);
    let pattern = t.get(&format!("/v1/ara/agent/{}/ee-pattern?resolution_level=3", agent.id), Some(&agent.token)).await;
    assert_eq!(pattern.status.as_u16(), 200, "{}", pattern.text);
    // (the third, short record was never confirmed, so ARA does not count it)
    assert_eq!(pattern.json["retention_distribution_effective"], json!({ "short": 2 }), "{}", pattern.text);
    assert_eq!(pattern.json["distributions"]["retention"], json!({ "indefinite": 2 }), "declared as it was");
}
