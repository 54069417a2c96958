//! DD/EE: the anchoring flow, pricing on the record, idempotency, Trial, direct
//! access, confirmation, listing and lineage.

use anchor_tests::*;
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

anchor_tests::both_backends!(
    register_create_confirm_detail,
    integrity_hash_follows_the_documented_encoding,
    reusing_a_request_id_returns_the_earlier_result,
    trial_pays_until_spent_then_a_402_challenge,
    trial_expiry_follows_the_clock,
    confirmation_happens_once_and_only_for_the_owner,
    direct_reads_count_against_quota_and_period,
    list_filters_and_pages,
    lineage_links_stay_within_one_agent,
    template_rules_and_classification_keys,
    premium_payment_sources_are_never_ignored,
    what_a_client_sends_is_read_and_what_the_service_says_is_true,
    a_scale_value_is_kept_as_written_but_its_exponent,
);

async fn register_create_confirm_detail(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let created = t.create(&agent, json!({ "ee_preset": "EE_high" })).await;
    assert_eq!(created["status"], "trial_paid");
    assert_eq!(created["pricing_version"], "v1.3.0");
    assert_eq!(created["dac_amount"], json!(157.5));
    // Trial paid the whole: the premium has no source of its own (external or earned).
    assert_eq!(
        created["cost_breakdown"],
        json!({
            "base_fee": 10, "base_fee_source": "trial", "premium": 147.5,
            "subtotal": 105, "multiplier": 1.5, "total_dac": 157.5,
        })
    );
    assert_eq!(created["trial_payment"]["trial_remaining"], json!(342.5));
    assert_eq!(created["content_inclusion_flag"], json!(0));
    let sha = created["pricing_component_sha256"].as_str().unwrap();
    assert_eq!(sha, hex::encode(Sha256::digest(anchor_plugin_host::DEFAULT_PRICING_WASM)));
    let dd_id = created["dd_id"].as_str().unwrap();

    let confirmed = t.confirm(&agent, dd_id).await;
    assert_eq!(confirmed.status, StatusCode::OK, "{}", confirmed.text);
    let hash = confirmed.json["integrity_hash"].as_str().unwrap();
    assert!(hash.starts_with("sha256:") && hash.len() == 71 && hash[7..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(confirmed.json["dac_ur_recorded"], json!(true));
    assert_eq!(confirmed.json["payment_sources"], json!(["trial"]));
    assert_eq!(confirmed.json["settlement_currency"], Value::Null);
    assert_eq!(confirmed.json["anchored_at"], created["anchored_at"]);

    let detail = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.text);
    assert_eq!(detail.json["dd"]["integrity_hash"], json!(hash));
    assert_eq!(detail.json["ee"]["ee_retention_period"], "long");
    assert_eq!(detail.json["ee"]["ee_preset"], "EE_high");
    assert_eq!(detail.json["dac"]["pricing_version"], "v1.3.0");
    assert_eq!(detail.json["dac"]["pricing_component_sha256"], json!(sha));
    assert_eq!(detail.json["payment"]["settlement_status"], "settled");
    assert_eq!(detail.json["direct_access"]["direct_access_remaining"], json!(9));

    // Usage entries (DAC-UR) exist only after confirmation: base fee and premium.
    let usage = t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(dd_id).unwrap())).await.unwrap();
    let amounts: Vec<(&str, i64)> = usage.iter().map(|u| (u.cost_component.as_str(), u.amount.milli())).collect();
    assert_eq!(amounts, vec![("base_fee", 10_000), ("premium", 147_500)]);
}

