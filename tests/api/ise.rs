//! ISE: stays that are free up to the free seconds and cost the flat fee
//! after, paid from Trial then x402 (external), from Earned DAC only
//! (earned_only) or never (free); one open stay per agent; stays closed by
//! the job at their limit.

use anchor_domain::Clock;
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use chrono::Duration;
use serde_json::json;

both_backends!(charged_stays_cost_the_fee_paid_as_their_mode_says, the_job_closes_stays_at_their_limit);

async fn enter(t: &TestServer, agent: &Agent, mode: &str) -> serde_json::Value {
    let reply = t.post("/v1/ise/enter", Some(&agent.token), &json!({ "payment_mode": mode })).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    reply.json
}

async fn exit(t: &TestServer, agent: &Agent) -> Reply {
    t.post("/v1/ise/exit", Some(&agent.token), &json!({})).await
}

async fn trial(t: &TestServer, agent: &Agent) -> serde_json::Value {
    t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].clone()
}

async fn charged_stays_cost_the_fee_paid_as_their_mode_says(backend: Backend) {
    // No background jobs: a round that ran after a clock move would close the
    // free stay at its limit before the test's own exit.
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let agent = t.register().await;
    assert_eq!(t.get("/v1/ise/status", Some(&agent.token)).await.json, json!({ "active": false }));
    exit(&t, &agent).await.assert_error(404, "NO_ACTIVE_SESSION");
    t.post("/v1/ise/enter", Some(&agent.token), &json!({ "payment_mode": "sometimes" })).await.assert_error(400, "INVALID_ENUM");

    // A charged stay costs the flat fee however short it is (decision 0062): Trial pays it.
    let entered = enter(&t, &agent, "external").await;
    assert_eq!((entered["free_seconds"].clone(), entered["fee_dac"].clone()), (json!(600), json!(10)), "{entered}");
    t.post("/v1/ise/enter", Some(&agent.token), &json!({})).await.assert_error(409, "SESSION_EXISTS");
    t.clock.advance(Duration::seconds(30));
    let status = t.get("/v1/ise/status", Some(&agent.token)).await.json;
    assert_eq!((status["active"].clone(), status["dac_if_exited_now"].clone()), (json!(true), json!(10)), "{status}");
    let short = exit(&t, &agent).await;
    assert_eq!(
        (short.status.as_u16(), short.json["dac_charged"].clone(), short.json["payment_source"].clone()),
        (200, json!(10), json!("trial"))
    );
    assert_eq!(short.json["duration_seconds"], 30);
    assert_eq!(trial(&t, &agent).await, json!(490));

    // Longer, external: the same fee, from Trial.
    enter(&t, &agent, "external").await;
    t.clock.advance(Duration::seconds(601));
    let paid = exit(&t, &agent).await;
    assert_eq!((paid.json["dac_charged"].clone(), paid.json["payment_source"].clone()), (json!(10), json!("trial")), "{}", paid.text);
    assert_eq!(trial(&t, &agent).await, json!(480));
    assert_eq!(t.scalar("select count(*) from usage_entry where subject_domain = 'ise_session' and payment_source = 'trial'").await, 2);

    // A free stay is never charged: it ends at the free seconds.
    enter(&t, &agent, "free").await;
    t.clock.advance(Duration::hours(2));
    let ended = exit(&t, &agent).await;
    assert_eq!((ended.json["dac_charged"].clone(), ended.json["duration_seconds"].clone()), (json!(0), json!(600)), "{}", ended.text);

    // earned_only: without Earned DAC the stay stays open; with it, Earned pays.
    enter(&t, &agent, "earned_only").await;
    t.clock.advance(Duration::minutes(20));
    exit(&t, &agent).await.assert_error(400, "INSUFFICIENT_DAC");
    assert_eq!(t.get("/v1/ise/status", Some(&agent.token)).await.json["active"], true);
    t.credit_earned(&agent, 40).await;
    let earned = exit(&t, &agent).await;
    assert_eq!(
        (earned.json["dac_charged"].clone(), earned.json["payment_source"].clone()),
        (json!(10), json!("earned")),
        "{}",
        earned.text
    );
    assert_eq!(t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json["earned_balance"], json!(30));
    assert_eq!(trial(&t, &agent).await, json!(480), "Trial untouched");

    // External with Trial spent: the x402 challenge, then a settled payment.
    let broke = t.register().await;
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {}", t.uuid_sql(&broke.id))).await;
    enter(&t, &broke, "external").await;
    t.clock.advance(Duration::minutes(11));
    let bearer = format!("Bearer {}", broke.token);
    let challenge = challenge_of(&t.call_with("POST", "/v1/ise/exit", &[("authorization", &bearer)], Some(&json!({}))).await);
    assert_eq!(challenge["accepts"][0]["amount"], "10000");
    assert_eq!(t.get("/v1/ise/status", Some(&broke.token)).await.json["active"], true, "unpaid, the stay stays open");
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let settled =
        t.call_with("POST", "/v1/ise/exit", &[("authorization", &bearer), ("payment-signature", &payment)], Some(&json!({}))).await;
    assert_eq!((settled.status.as_u16(), settled.json["payment_source"].clone()), (200, json!("external")), "{}", settled.text);
    assert!(settled.headers.get("payment-response").is_some());
    assert_eq!(t.scalar("select count(*) from usage_entry where subject_domain = 'ise_session' and payment_source = 'external'").await, 1);
    // Only entry, exit, duration and cost are kept: no declaration, no log leaf.
    assert_eq!(t.scalar("select count(*) from declaration").await, 0);
    assert_eq!(t.scalar("select count(*) from ise_session where exited_at is not null").await, 5);
}

async fn the_job_closes_stays_at_their_limit(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let free = t.register().await;
    let paying = t.register().await;
    let earned_only = t.register().await;
    enter(&t, &free, "free").await;
    enter(&t, &paying, "external").await;
    enter(&t, &earned_only, "earned_only").await;
    // At the free seconds only the free stay ends.
    t.clock.advance(Duration::seconds(601));
    assert_eq!(anchor_app::ise::close_due(&t.state.app).await.unwrap(), 1);
    assert_eq!(t.get("/v1/ise/status", Some(&free.token)).await.json["active"], false);
    assert_eq!(t.get("/v1/ise/status", Some(&paying.token)).await.json["active"], true);
    // At the maximum (24 hours) the others end: Trial pays one, nothing can pay the other.
    t.clock.advance(Duration::hours(24));
    assert_eq!(anchor_app::ise::close_due(&t.state.app).await.unwrap(), 2);
    assert_eq!(anchor_app::ise::close_due(&t.state.app).await.unwrap(), 0, "closed once");
    assert_eq!(trial(&t, &paying).await, json!(490));
    let rows =
        t.strings("select coalesce(payment_source, 'unpaid') from ise_session where closed_by = 'service' order by payment_mode").await;
    assert_eq!(rows, ["unpaid", "trial", "unpaid"]);
    assert_eq!(t.scalar("select count(*) from ise_session where unpaid").await, 1);
    // A stay may begin again after its end.
    enter(&t, &paying, "free").await;
}
