//! What an operator reads off a running host: `/metrics` after a scripted
//! workload adds up to what the workload did, and every answer names its
//! request id.

use std::collections::BTreeMap;

use anchor_domain::Clock;
use anchor_tests::*;
use reqwest::StatusCode;
use serde_json::json;

/// One scraped sample per `name{labels}`, labels in the order served.
fn scrape(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
        samples.insert(series.to_string(), value.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {line}")));
    }
    samples
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no sample {series}; served: {:#?}", samples.keys().collect::<Vec<_>>()))
}

/// The sum of every sample of `name` whose labels include all of `labels`.
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| series.split('{').next() == Some(name) && labels.iter().all(|l| series.contains(l)))
        .map(|(_, v)| v)
        .sum()
}

async fn metrics_counters_add_up_to_the_workload(backend: Backend) {
    let t = TestServer::with(backend, Options { rate_limit: 60, ..Default::default() }).await;
    // The workload: 3 agents, 5 declarations created on Trial, 4 confirmed,
    // one unknown route, one unauthenticated call.
    let mut agents = Vec::new();
    for _ in 0..3 {
        agents.push(t.register().await);
    }
    let mut created = Vec::new();
    for i in 0..5 {
        created.push(t.create(&agents[i % 3], json!({ "ee_preset": "EE_basic" })).await);
    }
    for (i, dd) in created.iter().take(4).enumerate() {
        let reply = t.confirm(&agents[i % 3], dd["dd_id"].as_str().unwrap()).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    t.get("/no/such/route", None).await.assert_error(404, "NOT_FOUND");
    assert_eq!(t.get("/v1/dd/list", None).await.status, StatusCode::UNAUTHORIZED);
    t.wait_for_log(4).await;
    // One observation paid over x402: a verification and a settlement.
    t.call("PUT", "/v1/agent/disclosure", Some(&agents[1].token), Some(&json!({ "disclosure_level": "full" }))).await;
    t.wait_for_fold(4).await;
    crate::ara::paid(&t, &agents[0], "GET", &format!("/v1/ara/agent/{}/profile", agents[1].id), None, "3000").await;

    let reply = t.get("/metrics", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.headers["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"), "{:?}", reply.headers);
    assert!(reply.text.trim_end().ends_with("# EOF"), "an OpenMetrics exposition ends with # EOF");
    let m = scrape(&reply.text);

    // Requests by route template, method and status.
    let requests = |route: &str, method: &str, status: u16| {
        value(&m, &format!("anchor_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}"))
    };
    assert_eq!(requests("/v1/agent/register", "POST", 201), 3.0);
    assert_eq!(requests("/v1/dd/create", "POST", 201), 5.0);
    assert_eq!(requests("/v1/dd/confirm", "POST", 200), 4.0);
    assert_eq!(requests("unmatched", "GET", 404), 1.0);
    assert_eq!(requests("/v1/dd/list", "GET", 401), 1.0);
    // No path with an id in it became a label.
    assert!(!reply.text.contains(created[0]["dd_id"].as_str().unwrap()));
    // The latency histogram counted the same requests.
    assert_eq!(value(&m, "anchor_http_request_duration_seconds_count{route=\"/v1/dd/create\",method=\"POST\"}"), 5.0);

    // What the use cases did.
    assert_eq!(value(&m, "anchor_declarations_created_total"), 5.0);
    assert_eq!(value(&m, "anchor_declarations_confirmed_total"), 4.0);
    assert_eq!(value(&m, "anchor_dac_debits_total{source=\"trial\"}"), 5.0);
    // A replayed request_id is answered with the earlier record and debits nothing.
    let body = create_body(json!({ "ee_preset": "EE_basic" }));
    assert_eq!(t.post("/v1/dd/create", Some(&agents[0].token), &body).await.status, StatusCode::CREATED);
    let replayed = t.post("/v1/dd/create", Some(&agents[0].token), &body).await;
    assert!(replayed.status.is_success(), "{}", replayed.text);
    let m = scrape(&t.get("/metrics", None).await.text);
    assert_eq!(value(&m, "anchor_dac_debits_total{source=\"trial\"}"), 6.0, "one debit for two answers");
    assert_eq!(value(&m, "anchor_declarations_created_total"), 6.0);
    let price = t.scalar("select cast(sum(dac_amount_milli) as bigint) from declaration").await;
    assert_eq!(value(&m, "anchor_dac_debited_millidac_total{source=\"trial\"}"), price as f64, "the Trial debits add up to the prices");

    // The log: its size, nothing pending, checkpoints signed by this host's jobs.
    assert_eq!(value(&m, "anchor_log_size"), 4.0);
    assert_eq!(value(&m, "anchor_log_pending_leaves"), 0.0);
    let signed = value(&m, "anchor_log_checkpoints_signed_total");
    let stored = t.scalar("select count(*) from log_checkpoint").await as f64;
    assert!(signed >= 1.0 && signed == stored, "signed {signed}, stored {stored}");
    assert!(value(&m, "anchor_log_seconds_since_checkpoint") >= 0.0);
    assert!(value(&m, "anchor_job_runs_total{job=\"log\"}") >= 1.0);
    assert_eq!(sum(&m, "anchor_job_failures_total", &[]), 0.0);

    assert_eq!(value(&m, "anchor_x402_verifications_total{outcome=\"verified\"}"), 1.0);
    assert_eq!(value(&m, "anchor_x402_settlements_total{outcome=\"settled\"}"), 1.0);
    assert_eq!(requests("/v1/ara/agent/{agent_id}/profile", "GET", 402), 1.0, "the challenge before it");

    // The store and its pool.
    assert!(value(&m, "anchor_store_statement_duration_seconds_count{operation=\"insert\",table=\"declaration\"}") >= 5.0);
    assert!(value(&m, "anchor_db_pool_connections{state=\"max\"}") >= 1.0);
    assert!(m.contains_key("anchor_db_pool_acquire_waits_total"));

    // Pricing ran in its sandbox for every create; nothing failed.
    assert!(value(&m, "anchor_plugin_call_duration_seconds_count{plugin=\"pricing\",call=\"quote\"}") >= 5.0);
    assert_eq!(sum(&m, "anchor_plugin_call_failures_total", &[]), 0.0);
    assert_eq!(value(&m, "anchor_rate_limit_refusals_total"), 0.0);

    // Past the per-client limit (60 a minute here): refusals are counted.
    let mut refused = 0;
    for _ in 0..70 {
        if t.get("/v1/dd/create", None).await.status == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert!(refused > 0);
    t.clock.advance(chrono::Duration::seconds(61));
    let m = scrape(&t.get("/metrics", None).await.text);
    assert_eq!(value(&m, "anchor_rate_limit_refusals_total"), f64::from(refused));
    assert_eq!(sum(&m, "anchor_http_requests_total", &["status=\"429\""]), f64::from(refused));
}

async fn every_answer_names_its_request_id(backend: Backend) {
    let t = TestServer::start(backend).await;
    let reply = t.call_with("GET", "/health", &[("x-request-id", "probe-42.a_b")], None).await;
    assert_eq!(reply.headers["x-request-id"], "probe-42.a_b", "a plain client id is kept");
    for forged in ["has space", "line\nbreak", &"x".repeat(65), ""] {
        let Ok(value) = reqwest::header::HeaderValue::from_str(forged) else { continue };
        let reply = t.http.get(t.url("/health")).header("x-request-id", value).send().await.unwrap();
        let id = reply.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_ne!(id, forged);
        assert_eq!(id.len(), 32, "a fresh id replaces {forged:?}");
    }
    let error = t.get("/no/such/route", None).await;
    assert_eq!(error.headers["x-request-id"].len(), 32, "errors carry one too");
}

async fn metrics_stay_off_the_api_unless_asked(backend: Backend) {
    // The binary's default; tests turn it on through their settings.
    let t = TestServer::start(backend).await;
    let state = t.state.clone().with_metrics_on_api(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(anchor_server::serve_listener(listener, state.clone()));
    let reply = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(reply.status(), StatusCode::NOT_FOUND);
    // The separate listener serves it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_base = format!("http://{}", listener.local_addr().unwrap());
    let metrics = tokio::spawn(anchor_server::listener::serve(
        listener,
        anchor_server::http::observe::metrics_router(state),
        Default::default(),
        std::future::pending(),
    ));
    let reply = reqwest::get(format!("{metrics_base}/metrics")).await.unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    assert!(reply.text().await.unwrap().contains("anchor_http_requests_total"));
    server.abort();
    metrics.abort();
}

/// A request keeps the pricing generation it started with when another comes
/// into force meanwhile; outside it, the new one prices. A publication for a
/// time already taken is refused, and a component that does not load is left
/// out without stopping the others.
async fn a_request_keeps_the_generation_it_started_with(backend: Backend) {
    use anchor_domain::pricing::Pricing;
    let t = TestServer::with(backend, Options { jobs: false, ..Default::default() }).await;
    let wasm = component_bytes("pricing-alt");
    let alt = load_component("pricing-alt");
    let (now, at) = (t.clock.now(), t.clock.now() + chrono::Duration::seconds(10));
    assert!(anchor_app::pricing::publish(t.store.as_ref(), alt.as_ref(), &wasm, at, now).await.unwrap());
    assert!(!anchor_app::pricing::publish(t.store.as_ref(), alt.as_ref(), &wasm, at, now).await.unwrap(), "one publication per instant");
    // A broken component, published later (written directly: publish's checks would refuse it).
    let broken = anchor_ports::PricingActivation {
        sha256: "0".repeat(64),
        version: "broken".into(),
        interface: "anchor:pricing@1.1.0".into(),
        activate_at: at + chrono::Duration::seconds(10),
        published_at: now,
    };
    assert!(t.store.publish_pricing(&broken, b"not a component").await.unwrap());
    let loader: anchor_app::pricing::Loader = std::sync::Arc::new(|wasm: &[u8]| {
        Ok(anchor_plugin_host::WasmPricing::load(engine(), wasm, anchor_plugin_host::Limits::PRICING)? as std::sync::Arc<dyn Pricing>)
    });
    assert_eq!(t.state.app.schedule.refresh(t.store.as_ref(), &loader).await.unwrap(), 1, "the good one loads, the broken one is left out");
    let pricing = t.state.app.pricing.clone();
    let scope = pricing.presets().unwrap()[0].scope();
    assert_eq!(pricing.generation().version, "v1.3.0");
    // Operators and agents see what is in force and what comes next.
    let at_text = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let current = t.get("/v1/pricing/current", None).await.json;
    assert_eq!(current["pricing_version"], "v1.3.0");
    assert_eq!(current["next"]["pricing_version"], "v9.0.0-test");
    assert_eq!(current["next"]["component_sha256"], alt.generation().sha256.as_str());
    assert_eq!(current["next"]["effective_from"], at.date_naive().to_string().as_str(), "a date, as for the generation in force");
    assert_eq!(current["next"]["effective_at"], at_text.as_str());
    assert!(current["effective_from"].as_str().is_some_and(|d| d.len() == 10), "{current}");
    let health = t.get("/health", None).await.json;
    assert_eq!(health["pricing"]["pricing_version"], "v1.3.0");
    assert_eq!(health["pricing"]["effective_from"], serde_json::Value::Null, "the host's own generation");
    assert_eq!(health["pricing"]["next"], current["next"]);
    // A declaration created before the switch and confirmed after it.
    let early_agent = t.register().await;
    let early = t.create(&early_agent, json!({ "ee_preset": "EE_basic" })).await;
    let early_id = early["dd_id"].as_str().unwrap().to_string();
    let inside = t
        .state
        .app
        .schedule
        .in_one_generation(async {
            t.clock.advance(chrono::Duration::seconds(11));
            (pricing.generation().version.clone(), pricing.quote(scope).unwrap().total.milli())
        })
        .await;
    assert_eq!(inside, ("v1.3.0".to_string(), 10_000), "the request's generation, though the clock passed the activation");
    assert_eq!((pricing.generation().version.clone(), pricing.quote(scope).unwrap().total.milli()), ("v9.0.0-test".to_string(), 20_000));
    // Past the broken one's time the good one stays in force.
    t.clock.advance(chrono::Duration::seconds(20));
    assert_eq!(pricing.generation().version, "v9.0.0-test");
    // Over HTTP, a create now records the new generation and its price.
    let agent = t.register().await;
    let late = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    let late_id = late["dd_id"].as_str().unwrap().to_string();
    let recorded = "select pricing_version || ' ' || dac_amount_milli from declaration order by anchored_at";
    assert_eq!(t.strings(recorded).await, vec!["v1.3.0 10000".to_string(), "v9.0.0-test 20000".to_string()]);
    let current = t.get("/v1/pricing/current", None).await.json;
    assert_eq!(
        (current["pricing_version"].as_str(), current["effective_from"].as_str(), current["effective_at"].as_str()),
        (Some("v9.0.0-test"), Some(at.date_naive().to_string().as_str()), Some(at_text.as_str()))
    );
    assert_eq!(current["next"], serde_json::Value::Null, "the broken publication never loaded, so nothing is next");
    // Confirmed after the switch, the early one keeps its price and its
    // generation, and so does the charge its confirmation records.
    for (agent, id) in [(&early_agent, &early_id), (&agent, &late_id)] {
        assert_eq!(t.confirm(agent, id).await.status, StatusCode::OK);
    }
    assert_eq!(t.strings(recorded).await, vec!["v1.3.0 10000".to_string(), "v9.0.0-test 20000".to_string()]);
    let priced_by = |id: &str| {
        let subject = anchor_ports::Subject::declaration(uuid::Uuid::parse_str(id).unwrap());
        let store = t.store.clone();
        async move { store.usage_for(subject).await.unwrap().into_iter().map(|u| (u.amount.milli(), u.priced_by.unwrap())).collect::<Vec<_>>() }
    };
    let bundled =
        anchor_plugin_host::WasmPricing::load(engine(), anchor_plugin_host::DEFAULT_PRICING_WASM, anchor_plugin_host::Limits::PRICING)
            .unwrap();
    assert_eq!(
        priced_by(&early_id).await,
        vec![(10_000, anchor_ports::PricedBy { version: "v1.3.0".into(), sha256: bundled.generation().sha256.clone() })]
    );
    assert_eq!(
        priced_by(&late_id).await,
        vec![(20_000, anchor_ports::PricedBy { version: "v9.0.0-test".into(), sha256: alt.generation().sha256.clone() })]
    );
}

both_backends!(
    ready_only_on_a_writable_database_at_this_builds_schema,
    a_request_keeps_the_generation_it_started_with,
    metrics_counters_add_up_to_the_workload,
    every_answer_names_its_request_id,
    metrics_stay_off_the_api_unless_asked,
    feature_switches_apply_while_serving
);

/// A switch stored in the database (what `anchor feature off` writes) is in
/// force at the host's next refresh: its routes answer 503 and the agent card
/// names it; switched on again, they answer as before. A name this build does
/// not know (a newer build's) changes nothing.
async fn feature_switches_apply_while_serving(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.register().await;
    let status = "/v1/retention/indefinite/status";
    assert_eq!(t.get(status, Some(&agent.token)).await.status, StatusCode::OK);
    let card = "/.well-known/agent-card.json";
    assert_eq!(t.get(card, None).await.json["x-anchor"]["features_off"], json!([]));

    let switch = |name: &'static str, on: bool| {
        let (store, now) = (t.store.clone(), t.clock.now());
        async move { anchor_ports::FeatureStore::set_feature_switch(store.as_ref(), name, on, now).await.unwrap() }
    };
    switch("retention", false).await;
    assert!(anchor_app::features::refresh(&t.state.app).await.unwrap(), "the refresh saw the switch");
    t.get(status, Some(&agent.token)).await.assert_error(503, "FEATURE_NOT_AVAILABLE");
    t.post("/v1/retention/indefinite/subscribe", Some(&agent.token), &json!({})).await.assert_error(503, "FEATURE_NOT_AVAILABLE");
    assert_eq!(t.get(card, None).await.json["x-anchor"]["features_off"], json!(["retention"]));
    // Indefinite retention cannot be declared while it is off.
    let mut ee = basic_axes();
    ee["ee_retention_period"] = json!("indefinite");
    let refused = t.post("/v1/dd/create", Some(&agent.token), &create_body(ee)).await;
    refused.assert_error(403, "INDEFINITE_SUBSCRIPTION_REQUIRED");
    assert!(refused.text.contains("switched off"), "{}", refused.text);

    switch("future_area", false).await;
    assert!(!anchor_app::features::refresh(&t.state.app).await.unwrap(), "an unknown name changes nothing");
    switch("retention", true).await;
    assert!(anchor_app::features::refresh(&t.state.app).await.unwrap());
    assert_eq!(t.get(status, Some(&agent.token)).await.status, StatusCode::OK);
    assert_eq!(t.get(card, None).await.json["x-anchor"]["features_off"], json!([]));

    // agent_owners, which --dap-no-agent-owners also switches.
    switch("agent_owners", false).await;
    anchor_app::features::refresh(&t.state.app).await.unwrap();
    t.post("/dap/auth/agent-login", Some(&agent.token), &json!({})).await.assert_error(503, "FEATURE_NOT_AVAILABLE");
}

/// `GET /ready` (what a load balancer asks): ready on a writable database
/// holding this build's migrations; a newer migration makes the host not
/// ready, with Retry-After, unless its rule lets this build serve beside it.
/// `/health` stays a liveness check throughout. (A standby is not writable:
/// `replica::observations_read_from_a_streaming_replica_and_fall_back_when_it_stops`.)
async fn ready_only_on_a_writable_database_at_this_builds_schema(backend: Backend) {
    let t = TestServer::start(backend).await;
    let ready = t.get("/ready", None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text);
    assert_eq!(ready.json["status"], "ready");
    assert_eq!(ready.json["writable"], true);
    assert_eq!(ready.json["migrations_applied"], true);
    assert_eq!(ready.json["storage"], if backend == Backend::Sqlite { "sqlite" } else { "postgres" });

    let checksum = match backend {
        Backend::Sqlite => "X'00'",
        Backend::Postgres => "'\\x00'::bytea",
    };
    let newer = format!(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time) \
         values (99999, 'a newer build', true, {checksum}, 0) returning version"
    );
    assert_eq!(t.scalar(&newer).await, 99999);
    let not_ready = t.get("/ready", None).await;
    assert_eq!(not_ready.status, StatusCode::SERVICE_UNAVAILABLE, "{}", not_ready.text);
    assert_eq!(not_ready.json["status"], "not_ready");
    assert_eq!(not_ready.json["migrations_applied"], false);
    assert_eq!(not_ready.json["storage_reachable"], true);
    assert_eq!(not_ready.headers["retry-after"], "5");
    assert_eq!(t.get("/health", None).await.status, StatusCode::OK, "alive all the same");

    // Recorded as an expand migration (decision 0067): this build serves
    // beside it, and says the schema is ahead.
    let expand = "insert into migration_rules (version, runs_beside_builds_from) values (99999, 0) returning version";
    assert_eq!(t.scalar(expand).await, 99999);
    let beside = t.get("/ready", None).await;
    assert_eq!(beside.status, StatusCode::OK, "{}", beside.text);
    assert_eq!((&beside.json["migrations_applied"], &beside.json["schema_ahead"]), (&json!(true), &json!(true)));
    // A contract migration for builds from it on: not this one.
    let contract = "update migration_rules set runs_beside_builds_from = 99999 where version = 99999 returning version";
    assert_eq!(t.scalar(contract).await, 99999);
    assert_eq!(t.get("/ready", None).await.status, StatusCode::SERVICE_UNAVAILABLE);

    assert_eq!(t.scalar("delete from migration_rules where version = 99999 returning version").await, 99999);
    assert_eq!(t.scalar("delete from _sqlx_migrations where version = 99999 returning version").await, 99999);
    let ready = t.get("/ready", None).await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.json["schema_ahead"], false);
}