/// Recomputes the hash from what the detail route returns, with code written
/// here from the documentation of `anchor-dd/1`, not with the service's own.
async fn integrity_hash_follows_the_documented_encoding(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut body = create_body(json!({ "ee_preset": "EE_standard", "delegation_state": "partial", "ee_direct_access_quota": 3 }));
    body["dd"]["decision_at"] = json!("2026-11-01T18:00:00+09:00");
    body["dd"]["selection_scope"] = json!("multi_target");
    body["content_inclusion_flag"] = json!(1);
    body["template"] = json!({ "decision_class": "payment", "decision_scale_value": 12.5, "decision_scale_unit": "USDC", "call_chain": ["planner", "pay.tool:v2"] });
    let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let dd_id = created.json["dd_id"].as_str().unwrap();
    let hash = t.confirm(&agent, dd_id).await.json["integrity_hash"].as_str().unwrap().to_string();
    let d = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await.json;
    assert_eq!(d["dd"]["decision_at"], "2026-11-01T09:00:00.000000Z", "decision_at is normalized to UTC");

    let s = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let tpl = &d["dd"]["template"];
    let lines = [
        ("salt", s(&d["integrity"]["salt"])),
        ("dd_id", s(&d["dd"]["dd_id"])),
        ("agent_id", s(&d["dd"]["agent_id"])),
        ("ee_id", s(&d["ee"]["ee_id"])),
        ("core_schema_version", s(&d["dd"]["core_schema_version"])),
        ("dd_unit_type", s(&d["dd"]["dd_unit_type"])),
        ("dd_declaration_mode", s(&d["dd"]["dd_declaration_mode"])),
        ("decision_type", s(&d["dd"]["decision_type"])),
        ("decision_action_type", s(&d["dd"]["decision_action_type"])),
        ("origin_context_type", s(&d["dd"]["origin_context_type"])),
        ("selection_state", s(&d["dd"]["selection_state"])),
        ("selection_scope", s(&d["dd"]["selection_scope"])),
        ("decision_at", s(&d["dd"]["decision_at"])),
        ("parent_dd_id", s(&d["dd"]["parent_dd_id"])),
        ("anchored_at", s(&d["dd"]["anchored_at"])),
        ("ee_retention_period", s(&d["ee"]["ee_retention_period"])),
        ("ee_integrity_verification_level", s(&d["ee"]["ee_integrity_verification_level"])),
        ("ee_disclosure_format_policy", s(&d["ee"]["ee_disclosure_format_policy"])),
        ("ee_responsibility_scope", s(&d["ee"]["ee_responsibility_scope"])),
        ("content_disclosure_scope", s(&d["ee"]["content_disclosure_scope"])),
        ("delegation_state", s(&d["ee"]["delegation_state"])),
        ("ee_direct_access_period", s(&d["ee"]["ee_direct_access_period"])),
        ("ee_direct_access_quota", s(&d["ee"]["ee_direct_access_quota"])),
        ("access_class", s(&d["ee"]["access_class"])),
        ("content_inclusion_flag", s(&d["dd"]["content_inclusion_flag"])),
        ("template.decision_class", s(&tpl["decision_class"])),
        ("template.decision_scale_value", s(&tpl["decision_scale_value"])),
        ("template.decision_scale_unit", s(&tpl["decision_scale_unit"])),
        ("template.target_class", s(&tpl["target_class"])),
        ("template.call_chain", tpl["call_chain"].as_array().map(|c| c.iter().map(s).collect::<Vec<_>>().join(",")).unwrap_or_default()),
        ("template.self_classification", s(&tpl["self_classification"])),
        ("template.decision_trigger", s(&tpl["decision_trigger"])),
        ("template.human_involvement", s(&tpl["human_involvement"])),
        ("pricing_version", s(&d["dac"]["pricing_version"])),
        ("pricing_component_sha256", s(&d["dac"]["pricing_component_sha256"])),
        ("dac_amount_milli", "55000".to_string()),
    ];
    assert_eq!(d["dac"]["dac_amount"], json!(55), "EE_standard 45 + partial delegation 10");
    let mut encoding = String::from("anchor-dd/1\n");
    for (key, value) in lines {
        encoding.push_str(&format!("{key}={value}\n"));
    }
    assert_eq!(hash, format!("sha256:{}", hex::encode(Sha256::digest(encoding.as_bytes()))));
}

