//! Registration, authentication failures, rotation, recovery and its rate limit.

use anchor_tests::*;
use serde_json::{Value, json};

anchor_tests::both_backends!(
    registration_grants_trial_and_secrets_of_the_documented_shape,
    missing_and_invalid_tokens_get_the_documented_401_bodies,
    rotation_kills_the_old_token_and_key_at_once,
    recovery_replaces_both_secrets_and_is_rate_limited,
    disclosure_level_is_validated_and_stored,
    registration_refuses_bad_input,
    a_remembered_agent_creates_only_through_a_write_that_checks_its_token,
    a_remembered_record_is_confirmed_only_through_a_write_that_checks_its_token,
);

async fn registration_grants_trial_and_secrets_of_the_documented_shape(backend: Backend) {
    let t = TestServer::start(backend).await;
    let reply = t.post("/v1/agent/register", None, &json!({ "region_code": "KR", "request_id": uuid::Uuid::new_v4() })).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let body = &reply.json;
    let token = body["auth_token"].as_str().unwrap();
    let key = body["recovery_key"].as_str().unwrap();
    assert!(token.starts_with("da_tk_") && token.len() == 6 + 64, "{token}");
    assert!(key.starts_with("da_rk_") && key.len() == 6 + 64, "{key}");
    assert_eq!(body["trial_dac_amount"], json!(500));
    assert_eq!(body["trial_period_days"], json!(30));
    assert!(body["next_steps"]["first_record"].is_object());
    // The same request_id creates a second agent: registration is not idempotent.
    let again = t.post("/v1/agent/register", None, &json!({})).await;
    assert_ne!(again.json["agent_id"], body["agent_id"]);
    // Only hashes are stored: the raw token appears nowhere in the agent row.
    let agent_id = uuid::Uuid::parse_str(body["agent_id"].as_str().unwrap()).unwrap();
    let record = t.store.agent(agent_id).await.unwrap().unwrap();
    assert_ne!(record.token_hash.to_vec(), token.as_bytes().to_vec());
    assert_eq!(record.token_hash, anchor_domain::agents::hash_secret(token));

    let status = t.get("/v1/trial/status", Some(token)).await;
    assert_eq!(status.json["trial_active"], json!(true));
    assert_eq!(status.json["trial_dac_remaining"], json!(500));
    assert_eq!(status.json["trial_days_remaining"], json!(30));
}

async fn missing_and_invalid_tokens_get_the_documented_401_bodies(backend: Backend) {
    let t = TestServer::start(backend).await;
    let missing = t.get("/v1/trial/status", None).await;
    missing.assert_error(401, "UNAUTHORIZED");
    assert!(missing.json["authentication"]["register"].as_str().unwrap().ends_with("/v1/agent/register"));
    assert!(missing.json["documentation"].is_string());
    assert!(missing.json.get("account").is_none());

    let no_prefix = t.call("GET", "/v1/trial/status", None, None).await;
    no_prefix.assert_error(401, "UNAUTHORIZED");

    let invalid = t.get("/v1/trial/status", Some(&format!("da_tk_{}", "0".repeat(64)))).await;
    invalid.assert_error(401, "INVALID_TOKEN");
    assert!(invalid.json["authentication"]["recover"].as_str().unwrap().ends_with("/v1/agent/token/recover"));
    let garbage = t.get("/v1/trial/status", Some("not-a-token")).await;
    garbage.assert_error(401, "INVALID_TOKEN");
    assert_eq!(garbage.headers["www-authenticate"], "Bearer");

    // The scheme's name is case-insensitive; another scheme is no token.
    let agent = t.register().await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let header = format!("{scheme} {}", agent.token);
        let reply = t.call_with("GET", "/v1/trial/status", &[("authorization", &header)], None).await;
        assert_eq!(reply.status.as_u16(), 200, "{scheme}: {}", reply.text);
    }
    let basic = format!("Basic {}", agent.token);
    t.call_with("GET", "/v1/trial/status", &[("authorization", &basic)], None).await.assert_error(401, "UNAUTHORIZED");
}

