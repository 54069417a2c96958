//! ARA over HTTP: de-identified releases over fixed windows (k = 10, then
//! differential privacy), agent-level observation gated by disclosure, the
//! check order before any payment, meta-observation, and the deprecated query.

use anchor_app::ara::privacy::Privacy;
use anchor_domain::Clock;
use anchor_tests::*;
use chrono::Duration;
use serde_json::{Value, json};

use anchor_tests::x402::{Twist, b64, challenge_of, pay};

both_backends!(
    releases_need_ten_agents_and_windows_are_fixed,
    checks_run_in_order_and_refusals_cost_nothing,
    disclosure_caps_each_level_and_demotion_shows_to_the_agent_only,
    comparisons_meta_observation_and_the_legacy_query,
    anomaly_bands_are_released_per_dimension,
    owners_see_their_agents_own_view_for_free,
    the_epsilon_ledger_holds_releases_to_the_budget,
    a_payment_sent_again_resumes_the_observation_it_paid
);

/// A test server whose releases are exact (k-anonymity alone), so the rules
/// can be checked without noise.
async fn exact(backend: Backend) -> TestServer {
    TestServer::with(backend, Options { privacy: Privacy::Exact, ..Default::default() }).await
}

/// `method path` as `agent`, with a payment payload if given.
pub(crate) async fn observe(
    t: &TestServer,
    agent: &Agent,
    method: &str,
    path: &str,
    payment: Option<&Value>,
    body: Option<&Value>,
) -> Reply {
    let bearer = format!("Bearer {}", agent.token);
    let signature = payment.map(b64);
    let mut headers = vec![("authorization", bearer.as_str())];
    if let Some(signature) = &signature {
        headers.push(("payment-signature", signature.as_str()));
    }
    t.call_with(method, path, &headers, body).await
}

/// Observes, answers the challenge with a payment for exactly its amount, and
/// returns the paid answer (asserting the amount asked).
pub(crate) async fn paid(t: &TestServer, agent: &Agent, method: &str, path: &str, body: Option<&Value>, amount_units: &str) -> Reply {
    let challenge = challenge_of(&observe(t, agent, method, path, None, body).await);
    assert_eq!(challenge["accepts"][0]["amount"], amount_units, "{path}: {challenge}");
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let reply = observe(t, agent, method, path, Some(&payment), body).await;
    assert_eq!(reply.status.as_u16(), 200, "{path}: {}", reply.text);
    assert!(reply.headers.get("payment-response").is_some(), "{path}: settled before the answer");
    reply
}

async fn observations(t: &TestServer) -> i64 {
    t.scalar("select count(*) from ara_observation").await
}

async fn payments(t: &TestServer) -> i64 {
    t.scalar("select count(*) from x402_payment").await
}

