//! The owner portal API (DAP): accounts and sessions, CSRF, linking, DAB,
//! the classification registry, the content-inclusion policy and reports.

use anchor_domain::Clock;
use anchor_tests::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

both_backends!(
    accounts_passwords_and_sessions,
    login_attempts_are_limited,
    linking_rotates_the_token_and_owners_stay_apart,
    csrf_is_refused_for_browser_requests,
    dab_set_in_the_portal_is_the_agents_dab,
    classification_registry,
    content_inclusion_policy_is_enforced_on_create,
    reports_count_each_declaration_once,
    account_deletion_restore_and_export,
    agent_type_owners,
);

fn no_agent_guidance(reply: &Reply) {
    assert!(
        reply.json.get("authentication").is_none() && reply.json.get("account").is_none(),
        "owner 401 carries agent guidance: {}",
        reply.text
    );
}

async fn accounts_passwords_and_sessions(backend: Backend) {
    let t = TestServer::start(backend).await;
    let register = |body: Value| {
        let t = &t;
        async move { t.post("/dap/register", None, &body).await }
    };
    let base = json!({ "email": "ada@example.com", "password": OWNER_PASSWORD, "terms_agreed": true, "privacy_agreed": true });
    let mut b = base.clone();
    b["terms_agreed"] = json!(false);
    register(b).await.assert_error(400, "TERMS_REQUIRED");
    let mut b = base.clone();
    b.as_object_mut().unwrap().remove("privacy_agreed");
    register(b).await.assert_error(400, "PRIVACY_REQUIRED");
    for weak in ["short1", "onlyletterslonger", "12345678901"] {
        let mut b = base.clone();
        b["password"] = json!(weak);
        register(b).await.assert_error(400, "INVALID_VALUE");
    }
    let mut b = base.clone();
    b["email"] = json!("not-an-email");
    register(b).await.assert_error(400, "INVALID_VALUE");
    assert_eq!(register(base.clone()).await.status, StatusCode::CREATED);
    let mut b = base.clone();
    b["email"] = json!("ADA@example.com");
    register(b).await.assert_error(409, "EMAIL_ALREADY_REGISTERED");

    // The password is kept as an argon2id hash only.
    let stored = t.store.owner_by_email("ada@example.com").await.unwrap().unwrap();
    assert!(stored.password_hash.as_deref().unwrap().starts_with("$argon2id$"));
    assert!(!stored.password_hash.as_deref().unwrap().contains(OWNER_PASSWORD));

    // Wrong password and unknown email: 401 without agent guidance.
    let wrong = t.post("/dap/login", None, &json!({ "email": "ada@example.com", "password": "a long passphrase 8" })).await;
    wrong.assert_error(401, "UNAUTHORIZED");
    no_agent_guidance(&wrong);
    assert!(wrong.headers.get("set-cookie").is_none());
    t.post("/dap/login", None, &json!({ "email": "nobody@example.com", "password": OWNER_PASSWORD }))
        .await
        .assert_error(401, "UNAUTHORIZED");

    // The cookie: connect.sid, HttpOnly, SameSite, expiring; not Secure over plain HTTP.
    let login = t.post("/dap/login", None, &json!({ "email": "ada@example.com", "password": OWNER_PASSWORD })).await;
    let set_cookie = login.headers.get("set-cookie").unwrap().to_str().unwrap().to_string();
    assert!(set_cookie.starts_with("connect.sid="), "{set_cookie}");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(flag), "{flag} missing: {set_cookie}");
    }
    assert!(!set_cookie.contains("Secure"));
    let owner = t.login("ada@example.com", OWNER_PASSWORD).await;
    let me = t.as_owner(&owner, "GET", "/dap/account/me", None).await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.text);
    assert_eq!(me.json["email"], "ada@example.com");
    assert_eq!(me.json["status"], "active");
    assert_eq!(me.json["content_inclusion_policy"], "agent_choice");
    assert_eq!(me.json["csrf_token"], owner.csrf.as_str());

    // No cookie, a made-up cookie: 401 without agent guidance.
    let none = t.get("/dap/agents", None).await;
    none.assert_error(401, "UNAUTHORIZED");
    no_agent_guidance(&none);
    t.call_with("GET", "/dap/agents", &[("cookie", "connect.sid=forged")], None).await.assert_error(401, "UNAUTHORIZED");

    // The session expires after its lifetime (12 hours), by the service clock.
    let short = t.login("ada@example.com", OWNER_PASSWORD).await;
    t.clock.advance(chrono::Duration::hours(11));
    assert_eq!(t.as_owner(&short, "GET", "/dap/agents", None).await.status, StatusCode::OK);
    t.clock.advance(chrono::Duration::hours(1) + chrono::Duration::seconds(1));
    let expired = t.as_owner(&short, "GET", "/dap/agents", None).await;
    expired.assert_error(401, "UNAUTHORIZED");
    no_agent_guidance(&expired);

    // A cookie replayed after logout is refused: the session ended on the server.
    let session = t.login("ada@example.com", OWNER_PASSWORD).await;
    let out = t.as_owner(&session, "POST", "/dap/logout", None).await;
    assert_eq!(out.status, StatusCode::OK);
    assert!(out.headers.get("set-cookie").unwrap().to_str().unwrap().contains("Max-Age=0"));
    t.as_owner(&session, "GET", "/dap/account/me", None).await.assert_error(401, "UNAUTHORIZED");

    // Logging out without a session is harmless.
    assert_eq!(t.post("/dap/logout", None, &json!({})).await.status, StatusCode::OK);

    // Changing the password ends the other sessions, keeps this one, and the old password stops working.
    let this = t.login("ada@example.com", OWNER_PASSWORD).await;
    let other = t.login("ada@example.com", OWNER_PASSWORD).await;
    t.as_owner(&this, "PUT", "/dap/password", Some(&json!({ "current_password": "wrong one 1", "new_password": "new passphrase 22" })))
        .await
        .assert_error(401, "UNAUTHORIZED");
    t.as_owner(&this, "PUT", "/dap/password", Some(&json!({ "current_password": OWNER_PASSWORD, "new_password": "short" })))
        .await
        .assert_error(400, "INVALID_VALUE");
    let changed = t
        .as_owner(&this, "PUT", "/dap/password", Some(&json!({ "current_password": OWNER_PASSWORD, "new_password": "new passphrase 22" })))
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    assert_eq!(t.as_owner(&this, "GET", "/dap/agents", None).await.status, StatusCode::OK);
    t.as_owner(&other, "GET", "/dap/agents", None).await.assert_error(401, "UNAUTHORIZED");
    t.post("/dap/login", None, &json!({ "email": "ada@example.com", "password": OWNER_PASSWORD })).await.assert_error(401, "UNAUTHORIZED");
    t.login("ada@example.com", "new passphrase 22").await;
}