/// `template.decision_scale_value` keeps the digits, point and sign the
/// client wrote (the integrity hash covers that text, not a float's
/// rounding of it); an exponent is kept as `e` with its sign, as JSON
/// encoders write it, whatever its case or sign were. The record's answers
/// show the text kept, which the hash covers.
async fn a_scale_value_is_kept_as_written_but_its_exponent(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    for (written, kept) in [
        ("1.50", "1.50"),
        ("18446744073709551616", "18446744073709551616"),
        ("1E2", "1e+2"),
        ("2.5e-3", "2.5e-3"),
        ("-0", "-0"),
        ("-0.0", "-0.0"),
    ] {
        let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
        body["content_inclusion_flag"] = json!(1);
        body["template"] = json!({ "decision_class": "payment", "decision_scale_value": "SCALE" });
        let text = body.to_string().replace("\"SCALE\"", written);
        let reply = t.http.post(t.url("/v1/dd/create")).bearer_auth(&agent.token).header("content-type", "application/json").body(text);
        let reply = reply.send().await.unwrap();
        assert_eq!(reply.status().as_u16(), 201, "{written}");
        let created: Value = reply.json().await.unwrap();
        let dd_id = created["dd_id"].as_str().unwrap();
        let detail = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await;
        let template = &detail.json["dd"]["template"];
        assert_eq!(template["decision_scale_value"].to_string(), kept, "{written}: {template}");
    }
}