async fn rotation_kills_the_old_token_and_key_at_once(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let other = t.register().await;
    t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": other.id })).await.assert_error(403, "FORBIDDEN");
    t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({})).await.assert_error(400, "MISSING_FIELD");
    t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": "nope" })).await.assert_error(400, "INVALID_UUID");

    let rotated = t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": agent.id })).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
    let new_token = rotated.json["auth_token"].as_str().unwrap();
    let new_key = rotated.json["recovery_key"].as_str().unwrap();
    assert_ne!(new_token, agent.token);
    t.get("/v1/trial/status", Some(&agent.token)).await.assert_error(401, "INVALID_TOKEN");
    assert_eq!(t.get("/v1/trial/status", Some(new_token)).await.status, StatusCode::OK);
    // The old recovery key died with the rotation; the new one works.
    t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": agent.recovery }))
        .await
        .assert_error(401, "INVALID_RECOVERY_KEY");
    let recovered = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": new_key })).await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text);
}

async fn recovery_replaces_both_secrets_and_is_rate_limited(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let recovered = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": agent.recovery })).await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text);
    let token = recovered.json["auth_token"].as_str().unwrap().to_string();
    let key = recovered.json["recovery_key"].as_str().unwrap().to_string();
    t.get("/v1/trial/status", Some(&agent.token)).await.assert_error(401, "INVALID_TOKEN");
    assert_eq!(t.get("/v1/trial/status", Some(&token)).await.status, StatusCode::OK);

    // Five wrong keys spend the window: a sixth wrong key is refused as rate
    // limited, but the right key is never locked out (agent ids are public).
    for _ in 0..5 {
        t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": "da_rk_wrong" }))
            .await
            .assert_error(401, "INVALID_RECOVERY_KEY");
    }
    let limited = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": "da_rk_wrong" })).await;
    limited.assert_error(429, "RATE_LIMITED");
    assert!(limited.headers.get("retry-after").is_some() || limited.headers.get("ratelimit-reset").is_some(), "{:?}", limited.headers);
    // The refused attempt changed nothing: the token still works.
    assert_eq!(t.get("/v1/trial/status", Some(&token)).await.status, StatusCode::OK);
    let later = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": key })).await;
    assert_eq!(later.status, StatusCode::OK, "{}", later.text);
    let key = later.json["recovery_key"].as_str().unwrap().to_string();
    // Fifteen minutes later wrong keys are counted afresh.
    t.clock.advance(chrono::Duration::minutes(16));
    t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id, "recovery_key": "da_rk_wrong" }))
        .await
        .assert_error(401, "INVALID_RECOVERY_KEY");
    // An unknown agent gets the same answer as a wrong key.
    t.post("/v1/agent/token/recover", None, &json!({ "agent_id": uuid::Uuid::new_v4(), "recovery_key": key }))
        .await
        .assert_error(401, "INVALID_RECOVERY_KEY");
    t.post("/v1/agent/token/recover", None, &json!({ "agent_id": agent.id })).await.assert_error(400, "MISSING_FIELD");
    t.post("/v1/agent/token/recover", None, &json!({ "agent_id": "x", "recovery_key": key })).await.assert_error(400, "INVALID_UUID");
}

async fn disclosure_level_is_validated_and_stored(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let ok = t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({ "disclosure_level": "detailed" }))).await;
    assert_eq!(ok.json, json!({ "agent_id": agent.id, "disclosure_level": "detailed" }));
    let id = uuid::Uuid::parse_str(&agent.id).unwrap();
    assert_eq!(t.store.agent(id).await.unwrap().unwrap().disclosure_level.as_str(), "detailed");
    t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({ "disclosure_level": "everything" })))
        .await
        .assert_error(400, "INVALID_ENUM");
    t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({}))).await.assert_error(400, "MISSING_FIELD");
    let extra = t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({ "disclosure_level": "full", "x": 1 }))).await;
    assert_eq!((extra.status.as_u16(), extra.headers["anchor-ignored-fields"].to_str().unwrap()), (200, "x"), "{}", extra.text);
}

async fn registration_refuses_bad_input(backend: Backend) {
    let t = TestServer::start(backend).await;
    t.post("/v1/agent/register", None, &json!({ "region_code": "MARS" })).await.assert_error(400, "INVALID_ENUM");
    t.post("/v1/agent/register", None, &json!({ "request_id": "abc" })).await.assert_error(400, "INVALID_UUID");
    let nicknamed = t.post("/v1/agent/register", None, &json!({ "nickname": "x" })).await;
    assert_eq!(nicknamed.status.as_u16(), 201, "an unknown key is left out: {}", nicknamed.text);
    assert_eq!(nicknamed.headers["anchor-ignored-fields"], "nickname");
    let not_json = t.http.post(t.url("/v1/agent/register")).body("{not json").send().await.unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = not_json.json().await.unwrap();
    assert_eq!(body["error_code"], "INVALID_INPUT");
}

