//! ASA: periods bought over x402 (settled before the answer) or from Earned
//! DAC, states read off timestamps (active, grace, expired; cancelled is
//! final), snapshots as hashes with bounded opaque metadata, the owner's
//! views (404 NOT_LINKED), one purchase at a time, and settlement refused or
//! unknown.

use anchor_domain::Clock;
use anchor_tests::x402::{Scripted, Twist, b64, challenge_of, pay};
use anchor_tests::*;
use anchor_x402::settlement::Settled;
use chrono::Duration;
use serde_json::{Value, json};

both_backends!(
    periods_states_and_snapshots,
    earned_periods_the_owner_and_parallel_purchases,
    a_purchase_settles_once_or_not_at_all,
    one_payment_sent_many_times_at_once_is_charged_once_and_never_refused_as_unpaid,
);

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

async fn earned(t: &TestServer, agent: &Agent) -> Value {
    t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json["earned_balance"].clone()
}

/// Pays for `path` over x402: the challenge must ask `units`.
async fn paid(t: &TestServer, agent: &Agent, path: &str, body: &Value, units: &str) -> Reply {
    let bearer = format!("Bearer {}", agent.token);
    let challenge = challenge_of(&t.call_with("POST", path, &[("authorization", &bearer)], Some(body)).await);
    assert_eq!(challenge["accepts"][0]["amount"], units, "{challenge}");
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    t.call_with("POST", path, &[("authorization", &bearer), ("payment-signature", &payment)], Some(body)).await
}

