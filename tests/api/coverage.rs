//! Every operation `/openapi.json` documents answers at least once with a
//! success, and its body validates against the schema generated from its
//! type. (Every response of every test is validated the same way, by
//! `anchor_tests::contract`; this walk makes sure no route is left out.)

use std::collections::BTreeSet;

use anchor_domain::Clock;
use anchor_tests::*;
use serde_json::json;

use anchor_tests::x402::{Twist, b64, challenge_of, pay};

both_backends!(every_operation_answers_with_its_documented_schema);

/// An agent's id, from its token (its DAB status names it).
async fn contract_agent_id(t: &TestServer, token: &str) -> String {
    t.get("/v1/dab/status", Some(token)).await.json["agent_id"].as_str().unwrap().to_string()
}

#[track_caller]
fn ok(reply: &Reply) {
    assert!(reply.status.is_success(), "expected a success: {} {}", reply.status, reply.text);
}

async fn every_operation_answers_with_its_documented_schema(backend: Backend) {
    // Exact releases: ten agents are enough to show the environment.
    let issuer = anchor_app::receipt_key::ReceiptKey::generate();
    let scitt = anchor_app::scitt::Registry::new(vec![anchor_app::scitt::Issuer {
        iss: "https://issuer.example".into(),
        keys: vec![(None, issuer.public().clone())],
    }])
    .unwrap();
    let t = TestServer::with(backend, Options { privacy: anchor_app::ara::privacy::Privacy::Exact, scitt, ..Default::default() }).await;
    let mut agent = t.register().await;
    let id = agent.id.clone();

    // Discovery, pricing, the agent's own views.
    for path in [
        "/",
        "/health",
        "/ready",
        "/openapi.json",
        "/llms.txt",
        "/.well-known/agent-card.json",
        "/.well-known/x402.json",
        "/.well-known/did.json",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        ok(&t.get(path, None).await);
    }
    ok(&t.get("/v1/pricing/current", None).await);
    ok(&t.get("/v1/pricing/ee-presets", None).await);
    ok(&t.get("/v1/trial/status", Some(&agent.token)).await);
    ok(&t.get("/v1/classification", Some(&agent.token)).await);
    ok(&t.get("/v1/dab/status", Some(&agent.token)).await);
    ok(&t.post("/v1/ise/enter", Some(&agent.token), &json!({ "payment_mode": "external" })).await);
    ok(&t.get("/v1/ise/status", Some(&agent.token)).await);
    ok(&t.post("/v1/ise/exit", Some(&agent.token), &json!({})).await);
    let simulating = t.post("/v1/sdac/session/start", Some(&agent.token), &json!({})).await;
    ok(&simulating);
    let session = simulating.json["session_id"].as_str().unwrap().to_string();
    ok(&t.post("/v1/sdac/trial", Some(&agent.token), &json!({ "session_id": session, "ee": basic_axes() })).await);
    ok(&t.get(&format!("/v1/sdac/session/{session}"), Some(&agent.token)).await);
    ok(&t.post("/v1/sdac/session/end", Some(&agent.token), &json!({ "session_id": session })).await);
    ok(&t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({ "disclosure_level": "full" }))).await);

    // Indefinite retention, paid from Earned DAC (credited as a sale would).
    t.credit_earned(&agent, 100).await;
    ok(&t.call("POST", "/v1/retention/indefinite/subscribe", Some(&agent.token), None).await);
    ok(&t.get("/v1/retention/indefinite/status", Some(&agent.token)).await);
    ok(&t.call("POST", "/v1/retention/indefinite/cancel", Some(&agent.token), None).await);

    // A bilateral proposal, paid over x402, accepted by its counterparty.
    let partner = t.register().await;
    let mut bilateral_dd = dd();
    bilateral_dd["dd_declaration_mode"] = json!("bilateral");
    let proposal = json!({ "counterparty_agent_id": partner.id, "dd": bilateral_dd, "ee": basic_axes() });
    let bearer_now = format!("Bearer {}", agent.token);
    let challenge =
        challenge_of(&t.call_with("POST", "/v1/dd/bilateral/propose", &[("authorization", &bearer_now)], Some(&proposal)).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let proposed = t
        .call_with("POST", "/v1/dd/bilateral/propose", &[("authorization", &bearer_now), ("payment-signature", &payment)], Some(&proposal))
        .await;
    ok(&proposed);
    ok(&t.get("/v1/dd/bilateral/received?all=false", Some(&partner.token)).await);
    ok(&t.get("/v1/dd/bilateral/sent", Some(&agent.token)).await);
    let agreement = proposed.json["agreement_id"].as_str().unwrap().to_string();
    ok(&t.post(&format!("/v1/dd/bilateral/{agreement}/respond"), Some(&partner.token), &json!({ "accept": true })).await);

    // Declarations: a parent and a child, confirmed, read every way.
    let parent = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    let parent_id = parent["dd_id"].as_str().unwrap().to_string();
    let mut child_body = create_body(json!({ "ee_preset": "EE_high" }));
    child_body["dd"]["parent_dd_id"] = json!(parent_id);
    child_body["content_inclusion_flag"] = json!(1);
    child_body["template"] = json!({ "decision_class": "payment", "decision_scale_value": 12.5, "call_chain": ["planner"] });
    let child = t.post("/v1/dd/create", Some(&agent.token), &child_body).await;
    ok(&child);
    ok(&t.confirm(&agent, &parent_id).await);
    let child_id = child.json["dd_id"].as_str().unwrap().to_string();
    ok(&t.confirm(&agent, &child_id).await);
    ok(&t.get("/v1/dd/list?limit=10", Some(&agent.token)).await);
    ok(&t.get(&format!("/v1/dd/{child_id}"), Some(&agent.token)).await);
    ok(&t.get(&format!("/v1/dd/{child_id}/lineage"), Some(&agent.token)).await);
    ok(&t.get(&format!("/v1/dd/lineage-group/{parent_id}"), Some(&agent.token)).await);
    ok(&t.get(&format!("/v1/payment/{child_id}/status"), Some(&agent.token)).await);

    // The verifiable log.
    let checkpoint = t.wait_for_log(2).await;
    ok(&t.get(&format!("/v1/dd/{child_id}/receipt"), Some(&agent.token)).await);
    ok(&t.get(&format!("/v1/dd/{child_id}/evidence"), Some(&agent.token)).await);
    ok(&t.get("/v1/log/checkpoint", None).await);
    ok(&t.get(&format!("/v1/log/checkpoints/{}", checkpoint.size), None).await);
    ok(&t.get(&format!("/v1/log/consistency?from=1&to={}", checkpoint.size), None).await);
    ok(&t.get("/v1/log/key", None).await);
    // The same proofs in COSE (RFC 9942), and the keys that sign them.
    ok(&t.get(&format!("/v1/dd/{child_id}/receipt.cose"), Some(&agent.token)).await);
    let keys = t.get("/.well-known/scitt-keys", None).await;
    ok(&keys);
    let kid = anchor_verify::cose::parse_keys(&t.http.get(t.url("/.well-known/scitt-keys")).send().await.unwrap().bytes().await.unwrap())
        .unwrap()[0]
        .thumbprint();
    use base64::Engine;
    ok(&t.get(&format!("/.well-known/scitt-keys/{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(kid)), None).await);
    let third = t.create(&agent, basic_axes()).await["dd_id"].as_str().unwrap().to_string();
    ok(&t.confirm(&agent, &third).await);
    let later = t.wait_for_log(checkpoint.size + 1).await;
    ok(&t.get(&format!("/v1/log/consistency.cose?from={}&to={}", checkpoint.size, later.size), None).await);
    ok(&t.get(&format!("/v1/log/tile/0/000.p/{}", checkpoint.size), None).await);
    // SCRAPI: a signed statement registered (303), its receipt (200), and
    // the same statement again, receipted at once (201).
    let statement =
        anchor_verify::statement::sign_statement("https://issuer.example", "pkg:coverage@1", None, b"{}", &issuer.kid(), |tbs| {
            issuer.sign(tbs)
        })
        .unwrap();
    let raw = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let register = || async {
        let reply = raw.post(t.url("/entries")).header("content-type", "application/cose").body(statement.clone()).send().await.unwrap();
        let (status, media) = (reply.status().as_u16(), reply.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()));
        contract::check(&t.base, "POST", "/entries", status, media.as_deref(), "");
        (status, reply.headers().get("location").map(|v| v.to_str().unwrap().to_owned()))
    };
    let (status, location) = register().await;
    assert_eq!(status, 303);
    let location = location.expect("a locator");
    let path = location.strip_prefix(&t.base).unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let reply = raw.get(&location).send().await.unwrap();
        let (status, media) = (reply.status().as_u16(), reply.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()));
        contract::check(&t.base, "GET", &path, status, media.as_deref(), "");
        if status == 200 {
            break;
        }
        assert!(status == 302 && std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(register().await.0, 201);

    // ARA: ten contributing agents with three branch-1 decisions each (shared
    // templates), then, the next day, every observation.
    let branch_one = |scale: i64| {
        let mut body = create_body(json!({ "ee_preset": "EE_basic", "content_disclosure_scope": "public" }));
        body["content_inclusion_flag"] = json!(1);
        body["template"] = json!({ "decision_class": "payment", "decision_scale_value": scale, "decision_scale_unit": "USDC" });
        body
    };
    let mut others = Vec::new();
    let mut own_branch_one = Vec::new();
    for i in 0..10 {
        let author = if i == 0 { agent.token.clone() } else { t.register().await.token };
        for scale in [10, 20, 15] {
            let created = t.post("/v1/dd/create", Some(&author), &branch_one(scale)).await;
            ok(&created);
            let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
            ok(&t.post("/v1/dd/confirm", Some(&author), &json!({ "dd_id": dd_id })).await);
            if i == 0 {
                own_branch_one.push(dd_id);
            }
            t.clock.advance(chrono::Duration::seconds(1));
        }
        if i == 1 {
            others.push(author);
        }
    }
    t.wait_for_fold(32).await;
    t.clock.advance(chrono::Duration::days(1));
    let bearer = format!("Bearer {}", agent.token);
    let pay_for = |method: &'static str, path: String, body: Option<serde_json::Value>| {
        let (t, bearer) = (&t, &bearer);
        async move {
            let challenge = challenge_of(&t.call_with(method, &path, &[("authorization", bearer)], body.as_ref()).await);
            let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
            t.call_with(method, &path, &[("authorization", bearer), ("payment-signature", &payment)], body.as_ref()).await
        }
    };
    for path in [
        "/v1/ara/environment",
        "/v1/ara/environment/summary",
        "/v1/ara/environment/density",
        "/v1/ara/pattern/ee-distribution",
        "/v1/ara/pattern/action-type",
        "/v1/ara/environment-anomaly?period_days=7",
    ] {
        ok(&pay_for("GET", path.to_string(), None).await);
    }
    let other = contract_agent_id(&t, &others[0]).await;
    ok(&pay_for("GET", format!("/v1/ara/pattern/compare?agents={id},{other}"), None).await);
    ok(&pay_for("GET", format!("/v1/ara/anomaly-compare?dd_id={}", own_branch_one[2]), None).await);
    ok(&pay_for("GET", format!("/v1/ara/evidence-report?dd_id={child_id}"), None).await);
    for route in ["profile", "timeline", "ee-pattern"] {
        ok(&t.get(&format!("/v1/ara/agent/{id}/{route}?resolution_level=3"), Some(&agent.token)).await);
    }
    ok(&t.post("/v1/ara/query", Some(&agent.token), &json!({ "agent_id": id, "query_type": "summary" })).await);

    // DUR: what the agent spent and what its decisions declared.
    for path in [
        "/v1/dur/summary",
        "/v1/dur/transactions?type=ara&page=1&limit=10",
        "/v1/dur/tsl?role=buyer",
        "/v1/dur/export",
        "/v1/dur/export?format=json",
        "/v1/dur/decision-metadata",
        "/v1/dur/decision-scale",
        "/v1/dur/self-classification",
        "/v1/earned-dac/balance",
        "/v1/earned-dac/ledger?limit=5",
    ] {
        ok(&t.get(path, Some(&agent.token)).await);
    }

    // The owner portal.
    ok(&t.get("/dap/register/suggested-country", None).await);
    let owner = t.owner("coverage@example.com").await;
    let dap = |method: &'static str, path: String, body: Option<serde_json::Value>| {
        let t = &t;
        let owner = &owner;
        async move { t.as_owner(owner, method, &path, body.as_ref()).await }
    };
    t.link(&owner, &mut agent).await;
    ok(&dap("GET", "/dap/account/me".into(), None).await);
    ok(&dap("PUT", "/dap/account/residence".into(), Some(json!({ "residence_country": "EU" }))).await);
    ok(&dap("PUT", "/dap/account/marketing-consent".into(), Some(json!({ "marketing_agreed": true }))).await);
    ok(&dap("GET", "/dap/agents".into(), None).await);
    ok(&dap("GET", "/dap/system/limits".into(), None).await);
    ok(&dap("GET", "/dap/trial/status".into(), None).await);
    let dab = json!({ "agent_id": id, "budget_limit_dac": 250.5, "budget_period": "monthly" });
    ok(&dap("PUT", "/dap/dab/set".into(), Some(dab)).await);
    ok(&dap("GET", format!("/dap/dab/status?agent_id={id}"), None).await);
    ok(&dap("DELETE", "/dap/dab/remove".into(), Some(json!({ "agent_id": id, "password": OWNER_PASSWORD }))).await);
    ok(&dap("GET", "/dap/dashboard".into(), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/report"), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/report/weekly"), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/report/export"), None).await);
    ok(&dap("GET", format!("/dap/evidence-report?dd_id={child_id}"), None).await);
    ok(&dap("GET", format!("/dap/dd/{child_id}/receipt"), None).await);
    ok(&dap("GET", format!("/dap/usage/daily?days=7&agent_id={id}"), None).await);
    ok(&dap("GET", "/dap/dur/summary".into(), None).await);
    ok(&dap("GET", format!("/dap/dur/export?agent_id={id}&format=json"), None).await);
    ok(&dap("GET", format!("/dap/dur/export?agent_id={id}"), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/ara"), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/ara?resolution_level=3"), None).await);
    ok(&dap("GET", "/dap/classification?include_inactive=true".into(), None).await);
    let category =
        dap("POST", "/dap/classification".into(), Some(json!({ "classification_key": "cover", "classification_label": "Cover" }))).await;
    ok(&category);
    let category_id = category.json["classification_id"].as_str().unwrap().to_string();
    ok(&dap("PATCH", format!("/dap/classification/{category_id}"), Some(json!({ "description": "every route" }))).await);
    ok(&dap("DELETE", format!("/dap/classification/{category_id}"), None).await);
    ok(&dap("GET", "/dap/policy/content-inclusion".into(), None).await);
    ok(&dap("PUT", "/dap/policy/content-inclusion".into(), Some(json!({ "content_inclusion_policy": "agent_choice" }))).await);

    // ASA: periods paid over x402, a snapshot, the owner's views; cancelled by the owner, then by the agent.
    let agent_bearer = format!("Bearer {}", agent.token);
    for (path, body) in [("/v1/asa/subscribe", json!({ "periods": 1 })), ("/v1/asa/extend", json!({ "periods": 1 }))] {
        let challenge = challenge_of(&t.call_with("POST", path, &[("authorization", &agent_bearer)], Some(&body)).await);
        let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
        ok(&t.call_with("POST", path, &[("authorization", &agent_bearer), ("payment-signature", &payment)], Some(&body)).await);
    }
    ok(&t.call("PATCH", "/v1/asa/subscription", Some(&agent.token), Some(&json!({ "next_payment_source": "external" }))).await);
    ok(&t.get("/v1/asa/subscription", Some(&agent.token)).await);
    let blob = json!({ "blob_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "label": "nightly" });
    ok(&t.post("/v1/asa/register", Some(&agent.token), &blob).await);
    ok(&t.get("/v1/asa/snapshot", Some(&agent.token)).await);
    ok(&t.post("/v1/asa/verify", Some(&agent.token), &json!({ "blob_hash": blob["blob_hash"] })).await);
    ok(&dap("GET", format!("/dap/asa/subscription/{id}"), None).await);
    ok(&dap("GET", format!("/dap/asa/snapshot/{id}"), None).await);
    ok(&dap("POST", format!("/dap/asa/verify/{id}"), Some(json!({ "blob_hash": blob["blob_hash"] }))).await);
    ok(&dap("DELETE", format!("/dap/asa/subscription/{id}"), None).await);
    let challenge = challenge_of(&t.call_with("POST", "/v1/asa/subscribe", &[("authorization", &agent_bearer)], Some(&json!({}))).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    ok(&t
        .call_with("POST", "/v1/asa/subscribe", &[("authorization", &agent_bearer), ("payment-signature", &payment)], Some(&json!({})))
        .await);
    ok(&t.call("DELETE", "/v1/asa/subscribe", Some(&agent.token), None).await);

    // The tool market: the linked agent sells, another agent buys at both
    // layers, the owner takes a human share.
    let seller = agent.token.clone();
    let buyer = format!("Bearer {}", others[0]);
    let tool_body = |name: &str, layer: &str| json!({ "tool_name": name, "layer": layer, "price_dac": 2.5, "ara_connections": [{ "observation_type": "environment_summary" }] });
    let mut tools = Vec::new();
    for (name, layer) in [("component", "layer1"), ("composite", "layer1"), ("upper", "layer2")] {
        let registered = t.post("/v1/tsl/tool/register", Some(&seller), &tool_body(name, layer)).await;
        ok(&registered);
        tools.push(registered.json["tool_id"].as_str().unwrap().to_string());
    }
    let (component, composite, upper) = (&tools[0], &tools[1], &tools[2]);
    ok(&t.get("/v1/tsl/tools?layer=layer1&status=active&limit=5&page=1", None).await);
    ok(&t.get(&format!("/v1/tsl/tool/{composite}"), None).await);
    ok(&t.post(&format!("/v1/tsl/tool/{composite}/dependency"), Some(&seller), &json!({ "depends_on_tool_id": component })).await);
    ok(&t.get(&format!("/v1/tsl/tool/{composite}/dependencies"), None).await);
    let share = json!({ "tool_id": composite, "component_tool_id": component, "beneficiary_agent_id": other, "share_rate": 0.1 });
    ok(&t.post("/v1/tsl/revenue-share", Some(&seller), &share).await);
    ok(&t.get(&format!("/v1/tsl/tool/{composite}/revenue-shares"), Some(&seller)).await);
    ok(&dap("POST", "/dap/tsl/human-share".into(), Some(json!({ "tool_id": composite, "human_share_rate": 0.05 }))).await);
    ok(&dap("GET", "/dap/tsl/human-shares".into(), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/market"), None).await);
    ok(&dap("GET", format!("/dap/agent/{id}/subscriptions"), None).await);
    for (path, tool) in [("/v1/tsl/purchase", composite), ("/v1/tsl/purchase/layer2", upper)] {
        let body = json!({ "tool_id": tool });
        let challenge = challenge_of(&t.call_with("POST", path, &[("authorization", &buyer)], Some(&body)).await);
        let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
        ok(&t.call_with("POST", path, &[("authorization", &buyer), ("payment-signature", &payment)], Some(&body)).await);
    }
    ok(&t.get("/v1/tsl/purchases?role=seller&limit=5&offset=0", Some(&seller)).await);
    // Tools that run: the seller uploads the example, the buyer runs it on
    // the environment release (paid, as in ARA), and both read the runtime.
    let upload = t
        .http
        .put(t.url(&format!("/v1/tsl/tool/{composite}/component")))
        .header("authorization", format!("Bearer {seller}"))
        .header("content-type", "application/wasm")
        .body(component_bytes("tool-example"))
        .send()
        .await
        .unwrap();
    let status = upload.status().as_u16();
    let content_type = upload.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_string);
    let text = upload.text().await.unwrap();
    contract::check(&t.base, "PUT", &format!("/v1/tsl/tool/{composite}/component"), status, content_type.as_deref(), &text);
    assert_eq!(status, 201, "{text}");
    ok(&t.get(&format!("/v1/tsl/tool/{composite}/component"), None).await);
    ok(&t.get("/v1/tsl/runtime", None).await);
    let run_path = format!("/v1/tsl/tool/{composite}/run");
    let challenge = challenge_of(&t.call_with("POST", &run_path, &[("authorization", &buyer)], Some(&json!({}))).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    ok(&t.call_with("POST", &run_path, &[("authorization", &buyer), ("payment-signature", &payment)], Some(&json!({}))).await);
    ok(&t.call_with("GET", "/v1/tsl/runs?limit=5", &[("authorization", &buyer)], None).await);
    ok(&t.get("/v1/tsl/revenue", Some(&seller)).await);
    let transfer = format!("/v1/tsl/tool/{component}/transfer-declaration");
    ok(&t.post(&transfer, Some(&seller), &json!({ "action": "transfer", "target_agent_id": other })).await);
    ok(&t.get(&transfer, Some(&seller)).await);
    ok(&t.call("DELETE", &transfer, Some(&seller), None).await);
    ok(&dap("GET", "/dap/account/export?format=json".into(), None).await);
    ok(&dap("GET", "/dap/account/export?format=csv".into(), None).await);

    // An agent-type owner: promoted, then signed in with its agent's token.
    let promoted = t.register().await;
    let mut promoted = promoted;
    t.link(&owner, &mut promoted).await;
    ok(&dap("POST", "/dap/owner/register-agent".into(), Some(json!({ "agent_id": promoted.id }))).await);
    ok(&t.post("/dap/auth/agent-login", Some(&promoted.token), &json!({})).await);

    // Credentials: rotation and recovery.
    let rotated = t.post("/v1/agent/token/rotate", Some(&agent.token), &json!({ "agent_id": id })).await;
    ok(&rotated);
    let recovery_key = rotated.json["recovery_key"].as_str().unwrap().to_string();
    ok(&t.post("/v1/agent/token/recover", None, &json!({ "agent_id": id, "recovery_key": recovery_key })).await);

    // The account's end of life, and the session's.
    ok(&dap("DELETE", "/dap/agent/unlink".into(), Some(json!({ "agent_id": id, "password": OWNER_PASSWORD }))).await);
    ok(&dap("DELETE", "/dap/account".into(), Some(json!({ "password": OWNER_PASSWORD }))).await);
    ok(&dap("GET", "/dap/account/deletion-status".into(), None).await);
    ok(&dap("POST", "/dap/account/restore".into(), None).await);
    let changed = json!({ "current_password": OWNER_PASSWORD, "new_password": "a new passphrase 8" });
    ok(&dap("PUT", "/dap/password".into(), Some(changed)).await);
    ok(&dap("POST", "/dap/logout".into(), None).await);

    // The market's environment the next day: the tools listed yesterday show
    // (buyers only once ten agents bought).
    t.clock.advance(chrono::Duration::days(1));
    let market = "/v1/ara/environment/tsl";
    let challenge = challenge_of(&t.call_with("GET", market, &[("authorization", &buyer)], None).await);
    let payment = b64(&pay(&challenge, t.clock.now().timestamp(), Twist::default()));
    let seen = t.call_with("GET", market, &[("authorization", &buyer), ("payment-signature", &payment)], None).await;
    ok(&seen);
    assert_eq!(seen.json["distributions"]["tools_by_layer"], json!({ "layer1": 2, "layer2": 1 }), "{}", seen.text);

    // Every documented operation answered with a success, checked against its schema.
    let answered: BTreeSet<(String, String)> =
        contract::seen(&t.base).into_iter().filter(|(_, _, status)| (200..300).contains(status)).map(|(m, p, _)| (m, p)).collect();
    let missing: Vec<String> = contract::operations().difference(&answered).map(|(method, path)| format!("{method} {path}")).collect();
    assert!(missing.is_empty(), "operations never answered with a success here: {missing:?}");
}
