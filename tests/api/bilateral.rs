//! Bilateral declarations: a proposal priced like DD create and paid over
//! x402 alone, accepted (the counterparty's own record, free; both anchored
//! and each side's receipt verifying offline), rejected, expired or left
//! unconfirmed (the reservation released, nothing charged), and its refusals.

use anchor_tests::x402::challenge_of;
use anchor_tests::*;
use anchor_verify::{Receipt, verify_receipt};
use chrono::Duration;
use serde_json::{Value, json};

both_backends!(accepted_both_records_are_anchored_and_verify, rejected_or_expired_nothing_is_charged);

fn bilateral_dd() -> Value {
    let mut dd = dd();
    dd["dd_declaration_mode"] = json!("bilateral");
    dd
}

fn body(counterparty: &str) -> Value {
    json!({ "counterparty_agent_id": counterparty, "dd": bilateral_dd(), "ee": basic_axes(), "request_id": uuid::Uuid::new_v4() })
}

/// Proposes, paying over x402.
async fn respond(t: &TestServer, agent: &Agent, agreement: &str, accept: bool) -> Reply {
    t.post(&format!("/v1/dd/bilateral/{agreement}/respond"), Some(&agent.token), &json!({ "accept": accept })).await
}

async fn trial(t: &TestServer, agent: &Agent) -> Value {
    t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].clone()
}

