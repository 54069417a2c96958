//! DUR over HTTP: spending that adds up (total = kinds = sources), the
//! agent's own decisions only, exact decimals, and the owner's reports.

use anchor_app::ara::privacy::Privacy;
use anchor_domain::Clock;
use anchor_tests::*;
use chrono::Duration;
use serde_json::{Value, json};

use super::ara::paid;

both_backends!(
    spending_adds_up_by_kind_and_source,
    decision_reports_cover_the_agent_itself,
    owners_read_their_agents_reports,
    earned_figures_are_the_ledgers
);

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("{value} is not a number"))
}

/// Asserts total = the sum of the kinds = the sum of the sources, and that
/// the deprecated alias is the same object.
#[track_caller]
fn adds_up(summary: &Value) {
    let spend = &summary["dac_spend"];
    let total = number(&spend["total"]);
    let kinds: f64 = ["dd_ee", "ara", "ise", "sdac", "tsl", "asa"].iter().map(|k| number(&spend[k])).sum();
    let sources: f64 = ["trial", "external", "earned"].iter().map(|s| number(&spend["by_source"][s])).sum();
    assert!((total - kinds).abs() < 1e-9 && (total - sources).abs() < 1e-9, "does not add up: {spend}");
    assert_eq!(summary["external_dac"], summary["dac_spend"]);
}

async fn spending_adds_up_by_kind_and_source(backend: Backend) {
    let t = TestServer::with(backend, Options { privacy: Privacy::Exact, ..Default::default() }).await;
    let me = t.anchored_agent(json!({ "ee_preset": "EE_high" })).await;
    let other = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    t.call("PUT", "/v1/agent/disclosure", Some(&other.token), Some(&json!({ "disclosure_level": "full" }))).await;
    // An unconfirmed declaration is not spending yet.
    t.create(&me, json!({ "ee_preset": "EE_basic" })).await;
    t.wait_for_fold(2).await;
    // Spend externally on observations: 3 + 4 DAC and 3 DAC.
    paid(&t, &me, "GET", &format!("/v1/ara/agent/{}/profile?resolution_level=3", other.id), None, "7000").await;
    paid(&t, &me, "GET", &format!("/v1/ara/agent/{}/timeline", other.id), None, "3000").await;
    // And a free one, which costs nothing.
    assert_eq!(t.get(&format!("/v1/ara/agent/{}/profile", me.id), Some(&me.token)).await.status.as_u16(), 200);
    t.clock.advance(Duration::minutes(1));

    let summary = t.get("/v1/dur/summary", Some(&me.token)).await;
    assert_eq!(summary.status.as_u16(), 200, "{}", summary.text);
    let s = &summary.json;
    adds_up(s);
    // EE_high is 157.5 DAC on Trial; the two observations 10 DAC over x402.
    assert_eq!(s["dac_spend"]["dd_ee"], 157.5);
    assert_eq!(s["dac_spend"]["ara"], 10);
    assert_eq!(s["dac_spend"]["by_source"]["trial"], 157.5);
    assert_eq!(s["dac_spend"]["by_source"]["external"], 10);
    assert_eq!(s["dac_spend"]["total"], 167.5);
    assert_eq!(s["dd_count"], 2, "the confirmed and the pending declaration are both on record");
    assert_eq!(s["ara_observations"], json!({ "count": 3, "total_dac": 10, "external_dac": 10, "earned_dac": 0 }));
    assert_eq!(s["fiat"]["external_dac"], 10);
    assert_eq!(s["fiat"]["approx_krw"], 14);
    assert_eq!(s["settlement"]["tx_count"], 0, "local settlements are not on chain");
    assert_eq!(s["dac_charged"], 0);

    // The transactions behind it, newest first, by kind.
    let all = t.get("/v1/dur/transactions", Some(&me.token)).await;
    assert_eq!(all.json["total"], 4, "base fee, premium and two observations: {}", all.text);
    let ara = t.get("/v1/dur/transactions?type=ara&limit=1", Some(&me.token)).await;
    assert_eq!((ara.json["total"].as_i64(), ara.json["transactions"].as_array().unwrap().len()), (Some(2), 1));
    assert_eq!(ara.json["transactions"][0]["type"], "ara");
    t.get("/v1/dur/transactions?type=coffee", Some(&me.token)).await.assert_error(400, "INVALID_ENUM");
    // A page larger than the largest is the largest, and the answer says so.
    let large = t.get("/v1/dur/transactions?limit=500", Some(&me.token)).await;
    assert_eq!(
        (large.status.as_u16(), large.json["limit"].clone(), large.json["total"].clone()),
        (200, json!(200), json!(4)),
        "{}",
        large.text
    );
    t.get("/v1/dur/transactions?limit=0", Some(&me.token)).await.assert_error(400, "INVALID_VALUE");
    let csv = t.get("/v1/dur/export", Some(&me.token)).await;
    assert!(csv.headers["content-type"].to_str().unwrap().starts_with("text/csv"));
    let lines: Vec<&str> = csv.text.lines().collect();
    assert_eq!(lines[0], "recorded_at,type,cost_component,payment_source,amount_dac,subject_id");
    assert_eq!(lines.len(), 5);
    let json = t.get("/v1/dur/export?format=json", Some(&me.token)).await;
    assert_eq!(json.json["total"], 4);

    // Ranges: a date includes that whole day; an ISO time is exclusive.
    let today = t.clock.now().date_naive();
    let day = t.get(&format!("/v1/dur/summary?from={today}&to={today}"), Some(&me.token)).await;
    assert_eq!(day.json["dac_spend"]["total"], 167.5);
    let before = t.get("/v1/dur/summary?to=2026-10-01T00:00:00Z&from=2026-09-01", Some(&me.token)).await;
    assert_eq!(before.json["dac_spend"]["total"], 0);
    adds_up(&before.json);
    t.get("/v1/dur/summary?from=yesterday", Some(&me.token)).await.assert_error(400, "INVALID_VALUE");
    t.get("/v1/dur/summary?from=2026-12-01&to=2026-11-01", Some(&me.token)).await.assert_error(400, "INVALID_VALUE");
    let tsl = t.get("/v1/dur/tsl?role=seller", Some(&me.token)).await;
    assert_eq!((tsl.json["total"].as_i64(), tsl.json["role"].as_str()), (Some(0), Some("seller")));
}