async fn periods_states_and_snapshots(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let start = t.clock.now();
    t.get("/v1/asa/subscription", Some(&agent.token)).await.assert_error(404, "NO_SUBSCRIPTION");
    t.post("/v1/asa/register", Some(&agent.token), &json!({ "blob_hash": HASH })).await.assert_error(403, "ASA_SUBSCRIPTION_REQUIRED");
    t.post("/v1/asa/extend", Some(&agent.token), &json!({})).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");
    t.post("/v1/asa/subscribe", Some(&agent.token), &json!({ "periods": 13 })).await.assert_error(400, "INVALID_VALUE");
    t.post("/v1/asa/subscribe", Some(&agent.token), &json!({ "periods": 0 })).await.assert_error(400, "INVALID_VALUE");
    t.post("/v1/asa/subscribe", Some(&agent.token), &json!({ "payment_source": "trial" })).await.assert_error(400, "INVALID_ENUM");

    // Subscribed over x402 (100 DAC = 100,000 USDC units; Trial never pays ASA).
    let subscribed = paid(&t, &agent, "/v1/asa/subscribe", &json!({ "periods": 1 }), "100000").await;
    assert_eq!(subscribed.status.as_u16(), 201, "{}", subscribed.text);
    assert!(subscribed.headers.get("payment-response").is_some());
    let s = &subscribed.json;
    assert_eq!((s["status"].clone(), s["days_remaining"].clone(), s["periods"].clone()), (json!("active"), json!(90), json!(1)), "{s}");
    assert_eq!((s["dac_charged"].clone(), s["payment_source"].clone()), (json!(100), json!("external")));
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(500), "Trial untouched");
    t.post("/v1/asa/subscribe", Some(&agent.token), &json!({})).await.assert_error(409, "ALREADY_SUBSCRIBED");
    let usage =
        t.strings("select cost_component || ':' || payment_source from usage_entry where subject_domain = 'asa_subscription'").await;
    assert_eq!(usage, ["asa_subscribe:external"]);

    // Snapshots: bare hex only, bounded, no personal data in the label; verify matches either case.
    let register = |body: Value| {
        let t = &t;
        let token = agent.token.clone();
        async move { t.post("/v1/asa/register", Some(&token), &body).await }
    };
    register(json!({ "blob_hash": format!("sha256:{HASH}") })).await.assert_error(400, "INVALID_HASH_FORMAT");
    register(json!({ "blob_hash": &HASH[1..] })).await.assert_error(400, "INVALID_HASH_FORMAT");
    register(json!({ "blob_hash": HASH, "label": "mail ops@example.com" })).await.assert_error(400, "PII_DETECTED");
    register(json!({ "blob_hash": HASH, "label": "x".repeat(201) })).await.assert_error(400, "INVALID_INPUT");
    register(json!({ "blob_hash": HASH, "blob_size_bytes": -1 })).await.assert_error(400, "INVALID_VALUE");
    let first =
        register(json!({ "blob_hash": HASH.to_uppercase(), "blob_size_bytes": 1024, "encrypted_key": "wrapped:AAAA", "label": "nightly" }))
            .await;
    assert_eq!(first.status.as_u16(), 201, "{}", first.text);
    assert_eq!(first.json["blob_hash"], HASH, "stored in lowercase");
    t.clock.advance(Duration::seconds(1));
    let second_hash = "a".repeat(64);
    assert_eq!(register(json!({ "blob_hash": second_hash })).await.status.as_u16(), 201);
    let latest = t.get("/v1/asa/snapshot", Some(&agent.token)).await;
    assert_eq!((latest.json["blob_hash"].clone(), latest.json["subscription"]["status"].clone()), (json!(second_hash), json!("active")));
    let verify = |hash: String| {
        let t = &t;
        let token = agent.token.clone();
        async move { t.post("/v1/asa/verify", Some(&token), &json!({ "blob_hash": hash })).await.json }
    };
    let old = verify(HASH.to_uppercase()).await;
    assert_eq!((old["match"].clone(), old["is_latest"].clone()), (json!(true), json!(false)), "{old}");
    assert_eq!(old["snapshot_id"], first.json["snapshot_id"]);
    assert_eq!(verify(second_hash.clone()).await["is_latest"], json!(true));
    assert_eq!(verify("b".repeat(64)).await["match"], json!(false));

    // PATCH stores the next source only.
    let patched = t.call("PATCH", "/v1/asa/subscription", Some(&agent.token), Some(&json!({ "next_payment_source": "earned" }))).await;
    assert_eq!((patched.status.as_u16(), patched.json["next_payment_source"].clone()), (200, json!("earned")), "{}", patched.text);
    let cleared = t.call("PATCH", "/v1/asa/subscription", Some(&agent.token), Some(&json!({ "next_payment_source": null }))).await;
    assert_eq!(cleared.json["next_payment_source"], Value::Null);
    t.call("PATCH", "/v1/asa/subscription", Some(&agent.token), Some(&json!({ "next_payment_source": "card" })))
        .await
        .assert_error(400, "INVALID_ENUM");

    // Grace after 90 days: reads yes, registering no; extending in grace adds from now.
    t.clock.advance(start + Duration::days(92) - t.clock.now());
    assert_eq!(t.get("/v1/asa/subscription", Some(&agent.token)).await.json["status"], "grace");
    register(json!({ "blob_hash": "c".repeat(64) })).await.assert_error(403, "ASA_SUBSCRIPTION_REQUIRED");
    assert_eq!(t.get("/v1/asa/snapshot", Some(&agent.token)).await.status.as_u16(), 200);
    assert_eq!(verify(HASH.to_string()).await["match"], json!(true));
    t.call("PATCH", "/v1/asa/subscription", Some(&agent.token), Some(&json!({ "next_payment_source": "earned" })))
        .await
        .assert_error(404, "NO_ACTIVE_SUBSCRIPTION");
    let extended = paid(&t, &agent, "/v1/asa/extend", &json!({ "periods": 2 }), "200000").await;
    assert_eq!(extended.status.as_u16(), 200, "{}", extended.text);
    assert_eq!(
        (extended.json["status"].clone(), extended.json["renewed_count"].clone(), extended.json["periods"].clone()),
        (json!("active"), json!(1), json!(3))
    );
    assert_eq!(extended.json["days_remaining"], json!(180), "the lapsed two days are not credited");

    // Expired after the paid time and 7 days of grace: nothing readable; a new subscription starts over.
    t.clock.advance(Duration::days(187));
    let expired = t.get("/v1/asa/subscription", Some(&agent.token)).await.json;
    assert_eq!((expired["status"].clone(), expired["days_remaining"].clone()), (json!("expired"), json!(0)));
    t.get("/v1/asa/snapshot", Some(&agent.token)).await.assert_error(403, "ASA_SUBSCRIPTION_REQUIRED");
    t.post("/v1/asa/extend", Some(&agent.token), &json!({})).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");
    t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");
    let again = paid(&t, &agent, "/v1/asa/subscribe", &json!({}), "100000").await;
    assert_eq!(again.status.as_u16(), 201, "{}", again.text);
    assert_ne!(again.json["subscription_id"], s["subscription_id"]);

    // Cancelled: final, not refunded.
    let cancelled = t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await;
    assert_eq!((cancelled.status.as_u16(), cancelled.json["refunded_dac"].clone()), (200, json!(0)), "{}", cancelled.text);
    assert_eq!(t.get("/v1/asa/subscription", Some(&agent.token)).await.json["status"], "cancelled");
    t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");
    t.get("/v1/asa/snapshot", Some(&agent.token)).await.assert_error(403, "ASA_SUBSCRIPTION_REQUIRED");
    // Nothing but hashes and the opaque fields sent: no table holds a blob.
    assert_eq!(t.scalar("select count(*) from asa_snapshot").await, 2);
}

