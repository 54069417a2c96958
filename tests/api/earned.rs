//! Earned DAC: lots spent first-expiring first, the threshold, expiry after
//! the generation's days (the clock moved), refunds into the same lots,
//! concurrent spenders, and the two routes that show it.

use anchor_domain::earned::EntryKind;
use anchor_domain::payments::{Subject, SubjectDomain};
use anchor_domain::{Clock, MilliDac};
use anchor_ports::{EarnedEntry, Spend};
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use chrono::Duration;
use serde_json::json;
use uuid::Uuid;

both_backends!(
    lots_are_spent_first_expiring_first_and_refunds_restore_them,
    lots_expire_when_their_days_are_over,
    concurrent_spenders_never_overdraw,
    the_balance_and_the_ledger_over_http,
    a_declaration_premium_is_paid_from_earned_and_given_back_if_never_anchored
);

const THRESHOLD: MilliDac = MilliDac::from_dac(30);

fn dac(n: i64) -> MilliDac {
    MilliDac::from_dac(n)
}

async fn agent_id(t: &TestServer) -> (Agent, Uuid) {
    let agent = t.register().await;
    let id = Uuid::parse_str(&agent.id).unwrap();
    (agent, id)
}

/// Credits `amount` that expires `days` from the server's now.
async fn credit(t: &TestServer, agent: Uuid, amount: MilliDac, days: i64) -> EarnedEntry {
    let now = t.clock.now();
    let sale = Subject { domain: SubjectDomain::TslPurchase, id: Uuid::new_v4() };
    t.store.credit_earned(agent, amount, "tool sale", Some(sale), now + Duration::days(days), now).await.unwrap()
}

async fn spend(t: &TestServer, agent: Uuid, amount: MilliDac) -> Spend {
    let observation = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    t.store.debit_earned(agent, amount, THRESHOLD, "resolution surcharge", Some(observation), t.clock.now()).await.unwrap()
}

fn debited(spend: Spend) -> EarnedEntry {
    match spend {
        Spend::Debited(entry) => entry,
        other => panic!("expected a debit, got {other:?}"),
    }
}

async fn lots_are_spent_first_expiring_first_and_refunds_restore_them(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (_, me) = agent_id(&t).await;
    let now = t.clock.now();
    let late = credit(&t, me, dac(20), 100).await;
    let early = credit(&t, me, dac(15), 50).await;
    assert_eq!((late.balance_after, early.balance_after), (dac(20), dac(35)));
    assert_eq!(early.expires_at, Some(now + Duration::days(50)));

    // 10 comes out of the lot that expires first.
    let first = debited(spend(&t, me, dac(10)).await);
    assert_eq!((first.kind, first.balance_after, first.seq), (EntryKind::Debit, dac(25), 3));
    let balance = t.store.earned_balance(me, t.clock.now()).await.unwrap();
    assert_eq!(balance.next_expiry, Some((dac(5), now + Duration::days(50))));
    // Below the threshold nothing is spendable, not even a little.
    assert_eq!(spend(&t, me, dac(1)).await, Spend::BelowThreshold { balance: dac(25) });

    credit(&t, me, dac(10), 365).await;
    assert_eq!(spend(&t, me, dac(36)).await, Spend::Insufficient { balance: dac(35) });
    // 8 spans two lots: the 5 left of the early one, then 3 of the late one.
    let second = debited(spend(&t, me, dac(8)).await);
    let balance = t.store.earned_balance(me, t.clock.now()).await.unwrap();
    assert_eq!(balance.next_expiry, Some((dac(17), now + Duration::days(100))));
    assert_eq!((balance.balance, balance.received, balance.spent), (dac(27), dac(45), dac(18)));

    // The refund puts the same amounts back into the same lots.
    let refund = t.store.refund_earned(second.entry_id, "settlement refused", t.clock.now()).await.unwrap().expect("refunded");
    assert_eq!((refund.kind, refund.amount, refund.balance_after), (EntryKind::Refund, dac(8), dac(35)));
    assert_eq!(refund.reference, second.reference);
    let balance = t.store.earned_balance(me, t.clock.now()).await.unwrap();
    assert_eq!(balance.next_expiry, Some((dac(5), now + Duration::days(50))));
    assert_eq!((balance.balance, balance.spent), (dac(35), dac(10)));
    // Once only; and a credit is not a debit.
    assert_eq!(t.store.refund_earned(second.entry_id, "again", t.clock.now()).await.unwrap(), None);
    assert_eq!(t.store.refund_earned(late.entry_id, "not a debit", t.clock.now()).await.unwrap(), None);

    let ledger = t.store.earned_ledger(me, 100, 0).await.unwrap();
    let kinds: Vec<_> = ledger.iter().map(|e| (e.seq, e.kind)).collect();
    use EntryKind::*;
    assert_eq!(kinds, [(6, Refund), (5, Debit), (4, Credit), (3, Debit), (2, Credit), (1, Credit)]);
    // Someone else's ledger is untouched.
    let (_, other) = agent_id(&t).await;
    assert!(t.store.earned_ledger(other, 100, 0).await.unwrap().is_empty());
    assert_eq!(t.store.earned_balance(other, t.clock.now()).await.unwrap().balance, MilliDac::ZERO);
}