async fn decision_reports_cover_the_agent_itself(backend: Backend) {
    let t = TestServer::start(backend).await;
    let me = t.register().await;
    let other = t.register().await;
    for (scale, unit, class) in [
        ("18446744073709551616.5", "USDC", "payment"),
        ("0.5", "USDC", "payment"),
        ("3", "calls", "api_call"),
        ("0.0000004", "calls", "api_call"),
    ] {
        let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
        body["content_inclusion_flag"] = json!(1);
        let template = format!(
            r#"{{ "decision_class": "{class}", "decision_scale_value": {scale}, "decision_scale_unit": "{unit}", "human_involvement": "approval" }}"#
        );
        body["template"] = serde_json::from_str(&template).unwrap();
        let created = t.post("/v1/dd/create", Some(&me.token), &body).await;
        assert_eq!(created.status.as_u16(), 201, "{}", created.text);
        t.confirm(&me, created.json["dd_id"].as_str().unwrap()).await;
    }
    t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;

    let metadata = t.get("/v1/dur/decision-metadata", Some(&me.token)).await;
    assert_eq!(metadata.status.as_u16(), 200, "{}", metadata.text);
    assert_eq!(metadata.json["dd_count"], 4);
    assert_eq!(metadata.json["decision_class"], json!({ "api_call": 2, "payment": 2 }));
    assert_eq!(metadata.json["human_involvement"], json!({ "approval": 4 }));
    assert_eq!(metadata.json["dac_charged"], 0);

    let scale = t.get("/v1/dur/decision-scale", Some(&me.token)).await;
    let units = scale.json["units"].as_array().unwrap();
    let usdc = units.iter().find(|u| u["unit"] == "USDC").unwrap();
    // Exact decimals: the maximum keeps every digit, the mean is exact to six places.
    assert!(scale.text.contains("\"max\":18446744073709551616.5"), "{}", scale.text);
    assert!(scale.text.contains("\"avg\":9223372036854775808.5"), "{}", scale.text);
    assert_eq!((usdc["count"].as_i64(), usdc["min"].as_f64()), (Some(2), Some(0.5)));
    // Six places, rounded half away from zero, however fine the values: 1.5000002 is 1.5.
    let calls = units.iter().find(|u| u["unit"] == "calls").unwrap();
    assert_eq!((calls["count"].as_i64(), calls["avg"].as_f64()), (Some(2), Some(1.5)), "{}", scale.text);
    assert!(scale.text.contains("\"min\":0.0000004") && !scale.text.contains("1.5000002"), "{}", scale.text);

    let classified = t.get("/v1/dur/self-classification", Some(&me.token)).await;
    assert_eq!((classified.json["dd_count"].as_i64(), classified.json["classified_count"].as_i64()), (Some(4), Some(0)));

    // Your own id is fine; another agent's is refused.
    assert_eq!(t.get(&format!("/v1/dur/decision-scale?agent_id={}", me.id), Some(&me.token)).await.status.as_u16(), 200);
    for path in ["decision-metadata", "decision-scale", "self-classification"] {
        t.get(&format!("/v1/dur/{path}?agent_id={}", other.id), Some(&me.token)).await.assert_error(403, "CROSS_AGENT_NOT_ALLOWED");
    }
    // Free: nothing was observed or paid.
    assert_eq!(t.scalar("select count(*) from ara_observation").await, 0);
}