#[tokio::test]
async fn residence_is_suggested_from_headers() {
    let t = TestServer::start(Backend::Sqlite).await;
    let suggest = |headers: Vec<(&'static str, &'static str)>| {
        let t = &t;
        async move { t.call_with("GET", "/dap/register/suggested-country", &headers, None).await.json }
    };
    let by_header = suggest(vec![("cf-ipcountry", "DE"), ("accept-language", "ko-KR")]).await;
    assert_eq!((by_header["suggested_country"].as_str(), by_header["detection_source"].as_str()), (Some("EU"), Some("country_header")));
    let by_language = suggest(vec![("accept-language", "ko-KR,ko;q=0.9,en;q=0.8")]).await;
    assert_eq!((by_language["suggested_country"].as_str(), by_language["detection_raw"].as_str()), (Some("KR"), Some("ko-KR")));
    assert_eq!(suggest(vec![("accept-language", "en-GB")]).await["suggested_country"], "UK");
    assert_eq!(suggest(vec![]).await["suggested_country"], "OTHER");
}

async fn login_attempts_are_limited(backend: Backend) {
    let t = TestServer::start(backend).await;
    t.owner("bob@example.com").await;
    for _ in 0..5 {
        t.post("/dap/login", None, &json!({ "email": "bob@example.com", "password": "guess guess 1" }))
            .await
            .assert_error(401, "UNAUTHORIZED");
    }
    // Locked for the window, even with the right password.
    let locked = t.post("/dap/login", None, &json!({ "email": "bob@example.com", "password": OWNER_PASSWORD })).await;
    locked.assert_error(429, "RATE_LIMITED");
    assert!(locked.headers.get("retry-after").is_some());
    t.clock.advance(chrono::Duration::minutes(16));
    t.login("bob@example.com", OWNER_PASSWORD).await;
}

async fn linking_rotates_the_token_and_owners_stay_apart(backend: Backend) {
    let t = TestServer::start(backend).await;
    let a = t.owner("a@example.com").await;
    let b = t.owner("b@example.com").await;
    let mut agent = t.register().await;
    let old = agent.token.clone();

    // A wrong token: 401 with the token guidance (UnauthorizedBody).
    let wrong = t
        .as_owner(&a, "POST", "/dap/agent/link", Some(&json!({ "agent_id": agent.id, "auth_token": format!("da_tk_{}", "0".repeat(64)) })))
        .await;
    wrong.assert_error(401, "INVALID_TOKEN");
    assert!(wrong.json["authentication"].is_object());

    let reply = t.as_owner(&a, "POST", "/dap/agent/link", Some(&json!({ "agent_id": agent.id, "auth_token": agent.token }))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.json["agent_id"], agent.id.as_str());
    assert!(reply.json["linked_at"].is_string());
    agent.token = reply.json["new_auth_token"].as_str().unwrap().to_string();
    assert_ne!(agent.token, old);
    assert!(agent.token.starts_with("da_tk_"));
    t.get("/v1/trial/status", Some(&old)).await.assert_error(401, "INVALID_TOKEN");
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.status, StatusCode::OK);

    let listed = t.as_owner(&a, "GET", "/dap/agents", None).await;
    assert_eq!(listed.json["count"], 1);
    assert_eq!(listed.json["agents"][0]["agent_id"], agent.id.as_str());

    // Owner B cannot take the agent, and its token is not rotated by the attempt.
    t.as_owner(&b, "POST", "/dap/agent/link", Some(&json!({ "agent_id": agent.id, "auth_token": agent.token })))
        .await
        .assert_error(409, "AGENT_ALREADY_LINKED");
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.status, StatusCode::OK);

    // Owner B sees and touches nothing of A's agent.
    let created = t.create(&agent, basic_axes()).await;
    let dd_id = created["dd_id"].as_str().unwrap();
    let id = &agent.id;
    for (method, path, body) in [
        ("GET", format!("/dap/agent/{id}/report"), None),
        ("GET", format!("/dap/agent/{id}/report/weekly"), None),
        ("GET", format!("/dap/agent/{id}/report/export"), None),
        ("GET", format!("/dap/dab/status?agent_id={id}"), None),
        ("GET", format!("/dap/evidence-report?dd_id={dd_id}"), None),
        ("GET", format!("/dap/dd/{dd_id}/receipt"), None),
        ("GET", format!("/dap/usage/daily?agent_id={id}"), None),
        ("PUT", "/dap/dab/set".into(), Some(json!({ "agent_id": id, "budget_limit_dac": 500, "budget_period": "monthly" }))),
        ("DELETE", "/dap/dab/remove".into(), Some(json!({ "agent_id": id, "password": OWNER_PASSWORD }))),
        ("DELETE", "/dap/agent/unlink".into(), Some(json!({ "agent_id": id, "password": OWNER_PASSWORD }))),
        ("POST", "/dap/owner/register-agent".into(), Some(json!({ "agent_id": id }))),
    ] {
        let reply = t.as_owner(&b, method, &path, body.as_ref()).await;
        assert_eq!(
            (reply.status.as_u16(), reply.json["error_code"].as_str()),
            (403, Some("NOT_LINKED")),
            "{method} {path}: {}",
            reply.text
        );
    }
    // An agent id that does not exist looks the same as another owner's.
    let ghost = uuid::Uuid::new_v4();
    t.as_owner(&b, "GET", &format!("/dap/agent/{ghost}/report"), None).await.assert_error(403, "NOT_LINKED");
    assert_eq!(t.as_owner(&b, "GET", "/dap/dashboard", None).await.json["agents"], json!([]));

    // Unlink needs the password; then B may link it.
    t.as_owner(&a, "DELETE", "/dap/agent/unlink", Some(&json!({ "agent_id": id, "password": "not it at all 1" })))
        .await
        .assert_error(401, "UNAUTHORIZED");
    let unlinked = t.as_owner(&a, "DELETE", "/dap/agent/unlink", Some(&json!({ "agent_id": id, "password": OWNER_PASSWORD }))).await;
    assert_eq!(unlinked.status, StatusCode::OK, "{}", unlinked.text);
    assert_eq!(t.as_owner(&a, "GET", "/dap/agents", None).await.json["count"], 0);
    t.link(&b, &mut agent).await;
    assert_eq!(t.as_owner(&b, "GET", "/dap/agents", None).await.json["count"], 1);
}