async fn releases_need_ten_agents_and_windows_are_fixed(backend: Backend) {
    let t = exact(backend).await;
    let observer = t.register().await;
    // Nine agents anchor one declaration each; a tenth anchors only an
    // internal_only one, which cross-agent views never count.
    for _ in 0..9 {
        t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    }
    t.anchored_agent(json!({ "ee_preset": "EE_basic", "access_class": "internal_only" })).await;
    t.wait_for_fold(10).await;
    // Windows end where today starts: today's declarations wait for tomorrow.
    t.clock.advance(Duration::days(1));
    for path in [
        "/v1/ara/environment",
        "/v1/ara/environment/summary",
        "/v1/ara/environment/density",
        "/v1/ara/pattern/ee-distribution",
        "/v1/ara/pattern/action-type",
    ] {
        let refused = observe(&t, &observer, "GET", path, None, None).await;
        refused.assert_error(404, "DATA_UNAVAILABLE");
        assert!(refused.headers.get("payment-required").is_none(), "{path}: refused before any challenge");
    }

    // A tenth visible agent anchors today: the day's release is fixed, so
    // asking again shows nothing new (no window can be moved to isolate it).
    let tenth = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    t.wait_for_fold(11).await;
    observe(&t, &observer, "GET", "/v1/ara/environment", None, None).await.assert_error(404, "DATA_UNAVAILABLE");
    assert_eq!(observations(&t).await, 0, "refusals are not observations");

    // The next day's window holds ten agents: released, and paid (1 DAC, never Trial).
    t.clock.advance(Duration::days(1));
    let environment = paid(&t, &observer, "GET", "/v1/ara/environment", None, "1000").await;
    let body = &environment.json;
    assert_eq!((body["agent_count"].as_i64(), body["dd_count"].as_i64()), (Some(10), Some(10)), "{body}");
    assert_eq!(body["action_type_distribution"], json!({ "execute": 10 }));
    assert_eq!(body["retention_distribution"], json!({ "short": 10 }));
    assert_eq!(body["dac_charged"], 1);
    assert_eq!(body["period"]["window_days"], 30);
    assert_eq!(body["privacy"]["k"], 10);
    assert!(!environment.text.contains(&tenth.id) && !environment.text.contains("dd_id"), "counts only: {}", environment.text);
    // Asked again the same day: the same release, paid again.
    let again = paid(&t, &observer, "GET", "/v1/ara/environment/summary", None, "1000").await;
    assert_eq!(again.json["action_type_distribution"], body["action_type_distribution"]);
    assert_eq!(again.json["privacy"]["released_at"], body["privacy"]["released_at"], "one release per window");

    let density = paid(&t, &observer, "GET", "/v1/ara/environment/density", None, "1000").await;
    assert_eq!(density.json["activity"], json!([{ "declarations": "1", "agents": 10 }]));
    let ee = paid(&t, &observer, "GET", "/v1/ara/pattern/ee-distribution", None, "1000").await;
    assert_eq!(ee.json["distributions"]["retention"], json!({ "short": 10 }));
    assert_eq!(ee.json["distributions"]["preset"], json!({ "EE_basic": 10 }));
    let actions = paid(&t, &observer, "GET", "/v1/ara/pattern/action-type", None, "1000").await;
    assert_eq!(actions.json["distributions"]["selection_state"], json!({ "SELECTED": 10 }));
    // The market has no activity: refused for free.
    observe(&t, &observer, "GET", "/v1/ara/environment/tsl", None, None).await.assert_error(404, "DATA_UNAVAILABLE");

    // Every paid observation is logged with its payment and its usage.
    assert_eq!(t.scalar("select count(*) from ara_observation where payment_id is not null").await, 5);
    let usage = t.scalar("select count(*) from usage_entry where subject_domain = 'ara_observation' and amount_milli = 1000").await;
    assert_eq!(usage, 5);
}