async fn earned_periods_the_owner_and_parallel_purchases(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("asa-owner@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let stranger = t.register().await;

    // Earned pays from its threshold up; short, nothing changes.
    t.credit_earned(&agent, 20).await;
    t.post("/v1/asa/subscribe", Some(&agent.token), &json!({ "payment_source": "earned" })).await.assert_error(400, "INSUFFICIENT_DAC");
    t.credit_earned(&agent, 330).await;
    // Eight parallel subscribes: one is paid.
    let body = json!({ "payment_source": "earned", "periods": 2 });
    let replies = futures_util::future::join_all((0..8).map(|_| t.post("/v1/asa/subscribe", Some(&agent.token), &body))).await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [201, 409, 409, 409, 409, 409, 409, 409], "{:?}", replies.iter().map(|r| &r.text).collect::<Vec<_>>());
    assert_eq!(earned(&t, &agent).await, json!(150));
    assert_eq!(t.scalar("select count(*) from asa_subscription").await, 1);

    // The owner reads; a stranger's agent is 404 NOT_LINKED on these routes.
    let seen = t.as_owner(&owner, "GET", &format!("/dap/asa/subscription/{}", agent.id), None).await;
    assert_eq!((seen.status.as_u16(), seen.json["days_remaining"].clone()), (200, json!(180)), "{}", seen.text);
    t.as_owner(&owner, "GET", &format!("/dap/asa/subscription/{}", stranger.id), None).await.assert_error(404, "NOT_LINKED");
    t.as_owner(&owner, "GET", &format!("/dap/asa/snapshot/{}", agent.id), None).await.assert_error(404, "NO_SNAPSHOT");
    assert_eq!(t.post("/v1/asa/register", Some(&agent.token), &json!({ "blob_hash": HASH })).await.status.as_u16(), 201);
    let owner_snapshot = t.as_owner(&owner, "GET", &format!("/dap/asa/snapshot/{}", agent.id), None).await;
    assert_eq!(owner_snapshot.json["blob_hash"], HASH, "{}", owner_snapshot.text);
    let verified = t.as_owner(&owner, "POST", &format!("/dap/asa/verify/{}", agent.id), Some(&json!({ "blob_hash": HASH }))).await;
    assert_eq!(verified.json["match"], json!(true), "{}", verified.text);
    t.as_owner(&owner, "POST", &format!("/dap/asa/verify/{}", stranger.id), Some(&json!({ "blob_hash": HASH })))
        .await
        .assert_error(404, "NOT_LINKED");

    // Extended from Earned; the owner cannot cancel periods the agent paid itself.
    let extended = t.post("/v1/asa/extend", Some(&agent.token), &json!({ "payment_source": "earned" })).await;
    assert_eq!((extended.status.as_u16(), extended.json["days_remaining"].clone()), (200, json!(270)), "{}", extended.text);
    assert_eq!(earned(&t, &agent).await, json!(50));
    let path = format!("/dap/asa/subscription/{}", agent.id);
    t.as_owner(&owner, "DELETE", &path, None).await.assert_error(403, "EARNED_SUBSCRIPTION_OWNER_CANNOT_CANCEL");
    let usage =
        t.strings("select cost_component || ':' || payment_source from usage_entry where subject_domain = 'asa_subscription'").await;
    assert_eq!(usage, ["asa_subscribe:earned", "asa_subscribe:earned"]);

    // An externally paid subscription the owner may cancel.
    let mut other = t.register().await;
    t.link(&owner, &mut other).await;
    assert_eq!(paid(&t, &other, "/v1/asa/subscribe", &json!({}), "100000").await.status.as_u16(), 201);
    let path = format!("/dap/asa/subscription/{}", other.id);
    let cancelled = t.as_owner(&owner, "DELETE", &path, None).await;
    assert_eq!((cancelled.status.as_u16(), cancelled.json["cancelled_by"].clone()), (200, json!("owner")), "{}", cancelled.text);
    t.as_owner(&owner, "DELETE", &path, None).await.assert_error(404, "NO_ACTIVE_SUBSCRIPTION");

    // Switched off, owners cannot cancel at all.
    let off = TestServer::with(
        backend,
        Options { features: anchor_app::Features { dap_asa_cancel: false, ..Default::default() }, ..Default::default() },
    )
    .await;
    let owner = off.owner("asa-off@example.com").await;
    let mut agent = off.register().await;
    off.link(&owner, &mut agent).await;
    off.as_owner(&owner, "DELETE", &format!("/dap/asa/subscription/{}", agent.id), None).await.assert_error(503, "FEATURE_NOT_AVAILABLE");
}