/// A DD create may use the agent as this host found it by its token lately
/// (decision 0086). What another host (here, a statement behind the
/// service's back) changed since is still decided as a fresh read decides it.
async fn a_remembered_agent_creates_only_through_a_write_that_checks_its_token(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let id = t.uuid_sql(&agent.id);
    let create = |token: String| {
        let t = &t;
        async move { t.post("/v1/dd/create", Some(&token), &create_body(json!({ "ee_preset": "EE_basic" }))).await }
    };
    let count = format!("select count(*) from declaration where agent_id = {id}");
    // Remembered with an empty Trial, then given back elsewhere: the
    // remembered balance does not refuse.
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {id}")).await;
    let short = create(agent.token.clone()).await;
    assert_eq!(short.status.as_u16(), 402, "{}", short.text);
    t.tamper(&format!("update agent set trial_balance_milli = 100000 where agent_id = {id}")).await;
    let paid = create(agent.token.clone()).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.text);
    assert_eq!(paid.json["cost_breakdown"]["base_fee_source"], "trial", "{}", paid.text);
    assert_eq!(t.scalar(&count).await, 1);

    // Taken to nothing elsewhere: the remembered balance does not pay.
    assert_eq!(create(agent.token.clone()).await.status, StatusCode::CREATED);
    t.tamper(&format!("update agent set trial_balance_milli = 0 where agent_id = {id}")).await;
    let short = create(agent.token.clone()).await;
    assert_eq!(short.status.as_u16(), 402, "{}", short.text);
    assert_eq!(t.scalar(&count).await, 2);
    t.tamper(&format!("update agent set trial_balance_milli = 100000 where agent_id = {id}")).await;
    let kept = create_body(json!({ "ee_preset": "EE_basic" }));
    let first = t.post("/v1/dd/create", Some(&agent.token), &kept).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    // Sent again with its token: answered with its record by the batch.
    let again = t.post("/v1/dd/create", Some(&agent.token), &kept).await;
    assert_eq!((again.status, &again.json["dd_id"]), (StatusCode::CREATED, &first.json["dd_id"]), "{}", again.text);
    assert_eq!(t.scalar(&count).await, 3);

    // The token replaced elsewhere: the remembered one records nothing and
    // is refused as any unknown token is.
    t.tamper(&format!("update agent set token_hash = recovery_hash where agent_id = {id}")).await;
    // Not answered with a record it made before, sent again,
    t.post("/v1/dd/create", Some(&agent.token), &kept).await.assert_error(401, "INVALID_TOKEN");
    // nor with a new one.
    let refused = create(agent.token.clone()).await;
    refused.assert_error(401, "INVALID_TOKEN");
    assert!(refused.json["authentication"].is_object(), "{}", refused.text);
    assert_eq!(t.scalar(&count).await, 3, "a replaced token recorded a declaration");
    t.get("/v1/trial/status", Some(&agent.token)).await.assert_error(401, "INVALID_TOKEN");

    // Paid over x402: 7.5 DAC of Trial cannot pay a 10 DAC base fee.
    let payer = t.register().await;
    let pid = t.uuid_sql(&payer.id);
    let trial_left = |milli: i64| format!("update agent set trial_balance_milli = {milli} where agent_id = {pid}");
    t.tamper(&trial_left(7500)).await;
    // A body and the payment its challenge asks for.
    let signed = || {
        let (t, token) = (&t, payer.token.clone());
        async move {
            let body = create_body(json!({ "ee_preset": "EE_basic" }));
            let challenged = t.post("/v1/dd/create", Some(&token), &body).await;
            let challenge = anchor_tests::x402::challenge_of(&challenged);
            let payment = anchor_tests::x402::pay(
                &challenge,
                anchor_domain::Clock::now(t.clock.as_ref()).timestamp(),
                anchor_tests::x402::Twist::default(),
            );
            (body, anchor_tests::x402::b64(&payment))
        }
    };
    let send = |body: Value, signature: String| {
        let (t, token) = (&t, payer.token.clone());
        async move {
            let bearer = format!("Bearer {token}");
            t.call_with("POST", "/v1/dd/create", &[("authorization", &bearer), ("payment-signature", &signature)], Some(&body)).await
        }
    };
    let payments = format!("select count(*) from x402_payment where agent_id = {pid}");
    let (first_body, first_signature) = signed().await;
    let paid = send(first_body.clone(), first_signature.clone()).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.text);
    assert_eq!(paid.json["cost_breakdown"]["base_fee_source"], "external", "{}", paid.text);
    assert_eq!(t.scalar(&payments).await, 1);
    // Sent again with its token and payment: its record, nothing reserved.
    let again = send(first_body.clone(), first_signature.clone()).await;
    assert_eq!((again.status, &again.json["dd_id"]), (StatusCode::CREATED, &paid.json["dd_id"]), "{}", again.text);
    assert_eq!(t.scalar(&payments).await, 1);
    // Trial given back elsewhere after the payment was signed: Trial pays,
    // as a fresh read decides, and the payment is not taken.
    let (body, signature) = signed().await;
    t.tamper(&trial_left(100_000)).await;
    let trial = send(body, signature).await;
    assert_eq!(trial.status, StatusCode::CREATED, "{}", trial.text);
    assert_eq!(trial.json["cost_breakdown"]["base_fee_source"], "trial", "{}", trial.text);
    assert_eq!(t.scalar(&payments).await, 1);
    // The token replaced elsewhere after the payment was signed: nothing
    // reserved or recorded.
    t.tamper(&trial_left(7500)).await;
    let (body, signature) = signed().await;
    t.tamper(&format!("update agent set token_hash = recovery_hash where agent_id = {pid}")).await;
    send(body, signature).await.assert_error(401, "INVALID_TOKEN");
    // Nor answered with the record that token paid for before, sent again.
    send(first_body, first_signature).await.assert_error(401, "INVALID_TOKEN");
    assert_eq!(t.scalar(&payments).await, 1, "a replaced token reserved a payment");
    assert_eq!(t.scalar(&format!("select count(*) from declaration where agent_id = {pid}")).await, 2);
}