async fn owners_read_their_agents_reports(backend: Backend) {
    let t = TestServer::start(backend).await;
    let owner = t.owner("dur-owner@example.com").await;
    let stranger = t.owner("dur-stranger@example.com").await;
    let mut first = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    let mut second = t.anchored_agent(json!({ "ee_preset": "EE_standard" })).await;
    t.link(&owner, &mut first).await;
    t.link(&owner, &mut second).await;

    let both = t.as_owner(&owner, "GET", "/dap/dur/summary", None).await;
    assert_eq!(both.status.as_u16(), 200, "{}", both.text);
    adds_up(&both.json);
    assert_eq!(both.json["dac_spend"]["dd_ee"], 10 + 45);
    let one = t.as_owner(&owner, "GET", &format!("/dap/dur/summary?agent_id={}", first.id), None).await;
    assert_eq!(one.json["dac_spend"]["total"], 10);
    let export = t.as_owner(&owner, "GET", &format!("/dap/dur/export?agent_id={}", second.id), None).await;
    assert_eq!(export.text.lines().count(), 3, "header, base fee and premium: {}", export.text);
    t.as_owner(&owner, "GET", "/dap/dur/export", None).await.assert_error(400, "MISSING_FIELD");
    t.as_owner(&stranger, "GET", &format!("/dap/dur/summary?agent_id={}", first.id), None).await.assert_error(403, "NOT_LINKED");
    t.as_owner(&stranger, "GET", &format!("/dap/dur/export?agent_id={}", first.id), None).await.assert_error(403, "NOT_LINKED");
    // An owner with no agents spent nothing.
    let nothing = t.as_owner(&stranger, "GET", "/dap/dur/summary", None).await;
    assert_eq!(nothing.json["dac_spend"]["total"], 0);
}

/// The summary's Earned DAC figures come from the Earned ledger: two sales
/// of a tool credit its seller, and the seller's summary says what they
/// credited and how many ledger lines moved money; a buyer received nothing.
async fn earned_figures_are_the_ledgers(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let tool = super::tsl::register_tool(&t, &seller, "ee-mix", 20.0, "layer1").await;
    for _ in 0..2 {
        let buyer = t.register().await;
        let bought = super::tsl::buy(&t, &buyer, "/v1/tsl/purchase", &json!({ "tool_id": tool }), "30000").await;
        assert_eq!(bought.status.as_u16(), 201, "{}", bought.text);
        let theirs = t.get("/v1/dur/summary", Some(&buyer.token)).await;
        assert_eq!((theirs.json["earned_dac"]["received"].clone(), theirs.json["earned_dac"]["tx_count"].clone()), (json!(0), json!(0)));
    }
    let ledger = t.get("/v1/earned-dac/ledger", Some(&seller.token)).await;
    assert_eq!(ledger.status.as_u16(), 200, "{}", ledger.text);
    let entries = ledger.json["entries"].as_array().or_else(|| ledger.json["ledger"].as_array()).expect("ledger entries").clone();
    let credited: f64 = entries.iter().filter(|e| e["kind"] == "credit" || e["type"] == "credit").map(|e| number(&e["amount"])).sum();
    assert!(credited > 0.0, "{}", ledger.text);
    let summary = t.get("/v1/dur/summary", Some(&seller.token)).await;
    assert_eq!(summary.status.as_u16(), 200, "{}", summary.text);
    assert!((number(&summary.json["earned_dac"]["received"]) - credited).abs() < 1e-9, "{} against {credited}", summary.text);
    assert_eq!(summary.json["earned_dac"]["tx_count"], json!(2), "two credits: {}", summary.text);
    adds_up(&summary.json);
    // The estimate's rate says where it came from (no market rate configured here).
    assert!(summary.json["fiat"]["rate_info"]["source"].as_str().unwrap().contains("indicative"), "{}", summary.text);
    assert!(
        summary.json["fiat"]["rate_info"]["as_of"].as_str().is_some_and(|t| t.starts_with("2026-11-01")),
        "when it was set: {}",
        summary.text
    );
}