async fn accepted_both_records_are_anchored_and_verify(backend: Backend) {
    let t = TestServer::start(backend).await;
    let proposer = t.register().await;
    let counterparty = t.register().await;

    // Refusals before anything is recorded.
    let mut wrong_mode = body(&counterparty.id);
    wrong_mode["dd"]["dd_declaration_mode"] = json!("self_declared");
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &wrong_mode).await.assert_error(400, "DECLARATION_MODE_MISMATCH");
    let mut preset = body(&counterparty.id);
    preset["ee"] = json!({ "ee_preset": "EE_basic" });
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &preset).await.assert_error(400, "UNKNOWN_FIELD");
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &body(&proposer.id)).await.assert_error(400, "INVALID_VALUE");
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &body(&uuid::Uuid::new_v4().to_string()))
        .await
        .assert_error(404, "AGENT_NOT_FOUND");
    let mut create_mode = create_body(basic_axes());
    create_mode["dd"]["dd_declaration_mode"] = json!("bilateral");
    t.post("/v1/dd/create", Some(&proposer.token), &create_mode).await.assert_error(400, "DECLARATION_MODE_NOT_ALLOWED");

    // Paid over x402 alone: Trial (500 DAC) is not touched, the challenge asks the EE quote (10 DAC).
    let bearer = format!("Bearer {}", proposer.token);
    let proposal = body(&counterparty.id);
    let challenge = challenge_of(&t.call_with("POST", "/v1/dd/bilateral/propose", &[("authorization", &bearer)], Some(&proposal)).await);
    assert_eq!(challenge["accepts"][0]["amount"], "10000", "{challenge}");
    let proposed = t.propose_paid(&proposer, &proposal).await;
    assert_eq!(proposed.status.as_u16(), 201, "{}", proposed.text);
    assert_eq!((proposed.json["status"].clone(), proposed.json["settlement_status"].clone()), (json!("proposed"), json!("pending")));
    assert_eq!(trial(&t, &proposer).await, json!(500));
    let agreement = proposed.json["agreement_id"].as_str().unwrap().to_string();
    let proposer_dd = proposed.json["dd_id"].as_str().unwrap().to_string();
    // The same request_id answers the same proposal, with no second reservation.
    let again = t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &proposal).await;
    assert_eq!((again.status.as_u16(), again.json["agreement_id"].clone()), (201, json!(agreement)), "{}", again.text);
    // A parent that is not there, or not the proposer's, is said before any payment is asked.
    let mut orphan = body(&counterparty.id);
    orphan["continuity"] = json!({ "parent_dd_id": uuid::Uuid::new_v4() });
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &orphan).await.assert_error(404, "DD_NOT_FOUND");
    let stranger = t.register().await;
    let theirs = t.create(&stranger, json!({ "ee_preset": "EE_basic" })).await;
    orphan["continuity"] = json!({ "parent_dd_id": theirs["dd_id"] });
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &orphan).await.assert_error(403, "FORBIDDEN");
    // The same request_id for another decision or scope is refused, not answered with the first.
    let mut other_scope = proposal.clone();
    other_scope["ee"]["ee_responsibility_scope"] = json!("extended");
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &other_scope).await.assert_error(400, "REQUEST_ID_USED");
    let mut other_action = proposal.clone();
    other_action["dd"]["decision_action_type"] = json!("hold");
    t.post("/v1/dd/bilateral/propose", Some(&proposer.token), &other_action).await.assert_error(400, "REQUEST_ID_USED");

    // The lists; confirming before acceptance is refused; only the counterparty answers.
    let received = t.get("/v1/dd/bilateral/received", Some(&counterparty.token)).await.json;
    assert_eq!((received["count"].clone(), received["agreements"][0]["agreement_id"].clone()), (json!(1), json!(agreement)), "{received}");
    assert_eq!(t.get("/v1/dd/bilateral/sent", Some(&proposer.token)).await.json["agreements"][0]["status"], "proposed");
    assert_eq!(t.get("/v1/dd/bilateral/received", Some(&proposer.token)).await.json["count"], json!(0));
    t.get("/v1/dd/bilateral/received?all=maybe", Some(&counterparty.token)).await.assert_error(400, "INVALID_ENUM");
    t.confirm(&proposer, &proposer_dd).await.assert_error(409, "AGREEMENT_PENDING");
    respond(&t, &proposer, &agreement, true).await.assert_error(403, "FORBIDDEN");
    respond(&t, &counterparty, &uuid::Uuid::new_v4().to_string(), true).await.assert_error(404, "AGREEMENT_NOT_FOUND");

    // Accepted: the counterparty's own record, free, mirroring the declared fields.
    let accepted = respond(&t, &counterparty, &agreement, true).await;
    assert_eq!(accepted.status.as_u16(), 200, "{}", accepted.text);
    assert_eq!(accepted.json["status"], "accepted");
    respond(&t, &counterparty, &agreement, false).await.assert_error(409, "AGREEMENT_NOT_PENDING");
    let counterparty_dd = accepted.json["counterparty_dd_id"].as_str().unwrap().to_string();
    let mirror = t.get(&format!("/v1/dd/{counterparty_dd}"), Some(&counterparty.token)).await.json;
    assert_eq!(mirror["dd"]["dd_declaration_mode"], "bilateral");
    assert_eq!(mirror["dd"]["decision_type"], bilateral_dd()["decision_type"]);
    assert_eq!((mirror["dac"]["dac_amount"].clone(), mirror["ee"]["ee_retention_period"].clone()), (json!(0), json!("short")), "{mirror}");
    assert_eq!(t.received_all(&counterparty).await, 1);

    // Each side confirms its own: the proposer's first (it settles the payment), then the counterparty's, free.
    t.confirm(&counterparty, &counterparty_dd).await.assert_error(409, "AGREEMENT_UNPAID");
    let confirmed = t.confirm(&proposer, &proposer_dd).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    assert!(confirmed.headers.get("payment-response").is_some(), "settled at the proposer's confirmation");
    let theirs = t.confirm(&counterparty, &counterparty_dd).await;
    assert_eq!(theirs.status.as_u16(), 200, "{}", theirs.text);
    assert_eq!(trial(&t, &counterparty).await, json!(500));
    let paid = t
        .scalar(&format!("select count(*) from x402_payment where status = 'settled' and subject_id = {}", t.uuid_sql(&proposer_dd)))
        .await;
    assert_eq!(paid, 1);
    t.wait_for_log(2).await;
    for (agent, dd_id) in [(&proposer, &proposer_dd), (&counterparty, &counterparty_dd)] {
        let reply = t.get(&format!("/v1/dd/{dd_id}/receipt"), Some(&agent.token)).await;
        assert_eq!(reply.status.as_u16(), 200, "{}", reply.text);
        let receipt: Receipt = serde_json::from_value(reply.json).expect("receipt shape");
        verify_receipt(&receipt, &t.log_key.vkey).unwrap_or_else(|e| panic!("{dd_id}: {e}"));
    }
}

