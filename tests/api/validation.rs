//! Every validation rule of DD create, one line each: the bad input, the status
//! and the documented error_code. Each case also checks that nothing was
//! charged or recorded.

use anchor_tests::*;
use serde_json::{Value, json};

/// An edit of the valid body: set a JSON pointer to a value, or remove it.
enum Edit {
    Set(&'static str, Value),
    Remove(&'static str),
    Replace(Value),
}
use Edit::*;

fn apply(mut body: Value, edits: Vec<Edit>) -> Value {
    for edit in edits {
        match edit {
            Set(pointer, value) => {
                let (parent, key) = pointer.rsplit_once('/').unwrap();
                let target = if parent.is_empty() { &mut body } else { body.pointer_mut(parent).unwrap() };
                target[key] = value;
            }
            Remove(pointer) => {
                let (parent, key) = pointer.rsplit_once('/').unwrap();
                let target = if parent.is_empty() { &mut body } else { body.pointer_mut(parent).unwrap() };
                target.as_object_mut().unwrap().remove(key);
            }
            Replace(value) => body = value,
        }
    }
    body
}

fn cases() -> Vec<(&'static str, Vec<Edit>, u16, &'static str)> {
    vec![
        ("body is not an object", vec![Replace(json!([1, 2]))], 400, "INVALID_INPUT"),
        ("missing request_id", vec![Remove("/request_id")], 400, "MISSING_FIELD"),
        ("request_id not a uuid", vec![Set("/request_id", json!("req-1"))], 400, "INVALID_UUID"),
        ("missing dd", vec![Remove("/dd")], 400, "MISSING_FIELD"),
        ("missing ee", vec![Remove("/ee")], 400, "MISSING_FIELD"),
        ("dd not an object", vec![Set("/dd", json!("single"))], 400, "INVALID_INPUT"),
        ("missing dd_unit_type", vec![Remove("/dd/dd_unit_type")], 400, "MISSING_FIELD"),
        ("missing selection_state", vec![Remove("/dd/selection_state")], 400, "MISSING_FIELD"),
        ("bad dd_unit_type", vec![Set("/dd/dd_unit_type", json!("many"))], 400, "INVALID_ENUM"),
        ("bad decision_type", vec![Set("/dd/decision_type", json!("other"))], 400, "INVALID_ENUM"),
        ("bad decision_action_type", vec![Set("/dd/decision_action_type", json!("EXECUTE"))], 400, "INVALID_ENUM"),
        ("bad origin_context_type", vec![Set("/dd/origin_context_type", json!("world"))], 400, "INVALID_ENUM"),
        ("lower-case selection_state", vec![Set("/dd/selection_state", json!("selected"))], 400, "INVALID_ENUM"),
        ("bad selection_scope", vec![Set("/dd/selection_scope", json!("everything"))], 400, "INVALID_ENUM"),
        ("enum sent as number", vec![Set("/dd/dd_unit_type", json!(1))], 400, "INVALID_ENUM"),
        ("bad declaration mode", vec![Set("/dd/dd_declaration_mode", json!("solo"))], 400, "INVALID_ENUM"),
        ("bilateral on create", vec![Set("/dd/dd_declaration_mode", json!("bilateral"))], 400, "DECLARATION_MODE_NOT_ALLOWED"),
        ("multi_party on create", vec![Set("/dd/dd_declaration_mode", json!("multi_party"))], 400, "DECLARATION_MODE_NOT_ALLOWED"),
        ("decision_at in the future", vec![Set("/dd/decision_at", json!("2026-11-01T09:00:01Z"))], 400, "DECISION_AT_IN_FUTURE"),
        (
            "decision_at in the future by offset",
            vec![Set("/dd/decision_at", json!("2026-11-01T10:00:01+01:00"))],
            400,
            "DECISION_AT_IN_FUTURE",
        ),
        ("decision_at not a date", vec![Set("/dd/decision_at", json!("yesterday"))], 400, "INVALID_VALUE"),
        ("decision_at without offset", vec![Set("/dd/decision_at", json!("2026-11-01T08:00:00"))], 400, "INVALID_VALUE"),
        ("parent_dd_id not a uuid", vec![Set("/dd/parent_dd_id", json!("parent"))], 400, "INVALID_UUID"),
        ("continuity parent not a uuid", vec![Set("/continuity", json!({ "parent_dd_id": 7 }))], 400, "INVALID_UUID"),
        ("missing retention without preset", vec![Remove("/ee/ee_retention_period")], 400, "MISSING_FIELD"),
        ("missing responsibility without preset", vec![Remove("/ee/ee_responsibility_scope")], 400, "MISSING_FIELD"),
        ("bad retention", vec![Set("/ee/ee_retention_period", json!("forever"))], 400, "INVALID_ENUM"),
        ("bad integrity", vec![Set("/ee/ee_integrity_verification_level", json!("perfect"))], 400, "INVALID_ENUM"),
        ("bad disclosure", vec![Set("/ee/ee_disclosure_format_policy", json!("public"))], 400, "INVALID_ENUM"),
        ("bad responsibility", vec![Set("/ee/ee_responsibility_scope", json!("total"))], 400, "INVALID_ENUM"),
        ("bad content_disclosure_scope", vec![Set("/ee/content_disclosure_scope", json!("world"))], 400, "INVALID_ENUM"),
        ("bad delegation_state", vec![Set("/ee/delegation_state", json!("some"))], 400, "INVALID_ENUM"),
        ("bad access_class", vec![Set("/ee/access_class", json!("anyone"))], 400, "INVALID_ENUM"),
        ("period without unit", vec![Set("/ee/ee_direct_access_period", json!("30"))], 400, "INVALID_VALUE"),
        ("period with leading zero", vec![Set("/ee/ee_direct_access_period", json!("030d"))], 400, "INVALID_VALUE"),
        ("period of zero", vec![Set("/ee/ee_direct_access_period", json!("0d"))], 400, "INVALID_VALUE"),
        ("period in weeks", vec![Set("/ee/ee_direct_access_period", json!("2w"))], 400, "INVALID_VALUE"),
        ("period as number", vec![Set("/ee/ee_direct_access_period", json!(30))], 400, "INVALID_VALUE"),
        ("negative quota", vec![Set("/ee/ee_direct_access_quota", json!(-1))], 400, "INVALID_VALUE"),
        ("fractional quota", vec![Set("/ee/ee_direct_access_quota", json!(1.5))], 400, "INVALID_VALUE"),
        ("unknown preset", vec![Set("/ee", json!({ "ee_preset": "EE_ultra" }))], 400, "INVALID_EE_PRESET"),
        (
            "preset with a bad axis",
            vec![Set("/ee/ee_preset", json!("EE_basic")), Set("/ee/ee_retention_period", json!("forever"))],
            400,
            "INVALID_ENUM",
        ),
        (
            "indefinite without subscription",
            vec![Set("/ee/ee_retention_period", json!("indefinite"))],
            403,
            "INDEFINITE_SUBSCRIPTION_REQUIRED",
        ),
        ("flag must be 0 or 1", vec![Set("/content_inclusion_flag", json!(2))], 400, "INVALID_ENUM"),
        ("flag as string", vec![Set("/content_inclusion_flag", json!("1"))], 400, "INVALID_ENUM"),
        ("flag 1 without template", vec![Set("/content_inclusion_flag", json!(1))], 400, "MISSING_FIELD"),
        ("flag 1 with empty template", vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({}))], 400, "INVALID_INPUT"),
        (
            "bad decision_class",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "decision_class": "bribe" }))],
            400,
            "INVALID_ENUM",
        ),
        (
            "bad target_class",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "target_class": "cat" }))],
            400,
            "INVALID_ENUM",
        ),
        (
            "bad decision_trigger",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "decision_trigger": "whim" }))],
            400,
            "INVALID_ENUM",
        ),
        (
            "bad human_involvement",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "human_involvement": "lots" }))],
            400,
            "INVALID_ENUM",
        ),
        (
            "scale value not a number",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "decision_scale_value": "12" }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "scale unit with a space",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "decision_scale_unit": "US dollars" }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "scale unit too long",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "decision_scale_unit": "ABCDEFGHIJKLMNOPQRSTU" }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "call_chain not an array",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": "a,b" }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "call_chain with free text",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["search", "then pay bob"] }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "call_chain entry too long",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["a".repeat(65)] }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "call_chain of 33",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": vec!["tool"; 33] }))],
            400,
            "INVALID_VALUE",
        ),
        (
            "call_chain with a phone number",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["sms", "010-1234-5678"] }))],
            400,
            "PII_DETECTED",
        ),
        (
            "call_chain with an email label",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["email:alice"] }))],
            400,
            "PII_DETECTED",
        ),
        (
            "call_chain with an IP address",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["10.1.2.3"] }))],
            400,
            "PII_DETECTED",
        ),
        (
            "call_chain with an IPv6 address inside a token",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "call_chain": ["fetch:2001:db8::1"] }))],
            400,
            "PII_DETECTED",
        ),
        (
            "unregistered self_classification",
            vec![Set("/content_inclusion_flag", json!(1)), Set("/template", json!({ "self_classification": "not_a_registered_key" }))],
            400,
            "INVALID_VALUE",
        ),
        ("bad premium_payment_source", vec![Set("/premium_payment_source", json!("trial"))], 400, "INVALID_ENUM"),
    ]
}