async fn csrf_is_refused_for_browser_requests(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("c@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let body = json!({ "agent_id": agent.id, "budget_limit_dac": 300, "budget_period": "monthly" });
    let cookie = owner.cookie.as_str();
    let ours = t.base.as_str();
    // Another site's page, with or without a guessed token.
    for headers in [
        vec![("cookie", cookie), ("origin", "http://evil.example")],
        vec![("cookie", cookie), ("origin", "http://evil.example"), ("x-csrf-token", owner.csrf.as_str())],
        vec![("cookie", cookie), ("sec-fetch-site", "cross-site")],
        vec![("cookie", cookie), ("origin", ours), ("sec-fetch-site", "same-site")],
        // Our own page, but without the session's token, or with another one.
        vec![("cookie", cookie), ("origin", ours)],
        vec![("cookie", cookie), ("origin", ours), ("x-csrf-token", "0000")],
        vec![("cookie", cookie), ("sec-fetch-site", "same-origin")],
        // Any fetch metadata marks a browser, not Sec-Fetch-Site alone.
        vec![("cookie", cookie), ("sec-fetch-mode", "cors")],
        vec![("cookie", cookie), ("sec-fetch-dest", "empty")],
        // A client with no browser headers needs no token, but one it sends
        // must be the session's.
        vec![("cookie", cookie), ("x-csrf-token", "0000")],
    ] {
        let reply = t.call_with("PUT", "/dap/dab/set", &headers, Some(&body)).await;
        assert_eq!((reply.status.as_u16(), reply.json["error_code"].as_str()), (403, Some("CSRF_REJECTED")), "{headers:?}: {}", reply.text);
    }
    let status = t.as_owner(&owner, "GET", &format!("/dap/dab/status?agent_id={}", agent.id), None).await;
    assert_eq!(status.json["limit_source"], "operator_default", "a refused request changed state");
    // Sign-in from another site is refused too (login CSRF).
    let login = t
        .call_with(
            "POST",
            "/dap/login",
            &[("origin", "http://evil.example")],
            Some(&json!({ "email": "c@example.com", "password": OWNER_PASSWORD })),
        )
        .await;
    login.assert_error(403, "CSRF_REJECTED");
    // Our page with the token, and an API client with no browser headers, pass.
    let page = t
        .call_with(
            "PUT",
            "/dap/dab/set",
            &[("cookie", cookie), ("origin", ours), ("sec-fetch-site", "same-origin"), ("x-csrf-token", &owner.csrf)],
            Some(&body),
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert_eq!(t.as_owner(&owner, "PUT", "/dap/dab/set", Some(&body)).await.status, StatusCode::OK);
    // Reading needs no token.
    assert_eq!(t.call_with("GET", "/dap/agents", &[("cookie", cookie), ("origin", ours)], None).await.status, StatusCode::OK);
}

async fn dab_set_in_the_portal_is_the_agents_dab(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("d@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let set = |limit: Value, period: &str| {
        let body = json!({ "agent_id": agent.id, "budget_limit_dac": limit, "budget_period": period });
        let owner = owner.clone();
        let t = &t;
        async move { t.as_owner(&owner, "PUT", "/dap/dab/set", Some(&body)).await }
    };
    set(json!(99.999), "monthly").await.assert_error(400, "INVALID_VALUE");
    set(json!(99), "monthly").await.assert_error(400, "INVALID_VALUE");
    set(json!(100.0001), "monthly").await.assert_error(400, "INVALID_VALUE");
    set(json!("250"), "monthly").await.assert_error(400, "INVALID_VALUE");
    set(json!(250), "weekly").await.assert_error(400, "INVALID_ENUM");
    t.as_owner(&owner, "PUT", "/dap/dab/set", Some(&json!({ "agent_id": agent.id, "budget_limit_dac": 250 })))
        .await
        .assert_error(400, "MISSING_FIELD");
    let saved = set(json!(250.5), "monthly").await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.text);
    assert_eq!(saved.json["budget_limit_dac"], json!(250.5));

    let agent_side = t.get("/v1/dab/status", Some(&agent.token)).await;
    assert_eq!(agent_side.json["budget_limit_dac"], json!(250.5));
    assert_eq!(agent_side.json["limit_source"], "owner");
    assert_eq!(agent_side.json["budget_period"], "monthly");
    let owner_side = t.as_owner(&owner, "GET", &format!("/dap/dab/status?agent_id={}", agent.id), None).await;
    assert_eq!(owner_side.json["budget_limit_dac"], agent_side.json["budget_limit_dac"]);
    t.as_owner(&owner, "GET", "/dap/dab/status", None).await.assert_error(400, "MISSING_FIELD");
    t.as_owner(&owner, "GET", "/dap/dab/status?agent_id=nope", None).await.assert_error(400, "INVALID_UUID");

    t.as_owner(&owner, "DELETE", "/dap/dab/remove", Some(&json!({ "agent_id": agent.id, "password": "wrong wrong 1" })))
        .await
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(t.get("/v1/dab/status", Some(&agent.token)).await.json["budget_limit_dac"], json!(250.5));
    let removed = t.as_owner(&owner, "DELETE", "/dap/dab/remove", Some(&json!({ "agent_id": agent.id, "password": OWNER_PASSWORD }))).await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text);
    let after = t.get("/v1/dab/status", Some(&agent.token)).await;
    assert_eq!((after.json["budget_limit_dac"].clone(), after.json["limit_source"].clone()), (json!(1000), json!("operator_default")));

    let limits = t.as_owner(&owner, "GET", "/dap/system/limits", None).await;
    assert_eq!(limits.json["dab"]["minimum_budget_limit_dac"], 100);
    assert_eq!(limits.json["agents"]["linked_agents"], 1);
}