async fn checks_run_in_order_and_refusals_cost_nothing(backend: Backend) {
    // An operator DAB of 4 DAC: a 5 DAC observation passes it, a 3 DAC one does not.
    let options = Options { privacy: Privacy::Exact, dab_default: anchor_domain::MilliDac::from_dac(4), ..Default::default() };
    let t = TestServer::with(backend, options).await;
    let observer = t.register().await;
    let hidden = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    let empty = t.register().await;
    t.call("PUT", "/v1/agent/disclosure", Some(&empty.token), Some(&json!({ "disclosure_level": "full" }))).await;
    let open = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    t.call("PUT", "/v1/agent/disclosure", Some(&open.token), Some(&json!({ "disclosure_level": "full" }))).await;
    t.call("PUT", "/v1/agent/disclosure", Some(&hidden.token), Some(&json!({ "disclosure_level": "none" }))).await;
    t.wait_for_fold(2).await;
    let profile = |id: &str, query: &str| format!("/v1/ara/agent/{id}/profile{query}");

    // 1. 400 first: a bad level or premium source, even for an agent that does not exist.
    let missing = uuid::Uuid::new_v4().to_string();
    observe(&t, &observer, "GET", &profile(&missing, "?resolution_level=9"), None, None).await.assert_error(400, "INVALID_VALUE");
    observe(&t, &observer, "GET", &profile(&missing, "?premium_source=gift"), None, None).await.assert_error(400, "INVALID_ENUM");
    observe(&t, &observer, "GET", &profile("not-an-id", ""), None, None).await.assert_error(400, "INVALID_UUID");
    // 2. 404 for an agent that does not exist.
    observe(&t, &observer, "GET", &profile(&missing, ""), None, None).await.assert_error(404, "AGENT_NOT_FOUND");
    // 3. 403 for a disclosure cap, before looking at its data.
    observe(&t, &observer, "GET", &profile(&hidden.id, ""), None, None).await.assert_error(403, "DISCLOSURE_CAP_EXCEEDED");
    // 4. 404 when there is nothing to observe.
    observe(&t, &observer, "GET", &profile(&empty.id, ""), None, None).await.assert_error(404, "DATA_UNAVAILABLE");
    // 5. 400 when Earned should pay a surcharge it cannot.
    observe(&t, &observer, "GET", &profile(&open.id, "?resolution_level=2&premium_source=earned"), None, None)
        .await
        .assert_error(400, "INSUFFICIENT_DAC");
    // Nothing was charged or logged for any of these.
    assert_eq!((observations(&t).await, payments(&t).await), (0, 0));

    // 6. the DAB, before the challenge: 5 DAC would pass the 4 DAC cap.
    observe(&t, &observer, "GET", &profile(&open.id, "?resolution_level=2"), None, None).await.assert_error(403, "DAB_LIMIT_REACHED");
    // 7. then the challenge: 3 DAC at level 1, for the observed agent's own path.
    let challenge = challenge_of(&observe(&t, &observer, "GET", &profile(&open.id, ""), None, None).await);
    assert_eq!(challenge["accepts"][0]["amount"], "3000");
    assert!(challenge["resource"]["url"].as_str().unwrap().ends_with(&format!("/v1/ara/agent/{}/profile", open.id)));
    assert_eq!((observations(&t).await, payments(&t).await), (0, 0), "a challenge records nothing");

    // 8. With Earned DAC held, it pays the surcharge and x402 the base: the
    // challenge (and the DAB) see the 3 DAC base alone, the answer the 5 DAC in all.
    let observer_id = uuid::Uuid::parse_str(&observer.id).unwrap();
    let now = t.clock.now();
    t.store
        .credit_earned(observer_id, anchor_domain::MilliDac::from_dac(40), "tool sale", None, now + Duration::days(365), now)
        .await
        .unwrap();
    let answer = paid(&t, &observer, "GET", &profile(&open.id, "?resolution_level=2&premium_source=earned"), None, "3000").await;
    assert_eq!(answer.json["dac_charged"], 5);
    assert_eq!(t.get("/v1/earned-dac/balance", Some(&observer.token)).await.json["earned_balance"], 38);
    let spend = t.get("/v1/dur/summary", Some(&observer.token)).await.json;
    let sources = &spend["dac_spend"]["by_source"];
    assert_eq!((sources["earned"].clone(), sources["external"].clone(), spend["dac_spend"]["ara"].clone()), (json!(2), json!(3), json!(5)));
    assert_eq!(spend["ara_observations"]["earned_dac"], 2);
}

async fn disclosure_caps_each_level_and_demotion_shows_to_the_agent_only(backend: Backend) {
    let t = exact(backend).await;
    let observer = t.register().await;
    let mut targets = Vec::new();
    for level in ["none", "summary", "detailed", "full"] {
        let agent = t.anchored_agent(json!({ "ee_preset": "EE_standard" })).await;
        t.call("PUT", "/v1/agent/disclosure", Some(&agent.token), Some(&json!({ "disclosure_level": level }))).await;
        targets.push((level, agent));
    }
    t.wait_for_fold(4).await;
    for (level, agent) in &targets {
        let cap = match *level {
            "none" => 0,
            "summary" => 1,
            "detailed" => 2,
            _ => 3,
        };
        for asked in 1..=3 {
            let path = format!("/v1/ara/agent/{}/ee-pattern?resolution_level={asked}", agent.id);
            let reply = observe(&t, &observer, "GET", &path, None, None).await;
            if asked <= cap {
                assert_eq!(reply.status.as_u16(), 402, "{level} at {asked}: {}", reply.text);
            } else {
                reply.assert_error(403, "DISCLOSURE_CAP_EXCEEDED");
            }
        }
    }

    // The agent itself: free at every level, with what only it may see.
    let (_, me) = &targets[0];
    for (route, field) in [("profile", "demotion_stats"), ("ee-pattern", "retention_distribution_effective")] {
        for level in 1..=3 {
            let own = observe(&t, me, "GET", &format!("/v1/ara/agent/{}/{route}?resolution_level={level}", me.id), None, None).await;
            assert_eq!(own.status.as_u16(), 200, "{}", own.text);
            assert_eq!(own.json["dac_charged"], 0);
            assert_eq!(own.json["observed_as"], "self");
            assert!(own.json.get(field).is_some(), "{route}: {field} for the agent itself: {}", own.text);
        }
    }
    let own_timeline = observe(&t, me, "GET", &format!("/v1/ara/agent/{}/timeline?resolution_level=3", me.id), None, None).await;
    let items = own_timeline.json["items"].as_array().unwrap();
    assert_eq!(items.len(), 30);
    assert!(items.iter().all(|i| i.get("retention_demotion").is_some()));
    assert_eq!(items.last().unwrap()["dd_count"], 1, "today's declaration is in today's bucket");
    let own_profile = observe(&t, me, "GET", &format!("/v1/ara/agent/{}/profile?resolution_level=3", me.id), None, None).await;
    assert_eq!(own_profile.json["dd_count"], 1);
    assert_eq!(own_profile.json["distributions"]["retention"], json!({ "medium": 1 }));
    assert!(own_profile.headers.get("payment-response").is_none(), "free answers settle nothing");
    assert_eq!(observations(&t).await, 8, "free observations are logged too");
    assert_eq!(payments(&t).await, 0);

    // Another agent (full disclosure): paid, and the demotion fields are absent, not null.
    let (_, open) = &targets[3];
    let profile = paid(&t, &observer, "GET", &format!("/v1/ara/agent/{}/profile?resolution_level=3", open.id), None, "7000").await;
    assert_eq!(profile.json["observed_as"], "other");
    assert_eq!(profile.json["dac_charged"], 7);
    assert!(profile.json.get("demotion_stats").is_none(), "{}", profile.text);
    let timeline = paid(&t, &observer, "GET", &format!("/v1/ara/agent/{}/timeline", open.id), None, "3000").await;
    assert_eq!(timeline.json["granularity"], "month");
    assert!(timeline.json["items"].as_array().unwrap().iter().all(|i| i.get("retention_demotion").is_none()));
    let pattern = paid(&t, &observer, "GET", &format!("/v1/ara/agent/{}/ee-pattern?resolution_level=2", open.id), None, "5000").await;
    assert!(pattern.json.get("retention_distribution_effective").is_none(), "{}", pattern.text);
    assert_eq!(pattern.json["distributions"]["integrity"], json!({ "basic": 1 }));
}