anchor_tests::both_backends!(
    every_rule_answers_its_documented_code,
    unknown_keys_are_left_out_and_named,
    presets_expand_and_override_the_axes,
    preset_disabled_is_refused
);

/// A key the request does not define, at any depth, is left out (decision
/// 0061): the declaration is recorded as if it were not there, nothing of it
/// is kept, and the answer names it in Anchor-Ignored-Fields.
async fn unknown_keys_are_left_out_and_named(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let body = apply(
        create_body(basic_axes()),
        vec![
            Set("/colour", json!("blue")),
            Set("/dd/reason", json!("because the customer asked")),
            Set("/ee/ee_colour", json!("x")),
            Set("/content_inclusion_flag", json!(1)),
            Set("/template", json!({ "decision_class": "payment", "notes": "free text, never kept" })),
            Set("/continuity", json!({ "parent_dd_id": null, "thread": "t-1" })),
        ],
    );
    let reply = t.post("/v1/dd/create", Some(&agent.token), &body).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    let named = reply.headers.get("anchor-ignored-fields").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let mut names: Vec<&str> = named.split(", ").collect();
    names.sort();
    assert_eq!(names, ["colour", "ee_colour", "notes", "reason", "thread"], "{named}");
    let dd_id = reply.json["dd_id"].as_str().unwrap();
    let read = t.get(&format!("/v1/dd/{dd_id}"), Some(&agent.token)).await;
    assert!(!read.text.contains("free text") && !read.text.contains("because the customer"), "nothing of them is kept: {}", read.text);
    // A body with every key known names nothing.
    let plain = t.post("/v1/dd/create", Some(&agent.token), &create_body(basic_axes())).await;
    assert_eq!(plain.status.as_u16(), 201, "{}", plain.text);
    assert!(plain.headers.get("anchor-ignored-fields").is_none());
    // A key that means something elsewhere is still refused where it cannot act.
    let counterparty = t.register().await;
    let mut proposal = create_body(json!({ "ee_preset": "EE_basic" }));
    proposal["counterparty_agent_id"] = json!(counterparty.id);
    proposal["dd"]["dd_declaration_mode"] = json!("bilateral");
    t.post("/v1/dd/bilateral/propose", Some(&agent.token), &proposal).await.assert_error(400, "UNKNOWN_FIELD");
    // A body sent as another media type than JSON is not read as JSON.
    let text = t
        .http
        .post(t.url("/v1/dd/create"))
        .bearer_auth(&agent.token)
        .header("content-type", "text/plain")
        .body(create_body(basic_axes()).to_string())
        .send()
        .await
        .unwrap();
    let status = text.status().as_u16();
    let content_type = text.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_string);
    let answer = text.text().await.unwrap();
    // A refusal the operation documents, as every operation with a JSON body does.
    contract::check(&t.base, "POST", "/v1/dd/create", status, content_type.as_deref(), &answer);
    assert_eq!(status, 415);
    assert_eq!(serde_json::from_str::<Value>(&answer).unwrap()["error_code"], "UNSUPPORTED_MEDIA_TYPE");
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(2));
}

