//! sDAC: trials priced by the real generation and recorded nowhere else;
//! ending costs the base fee plus a tenth of the simulated totals (nothing
//! without trials), from Trial, else over x402.

use anchor_domain::Clock;
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use serde_json::json;

both_backends!(
    trials_are_priced_for_real_and_the_session_end_pays_a_share,
    an_end_racing_its_trials_charges_every_trial_it_counts,
    a_session_counts_at_most_a_thousand_trials,
    ends_sent_at_once_are_one_end_and_no_challenge
);

fn axes(retention: &str) -> serde_json::Value {
    json!({
        "ee_retention_period": retention,
        "ee_integrity_verification_level": "basic",
        "ee_disclosure_format_policy": "internal",
        "ee_responsibility_scope": "minimal",
    })
}

async fn trials_are_priced_for_real_and_the_session_end_pays_a_share(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let started = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await;
    assert_eq!(started.status.as_u16(), 201, "{}", started.text);
    let session = started.json["session_id"].as_str().unwrap().to_string();
    t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await.assert_error(409, "SESSION_EXISTS");

    // A trial quotes what a declaration would cost, and records no declaration.
    let created = t.create(&agent, axes("medium")).await;
    let trial = t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": axes("medium") })).await;
    assert_eq!(trial.status.as_u16(), 200, "{}", trial.text);
    assert_eq!(trial.json["cost_breakdown"]["total_dac"], created["cost_breakdown"]["total_dac"], "the real generation's price");
    let one = trial.json["cost_breakdown"]["total_dac"].as_f64().unwrap();
    let second = t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": axes("short") })).await;
    assert_eq!(second.json["trial_number"], 2);
    let simulated = one + second.json["cost_breakdown"]["total_dac"].as_f64().unwrap();
    assert_eq!(t.scalar("select count(*) from declaration").await, 1, "only the real declaration");
    // ee_preset is for declarations only; another agent's session is not yours.
    let preset = t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": { "ee_preset": "EE_basic" } })).await;
    preset.assert_error(400, "UNKNOWN_FIELD");
    let other = t.register().await;
    t.post("/v1/sdac/trial", Some(&other.token), &json!({ "session_id": session, "ee": axes("short") }))
        .await
        .assert_error(404, "SESSION_NOT_FOUND");
    t.get(&format!("/v1/sdac/session/{session}"), Some(&other.token)).await.assert_error(404, "SESSION_NOT_FOUND");
    let history = t.get(&format!("/v1/sdac/session/{session}"), Some(&agent.token)).await;
    assert_eq!((history.json["trial_count"].clone(), history.json["status"].clone()), (json!(2), json!("active")), "{}", history.text);
    assert_eq!(history.json["trials"][1]["ee"]["ee_retention_period"], "short");

    // The end: 10 DAC plus a tenth of the simulated total, from Trial.
    let trial_before = t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].as_f64().unwrap();
    let ended = t.post("/v1/sdac/session/end", Some(&agent.token), &json!({ "session_id": session })).await;
    assert_eq!(ended.status.as_u16(), 200, "{}", ended.text);
    let charged = ended.json["dac_charged"].as_f64().unwrap();
    assert!((charged - (10.0 + simulated / 10.0)).abs() < 0.001, "{charged} for {simulated} simulated");
    assert_eq!(ended.json["payment_source"], "trial");
    let trial_after = t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].as_f64().unwrap();
    assert!((trial_before - trial_after - charged).abs() < 0.001);
    t.post("/v1/sdac/session/end", Some(&agent.token), &json!({ "session_id": session })).await.assert_error(404, "SESSION_NOT_FOUND");

    // No trial: the base fee alone (decision 0062); Trial spent, the x402 challenge and a settled payment.
    let empty = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await.json["session_id"].as_str().unwrap().to_string();
    let base = t.post("/v1/sdac/session/end", Some(&agent.token), &json!({ "session_id": empty })).await;
    assert_eq!((base.json["dac_charged"].clone(), base.json["payment_source"].clone()), (json!(10), json!("trial")), "{}", base.text);
    let broke = t.register().await;
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {}", t.uuid_sql(&broke.id))).await;
    let paid = t.post("/v1/sdac/session/start", Some(&broke.token), &json!({})).await.json["session_id"].as_str().unwrap().to_string();
    t.post("/v1/sdac/trial", Some(&broke.token), &json!({ "session_id": paid, "ee": axes("short") })).await;
    let bearer = format!("Bearer {}", broke.token);
    let body = json!({ "session_id": paid });
    let challenge = challenge_of(&t.call_with("POST", "/v1/sdac/session/end", &[("authorization", &bearer)], Some(&body)).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let settled =
        t.call_with("POST", "/v1/sdac/session/end", &[("authorization", &bearer), ("payment-signature", &payment)], Some(&body)).await;
    assert_eq!((settled.status.as_u16(), settled.json["payment_source"].clone()), (200, json!("external")), "{}", settled.text);
    assert!(settled.headers.get("payment-response").is_some());
    // The first end, the empty session's base fee, this one.
    assert_eq!(t.scalar("select count(*) from usage_entry where subject_domain = 'sdac_session'").await, 3);
}

