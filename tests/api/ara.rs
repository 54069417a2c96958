//! ARA environment observation over HTTP: de-identified, refused for free when
//! too few agents contribute, paid over x402 and settled before the answer.

use anchor_domain::Clock;
use anchor_tests::*;
use serde_json::json;

use super::payments::{Twist, b64, challenge_of, pay};

both_backends!(the_environment_is_observed_paid_and_de_identified);

/// GET /v1/ara/environment as `agent`, with a payment payload if given.
async fn observe(t: &TestServer, agent: &Agent, payment: Option<&serde_json::Value>) -> Reply {
    let bearer = format!("Bearer {}", agent.token);
    let signature = payment.map(b64);
    let mut headers = vec![("authorization", bearer.as_str())];
    if let Some(signature) = &signature {
        headers.push(("payment-signature", signature.as_str()));
    }
    t.call_with("GET", "/v1/ara/environment", &headers, None).await
}

async fn the_environment_is_observed_paid_and_de_identified(backend: Backend) {
    let t = TestServer::start(backend).await;
    let observer = t.register().await;

    // Nine agents anchor one declaration each, a tenth only an internal_only
    // one: still too few to show, refused before any challenge.
    for i in 0..10 {
        let agent = t.register().await;
        let mut ee = json!({ "ee_preset": "EE_basic" });
        if i == 9 {
            ee["access_class"] = json!("internal_only");
        }
        let created = t.create(&agent, ee).await;
        assert_eq!(t.confirm(&agent, created["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    }
    let unavailable = observe(&t, &observer, None).await;
    unavailable.assert_error(404, "DATA_UNAVAILABLE");
    assert!(unavailable.headers.get("payment-required").is_none());

    // A tenth visible agent, and an unconfirmed declaration that does not count.
    let tenth = t.register().await;
    let created = t.create(&tenth, json!({ "ee_preset": "EE_basic" })).await;
    assert_eq!(t.confirm(&tenth, created["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    t.create(&tenth, json!({ "ee_preset": "EE_basic" })).await;

    // Trial is untouched by observations: the challenge asks 1 DAC over x402.
    let challenge = challenge_of(&observe(&t, &observer, None).await);
    assert_eq!(challenge["accepts"][0]["amount"], "1000");
    assert_eq!(challenge["resource"]["url"].as_str().unwrap().rsplit_once("/v1/").unwrap().1, "ara/environment");

    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let paid = observe(&t, &observer, Some(&payment)).await;
    assert_eq!(paid.status.as_u16(), 200, "{}", paid.text);
    assert!(paid.headers.get("payment-response").is_some(), "settled before the answer");
    let body = &paid.json;
    assert_eq!(body["dd_count"], 10);
    assert_eq!(body["agent_count"], 10);
    assert_eq!(body["action_type_distribution"], json!({ "execute": 10 }));
    assert_eq!(body["retention_distribution"], json!({ "short": 10 }));
    assert_eq!(body["dac_charged"], 1);
    // Counts only: no identifier of a record or an agent anywhere in it.
    assert!(!paid.text.contains(&tenth.id) && !paid.text.contains("dd_id"), "{}", paid.text);

    // The same authorization cannot pay twice.
    let replayed = challenge_of(&observe(&t, &observer, Some(&payment)).await);
    assert_eq!(replayed["error"], "invalid_exact_evm_nonce_already_used");

    // The observation and its usage are on record, paid externally.
    let counted: i64 = t.scalar("select count(*) from ara_observation where kind = 'environment' and payment_id is not null").await;
    assert_eq!(counted, 1);
    let usage: i64 =
        t.scalar("select count(*) from usage_entry where subject_domain = 'ara_observation' and cost_component = 'ara_observation' and amount_milli = 1000").await;
    assert_eq!(usage, 1);
}