impl ReceivedAll for TestServer {
    async fn received_all(&self, agent: &Agent) -> usize {
        let reply = self.get("/v1/dd/bilateral/received?all=true", Some(&agent.token)).await;
        reply.json["agreements"].as_array().map_or(0, Vec::len)
    }
}

trait ReceivedAll {
    async fn received_all(&self, agent: &Agent) -> usize;
}

async fn rejected_or_expired_nothing_is_charged(backend: Backend) {
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let proposer = t.register().await;
    let counterparty = t.register().await;

    // Rejected: released at once; the proposer's confirmation says why.
    let rejected = t.propose_paid(&proposer, &body(&counterparty.id)).await;
    assert_eq!(rejected.status.as_u16(), 201, "{}", rejected.text);
    let (agreement, dd_id) = (rejected.json["agreement_id"].as_str().unwrap(), rejected.json["dd_id"].as_str().unwrap());
    assert_eq!(respond(&t, &counterparty, agreement, false).await.json["status"], "rejected");
    t.confirm(&proposer, dd_id).await.assert_error(409, "AGREEMENT_REJECTED");
    let status = t.strings(&format!("select status from x402_payment where subject_id = {}", t.uuid_sql(dd_id))).await;
    assert_eq!(status, ["released"]);
    assert_eq!(t.get("/v1/dd/bilateral/received", Some(&counterparty.token)).await.json["count"], json!(0), "pending only by default");
    assert_eq!(t.received_all(&counterparty).await, 1);

    // Unanswered for the payment window: expired by the job, released; answering later is refused.
    let late = t.propose_paid(&proposer, &body(&counterparty.id)).await;
    let (agreement, dd_id) = (late.json["agreement_id"].as_str().unwrap().to_string(), late.json["dd_id"].as_str().unwrap().to_string());
    t.clock.advance(Duration::minutes(29));
    assert_eq!(anchor_app::bilateral::expire_due(&t.state.app).await.unwrap(), 0);
    t.clock.advance(Duration::minutes(1));
    assert_eq!(anchor_app::bilateral::expire_due(&t.state.app).await.unwrap(), 1);
    assert_eq!(anchor_app::bilateral::expire_due(&t.state.app).await.unwrap(), 0, "expired once");
    let status = t.strings(&format!("select status from x402_payment where subject_id = {}", t.uuid_sql(&dd_id))).await;
    assert_eq!(status, ["released"]);
    respond(&t, &counterparty, &agreement, true).await.assert_error(409, "AGREEMENT_NOT_PENDING");
    t.confirm(&proposer, &dd_id).await.assert_error(410, "PAYMENT_EXPIRED");
    let sent = t.get("/v1/dd/bilateral/sent", Some(&proposer.token)).await.json;
    let listed: Vec<(Value, Value)> =
        sent["agreements"].as_array().unwrap().iter().map(|a| (a["agreement_id"].clone(), a["status"].clone())).collect();
    assert!(listed.contains(&(json!(agreement), json!("expired"))), "{sent}");

    // Accepted, never confirmed by its proposer: the service releases the
    // reservation once the window and its grace have passed (decision 0083).
    let accepted = t.propose_paid(&proposer, &body(&counterparty.id)).await;
    let (agreement, dd_id) = (accepted.json["agreement_id"].as_str().unwrap(), accepted.json["dd_id"].as_str().unwrap());
    assert_eq!(respond(&t, &counterparty, agreement, true).await.status.as_u16(), 200);
    t.clock.advance(Duration::minutes(46));
    let mut walked = None;
    assert_eq!(anchor_app::declarations::release_lapsed(&t.state.app, &mut walked, 4).await.unwrap(), (1, false));
    let status = t.strings(&format!("select status from x402_payment where subject_id = {}", t.uuid_sql(dd_id))).await;
    assert_eq!(status, ["released"]);
    t.confirm(&proposer, dd_id).await.assert_error(410, "PAYMENT_EXPIRED");
    assert_eq!(t.scalar("select count(*) from usage_entry").await, 0, "nothing was charged");
}