fn with_template(template: Value) -> Value {
    let mut body = create_body(basic_axes());
    body["content_inclusion_flag"] = json!(1);
    body["template"] = template;
    body
}

async fn classification_registry(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("e@example.com").await;
    let stranger = t.owner("f@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let mut foreign = t.register().await;
    t.link(&stranger, &mut foreign).await;
    let post = |owner: &Owner, body: Value| {
        let owner = owner.clone();
        let t = &t;
        async move { t.as_owner(&owner, "POST", "/dap/classification", Some(&body)).await }
    };
    let created = post(
        &owner,
        json!({ "classification_key": "vendor_payment", "classification_label": "Vendor payment", "description": "Pays a supplier" }),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.json["classification_id"].as_str().unwrap().to_string();
    assert_eq!(created.json["is_active"], true);
    post(&owner, json!({ "classification_key": "vendor_payment", "classification_label": "Again" }))
        .await
        .assert_error(409, "CLASSIFICATION_KEY_EXISTS");
    post(&owner, json!({ "classification_key": "other", "classification_label": "Clashes with a base key" }))
        .await
        .assert_error(409, "CLASSIFICATION_KEY_EXISTS");
    // Another owner may use the same key.
    assert_eq!(
        post(&stranger, json!({ "classification_key": "vendor_payment", "classification_label": "Mine" })).await.status,
        StatusCode::CREATED
    );
    for bad in ["Vendor", "9lives", "with-dash", "", &"k".repeat(101)] {
        post(&owner, json!({ "classification_key": bad, "classification_label": "x" })).await.assert_error(400, "INVALID_VALUE");
    }
    assert_eq!(
        post(&owner, json!({ "classification_key": "k".repeat(100), "classification_label": "longest key" })).await.status,
        StatusCode::CREATED
    );
    post(&owner, json!({ "classification_key": "long_label", "classification_label": "l".repeat(201) }))
        .await
        .assert_error(400, "INVALID_VALUE");
    post(&owner, json!({ "classification_key": "no_label" })).await.assert_error(400, "MISSING_FIELD");

    // The agent sees base + its owner's, and may use exactly those keys.
    let visible = t.get("/v1/classification", Some(&agent.token)).await;
    let keys: Vec<&str> =
        visible.json["classifications"].as_array().unwrap().iter().map(|c| c["classification_key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"vendor_payment") && keys.contains(&"routine_operation"), "{keys:?}");
    assert_eq!(keys.iter().filter(|k| **k == "vendor_payment").count(), 1, "another owner's key leaked: {keys:?}");
    let use_key = |key: &str| with_template(json!({ "self_classification": key }));
    assert_eq!(t.post("/v1/dd/create", Some(&agent.token), &use_key("vendor_payment")).await.status, StatusCode::CREATED);
    t.post("/v1/dd/create", Some(&agent.token), &use_key("unheard_of")).await.assert_error(400, "INVALID_VALUE");
    let unlinked = t.register().await;
    t.post("/v1/dd/create", Some(&unlinked.token), &use_key("vendor_payment")).await.assert_error(400, "INVALID_VALUE");

    // Update label and description; the key stays.
    let patched = t
        .as_owner(&owner, "PATCH", &format!("/dap/classification/{id}"), Some(&json!({ "classification_label": "Supplier payment" })))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(
        (patched.json["classification_label"].as_str(), patched.json["description"].as_str()),
        (Some("Supplier payment"), Some("Pays a supplier"))
    );
    t.as_owner(&stranger, "PATCH", &format!("/dap/classification/{id}"), Some(&json!({ "classification_label": "hijack" })))
        .await
        .assert_error(404, "NOT_FOUND");
    // The key is not a thing a change can name: left out, and nothing changes.
    let renamed =
        t.as_owner(&owner, "PATCH", &format!("/dap/classification/{id}"), Some(&json!({ "classification_key": "renamed" }))).await;
    assert_eq!(renamed.headers.get("anchor-ignored-fields").map(|v| v.to_str().unwrap()), Some("classification_key"), "{}", renamed.text);
    assert!(!renamed.text.contains("\"renamed\""), "{}", renamed.text);

    // Soft delete: gone for agents, kept (inactive) for the owner, key still reserved.
    t.as_owner(&stranger, "DELETE", &format!("/dap/classification/{id}"), None).await.assert_error(404, "NOT_FOUND");
    let deleted = t.as_owner(&owner, "DELETE", &format!("/dap/classification/{id}"), None).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    t.as_owner(&owner, "DELETE", &format!("/dap/classification/{id}"), None).await.assert_error(404, "NOT_FOUND");
    t.as_owner(&owner, "PATCH", &format!("/dap/classification/{id}"), Some(&json!({ "classification_label": "x" })))
        .await
        .assert_error(404, "NOT_FOUND");
    t.post("/v1/dd/create", Some(&agent.token), &use_key("vendor_payment")).await.assert_error(400, "INVALID_VALUE");
    let active = t.as_owner(&owner, "GET", "/dap/classification", None).await;
    assert_eq!(active.json["count"], 1);
    assert!(active.json["base_classifications"].as_array().unwrap().len() >= 10);
    let all = t.as_owner(&owner, "GET", "/dap/classification?include_inactive=true", None).await;
    assert_eq!(all.json["count"], 2);
    assert!(
        all.json["classifications"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["classification_key"] == "vendor_payment" && c["is_active"] == false)
    );
    post(&owner, json!({ "classification_key": "vendor_payment", "classification_label": "Back" }))
        .await
        .assert_error(409, "CLASSIFICATION_KEY_EXISTS");
    t.as_owner(&owner, "GET", "/dap/classification?include_inactive=maybe", None).await.assert_error(400, "INVALID_VALUE");

    // An owner registers at most 500 categories, inactive ones included (it has 2).
    for n in 2..500 {
        let added = post(&owner, json!({ "classification_key": format!("cat_{n}"), "classification_label": "Some" })).await;
        assert_eq!(added.status, StatusCode::CREATED, "{n}: {}", added.text);
    }
    post(&owner, json!({ "classification_key": "cat_500", "classification_label": "One more" }))
        .await
        .assert_error(409, "CLASSIFICATION_LIMIT_REACHED");
    // The key taken is still said first; another owner is not held by it.
    post(&owner, json!({ "classification_key": "cat_7", "classification_label": "Again" }))
        .await
        .assert_error(409, "CLASSIFICATION_KEY_EXISTS");
    assert_eq!(
        post(&stranger, json!({ "classification_key": "cat_500", "classification_label": "Mine" })).await.status,
        StatusCode::CREATED
    );
}

async fn content_inclusion_policy_is_enforced_on_create(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("g@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let policy = t.as_owner(&owner, "GET", "/dap/policy/content-inclusion", None).await;
    assert_eq!(policy.json["content_inclusion_policy"], "agent_choice");
    assert_eq!(policy.json["valid_values"], json!(["agent_choice", "always_branch_0", "always_branch_1"]));
    let put = |value: Value| {
        let owner = owner.clone();
        let t = &t;
        async move { t.as_owner(&owner, "PUT", "/dap/policy/content-inclusion", Some(&json!({ "content_inclusion_policy": value }))).await }
    };
    put(json!("always")).await.assert_error(400, "INVALID_ENUM");
    let flag0 = || create_body(basic_axes());
    let flag1 = || with_template(json!({ "decision_class": "payment" }));
    async fn trial(t: &TestServer, token: String) -> Value {
        t.get("/v1/trial/status", Some(&token)).await.json["trial_dac_remaining"].clone()
    }

    assert_eq!(put(json!("always_branch_0")).await.status, StatusCode::OK);
    let before = trial(&t, agent.token.clone()).await;
    t.post("/v1/dd/create", Some(&agent.token), &flag1()).await.assert_error(403, "CONTENT_INCLUSION_POLICY");
    assert_eq!(trial(&t, agent.token.clone()).await, before, "a refused declaration was charged");
    assert_eq!(t.post("/v1/dd/create", Some(&agent.token), &flag0()).await.status, StatusCode::CREATED);

    assert_eq!(put(json!("always_branch_1")).await.json["content_inclusion_policy"], "always_branch_1");
    t.post("/v1/dd/create", Some(&agent.token), &flag0()).await.assert_error(403, "CONTENT_INCLUSION_POLICY");
    assert_eq!(t.post("/v1/dd/create", Some(&agent.token), &flag1()).await.status, StatusCode::CREATED);
    // Accepting a proposal records the agent's own declaration, which never
    // carries content: refused under always_branch_1 too.
    let proposer = t.register().await;
    let mut bilateral = dd();
    bilateral["dd_declaration_mode"] = json!("bilateral");
    let proposal = json!({ "counterparty_agent_id": agent.id, "dd": bilateral, "ee": basic_axes(), "request_id": uuid::Uuid::new_v4() });
    let proposed = t.propose_paid(&proposer, &proposal).await;
    assert_eq!(proposed.status, StatusCode::CREATED, "{}", proposed.text);
    let respond = format!("/v1/dd/bilateral/{}/respond", proposed.json["agreement_id"].as_str().unwrap());
    t.post(&respond, Some(&agent.token), &json!({ "accept": true })).await.assert_error(403, "CONTENT_INCLUSION_POLICY");

    // Another owner's agent and an agent without owner choose freely.
    let free = t.register().await;
    assert_eq!(t.post("/v1/dd/create", Some(&free.token), &flag0()).await.status, StatusCode::CREATED);
    assert_eq!(put(json!("agent_choice")).await.status, StatusCode::OK);
    assert_eq!(t.post("/v1/dd/create", Some(&agent.token), &flag0()).await.status, StatusCode::CREATED);
    assert_eq!(
        t.post(&respond, Some(&agent.token), &json!({ "accept": true })).await.status,
        StatusCode::OK,
        "the refusal left it pending"
    );
    assert_eq!(t.as_owner(&owner, "GET", "/dap/account/me", None).await.json["content_inclusion_policy"], "agent_choice");
}

async fn reports_count_each_declaration_once(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("h@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    let mut second = t.register().await;
    t.link(&owner, &mut second).await;
    // Last week: one declaration; this week: three (one with a premium), two confirmed.
    t.create(&agent, basic_axes()).await;
    t.clock.advance(chrono::Duration::days(8));
    let owner = t.login(&owner.email, OWNER_PASSWORD).await;
    let mut premium_axes = basic_axes();
    premium_axes["ee_retention_period"] = json!("long");
    let a = t.create(&agent, basic_axes()).await;
    let b = t.create(&agent, premium_axes.clone()).await;
    t.create(&second, basic_axes()).await;
    assert_eq!(t.confirm(&agent, a["dd_id"].as_str().unwrap()).await.status, StatusCode::OK);
    assert_eq!(t.confirm(&agent, b["dd_id"].as_str().unwrap()).await.status, StatusCode::OK);
    let dac = |v: &Value| (v["dac_amount"].as_f64().unwrap() * 1000.0).round() as i64;
    let (dac_a, dac_b) = (dac(&a), dac(&b));
    let agent_total_milli = 2 * dac_a + dac_b;

    let dash = t.as_owner(&owner, "GET", "/dap/dashboard", None).await;
    assert_eq!(dash.status, StatusCode::OK, "{}", dash.text);
    assert_eq!(dash.json["total_dd_count"], 4);
    let row = dash.json["agents"].as_array().unwrap().iter().find(|r| r["agent_id"] == agent.id.as_str()).unwrap().clone();
    assert_eq!(row["dd_count"], 3);
    assert_eq!((row["dac_total"].as_f64().unwrap() * 1000.0).round() as i64, agent_total_milli);

    let report = t.as_owner(&owner, "GET", &format!("/dap/agent/{}/report", agent.id), None).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    assert_eq!(report.json["summary"]["total_dd"], 3);
    // a: one settled row; b: base fee and premium, both settled.
    assert_eq!(report.json["summary"]["settled_payment_rows"], 3);
    let recent = report.json["recent_dds"].as_array().unwrap();
    assert_eq!(recent.len(), 3);
    let b_row = recent.iter().find(|r| r["dd_id"] == b["dd_id"]).unwrap();
    assert_eq!(b_row["settlement_statuses"], json!(["settled", "settled"]));
    assert_eq!(report.json["rate_limit"]["daily_dd_count"], 2);
    assert_eq!(report.json["dab"]["budget_period"], "monthly");

    let weekly = t.as_owner(&owner, "GET", &format!("/dap/agent/{}/report/weekly", agent.id), None).await;
    assert_eq!(weekly.status, StatusCode::OK, "{}", weekly.text);
    assert_eq!((weekly.json["this_week"]["dd_count"].as_i64(), weekly.json["prev_week"]["dd_count"].as_i64()), (Some(2), Some(1)));
    assert_eq!(weekly.json["change"]["dd_count"], 1);
    assert_eq!(weekly.json["change"]["dd_pct"], json!(100.0));
    let distribution: i64 = weekly.json["ee_distribution"].as_array().unwrap().iter().map(|d| d["dd_count"].as_i64().unwrap()).sum();
    assert_eq!(distribution, 2);

    let csv = t.as_owner(&owner, "GET", &format!("/dap/agent/{}/report/export", agent.id), None).await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(csv.headers["content-type"].to_str().unwrap().starts_with("text/csv"));
    let lines: Vec<&str> = csv.text.lines().collect();
    assert_eq!(
        lines[0],
        "dd_id,anchored_at,action_type,selection_state,retention,integrity,disclosure,responsibility,dac_amount,settlement_statuses"
    );
    assert_eq!(lines.len(), 4);
    let b_line = lines.iter().find(|l| l.starts_with(b["dd_id"].as_str().unwrap())).unwrap();
    let fields: Vec<&str> = b_line.split(',').collect();
    assert_eq!(fields.len(), 10, "{b_line}");
    assert_eq!((fields[2], fields[3], fields[4], fields[9]), ("execute", "SELECTED", "long", "settled+settled"));
    let since = (t.clock.now() - chrono::Duration::days(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let ranged = t.as_owner(&owner, "GET", &format!("/dap/agent/{}/report/export?from={since}", agent.id), None).await;
    assert_eq!(ranged.text.lines().count(), 3);
    t.as_owner(&owner, "GET", &format!("/dap/agent/{}/report/export?from=yesterday", agent.id), None)
        .await
        .assert_error(400, "INVALID_VALUE");

    let usage = t.as_owner(&owner, "GET", "/dap/usage/daily?days=14", None).await;
    assert_eq!(usage.status, StatusCode::OK, "{}", usage.text);
    let days = usage.json["days"].as_array().unwrap();
    assert_eq!(days.len(), 14);
    let counted: i64 = days.iter().map(|d| d["dd_count"].as_i64().unwrap()).sum();
    assert_eq!(counted, 4);
    t.as_owner(&owner, "GET", "/dap/usage/daily?days=0", None).await.assert_error(400, "INVALID_VALUE");

    let trial = t.as_owner(&owner, "GET", "/dap/trial/status", None).await;
    assert_eq!(trial.json["agents"].as_array().unwrap().len(), 2);
    assert!(trial.json["agents"][0]["trial_active"].is_boolean());

    // Evidence report: sections, metadata only, log position once integrated.
    let dd_id = a["dd_id"].as_str().unwrap();
    t.wait_for_log(2).await;
    let evidence = t.as_owner(&owner, "GET", &format!("/dap/evidence-report?dd_id={dd_id}"), None).await;
    assert_eq!(evidence.status, StatusCode::OK, "{}", evidence.text);
    for section in ["report", "decision", "ee_resolution", "responsibility", "accountability_record", "transparency_log"] {
        assert!(evidence.json[section].is_object(), "{section} missing: {}", evidence.text);
    }
    assert_eq!(evidence.json["report"]["audience"], "owner");
    assert_eq!(evidence.json["transparency_log"]["included"], true);
    assert!(!evidence.text.contains("\"salt\""));
    t.as_owner(&owner, "GET", "/dap/evidence-report", None).await.assert_error(400, "MISSING_FIELD");
    // The receipt, for the owner to keep: the agent's own, and it verifies offline.
    let receipt = t.as_owner(&owner, "GET", &format!("/dap/dd/{dd_id}/receipt"), None).await;
    assert_eq!(receipt.status, StatusCode::OK, "{}", receipt.text);
    assert!(receipt.headers["content-disposition"].to_str().unwrap().starts_with("attachment"));
    let receipt: anchor_verify::Receipt = serde_json::from_value(receipt.json).unwrap();
    assert_eq!(receipt.dd_id, dd_id);
    anchor_verify::verify_receipt(&receipt, &t.log_key.vkey).expect("the owner's receipt verifies");
    t.as_owner(&owner, "GET", &format!("/dap/evidence-report?dd_id={}", uuid::Uuid::new_v4()), None)
        .await
        .assert_error(404, "DD_NOT_FOUND");
}

async fn account_deletion_restore_and_export(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("i@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    t.as_owner(&owner, "PUT", "/dap/dab/set", Some(&json!({ "agent_id": agent.id, "budget_limit_dac": 400, "budget_period": "monthly" })))
        .await;

    t.as_owner(&owner, "PUT", "/dap/account/residence", Some(&json!({ "residence_country": "FR" })))
        .await
        .assert_error(400, "INVALID_ENUM");
    let residence = t.as_owner(&owner, "PUT", "/dap/account/residence", Some(&json!({ "residence_country": "EU" }))).await;
    assert_eq!(residence.json["residence_country"], "EU");
    t.as_owner(&owner, "PUT", "/dap/account/marketing-consent", Some(&json!({ "marketing_agreed": "yes" })))
        .await
        .assert_error(400, "INVALID_VALUE");
    let consent = t.as_owner(&owner, "PUT", "/dap/account/marketing-consent", Some(&json!({ "marketing_agreed": true }))).await;
    assert!(consent.json["marketing_agreed_at"].is_string());

    let export = t.as_owner(&owner, "GET", "/dap/account/export", None).await;
    assert_eq!(export.json["account"]["email"], "i@example.com");
    assert_eq!(export.json["agents"][0]["agent_id"], agent.id.as_str());
    assert!(!export.text.contains("argon2"), "the export leaks the password hash");
    // A category label a spreadsheet would run as a formula is exported as text; control characters never go in.
    let formula = json!({ "classification_key": "formula", "classification_label": "=HYPERLINK(\"http://x.example\",\"a\")" });
    assert_eq!(t.as_owner(&owner, "POST", "/dap/classification", Some(&formula)).await.status, StatusCode::CREATED);
    let blank_first = json!({ "classification_key": "blank_first", "classification_label": "  =1+1", "description": "kept, as in JSON" });
    assert_eq!(t.as_owner(&owner, "POST", "/dap/classification", Some(&blank_first)).await.status, StatusCode::CREATED);
    for label in ["\u{1b}[31mred", "back\u{8}space", "bell\u{7}", "two\nlines", "tab\there", "line\u{2028}separator", "next\u{85}line"] {
        t.as_owner(&owner, "POST", "/dap/classification", Some(&json!({ "classification_key": "ctl", "classification_label": label })))
            .await
            .assert_error(400, "INVALID_VALUE");
    }
    let csv = t.as_owner(&owner, "GET", "/dap/account/export?format=csv", None).await;
    assert!(csv.text.starts_with("section,field,value\n") && csv.text.contains("account,email,i@example.com"));
    assert!(csv.text.contains(".classification_label,\"'=HYPERLINK(\"\"http://x.example\"\",\"\"a\"\")\"\n"), "{}", csv.text);
    assert!(
        csv.text.contains(".classification_label,'  =1+1\n") && csv.text.contains(".description,\"kept, as in JSON\"\n"),
        "{}",
        csv.text
    );
    // Every value of the JSON export is a row of the CSV one.
    let export = t.as_owner(&owner, "GET", "/dap/account/export", None).await;
    fn leaves(value: &Value) -> usize {
        match value {
            Value::Object(map) => map.values().map(leaves).sum(),
            Value::Array(items) => items.iter().map(leaves).sum(),
            _ => 1,
        }
    }
    assert_eq!(csv.text.lines().count() - 1, leaves(&export.json), "{}\n{}", csv.text, export.text);
    assert!(csv.text.contains(&format!("agent,1.agent_id,{}\n", agent.id)), "{}", csv.text);
    t.as_owner(&owner, "GET", "/dap/account/export?format=xml", None).await.assert_error(400, "INVALID_ENUM");

    t.as_owner(&owner, "DELETE", "/dap/account", Some(&json!({ "password": "wrong wrong 9" }))).await.assert_error(401, "UNAUTHORIZED");
    let deletion = t.as_owner(&owner, "DELETE", "/dap/account", Some(&json!({ "password": OWNER_PASSWORD }))).await;
    assert_eq!(deletion.status, StatusCode::OK, "{}", deletion.text);
    assert_eq!((deletion.json["status"].as_str(), deletion.json["grace_period_days"].as_i64()), (Some("pending_deletion"), Some(30)));
    t.as_owner(&owner, "DELETE", "/dap/account", Some(&json!({ "password": OWNER_PASSWORD })))
        .await
        .assert_error(409, "DELETION_ALREADY_REQUESTED");
    assert_eq!(t.as_owner(&owner, "GET", "/dap/account/deletion-status", None).await.json["status"], "pending_deletion");
    let restored = t.as_owner(&owner, "POST", "/dap/account/restore", None).await;
    assert_eq!(restored.json["status"], "active");
    t.as_owner(&owner, "POST", "/dap/account/restore", None).await.assert_error(409, "NOT_PENDING_DELETION");
    // Several at once: one starts the grace period and one cancels it, the others are told.
    let body = json!({ "password": OWNER_PASSWORD });
    let at_once = futures_util::future::join_all((0..6).map(|_| t.as_owner(&owner, "DELETE", "/dap/account", Some(&body)))).await;
    let statuses: Vec<u16> = at_once.iter().map(|r| r.status.as_u16()).collect();
    // (A password confirmed this often may also be told to wait: 429.)
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| [200, 409, 429].contains(s)), "{statuses:?}");
    let at_once = futures_util::future::join_all((0..6).map(|_| t.as_owner(&owner, "POST", "/dap/account/restore", None))).await;
    let statuses: Vec<u16> = at_once.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!((statuses.iter().filter(|s| **s == 200).count(), statuses.iter().filter(|s| **s == 409).count()), (1, 5), "{statuses:?}");

    // Past the grace period the account is gone: sessions and sign-in refused, then erased.
    t.as_owner(&owner, "DELETE", "/dap/account", Some(&json!({ "password": OWNER_PASSWORD }))).await;
    t.clock.advance(chrono::Duration::days(31));
    let fresh_session_refused = t.as_owner(&owner, "GET", "/dap/agents", None).await;
    fresh_session_refused.assert_error(401, "UNAUTHORIZED");
    t.post("/dap/login", None, &json!({ "email": "i@example.com", "password": OWNER_PASSWORD })).await.assert_error(401, "UNAUTHORIZED");
    assert_eq!(t.store.erase_due_owners(t.clock.now()).await.unwrap(), 1);
    assert_eq!(t.store.erase_due_owners(t.clock.now()).await.unwrap(), 0, "an owner was erased twice");
    let dab = t.get("/v1/dab/status", Some(&agent.token)).await;
    assert_eq!(dab.json["limit_source"], "operator_default", "the erased owner's DAB still applies");
    assert!(t.store.owner_by_email("i@example.com").await.unwrap().is_none());
    // The email may sign up again.
    t.owner("i@example.com").await;
}

async fn agent_type_owners(backend: Backend) {
    let t = TestServer::start(backend).await;
    let human = t.owner("j@example.com").await;
    let mut parent = t.register().await;
    t.link(&human, &mut parent).await;
    t.post("/dap/auth/agent-login", Some(&parent.token), &json!({})).await.assert_error(403, "NOT_DAP_OWNER");
    t.as_owner(&human, "POST", "/dap/owner/register-agent", Some(&json!({}))).await.assert_error(400, "MISSING_FIELD");
    let made = t.as_owner(&human, "POST", "/dap/owner/register-agent", Some(&json!({ "agent_id": parent.id }))).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    assert_eq!((made.json["owner_type"].as_str(), made.json["owner_depth"].as_i64()), (Some("agent"), Some(1)));
    assert_eq!(made.json["parent_owner_id"], human.owner_id.as_str());
    t.as_owner(&human, "POST", "/dap/owner/register-agent", Some(&json!({ "agent_id": parent.id })))
        .await
        .assert_error(409, "ALREADY_REGISTERED");
    // The owner's export names the agent-type owners it registered.
    let export = t.as_owner(&human, "GET", "/dap/account/export", None).await;
    let listed = &export.json["agent_owners"];
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{}", export.text);
    assert_eq!((&listed[0]["owner_id"], &listed[0]["agent_id"]), (&made.json["owner_id"], &json!(parent.id)), "{}", export.text);
    let csv = t.as_owner(&human, "GET", "/dap/account/export?format=csv", None).await;
    assert!(csv.text.contains(&format!("agent_owner,1.agent_id,{}\n", parent.id)), "{}", csv.text);

    let login = t.post("/dap/auth/agent-login", Some(&parent.token), &json!({})).await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text);
    assert_eq!(login.json["managing_agent_id"], parent.id.as_str());
    let cookie = login.headers["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let agent_owner = Owner {
        email: String::new(),
        password: parent.token.clone(),
        owner_id: made.json["owner_id"].as_str().unwrap().into(),
        cookie,
        csrf: String::new(),
    };
    // The agent-type owner manages its own sub-agents, and cannot make owners.
    let mut child = t.register().await;
    t.link(&agent_owner, &mut child).await;
    assert_eq!(t.as_owner(&agent_owner, "GET", "/dap/agents", None).await.json["agents"][0]["agent_id"], child.id.as_str());
    t.as_owner(&agent_owner, "POST", "/dap/owner/register-agent", Some(&json!({ "agent_id": child.id })))
        .await
        .assert_error(403, "HUMAN_OWNER_REQUIRED");
    // The human owner does not see the sub-agent.
    assert_eq!(t.as_owner(&human, "GET", "/dap/agents", None).await.json["count"], 1);
    t.post("/dap/auth/agent-login", None, &json!({})).await.assert_error(401, "UNAUTHORIZED");

    // The token is the agent-type owner's password: rotating it, or
    // recovering the agent, ends the sessions it opened.
    let rotated = t.post("/v1/agent/token/rotate", Some(&parent.token), &json!({ "agent_id": parent.id })).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
    t.as_owner(&agent_owner, "GET", "/dap/agents", None).await.assert_error(401, "UNAUTHORIZED");
    let token = rotated.json["new_auth_token"].as_str().or(rotated.json["auth_token"].as_str()).expect("a new token").to_owned();
    let login = t.post("/dap/auth/agent-login", Some(&token), &json!({})).await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text);
    let cookie = login.headers["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let agent_owner = Owner { cookie, ..agent_owner };
    assert_eq!(t.as_owner(&agent_owner, "GET", "/dap/agents", None).await.status, StatusCode::OK);
    let key = rotated.json["new_recovery_key"].as_str().or(rotated.json["recovery_key"].as_str()).expect("a new recovery key");
    let recovered = t.post("/v1/agent/token/recover", None, &json!({ "agent_id": parent.id, "recovery_key": key })).await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text);
    t.as_owner(&agent_owner, "GET", "/dap/agents", None).await.assert_error(401, "UNAUTHORIZED");
}