async fn a_purchase_settles_once_or_not_at_all(backend: Backend) {
    let script = Scripted::new(vec![
        Settled::Unknown { detail: "facilitator timed out".into() },
        Settled::No { reason: "insufficient_funds".into() },
    ]);
    // Reconciliation is driven by the test alone.
    let t = TestServer::with(backend, Options { settler: Some(script.clone()), jobs: false, ..Default::default() }).await;
    let agent = t.register().await;
    // Refused: 402, the purchase failed, no subscription.
    let refused = paid(&t, &agent, "/v1/asa/subscribe", &json!({}), "100000").await;
    assert_eq!(refused.status.as_u16(), 402, "{}", refused.text);
    assert_eq!(t.strings("select status from asa_purchase").await, ["failed"]);
    t.get("/v1/asa/subscription", Some(&agent.token)).await.assert_error(404, "NO_SUBSCRIPTION");
    // Unknown: 503; a second purchase waits for it; reconciliation applies it once.
    paid(&t, &agent, "/v1/asa/subscribe", &json!({}), "100000").await.assert_error(503, "SETTLEMENT_PENDING");
    paid(&t, &agent, "/v1/asa/subscribe", &json!({}), "100000").await.assert_error(409, "DUPLICATE_REQUEST");
    t.get("/v1/asa/subscription", Some(&agent.token)).await.assert_error(404, "NO_SUBSCRIPTION");
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 0);
    assert_eq!(t.get("/v1/asa/subscription", Some(&agent.token)).await.json["status"], "active");
    let mut statuses = t.strings("select status from asa_purchase").await;
    statuses.sort();
    assert_eq!(statuses, ["completed", "failed"]);

    // While an extension's settlement is unknown the subscription cannot be
    // cancelled (its settlement would bring it back); once it is settled it can.
    script.0.lock().unwrap().push(Settled::Unknown { detail: "facilitator timed out".into() });
    paid(&t, &agent, "/v1/asa/extend", &json!({}), "100000").await.assert_error(503, "SETTLEMENT_PENDING");
    t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await.assert_error(409, "PURCHASE_PENDING");
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&t.state.app).await.unwrap(), 1);
    assert_eq!(t.get("/v1/asa/subscription", Some(&agent.token)).await.json["periods"], json!(2));
    let cancelled = t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await;
    assert_eq!(cancelled.status.as_u16(), 200, "{}", cancelled.text);
}

/// The same signed payment sent several times at once by its agent (a client
/// retrying before the first answer came): one subscription, one charge,
/// and no answer saying the payment failed (402), since it did not; the
/// others say the same payment was sent before (409). The same payment sent
/// by another agent is a replay, refused as one.
async fn one_payment_sent_many_times_at_once_is_charged_once_and_never_refused_as_unpaid(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, other) = (t.register().await, t.register().await);
    let bearer = format!("Bearer {}", agent.token);
    let body = json!({ "periods": 1 });
    let challenge = challenge_of(&t.call_with("POST", "/v1/asa/subscribe", &[("authorization", &bearer)], Some(&body)).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let headers = [("authorization", bearer.as_str()), ("payment-signature", payment.as_str())];
    let replies = futures_util::future::join_all((0..12).map(|_| t.call_with("POST", "/v1/asa/subscribe", &headers, Some(&body)))).await;
    let answers: Vec<(u16, String)> =
        replies.iter().map(|r| (r.status.as_u16(), r.json["error_code"].as_str().unwrap_or_default().to_string())).collect();
    assert_eq!(answers.iter().filter(|(status, _)| *status == 201).count(), 1, "{answers:?}");
    assert!(
        answers.iter().all(
            |(status, code)| *status == 201 || (*status == 409 && ["DUPLICATE_REQUEST", "ALREADY_SUBSCRIBED"].contains(&code.as_str()))
        ),
        "{answers:?}"
    );
    assert_eq!(t.scalar("select count(*) from asa_subscription").await, 1);
    assert_eq!(t.scalar("select count(*) from x402_payment").await, 1, "one payment reserved and settled");
    let usage =
        t.strings("select cost_component || ':' || payment_source from usage_entry where subject_domain = 'asa_subscription'").await;
    assert_eq!(usage, ["asa_subscribe:external"]);
    // Another agent sending that payment replays it: refused as a used nonce.
    let other_bearer = format!("Bearer {}", other.token);
    let replayed =
        t.call_with("POST", "/v1/asa/subscribe", &[("authorization", &other_bearer), ("payment-signature", &payment)], Some(&body)).await;
    assert_eq!(replayed.status.as_u16(), 402, "{}", replayed.text);
    assert!(replayed.text.contains("nonce"), "{}", replayed.text);
    assert_eq!(t.scalar("select count(*) from asa_subscription").await, 1);
}