async fn lots_expire_when_their_days_are_over(backend: Backend) {
    // The test runs the expiry job itself (a background round could run it
    // between the clock move and the test's own call).
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let (agent, me) = agent_id(&t).await;
    let terms = anchor_app::earned::terms(&t.state.app).unwrap();
    assert_eq!((terms.threshold, terms.expiry_days), (THRESHOLD, 365));
    credit(&t, me, dac(40), terms.expiry_days.into()).await;
    t.clock.advance(Duration::days(10));
    credit(&t, me, dac(5), terms.expiry_days.into()).await;
    let spent = debited(spend(&t, me, dac(12)).await);

    // A day before the first lot's end it is all there.
    t.clock.advance(Duration::days(354));
    let balance = t.get("/v1/earned-dac/balance", Some(&agent.token)).await;
    assert_eq!(balance.status.as_u16(), 200, "{}", balance.text);
    assert_eq!((balance.json["earned_balance"].as_f64(), balance.json["spendable"].as_bool()), (Some(33.0), Some(true)));

    // At its end, what was left of it (28) no longer counts, even before the job runs.
    t.clock.advance(Duration::days(1));
    let balance = t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json;
    assert_eq!(balance["earned_balance"], 5);
    assert_eq!(balance["expired_total"], 28);
    assert_eq!(balance["spendable"], false);
    assert_eq!(balance["next_expiry"]["amount"], 5);

    // The job ends it once, with a ledger line; the totals stay the same.
    assert_eq!(anchor_app::earned::expire_due(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::earned::expire_due(&t.state.app).await.unwrap(), 0);
    let after = t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json;
    assert_eq!(
        (after["earned_balance"].clone(), after["expired_total"].clone(), after["received_total"].clone()),
        (json!(5), json!(28), json!(45))
    );
    let ledger = t.get("/v1/earned-dac/ledger", Some(&agent.token)).await.json;
    assert_eq!(ledger["entries"][0]["type"], "expiry");
    assert_eq!((ledger["entries"][0]["amount"].clone(), ledger["entries"][0]["balance_after"].clone()), (json!(28), json!(5)));

    // A refund of a debit whose lot has ended since: the refund, then that part expires at once.
    let refund = t.store.refund_earned(spent.entry_id, "settlement refused", t.clock.now()).await.unwrap().expect("refunded");
    assert_eq!(refund.balance_after, dac(17));
    let ledger = t.store.earned_ledger(me, 2, 0).await.unwrap();
    assert_eq!((ledger[0].kind, ledger[0].amount, ledger[0].balance_after), (EntryKind::Expiry, dac(12), dac(5)));
    assert_eq!(ledger[1].entry_id, refund.entry_id);
    let after = t.store.earned_balance(me, t.clock.now()).await.unwrap();
    assert_eq!((after.balance, after.spent, after.expired, after.received), (dac(5), MilliDac::ZERO, dac(40), dac(45)));
}

async fn concurrent_spenders_never_overdraw(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (_, me) = agent_id(&t).await;
    credit(&t, me, dac(60), 365).await;
    credit(&t, me, dac(40), 200).await;
    // 20 spenders of 10 at once: spendable while 30 or more is left, so
    // exactly 8 pass (100, 90, … 30) and 20 stays.
    let mut spenders = Vec::new();
    for _ in 0..20 {
        let store = t.store.clone();
        let now = t.clock.now();
        spenders.push(tokio::spawn(async move { store.debit_earned(me, dac(10), THRESHOLD, "surcharge", None, now).await.unwrap() }));
    }
    let mut after = Vec::new();
    for spender in spenders {
        if let Spend::Debited(entry) = spender.await.unwrap() {
            after.push(entry.balance_after.milli());
        }
    }
    after.sort();
    assert_eq!(after, (2..=9).map(|n| n * 10_000).collect::<Vec<_>>(), "each debit saw the one before it");
    let balance = t.store.earned_balance(me, t.clock.now()).await.unwrap();
    assert_eq!((balance.balance, balance.spent), (dac(20), dac(80)));
    let ledger = t.store.earned_ledger(me, 100, 0).await.unwrap();
    assert_eq!(ledger.len(), 10);
    let mut seqs: Vec<i64> = ledger.iter().map(|e| e.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), 10, "one position per line");
}

