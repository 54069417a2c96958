//! Dispute evidence (decision 0070): `GET /v1/dd/{dd_id}/evidence` gives one
//! file that ties a declared scope to the x402 payment made for it; the
//! verifier checks it offline with the log key alone, and refuses each
//! tampering (scope, proof, order, payment) by naming its check.

use anchor_domain::Clock;
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use anchor_verify::evidence::{Authorized, Evidence, verify_evidence};
use base64::Engine;
use serde_json::{Value, json};

anchor_tests::both_backends!(an_evidence_bundle_ties_the_scope_to_its_payment);

/// The payer's authorization as the x402 crate reads it, its signature checked.
fn payer(payload: &Value) -> Result<Authorized, String> {
    let a = anchor_x402::authorization(payload).map_err(|reason| reason.as_str().to_string())?;
    Ok(Authorized { from: a.payer, to: a.pay_to, value: a.amount_units, valid_after: a.valid_after, valid_before: a.valid_before })
}

/// Creates an EE_basic declaration paid over x402 (the agent's Trial is
/// spent) and confirms it; returns its dd_id and the signed receipt (JWS)
/// its confirmation's PAYMENT-RESPONSE carried.
async fn paid(t: &TestServer, agent: &Agent) -> (String, String) {
    let body = create_body(json!({ "ee_preset": "EE_basic" }));
    let challenge = challenge_of(&t.post("/v1/dd/create", Some(&agent.token), &body).await);
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let created = t
        .http
        .post(t.url("/v1/dd/create"))
        .bearer_auth(&agent.token)
        .header("PAYMENT-SIGNATURE", b64(&payment))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let dd_id = created.json::<Value>().await.unwrap()["dd_id"].as_str().unwrap().to_string();
    let confirmed = t.confirm(agent, &dd_id).await;
    assert_eq!(confirmed.status.as_u16(), 200, "{}", confirmed.text);
    let header = confirmed.headers["payment-response"].to_str().unwrap();
    let settlement: Value = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap();
    let receipt = settlement["extensions"]["offer-receipt"]["info"]["receipt"]["signature"].as_str().unwrap().to_string();
    (dd_id, receipt)
}

/// The bundle of `dd_id` once the log holds it.
async fn bundle(t: &TestServer, token: &str, dd_id: &str) -> Evidence {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let reply = t.get(&format!("/v1/dd/{dd_id}/evidence"), Some(token)).await;
        if reply.status == StatusCode::OK {
            assert_eq!(reply.headers["cache-control"], "private, no-store");
            return serde_json::from_value(reply.json).expect("an anchor-evidence/1 bundle");
        }
        reply.assert_error(409, "NOT_YET_IN_LOG");
        assert!(std::time::Instant::now() < deadline, "no bundle: {}", reply.text);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn an_evidence_bundle_ties_the_scope_to_its_payment(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let vkey = t.log_key.vkey.clone();

    // Paid from Trial: the scope and its proof, no payment.
    let created = t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_basic" }))).await;
    let trial_dd = created.json["dd_id"].as_str().unwrap().to_string();
    t.get(&format!("/v1/dd/{trial_dd}/evidence"), Some(&agent.token)).await.assert_error(409, "NOT_CONFIRMED");
    assert_eq!(t.confirm(&agent, &trial_dd).await.status.as_u16(), 200);
    let trial = bundle(&t, &agent.token, &trial_dd).await;
    assert!(trial.payments.is_empty());
    let established = verify_evidence(&trial, &vkey, payer).expect("a Trial-paid bundle verifies");
    assert_eq!(established.anchored_at, trial.anchored_at);

    // Two paid declarations a minute apart.
    t.clock.advance(chrono::Duration::days(31));
    let (earlier_dd, _) = paid(&t, &agent).await;
    t.clock.advance(chrono::Duration::minutes(1));
    let (dd_id, sent_receipt) = paid(&t, &agent).await;
    let earlier = bundle(&t, &agent.token, &earlier_dd).await;
    let evidence = bundle(&t, &agent.token, &dd_id).await;
    assert_eq!(evidence.format, "anchor-evidence/1");
    assert_eq!(
        evidence.scope["ee_retention_period"],
        evidence.receipt.canonical_record.lines().find_map(|l| l.strip_prefix("ee_retention_period=")).unwrap()
    );
    assert!(!evidence.scope.contains_key("salt"));
    assert!(evidence.cose_receipt.is_some(), "the tree holds more than one leaf: the COSE receipt comes along");
    let [payment] = evidence.payments.as_slice() else { panic!("one payment: {:?}", evidence.payments) };
    assert_eq!(payment.receipt, sent_receipt, "the receipt in the bundle is the one the settlement carried");
    assert_eq!(payment.payer, "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266");
    assert!(payment.transaction.starts_with("local:0x"));
    assert_eq!(payment.resource_url, format!("{}/v1/dd/create", t.base));
    let established = verify_evidence(&evidence, &vkey, payer).expect("the bundle verifies");
    assert_eq!(established.payments[0].0, payment.transaction);

    // Another agent gets nothing; a malformed id is refused.
    let stranger = t.register().await;
    t.get(&format!("/v1/dd/{dd_id}/evidence"), Some(&stranger.token)).await.assert_error(403, "FORBIDDEN");
    t.get("/v1/dd/not-a-uuid/evidence", Some(&agent.token)).await.assert_error(400, "INVALID_UUID");
    t.get(&format!("/v1/dd/{}/evidence", uuid::Uuid::new_v4()), Some(&agent.token)).await.assert_error(404, "DD_NOT_FOUND");

    // Each tampering is refused by its check.
    let check = |tampered: &Evidence| verify_evidence(tampered, &vkey, payer).map(|_| ()).unwrap_err().check();
    let mut scope = evidence.clone();
    scope.scope.get_mut("ee_retention_period").unwrap().push('x');
    assert_eq!(check(&scope), "scope");
    let mut record = evidence.clone();
    record.receipt.canonical_record = record.receipt.canonical_record.replace("decision_action_type=execute", "decision_action_type=stop");
    assert_eq!(check(&record), "scope");
    let mut proof = evidence.clone();
    proof.receipt.leaf_index ^= 1;
    assert_eq!(check(&proof), "proof");
    // The earlier declaration's payment passed off as this one's: it
    // settled before this scope was anchored.
    let mut order = evidence.clone();
    order.payments = earlier.payments.clone();
    assert_eq!(check(&order), "order");
    let mut amount = evidence.clone();
    amount.payments[0].amount = "1".into();
    assert_eq!(check(&amount), "payment");
    let mut binding = evidence.clone();
    binding.payments[0].binding = earlier.payments[0].binding.clone();
    assert_eq!(check(&binding), "payment");
    let mut authorization = evidence.clone();
    authorization.payments[0].authorization["payload"]["authorization"]["value"] = json!("20000");
    assert_eq!(check(&authorization), "payment");
    // Under another log's key, nothing holds.
    let other = anchor_app::log::LogKey::generate("another.example/log").unwrap();
    assert_ne!(verify_evidence(&evidence, &other.vkey, payer).map(|_| ()), Ok(()));

    // The payer's own signature travels with its authorization: the check
    // above recovered the payer from it.
    assert!(payment.authorization["payload"]["signature"].is_string());
}