async fn every_rule_answers_its_documented_code(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let mut failures = Vec::new();
    for (name, edits, status, code) in cases() {
        let body = apply(create_body(basic_axes()), edits);
        let reply = t.post("/v1/dd/create", Some(&agent.token), &body).await;
        let got = (reply.status.as_u16(), reply.json["error_code"].as_str().unwrap_or("").to_string());
        if got != (status, code.to_string()) || reply.json["message"].as_str().is_none_or(str::is_empty) {
            failures.push(format!("{name}: expected {status} {code}, got {} {}", got.0, reply.text));
        }
    }
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n"));
    // Nothing was recorded or charged by any of them.
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(0));
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(500));
}

async fn presets_expand_and_override_the_axes(backend: Backend) {
    let t = TestServer::start(backend).await;
    for (preset, total) in [("EE_basic", json!(10)), ("EE_standard", json!(45)), ("EE_high", json!(157.5))] {
        let agent = t.register().await;
        let mut ee = basic_axes();
        ee["ee_preset"] = json!(preset);
        let created = t.create(&agent, ee).await;
        assert_eq!(created["dac_amount"], total, "{preset}");
    }
    // Explicit axes without a preset are priced axis by axis, multiplier included:
    // (10 + 50 + 0 + 30 + 0 + 40 + 30) x 1.5 = 240.
    let agent = t.register().await;
    let scope = |retention: &str, disclosure: &str, responsibility: &str| {
        json!({
            "ee_retention_period": retention, "ee_integrity_verification_level": "certifiable",
            "ee_disclosure_format_policy": disclosure, "ee_responsibility_scope": responsibility,
            "content_disclosure_scope": "public", "delegation_state": "full",
        })
    };
    let created = t.create(&agent, scope("long", "exportable", "minimal")).await;
    assert_eq!(created["dac_amount"], json!(240));
    assert_eq!(created["cost_breakdown"]["multiplier"], json!(1.5));
    // extreme_long is an overlay, not "long": with exportable alone only one
    // condition holds, so no multiplier: 10 + 100 + 30 + 40 + 30 = 210.
    let agent = t.register().await;
    let over = t.create(&agent, scope("extreme_long", "exportable", "minimal")).await;
    assert_eq!(over["dac_amount"], json!(210));
    assert_eq!(over["cost_breakdown"]["multiplier"], json!(1));
}

async fn preset_disabled_is_refused(backend: Backend) {
    use anchor_domain::declarations::ee::*;
    use anchor_domain::pricing::*;
    /// The bundled generation, with EE_high switched off by the operator.
    struct Disabled(std::sync::Arc<dyn Pricing>);
    impl Pricing for Disabled {
        fn generation(&self) -> &Generation {
            self.0.generation()
        }
        fn quote(&self, scope: Scope) -> Result<Quote, PricingError> {
            self.0.quote(scope)
        }
        fn presets(&self) -> Result<Vec<Preset>, PricingError> {
            let mut presets = self.0.presets()?;
            presets.iter_mut().filter(|p| p.name == "EE_high").for_each(|p| p.enabled = false);
            Ok(presets)
        }
        fn policy(&self) -> Result<Policy, PricingError> {
            self.0.policy()
        }
        fn services(&self) -> Result<Option<anchor_domain::pricing::ServicePrices>, PricingError> {
            self.0.services()
        }
    }
    let t = TestServer::with(backend, Options { pricing: std::sync::Arc::new(Disabled(default_pricing())), ..Options::default() }).await;
    let agent = t.register().await;
    let reply = t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_high" }))).await;
    reply.assert_error(400, "EE_PRESET_DISABLED");
}