async fn the_balance_and_the_ledger_over_http(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, me) = agent_id(&t).await;
    let empty = t.get("/v1/earned-dac/balance", Some(&agent.token)).await;
    assert_eq!(empty.status.as_u16(), 200, "{}", empty.text);
    assert_eq!(
        empty.json,
        json!({
            "earned_balance": 0, "spendable": false, "min_spend_threshold": 30, "expiry_days": 365, "next_expiry": null,
            "received_total": 0, "spent_total": 0, "expired_total": 0
        })
    );
    // Fractional DAC stays exact.
    let sale = credit(&t, me, MilliDac(31_500), 365).await;
    let observation = debited(spend(&t, me, MilliDac(1_250)).await);
    for _ in 0..3 {
        t.clock.advance(Duration::seconds(1));
        credit(&t, me, dac(1), 365).await;
    }
    let balance = t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json;
    assert_eq!((balance["earned_balance"].clone(), balance["spendable"].clone()), (json!(33.25), json!(true)));
    assert_eq!(balance["next_expiry"]["amount"], 30.25);

    let page = t.get("/v1/earned-dac/ledger?limit=2&offset=3", Some(&agent.token)).await;
    assert_eq!(page.status.as_u16(), 200, "{}", page.text);
    assert_eq!((page.json["limit"].clone(), page.json["offset"].clone()), (json!(2), json!(3)));
    let entries = page.json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["entry_id"], observation.entry_id.to_string());
    assert_eq!(entries[0]["type"], "debit");
    assert_eq!(entries[0]["amount"], 1.25);
    assert_eq!(entries[0]["reference"]["kind"], "ara_observation");
    assert_eq!(entries[0]["expires_at"], json!(null));
    assert_eq!(entries[1]["entry_id"], sale.entry_id.to_string());
    assert_eq!((entries[1]["type"].clone(), entries[1]["balance_after"].clone()), (json!("credit"), json!(31.5)));
    assert!(entries[1]["expires_at"].is_string());
    let all = t.get("/v1/earned-dac/ledger", Some(&agent.token)).await.json;
    assert_eq!((all["entries"].as_array().unwrap().len(), all["limit"].clone()), (5, json!(20)));

    for bad in ["limit=0", "limit=101", "offset=-1", "limit=ten"] {
        t.get(&format!("/v1/earned-dac/ledger?{bad}"), Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    }
    assert_eq!(t.get("/v1/earned-dac/balance", None).await.status.as_u16(), 401);
    assert_eq!(t.get("/v1/earned-dac/ledger", None).await.status.as_u16(), 401);
    // Another agent sees its own, empty ledger.
    let (stranger, _) = agent_id(&t).await;
    let theirs = t.get("/v1/earned-dac/ledger", Some(&stranger.token)).await.json;
    assert_eq!(theirs["entries"], json!([]));
}