async fn comparisons_meta_observation_and_the_legacy_query(backend: Backend) {
    let t = exact(backend).await;
    let me = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    let other = t.anchored_agent(json!({ "ee_preset": "EE_high" })).await;
    t.call("PUT", "/v1/agent/disclosure", Some(&other.token), Some(&json!({ "disclosure_level": "detailed" }))).await;
    // Branch-1 decisions with templates for the anomaly comparison.
    let mut mine = Vec::new();
    for (scale, class) in [(10, "payment"), (20, "payment"), (90, "resource_transfer")] {
        let mut body = create_body(json!({ "ee_preset": "EE_basic" }));
        body["content_inclusion_flag"] = json!(1);
        body["template"] = json!({ "decision_class": class, "decision_scale_value": scale, "decision_scale_unit": "USDC" });
        let created = t.post("/v1/dd/create", Some(&me.token), &body).await;
        let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
        assert_eq!(t.confirm(&me, &dd_id).await.status.as_u16(), 200);
        mine.push(dd_id);
    }
    t.wait_for_fold(5).await;

    // pattern/compare: 2 to 10 agents, levels 1 and 2, never Earned.
    let compare = |query: &str| format!("/v1/ara/pattern/compare?agents={},{}{query}", me.id, other.id);
    observe(&t, &me, "GET", &compare("&resolution_level=3"), None, None).await.assert_error(400, "INVALID_VALUE");
    observe(&t, &me, "GET", &compare("&premium_source=earned"), None, None).await.assert_error(400, "INVALID_VALUE");
    observe(&t, &me, "GET", &format!("/v1/ara/pattern/compare?agents={}", me.id), None, None).await.assert_error(400, "INVALID_VALUE");
    observe(&t, &me, "GET", "/v1/ara/pattern/compare", None, None).await.assert_error(400, "MISSING_FIELD");
    let compared = paid(&t, &me, "GET", &compare("&resolution_level=2"), None, "2000").await;
    assert_eq!(compared.json["agents"].as_array().unwrap().len(), 2);
    assert_eq!(compared.json["agents"][1]["distributions"]["retention"], json!({ "long": 1 }));

    // anomaly-compare: own decisions only, two in the sample at least.
    let anomaly = |dd: &str, days: &str| format!("/v1/ara/anomaly-compare?dd_id={dd}{days}");
    observe(&t, &me, "GET", "/v1/ara/anomaly-compare", None, None).await.assert_error(400, "MISSING_FIELD");
    observe(&t, &me, "GET", &anomaly(&uuid::Uuid::new_v4().to_string(), ""), None, None).await.assert_error(404, "DD_NOT_FOUND");
    observe(&t, &other, "GET", &anomaly(&mine[2], ""), None, None).await.assert_error(403, "FORBIDDEN");
    observe(&t, &me, "GET", &anomaly(&mine[2], "&period_days=0"), None, None).await.assert_error(400, "INVALID_VALUE");
    let result = paid(&t, &me, "GET", &anomaly(&mine[2], ""), None, "5000").await;
    assert_eq!(result.json["sample_size"], 2);
    assert_eq!(result.json["band_position"]["decision_scale"], "outlier", "{}", result.text);
    assert_eq!(result.json["band_position"]["decision_class"], "outlier");
    assert_eq!(result.json["band_position"]["target_class"], Value::Null, "no target_class anywhere");
    assert_eq!(result.json["bands"]["decision_scale"], json!({ "unit": "USDC", "min": 10.0, "max": 20.0 }));
    let within = paid(&t, &me, "GET", &anomaly(&mine[1], ""), None, "5000").await;
    assert_eq!(within.json["band_position"]["decision_scale"], "within_band");

    // evidence-report: own decisions, 10 DAC, audience external.
    observe(&t, &other, "GET", &format!("/v1/ara/evidence-report?dd_id={}", mine[0]), None, None).await.assert_error(403, "FORBIDDEN");
    let evidence = paid(&t, &me, "GET", &format!("/v1/ara/evidence-report?dd_id={}", mine[0]), None, "10000").await;
    assert_eq!(evidence.json["report"]["audience"], "external");
    assert_eq!(evidence.json["report"]["dac_charged"], 10);
    assert_eq!(evidence.json["decision"]["dd_id"], mine[0]);

    // The deprecated query maps to the tiered observations.
    let own = observe(&t, &me, "POST", "/v1/ara/query", None, Some(&json!({ "agent_id": me.id, "query_type": "summary" }))).await;
    assert_eq!(own.status.as_u16(), 200, "{}", own.text);
    assert_eq!(own.json["dac_charged"], 0);
    assert_eq!(own.json["result"]["resolution_level"], 1);
    let detail = json!({ "agent_id": other.id, "query_type": "detail" });
    let challenge = challenge_of(&observe(&t, &me, "POST", "/v1/ara/query", None, Some(&detail)).await);
    assert_eq!(challenge["accepts"][0]["amount"], "5000", "priced as a level-2 timeline");
    assert!(challenge["resource"]["url"].as_str().unwrap().ends_with("/v1/ara/query"));
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let answered = observe(&t, &me, "POST", "/v1/ara/query", Some(&payment), Some(&detail)).await;
    assert_eq!(answered.status.as_u16(), 200, "{}", answered.text);
    assert_eq!(answered.json["result"]["granularity"], "week");
    let full = json!({ "agent_id": other.id, "query_type": "period", "premium_source": "earned" });
    observe(&t, &me, "POST", "/v1/ara/query", None, Some(&full)).await.assert_error(400, "INSUFFICIENT_DAC");
}