async fn reusing_a_request_id_returns_the_earlier_result(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let body = create_body(basic_axes());
    let first = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    let second = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(second.status, StatusCode::CREATED);
    assert_eq!(first.json, second.json);
    // The same key with another declaration is refused, naming what differs
    // (decision 0061); the same body with its keys in another order is the same request.
    let mut other_dd = body.clone();
    other_dd["dd"]["decision_type"] = json!("external_interaction");
    let reused = t.post("/v1/dd/create", Some(&agent.token), &other_dd).await;
    reused.assert_error(400, "REQUEST_ID_USED");
    assert!(reused.json["message"].as_str().unwrap().contains("another dd"), "{}", reused.text);
    let mut other_ee = body.clone();
    other_ee["ee"]["ee_retention_period"] = json!("long");
    t.post("/v1/dd/create", Some(&agent.token), &other_ee).await.assert_error(400, "REQUEST_ID_USED");
    let mut with_template = body.clone();
    with_template["content_inclusion_flag"] = json!(1);
    with_template["template"] = json!({ "decision_class": "payment" });
    t.post("/v1/dd/create", Some(&agent.token), &with_template).await.assert_error(400, "REQUEST_ID_USED");
    let reordered: Value =
        serde_json::from_str(&format!(r#"{{"ee": {}, "dd": {}, "request_id": {}}}"#, body["ee"], body["dd"], body["request_id"])).unwrap();
    let third = t.post("/v1/dd/create", Some(&agent.token), &reordered).await;
    assert_eq!((third.status, third.json["dd_id"].clone()), (StatusCode::CREATED, first.json["dd_id"].clone()), "{}", third.text);
    // Charged once.
    let status = t.get("/v1/trial/status", Some(&agent.token)).await;
    assert_eq!(status.json["trial_dac_remaining"], json!(490));
    // Another agent using the same request_id gets its own record.
    let other = t.register().await;
    let theirs = t.post("/v1/dd/create", Some(&other.token), &body).await;
    assert_ne!(theirs.json["dd_id"], first.json["dd_id"]);
}

async fn trial_pays_until_spent_then_a_402_challenge(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    // 3 x 157.5 = 472.5; a fourth EE_high does not fit in the 27.5 left:
    // Trial can pay its base fee, so x402 is asked for the premium alone (decision 0062).
    for _ in 0..3 {
        t.create(&agent, json!({ "ee_preset": "EE_high" })).await;
    }
    let refused = t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_high" }))).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{}", refused.text);
    assert_eq!(refused.headers["cache-control"], "no-store");
    let header = refused.headers["payment-required"].to_str().unwrap();
    let decoded: Value = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap();
    assert_eq!(decoded, refused.json, "header and body carry the same object");
    assert_eq!(decoded["x402Version"], 2);
    let accepts = decoded["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1);
    assert_eq!(accepts[0]["amount"], "147500", "the 147.5 DAC premium in USDC base units");
    assert_eq!(accepts[0]["network"], "eip155:8453");
    assert_eq!(accepts[0]["scheme"], "exact");
    assert_eq!(decoded["resource"]["url"], json!(t.url("/v1/dd/create")));
    // Nothing was recorded or debited by the refusal; a cheaper scope still fits.
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(27.5));
    let basic = t.create(&agent, basic_axes()).await;
    assert_eq!(basic["trial_payment"]["trial_remaining"], json!(17.5));
    let listed = t.get("/v1/dd/list", Some(&agent.token)).await;
    assert_eq!(listed.json["total"], json!(4));
}

async fn trial_expiry_follows_the_clock(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    t.clock.advance(chrono::Duration::days(29));
    t.create(&agent, basic_axes()).await;
    t.clock.advance(chrono::Duration::days(2));
    let status = t.get("/v1/trial/status", Some(&agent.token)).await;
    assert_eq!(status.json["trial_active"], json!(false));
    assert_eq!(status.json["trial_dac_remaining"], json!(0));
    let refused = t.post("/v1/dd/create", Some(&agent.token), &create_body(basic_axes())).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{}", refused.text);
    assert_eq!(refused.json["accepts"][0]["amount"], "10000");
}

async fn confirmation_happens_once_and_only_for_the_owner(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let other = t.register().await;
    let dd_id = t.create(&agent, basic_axes()).await["dd_id"].as_str().unwrap().to_string();
    t.confirm(&other, &dd_id).await.assert_error(403, "FORBIDDEN");
    t.confirm(&agent, &uuid::Uuid::new_v4().to_string()).await.assert_error(404, "DD_NOT_FOUND");
    t.post("/v1/dd/confirm", Some(&agent.token), &json!({ "dd_id": "zzz" })).await.assert_error(400, "INVALID_UUID");
    t.post("/v1/dd/confirm", Some(&agent.token), &json!({})).await.assert_error(400, "MISSING_FIELD");
    // The token is checked before the body, whether the body reads or not,
    // and a token that is not the owner's is refused as on every route.
    let stale = format!("da_tk_{}", "0".repeat(64));
    t.post("/v1/dd/confirm", Some(&stale), &json!({ "dd_id": dd_id })).await.assert_error(401, "INVALID_TOKEN");
    t.post("/v1/dd/confirm", Some(&stale), &json!({})).await.assert_error(401, "INVALID_TOKEN");
    t.post("/v1/dd/confirm", None, &json!({ "dd_id": dd_id })).await.assert_error(401, "UNAUTHORIZED");
    t.post("/v1/dd/confirm", Some(&other.token), &json!({ "dd_id": "zzz" })).await.assert_error(400, "INVALID_UUID");
    let first = t.post("/v1/dd/confirm", Some(&agent.token), &json!({ "dd_id": dd_id, "extra": true })).await;
    assert_eq!(first.headers["anchor-ignored-fields"], "extra", "{}", first.text);
    assert_eq!(first.status, StatusCode::OK);
    t.confirm(&agent, &dd_id).await.assert_error(409, "ALREADY_CONFIRMED");
    // Concurrent confirmations of a fresh record: exactly one wins.
    let dd_id = t.create(&agent, basic_axes()).await["dd_id"].as_str().unwrap().to_string();
    let replies = futures_join(&t, &agent, &dd_id, 8).await;
    assert_eq!(replies.iter().filter(|s| **s == 200).count(), 1, "{replies:?}");
    assert_eq!(replies.iter().filter(|s| **s == 409).count(), 7, "{replies:?}");
    let usage = t.store.usage_for(anchor_ports::Subject::declaration(uuid::Uuid::parse_str(&dd_id).unwrap())).await.unwrap();
    assert_eq!(usage.len(), 1, "one usage entry (base fee), written once");
    t.get(&format!("/v1/dd/{dd_id}"), Some(&other.token)).await.assert_error(403, "FORBIDDEN");
}

async fn futures_join(t: &TestServer, agent: &Agent, dd_id: &str, n: usize) -> Vec<u16> {
    let mut handles = Vec::new();
    for _ in 0..n {
        let http = t.http.clone();
        let url = t.url("/v1/dd/confirm");
        let token = agent.token.clone();
        let body = json!({ "dd_id": dd_id }).to_string();
        handles.push(tokio::spawn(async move {
            http.post(url).bearer_auth(token).header("content-type", "application/json").body(body).send().await.unwrap().status().as_u16()
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

async fn direct_reads_count_against_quota_and_period(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut ee = basic_axes();
    ee["ee_direct_access_quota"] = json!(2);
    ee["ee_direct_access_period"] = json!("3d");
    let dd_id = t.create(&agent, ee).await["dd_id"].as_str().unwrap().to_string();
    let path = format!("/v1/dd/{dd_id}");
    assert_eq!(t.get(&path, Some(&agent.token)).await.json["direct_access"]["direct_access_remaining"], json!(1));
    // The list, lineage and confirm do not count.
    t.get("/v1/dd/list", Some(&agent.token)).await;
    t.get(&format!("{path}/lineage"), Some(&agent.token)).await;
    t.confirm(&agent, &dd_id).await;
    assert_eq!(t.get(&path, Some(&agent.token)).await.json["direct_access"]["direct_access_remaining"], json!(0));
    t.get(&path, Some(&agent.token)).await.assert_error(403, "DIRECT_ACCESS_EXHAUSTED");
    // The summary stays visible and unchanged.
    let listed = t.get("/v1/dd/list", Some(&agent.token)).await;
    assert_eq!(listed.json["dds"][0]["dd_id"], json!(dd_id));

    let mut ee = basic_axes();
    ee["ee_direct_access_period"] = json!("1d");
    let short = t.create(&agent, ee).await["dd_id"].as_str().unwrap().to_string();
    t.clock.advance(chrono::Duration::days(2));
    t.get(&format!("/v1/dd/{short}"), Some(&agent.token)).await.assert_error(403, "DIRECT_ACCESS_EXPIRED");

    let mut ee = basic_axes();
    ee["access_class"] = json!("ara_only");
    let ara = t.create(&agent, ee).await["dd_id"].as_str().unwrap().to_string();
    t.get(&format!("/v1/dd/{ara}"), Some(&agent.token)).await.assert_error(403, "DIRECT_ACCESS_NOT_PERMITTED");
    t.get("/v1/dd/not-a-uuid", Some(&agent.token)).await.assert_error(400, "INVALID_UUID");
    t.get(&format!("/v1/dd/{}", uuid::Uuid::new_v4()), Some(&agent.token)).await.assert_error(404, "DD_NOT_FOUND");
}

async fn list_filters_and_pages(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(t.create(&agent, basic_axes()).await["dd_id"].as_str().unwrap().to_string());
        t.clock.advance(chrono::Duration::hours(1));
    }
    let all = t.get("/v1/dd/list", Some(&agent.token)).await;
    assert_eq!(all.json["total"], json!(5));
    let newest_first: Vec<&str> = all.json["dds"].as_array().unwrap().iter().map(|d| d["dd_id"].as_str().unwrap()).collect();
    let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    expected.reverse();
    assert_eq!(newest_first, expected);
    let page = t.get("/v1/dd/list?limit=2&offset=1", Some(&agent.token)).await;
    assert_eq!(page.json["dds"].as_array().unwrap().len(), 2);
    assert_eq!(page.json["dds"][0]["dd_id"], json!(ids[3]));
    // 09:00 start, one per hour: from 10:00 to 12:00 holds the 2nd, 3rd and 4th.
    let window = t.get("/v1/dd/list?from=2026-11-01T10:00:00Z&to=2026-11-01T12:00:00Z", Some(&agent.token)).await;
    assert_eq!(window.json["total"], json!(3), "{}", window.text);
    t.get("/v1/dd/list?from=yesterday", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    t.get("/v1/dd/list?limit=0", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    t.get("/v1/dd/list?limit=abc", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    // The reference sets no largest page: past ours (200) the page is ours, and the answer says so.
    let large = t.get("/v1/dd/list?limit=100000", Some(&agent.token)).await;
    assert_eq!((large.status.as_u16(), large.json["limit"].clone()), (200, json!(200)), "{}", large.text);
    assert_eq!(large.json["dds"].as_array().unwrap().len(), 5);
    t.get("/v1/dd/list?offset=-1", Some(&agent.token)).await.assert_error(400, "INVALID_VALUE");
    // Another agent sees none of them.
    let other = t.register().await;
    assert_eq!(t.get("/v1/dd/list", Some(&other.token)).await.json["total"], json!(0));
}

async fn lineage_links_stay_within_one_agent(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let root = t.create(&agent, basic_axes()).await["dd_id"].as_str().unwrap().to_string();
    let mut body = create_body(basic_axes());
    body["continuity"] = json!({ "parent_dd_id": root, "ignored_key": 1 });
    let child = t.post("/v1/dd/create", Some(&agent.token), &body).await.json;
    assert_eq!(child["lineage_group_id"], json!(root));
    let mut body = create_body(basic_axes());
    body["dd"]["parent_dd_id"] = child["dd_id"].clone();
    let grandchild = t.post("/v1/dd/create", Some(&agent.token), &body).await.json;
    let grandchild_id = grandchild["dd_id"].as_str().unwrap();

    let lineage = t.get(&format!("/v1/dd/{grandchild_id}/lineage"), Some(&agent.token)).await;
    assert_eq!(lineage.json["root_dd_id"], json!(root));
    let ancestors: Vec<&Value> = lineage.json["ancestors"].as_array().unwrap().iter().map(|a| &a["dd_id"]).collect();
    assert_eq!(ancestors, vec![&json!(root), &child["dd_id"]]);
    assert_eq!(lineage.json["tree"]["children"][0]["children"][0]["dd_id"], json!(grandchild_id));
    let group = t.get(&format!("/v1/dd/lineage-group/{root}"), Some(&agent.token)).await;
    assert_eq!(group.json["count"], json!(3));

    let other = t.register().await;
    let mut foreign = create_body(basic_axes());
    foreign["continuity"] = json!({ "parent_dd_id": root });
    t.post("/v1/dd/create", Some(&other.token), &foreign).await.assert_error(403, "FORBIDDEN");
    t.get(&format!("/v1/dd/lineage-group/{root}"), Some(&other.token)).await.assert_error(404, "NOT_FOUND");
    let mut unknown = create_body(basic_axes());
    unknown["continuity"] = json!({ "parent_dd_id": uuid::Uuid::new_v4() });
    t.post("/v1/dd/create", Some(&agent.token), &unknown).await.assert_error(404, "DD_NOT_FOUND");
    let mut conflicting = create_body(basic_axes());
    conflicting["continuity"] = json!({ "parent_dd_id": root });
    conflicting["dd"]["parent_dd_id"] = child["dd_id"].clone();
    t.post("/v1/dd/create", Some(&agent.token), &conflicting).await.assert_error(400, "INVALID_VALUE");
    // The refused creates cost nothing: 3 x 10 DAC spent.
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(470));
}

async fn template_rules_and_classification_keys(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let keys = t.get("/v1/classification", Some(&agent.token)).await;
    let list = keys.json["classifications"].as_array().unwrap();
    assert!(list.len() >= 5, "operator base categories exist before any owner does");
    assert!(list.iter().all(|c| c["source"] == "operator"));
    let key = list[0]["classification_key"].as_str().unwrap();

    let mut body = create_body(basic_axes());
    body["content_inclusion_flag"] = json!(1);
    body["template"] = json!({ "self_classification": key, "human_involvement": "approval" });
    let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.json["dac_amount"], json!(10), "content inclusion carries no surcharge");
    let detail = t.get(&format!("/v1/dd/{}", created.json["dd_id"].as_str().unwrap()), Some(&agent.token)).await;
    assert_eq!(detail.json["dd"]["template"]["self_classification"], json!(key));
    assert_eq!(detail.json["dd"]["content_inclusion_flag"], json!(1));
}

async fn premium_payment_sources_are_never_ignored(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut earned = create_body(json!({ "ee_preset": "EE_standard" }));
    earned["premium_payment_source"] = json!("earned");
    t.post("/v1/dd/create", Some(&agent.token), &earned).await.assert_error(400, "INSUFFICIENT_DAC");
    let mut external = create_body(json!({ "ee_preset": "EE_standard" }));
    external["premium_payment_source"] = json!("external");
    // external: Trial keeps the base fee, the premium is challenged on its own.
    let challenge = t.post("/v1/dd/create", Some(&agent.token), &external).await;
    assert_eq!(challenge.status, StatusCode::PAYMENT_REQUIRED, "{}", challenge.text);
    assert_eq!(challenge.json["accepts"][0]["amount"], "35000", "the 35 DAC premium of EE_standard");
    // With no premium the source has nothing to pay and Trial pays the base fee.
    let mut basic = create_body(json!({ "ee_preset": "EE_basic" }));
    basic["premium_payment_source"] = json!("external");
    assert_eq!(t.post("/v1/dd/create", Some(&agent.token), &basic).await.status, StatusCode::CREATED);
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(490));
}

/// A template sent with content_inclusion_flag 0 is not read or stored
/// (branch 0 is the decision fact only); a Trial too short for the whole
/// price says, in its 402, how to let it pay the base fee; the premium's
/// source is external or earned, never Trial; discovery says what the
/// routes do (Earned pays a declaration's premium and an earned_only stay;
/// indefinite retention is not offered while the operator has it off).
async fn what_a_client_sends_is_read_and_what_the_service_says_is_true(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
    body["template"] = json!({ "decision_class": "payment", "decision_scale_value": 12 });
    let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(created.status.as_u16(), 201, "{}", created.text);
    assert_eq!(created.json["content_inclusion_flag"], json!(0));
    let named = created.headers.get("anchor-ignored-fields").map(|v| v.to_str().unwrap());
    assert_eq!(named, Some("template"), "a template the flag 0 leaves out is named, as unknown keys are");
    let dd_id = created.json["dd_id"].as_str().unwrap();
    let stored = format!(
        "select count(*) from declaration where dd_id = {} and tpl_decision_class is null and tpl_decision_scale_value is null",
        t.uuid_sql(dd_id)
    );
    assert_eq!(t.scalar(&stored).await, 1, "the template of a branch-0 declaration is not stored");

    // 27.5 DAC of Trial left, a 45 DAC declaration: Trial pays the base fee,
    // the 402 asks for the premium alone and says so (decision 0062).
    let spender = t.register().await;
    t.tamper(&format!("update agent set trial_balance_milli = 27500 where agent_id = {}", t.uuid_sql(&spender.id))).await;
    let standard = t.post("/v1/dd/create", Some(&spender.token), &create_body(json!({ "ee_preset": "EE_standard" }))).await;
    assert_eq!(standard.status.as_u16(), 402, "{}", standard.text);
    let challenge = anchor_tests::x402::challenge_of(&standard);
    let description = challenge["resource"]["description"].as_str().unwrap_or_default().to_string();
    assert!(description.contains("Trial pays its 10 DAC base fee"), "{challenge}");
    assert_eq!(challenge["accepts"][0]["amount"], "35000", "{challenge}");
    let mut split = create_body(json!({ "ee_preset": "EE_standard" }));
    split["premium_payment_source"] = json!("external");
    let challenged = t.post("/v1/dd/create", Some(&spender.token), &split).await;
    assert_eq!(challenged.status.as_u16(), 402, "the premium over x402: {}", challenged.text);
    let payment = anchor_tests::x402::pay(
        &anchor_tests::x402::challenge_of(&challenged),
        anchor_domain::Clock::now(t.clock.as_ref()).timestamp(),
        anchor_tests::x402::Twist::default(),
    );
    let bearer = format!("Bearer {}", spender.token);
    let signature = anchor_tests::x402::b64(&payment);
    let paid = t.call_with("POST", "/v1/dd/create", &[("authorization", &bearer), ("payment-signature", &signature)], Some(&split)).await;
    assert_eq!(paid.status.as_u16(), 201, "{}", paid.text);
    assert_eq!(paid.json["cost_breakdown"]["base_fee_source"], "trial");
    assert_eq!(paid.json["cost_breakdown"]["premium_source"], "external", "{}", paid.text);

    // Discovery says what the routes do.
    let x402 = t.get("/.well-known/x402.json", None).await.json;
    let endpoint = |name: &str| x402["paid_endpoints"].as_array().unwrap().iter().find(|e| e["endpoint"] == name).cloned().unwrap();
    assert_eq!(endpoint("POST /v1/ise/exit")["accepts_earned"], json!(true));
    assert_eq!(endpoint("POST /v1/sdac/session/end")["accepts_earned"], json!(false));
    assert_eq!(endpoint("POST /v1/dd/create")["accepts_earned"], json!(true));
    let off = TestServer::with(
        backend,
        Options { features: anchor_app::Features { retention: false, ..Default::default() }, ..Options::default() },
    )
    .await;
    let pricing = off.get("/v1/pricing/current", None).await.json;
    assert_eq!(pricing["indefinite_available"], json!(false), "{pricing}");
    assert_eq!(pricing["axes"]["ee_retention_period"]["indefinite"]["available"], json!(false));
    assert_eq!(t.get("/v1/pricing/current", None).await.json["indefinite_available"], json!(true));
}