/// Trials sent while the session is being ended: each trial answered 200 is
/// counted in the ended session, and the end charged the price of exactly
/// the trials counted (none slip in after the end was priced). An end is
/// priced again only after a trial was counted, so eight trials can make
/// it retry at most eight times, within its ten attempts.
async fn an_end_racing_its_trials_charges_every_trial_it_counts(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    for round in 0..6 {
        let session =
            t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await.json["session_id"].as_str().unwrap().to_string();
        let body = json!({ "session_id": session, "ee": axes("short") });
        let trials = (0..8).map(|_| t.post("/v1/sdac/trial", Some(&agent.token), &body));
        let end_body = json!({ "session_id": session });
        let end = t.post("/v1/sdac/session/end", Some(&agent.token), &end_body);
        let (answers, ended) = tokio::join!(futures_util::future::join_all(trials), end);
        assert_eq!(ended.status.as_u16(), 200, "round {round}: {}", ended.text);
        let counted = answers.iter().filter(|a| a.status.as_u16() == 200).count() as i64;
        for answer in answers.iter().filter(|a| a.status.as_u16() != 200) {
            answer.assert_error(404, "SESSION_NOT_FOUND");
        }
        let id = t.uuid_sql(&session);
        let stored = t.scalar(&format!("select cast(trials as bigint) from sdac_session where session_id = {id}")).await;
        let simulated = t.scalar(&format!("select simulated_milli from sdac_session where session_id = {id}")).await;
        let charged = t.scalar(&format!("select charged_milli from sdac_session where session_id = {id}")).await;
        assert_eq!(stored, counted, "round {round}: every trial answered 200 is in the session");
        // The base fee whatever the count, an end that won the race before
        // any trial included (decision 0062), plus a tenth of what was simulated.
        let price = 10_000 + (simulated * 100 + 500) / 1000;
        assert_eq!(charged, price, "round {round}: {stored} trials ({simulated} milli-DAC simulated) charged {charged}");
        assert_eq!(ended.json["dac_charged"].as_f64().unwrap(), price as f64 / 1000.0, "{}", ended.text);
    }
}

/// Trials are kept and answered whole with the session: a session counts at
/// most 1,000, then says so (not "no session"), and is still read whole.
async fn a_session_counts_at_most_a_thousand_trials(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let started = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await;
    let session = started.json["session_id"].as_str().unwrap().to_string();
    let trial = json!({ "session_id": session, "ee": axes("short") });
    for n in 0..1000 {
        let counted = t.post("/v1/sdac/trial", Some(&agent.token), &trial).await;
        assert_eq!(counted.status.as_u16(), 200, "trial {n}: {}", counted.text);
    }
    t.post("/v1/sdac/trial", Some(&agent.token), &trial).await.assert_error(409, "SDAC_TRIAL_LIMIT_REACHED");
    let seen = t.get(&format!("/v1/sdac/session/{session}"), Some(&agent.token)).await;
    assert_eq!(seen.status.as_u16(), 200, "{}", seen.text);
    assert_eq!(t.scalar("select count(*) from sdac_trial").await, 1000);
    // Another agent's session id is still "no session", full or not.
    let other = t.register().await;
    t.post("/v1/sdac/trial", Some(&other.token), &trial).await.assert_error(404, "SESSION_NOT_FOUND");
}

/// Ten ends of one session at once, with Trial enough for one of them: one
/// ends it (from Trial), and the others are told the session is gone, not
/// asked to pay for it over x402 (Trial having become too short for them).
async fn ends_sent_at_once_are_one_end_and_no_challenge(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let started = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await;
    let session = started.json["session_id"].as_str().unwrap().to_string();
    let trial = t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": axes("medium") })).await;
    let end_milli = 10_000 + (trial.json["cost_breakdown"]["total_dac"].as_f64().unwrap() * 100.0).round() as i64;
    t.tamper(&format!("update agent set trial_balance_milli = {} where agent_id = {}", end_milli * 3 / 2, t.uuid_sql(&agent.id))).await;

    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(10));
    let ends: Vec<_> = (0..10)
        .map(|_| {
            let (http, url, token, barrier) = (t.http.clone(), t.url("/v1/sdac/session/end"), agent.token.clone(), barrier.clone());
            let body = json!({ "session_id": session });
            tokio::spawn(async move {
                barrier.wait().await;
                let reply = http.post(url).bearer_auth(token).json(&body).send().await.unwrap();
                (reply.status().as_u16(), reply.json::<serde_json::Value>().await.unwrap())
            })
        })
        .collect();
    let mut ended = 0;
    for end in ends {
        let (status, body) = end.await.unwrap();
        match status {
            200 => ended += 1,
            404 => assert_eq!(body["error_code"], "SESSION_NOT_FOUND", "{body}"),
            409 => assert_eq!(body["error_code"], "DUPLICATE_REQUEST", "{body}"),
            _ => panic!("an end answered {status}: {body}"),
        }
    }
    assert_eq!(ended, 1, "one end ends the session");
    let remaining = t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].as_f64().unwrap();
    assert!((remaining * 1000.0 - (end_milli * 3 / 2 - end_milli) as f64).abs() < 1.0, "Trial paid one end: {remaining}");
}