async fn anomaly_bands_are_released_per_dimension(backend: Backend) {
    let t = exact(backend).await;
    let observer = t.register().await;
    // Ten agents, each with three branch-1 decisions whose templates are
    // shared (content_disclosure_scope public). The second (10) sits within
    // the band of the first (10); the third within [10, 10] for six agents,
    // outside it for four. Each agent counts once per dimension, in the
    // position it held most (a tie goes to outlier).
    for i in 0..10 {
        let agent = t.register().await;
        for scale in [10, 10, if i < 6 { 10 } else { 99 }] {
            let mut body = create_body(json!({ "ee_preset": "EE_basic", "content_disclosure_scope": "public" }));
            body["content_inclusion_flag"] = json!(1);
            body["template"] = json!({ "decision_class": "payment", "decision_scale_value": scale, "decision_scale_unit": "USDC" });
            let created = t.post("/v1/dd/create", Some(&agent.token), &body).await;
            assert_eq!(created.status.as_u16(), 201, "{}", created.text);
            assert_eq!(t.confirm(&agent, created.json["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
            t.clock.advance(Duration::seconds(1));
        }
    }
    t.wait_for_fold(30).await;
    t.clock.advance(Duration::days(1));
    observe(&t, &observer, "GET", "/v1/ara/environment-anomaly?period_days=10", None, None).await.assert_error(400, "INVALID_VALUE");
    observe(&t, &observer, "GET", "/v1/ara/environment-anomaly?dimension=mood", None, None).await.assert_error(400, "INVALID_ENUM");
    let released = paid(&t, &observer, "GET", "/v1/ara/environment-anomaly?period_days=7", None, "2000").await;
    let dimensions = &released.json["dimensions"];
    // The class (always payment), the time of day and the premium sat within
    // every agent's band: ten agents each. The scale splits six to four:
    // both groups are under k, so the dimension is not shown at all.
    for dimension in ["decision_class", "time_zone", "ee_resolution"] {
        assert_eq!(dimensions[dimension], json!({ "within_band": 10 }), "{dimension}: {}", released.text);
    }
    assert!(dimensions.get("decision_scale").is_none(), "groups of six and four stay hidden: {}", released.text);
    assert!(dimensions.get("target_class").is_none(), "no decision has a target class");
    let one = paid(&t, &observer, "GET", "/v1/ara/environment-anomaly?period_days=7&dimension=decision_class", None, "2000").await;
    assert_eq!(one.json["dimensions"].as_object().unwrap().len(), 1);
    observe(&t, &observer, "GET", "/v1/ara/environment-anomaly?period_days=7&dimension=decision_scale", None, None)
        .await
        .assert_error(404, "DATA_UNAVAILABLE");
}

/// With the default differential privacy, a large group is released with
/// noisy counts near the truth, a group under k never is, and the release
/// says what it spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_noisy_and_state_their_budget() {
    let t = TestServer::start(Backend::Sqlite).await;
    let observer = t.register().await;
    for i in 0..60 {
        let preset = if i < 55 { "EE_basic" } else { "EE_high" };
        t.anchored_agent(json!({ "ee_preset": preset })).await;
    }
    t.wait_for_fold(60).await;
    t.clock.advance(Duration::days(1));
    let released = paid(&t, &observer, "GET", "/v1/ara/pattern/ee-distribution", None, "1000").await;
    let retention = &released.json["distributions"]["retention"];
    let short = retention["short"].as_i64().expect("55 agents are released");
    assert!((short - 55).abs() <= 12, "a noisy count near 55: {short}");
    assert!(retention.get("long").is_none(), "five agents are never shown: {}", released.text);
    let privacy = &released.json["privacy"];
    assert_eq!(privacy["mechanism"], "discrete_laplace");
    assert_eq!(privacy["epsilon"], 8.0, "seven distributions and the gate at epsilon 1 each: {privacy}");
    assert!(privacy["delta"].as_f64().unwrap() <= 7e-6);
}

/// The portal's view: an owner reads its agent's own timeline and EE pattern
/// (its internal_only declarations included), for free, and that records no
/// observation; other owners' agents are refused.
async fn owners_see_their_agents_own_view_for_free(backend: Backend) {
    let t = exact(backend).await;
    let owner = t.owner("ara-view@example.com").await;
    let stranger = t.owner("ara-stranger@example.com").await;
    let mut agent = t.register().await;
    t.link(&owner, &mut agent).await;
    for ee in [json!({ "ee_preset": "EE_basic" }), json!({ "ee_preset": "EE_basic", "access_class": "internal_only" })] {
        let created = t.create(&agent, ee).await;
        assert_eq!(t.confirm(&agent, created["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    }
    t.wait_for_fold(2).await;

    let usage = t.scalar("select count(*) from usage_entry").await;
    let trial = t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"].clone();
    assert!(trial.is_number(), "{trial}");
    let path = format!("/dap/agent/{}/ara?resolution_level=3", agent.id);
    let view = t.as_owner(&owner, "GET", &path, None).await;
    assert_eq!(view.status.as_u16(), 200, "{}", view.text);
    let items = view.json["timeline"]["items"].as_array().unwrap();
    assert_eq!((items.len(), view.json["timeline"]["granularity"].as_str()), (30, Some("day")));
    assert_eq!(items.last().unwrap()["dd_count"], 2, "today's bucket holds both, the internal_only one included");
    assert_eq!(items.last().unwrap()["action_type_distribution"], json!({ "execute": 2 }));
    let pattern = &view.json["ee_pattern"];
    assert_eq!(pattern["distributions"]["access_class"], json!({ "internal_only": 1, "self_direct": 1 }));
    assert_eq!(pattern["retention_distribution_effective"], json!({ "short": 2 }));
    assert_eq!((view.json["timeline"]["dac_charged"].as_i64(), pattern["dac_charged"].as_i64()), (Some(0), Some(0)));
    // Twelve weeks by default.
    let weeks = t.as_owner(&owner, "GET", &format!("/dap/agent/{}/ara", agent.id), None).await;
    assert_eq!(weeks.json["timeline"]["items"].as_array().unwrap().len(), 12);
    assert_eq!(observations(&t).await, 0, "an owner looking is not an observation");
    assert_eq!((t.scalar("select count(*) from usage_entry").await, payments(&t).await), (usage, 0), "and costs nothing");
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], trial);

    t.as_owner(&owner, "GET", &format!("/dap/agent/{}/ara?resolution_level=4", agent.id), None).await.assert_error(400, "INVALID_VALUE");
    t.as_owner(&owner, "GET", "/dap/agent/not-a-uuid/ara", None).await.assert_error(400, "INVALID_UUID");
    t.as_owner(&stranger, "GET", &path, None).await.assert_error(403, "NOT_LINKED");
    let bad_level = format!("/dap/agent/{}/ara?resolution_level=0", agent.id);
    t.as_owner(&stranger, "GET", &bad_level, None).await.assert_error(400, "INVALID_VALUE");
    let unknown = format!("/dap/agent/{}/ara", uuid_of_nobody());
    t.as_owner(&owner, "GET", &unknown, None).await.assert_error(403, "NOT_LINKED");
    assert_eq!(t.get(&path, None).await.status.as_u16(), 401);
}

fn uuid_of_nobody() -> String {
    "00000000-0000-4000-8000-000000000000".to_string()
}

/// The ε ledger: every release of a kind charges each day of its window with
/// what it spent, and a release that would take a day past the budget is not
/// cut (404, free). A release says what the ledger stood at once it was
/// stored, and the operator's metrics say it too. Other kinds keep their own.
async fn the_epsilon_ledger_holds_releases_to_the_budget(backend: Backend) {
    // ε = 5 per component: an environment release spends at most 4 × 5 = 20
    // (its gate, its declarations and two histograms); the budget lets one
    // release cover a day, not two.
    let privacy = Privacy::Noisy { epsilon: 5.0, delta: 1e-6, budget: 30.0 };
    let t = TestServer::with(backend, Options { privacy, ..Default::default() }).await;
    for _ in 0..20 {
        t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    }
    t.wait_for_fold(20).await;
    t.clock.advance(Duration::days(1));
    let observer = t.register().await;
    let first = paid(&t, &observer, "GET", "/v1/ara/environment", None, "1000").await;
    let privacy_view = &first.json["privacy"];
    let spent = privacy_view["epsilon_spent_on_window"].as_f64().expect("the ledger is shown");
    assert_eq!(privacy_view["epsilon_budget"], json!(30.0), "{}", first.text);
    // What this release spent, and what earlier releases of the kind (the
    // job's, on days with nothing to show yet: their gate) spent on its days.
    let epsilon = privacy_view["epsilon"].as_f64().unwrap();
    assert!(epsilon > 0.0 && epsilon <= 20.0 + 1e-9 && spent >= epsilon - 1e-9 && spent <= 30.0 + 1e-9, "{}", first.text);
    let metrics = t.get("/metrics", None).await.text;
    assert!(metrics.lines().any(|l| l.starts_with("anchor_ara_epsilon_spent{kind=\"environment\"}")), "{metrics}");
    // The next day's window shares 29 days with this one: 20 + 20 > 30.
    t.clock.advance(Duration::days(1));
    let refused = observe(&t, &observer, "GET", "/v1/ara/environment", None, None).await;
    refused.assert_error(404, "DATA_UNAVAILABLE");
    assert!(refused.text.contains("budget"), "{}", refused.text);
    let today = anchor_domain::ara::day_of(t.clock.now());
    let cut_today = format!("select count(*) from ara_release where kind = 'environment' and window_end = {today}");
    assert_eq!(t.scalar(&cut_today).await, 0, "not cut");
    // Each kind keeps a ledger of its own: nothing was spent on the
    // ee-distribution ledger, but its release could spend 8 × 5 = 40 at most
    // (a gate and seven distributions), more than the whole budget.
    let pattern = observe(&t, &observer, "GET", "/v1/ara/pattern/ee-distribution", None, None).await;
    pattern.assert_error(404, "DATA_UNAVAILABLE");
    assert!(pattern.text.contains("up to 40.00 epsilon") && pattern.text.contains("more than the whole"), "{}", pattern.text);
}

/// The settlement's transaction a paid answer reports in `PAYMENT-RESPONSE`.
fn settled_transaction(reply: &Reply) -> String {
    use base64::Engine;
    let header = reply.headers.get("payment-response").unwrap_or_else(|| panic!("no PAYMENT-RESPONSE: {}", reply.text));
    let decoded = base64::engine::general_purpose::STANDARD.decode(header.to_str().unwrap()).unwrap();
    let settled: Value = serde_json::from_slice(&decoded).unwrap();
    settled["transaction"].as_str().expect("a transaction").to_string()
}

/// Decision 0085 (FEATURES: a retry with the same payment, route and agent
/// resumes that payment): an observation asked again with the payment that
/// paid for it, by its agent, for the same request, is answered again with
/// that payment's settlement and charged once; sent many times at once, it
/// is charged once and never refused as unpaid. The same payment for
/// another request is still a duplicate (409), and another agent's a replay (402).
async fn a_payment_sent_again_resumes_the_observation_it_paid(backend: Backend) {
    let t = exact(backend).await;
    let me = t.register().await;
    let mut mine = Vec::new();
    for _ in 0..2 {
        let created = t.post("/v1/dd/create", Some(&me.token), &create_body(json!({ "ee_preset": "EE_basic" }))).await;
        let dd_id = created.json["dd_id"].as_str().unwrap().to_string();
        assert_eq!(t.confirm(&me, &dd_id).await.status.as_u16(), 200);
        mine.push(dd_id);
    }
    let report = |dd_id: &str| format!("/v1/ara/evidence-report?dd_id={dd_id}");
    let challenge = challenge_of(&observe(&t, &me, "GET", &report(&mine[0]), None, None).await);
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let first = observe(&t, &me, "GET", &report(&mine[0]), Some(&payment), None).await;
    assert_eq!(first.status.as_u16(), 200, "{}", first.text);
    // The client did not get that answer (it hung up, say) and sends the request again.
    let again = observe(&t, &me, "GET", &report(&mine[0]), Some(&payment), None).await;
    assert_eq!(again.status.as_u16(), 200, "{}", again.text);
    assert_eq!(again.json["decision"]["dd_id"], mine[0].as_str());
    assert_eq!(again.json["report"]["dac_charged"], first.json["report"]["dac_charged"]);
    assert_eq!(settled_transaction(&again), settled_transaction(&first));
    let charged = || async {
        (
            payments(&t).await,
            observations(&t).await,
            t.scalar("select count(*) from usage_entry where subject_domain = 'ara_observation'").await,
        )
    };
    assert_eq!(charged().await, (1, 1, 1));
    // Many at once: each answered, or told it is a duplicate while the first settles; never a second charge.
    let challenge = challenge_of(&observe(&t, &me, "GET", &report(&mine[1]), None, None).await);
    let payment_b = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let path_b = report(&mine[1]);
    let at_once = futures_util::future::join_all((0..8).map(|_| observe(&t, &me, "GET", &path_b, Some(&payment_b), None))).await;
    for reply in &at_once {
        match reply.status.as_u16() {
            200 => assert_eq!(reply.json["decision"]["dd_id"], mine[1].as_str()),
            409 => assert_eq!(reply.json["error_code"], "DUPLICATE_REQUEST", "{}", reply.text),
            _ => panic!("a payment sent many times at once: {} {}", reply.status, reply.text),
        }
    }
    assert!(at_once.iter().any(|r| r.status.as_u16() == 200));
    assert_eq!(charged().await, (2, 2, 2));
    // The same payment for another request is a duplicate of its purchase: it buys one report.
    observe(&t, &me, "GET", &report(&mine[1]), Some(&payment), None).await.assert_error(409, "DUPLICATE_REQUEST");
    // Another agent sending it is a replay.
    let other = t.register().await;
    let created = t.post("/v1/dd/create", Some(&other.token), &create_body(json!({ "ee_preset": "EE_basic" }))).await;
    let theirs = created.json["dd_id"].as_str().unwrap().to_string();
    assert_eq!(t.confirm(&other, &theirs).await.status.as_u16(), 200);
    let stolen = observe(&t, &other, "GET", &report(&theirs), Some(&payment), None).await;
    assert_eq!(stolen.status.as_u16(), 402, "{}", stolen.text);
    assert_eq!(charged().await, (2, 2, 2));
}