/// `premium_payment_source: earned` on DD create: Earned DAC pays the
/// premium at create (Trial, or x402 once Trial is gone, the base fee), the
/// confirmation records it as Earned usage, and a record that is never
/// anchored gives it back.
async fn a_declaration_premium_is_paid_from_earned_and_given_back_if_never_anchored(backend: Backend) {
    let t = TestServer::start(backend).await;
    let (agent, me) = agent_id(&t).await;
    credit(&t, me, dac(50), 365).await;
    let mut body = create_body(json!({ "ee_preset": "EE_standard" }));
    body["premium_payment_source"] = json!("earned");

    // Trial pays the 10 DAC base fee, Earned the 35 DAC premium.
    let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    assert_eq!((created.json["status"].clone(), created.json["dac_amount"].clone()), (json!("trial_paid"), json!(45)));
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(490));
    assert_eq!(t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json["earned_balance"], json!(15));
    let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
    assert_eq!(t.confirm(&agent, &dd_id).await.status.as_u16(), 200);
    let dd = Uuid::parse_str(&dd_id).unwrap();
    let mut usage = t.store.usage_for(Subject::declaration(dd)).await.unwrap();
    usage.sort_by_key(|u| u.cost_component.as_str());
    let sources: Vec<_> = usage.iter().map(|u| (u.cost_component.as_str(), u.source.as_str(), u.amount)).collect();
    assert_eq!(sources, [("base_fee", "trial", dac(10)), ("premium", "earned", dac(35))]);

    // 15 left is below the threshold: refused before anything is paid.
    body["request_id"] = json!(Uuid::new_v4().to_string());
    t.post("/v1/dd/create", Some(&agent.token), &body).await.assert_error(400, "INSUFFICIENT_DAC");
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(490));

    // Once Trial has expired, x402 pays the base fee alone; a record never
    // confirmed within its window gives the premium back.
    credit(&t, me, dac(40), 365).await;
    t.clock.advance(Duration::days(31));
    body["request_id"] = json!(Uuid::new_v4().to_string());
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
    assert_eq!(challenge["accepts"][0]["amount"], "10000", "the base fee only");
    let signature = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let bearer = format!("Bearer {}", agent.token);
    let paid = t.call_with("POST", "/v1/dd/create", &[("authorization", &bearer), ("payment-signature", &signature)], Some(&body)).await;
    assert_eq!(paid.status.as_u16(), 201, "{}", paid.text);
    assert_eq!(paid.json["status"], "pending_payment");
    assert_eq!(t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json["earned_balance"], json!(20));
    t.clock.advance(Duration::minutes(31));
    t.confirm(&agent, paid.json["dd_id"].as_str().unwrap()).await.assert_error(410, "PAYMENT_EXPIRED");
    let balance = t.get("/v1/earned-dac/balance", Some(&agent.token)).await.json;
    assert_eq!((balance["earned_balance"].clone(), balance["spent_total"].clone()), (json!(55), json!(35)));
    assert_eq!(t.get("/v1/earned-dac/ledger?limit=1", Some(&agent.token)).await.json["entries"][0]["type"], "refund");
}