/// A DD confirm may use the record its host's create stored by the same
/// token within a second, unread (decision 0088): its write checks the
/// token, and what it does not take is decided from a fresh read. Each case
/// runs until a confirmation did use a remembered record (the store's
/// counter), so that none passes by reading afresh only.
async fn a_remembered_record_is_confirmed_only_through_a_write_that_checks_its_token(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let other = t.register().await;
    let id = t.uuid_sql(&agent.id);
    let remembered = || t.store.metrics().remembered_records.get();
    // A record created while the agent is remembered (the first create reads
    // it, the second uses it and is stored with its token checked).
    let create = || {
        let t = &t;
        let token = agent.token.clone();
        async move {
            let created = t.post("/v1/dd/create", Some(&token), &create_body(json!({ "ee_preset": "EE_basic" }))).await;
            assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
            created.json["dd_id"].as_str().expect("a dd_id").to_owned()
        }
    };
    // An agent whose 7.5 DAC of Trial cannot pay a 10 DAC base fee: its
    // challenge reads it afresh, and the create paying it uses it remembered.
    let payer = t.register().await;
    let pid = t.uuid_sql(&payer.id);
    t.tamper(&format!("update agent set trial_balance_milli = 7500 where agent_id = {pid}")).await;
    let paid_create = || {
        let (t, token) = (&t, payer.token.clone());
        async move {
            let body = create_body(json!({ "ee_preset": "EE_basic" }));
            let challenged = t.post("/v1/dd/create", Some(&token), &body).await;
            let challenge = anchor_tests::x402::challenge_of(&challenged);
            let now = anchor_domain::Clock::now(t.clock.as_ref()).timestamp();
            let payment = anchor_tests::x402::b64(&anchor_tests::x402::pay(&challenge, now, anchor_tests::x402::Twist::default()));
            let bearer = format!("Bearer {token}");
            let headers = [("authorization", bearer.as_str()), ("payment-signature", payment.as_str())];
            let created = t.call_with("POST", "/v1/dd/create", &headers, Some(&body)).await;
            assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
            assert_eq!(created.json["cost_breakdown"]["base_fee_source"], "external", "{}", created.text);
            created.json["dd_id"].as_str().expect("a dd_id").to_owned()
        }
    };
    let payment_status = |dd_id: String| {
        let t = &t;
        async move {
            let dd = t.uuid_sql(&dd_id);
            t.strings(&format!("select status from x402_payment where dd_id = {dd}")).await.join(",")
        }
    };
    let confirm = |token: String, dd_id: String| {
        let t = &t;
        async move { t.post("/v1/dd/confirm", Some(&token), &json!({ "dd_id": dd_id })).await }
    };
    let written = |dd_id: String| {
        let t = &t;
        async move {
            let dd = t.uuid_sql(&dd_id);
            (
                t.scalar(&format!("select count(*) from declaration where dd_id = {dd} and confirmed_at is not null")).await,
                t.scalar(&format!("select count(*) from usage_entry where subject_id = {dd}")).await,
                // Queued, or integrated into the log since.
                t.scalar(&format!(
                    "select (select count(*) from log_pending where dd_id = {dd}) + (select count(*) from log_entry where dd_id = {dd})"
                ))
                .await,
            )
        }
    };
    let cases = ["confirmed", "another agent's token", "confirmed elsewhere", "token replaced", "paid", "paid, token replaced"];
    for case in cases {
        let mut used = false;
        for _attempt in 0..5 {
            // The agent found by its token afresh, then remembered.
            let dd_id = match case.starts_with("paid") {
                true => paid_create().await,
                false => {
                    create().await;
                    create().await
                }
            };
            let before = remembered();
            match case {
                "confirmed" => {
                    let done = confirm(agent.token.clone(), dd_id.clone()).await;
                    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
                    assert_eq!(done.json["settlement_status"], "settled", "{}", done.text);
                    assert_eq!(written(dd_id.clone()).await, (1, 1, 1), "{case}");
                    confirm(agent.token.clone(), dd_id.clone()).await.assert_error(409, "ALREADY_CONFIRMED");
                    assert_eq!(written(dd_id.clone()).await, (1, 1, 1), "{case}: confirmed twice");
                }
                "another agent's token" => {
                    confirm(other.token.clone(), dd_id.clone()).await.assert_error(403, "FORBIDDEN");
                    assert_eq!(written(dd_id.clone()).await, (0, 0, 0), "{case}");
                    // Still remembered for its own agent.
                    let done = confirm(agent.token.clone(), dd_id.clone()).await;
                    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
                    assert_eq!(written(dd_id.clone()).await, (1, 1, 1), "{case}");
                }
                "confirmed elsewhere" => {
                    let dd = t.uuid_sql(&dd_id);
                    t.tamper(&format!("update declaration set confirmed_at = anchored_at where dd_id = {dd}")).await;
                    confirm(agent.token.clone(), dd_id.clone()).await.assert_error(409, "ALREADY_CONFIRMED");
                    assert_eq!(written(dd_id.clone()).await, (1, 0, 0), "{case}: written over");
                }
                "paid" => {
                    let done = confirm(payer.token.clone(), dd_id.clone()).await;
                    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
                    assert!(done.headers.contains_key("payment-response"), "a settlement is answered with its receipt");
                    assert_eq!(payment_status(dd_id.clone()).await, "settled", "{case}");
                    assert_eq!(written(dd_id.clone()).await, (1, 1, 1), "{case}");
                }
                "paid, token replaced" => {
                    let swap = format!("update agent set token_hash = recovery_hash, recovery_hash = token_hash where agent_id = {pid}");
                    t.tamper(&swap).await;
                    confirm(payer.token.clone(), dd_id.clone()).await.assert_error(401, "INVALID_TOKEN");
                    assert_eq!(payment_status(dd_id.clone()).await, "reserved", "{case}: a replaced token settled");
                    assert_eq!(written(dd_id.clone()).await, (0, 0, 0), "{case}: a replaced token confirmed");
                    t.tamper(&swap).await;
                    let done = confirm(payer.token.clone(), dd_id.clone()).await;
                    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
                    assert_eq!(payment_status(dd_id.clone()).await, "settled", "{case}");
                }
                _ => {
                    // Replaced behind the service's back (as through another host).
                    let swap = format!("update agent set token_hash = recovery_hash, recovery_hash = token_hash where agent_id = {id}");
                    t.tamper(&swap).await;
                    let refused = confirm(agent.token.clone(), dd_id.clone()).await;
                    refused.assert_error(401, "INVALID_TOKEN");
                    assert!(refused.json["authentication"].is_object(), "{}", refused.text);
                    assert_eq!(written(dd_id.clone()).await, (0, 0, 0), "{case}: a replaced token confirmed");
                    t.tamper(&swap).await;
                    let done = confirm(agent.token.clone(), dd_id.clone()).await;
                    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
                }
            }
            if remembered() > before {
                used = true;
                break;
            }
        }
        assert!(used, "{case}: no confirmation used a remembered record in five tries");
    }
}
