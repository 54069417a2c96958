//! Tools that run: the Rust and the JavaScript example give the same report;
//! hostile components fail their own runs with a named reason (at the
//! runtime, and over HTTP while declarations go on); capabilities are refused
//! at upload; compiled components survive a restart; a bought tool runs on
//! its buyer's observations, free for its own and paid for another agent's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anchor_domain::Clock;
use anchor_domain::tools::{Cell, DayCount, Observation, Rejected, RunFailure, ToolInput, ToolLimits, ToolRuntime};
use anchor_domain::tsl::ObservationType;
use anchor_plugin_host::WasmTools;
use anchor_tests::hostile;
use anchor_tests::x402::{Twist, b64, challenge_of, pay};
use anchor_tests::*;
use serde_json::{Value, json};

use crate::tsl::buy;

both_backends!(
    a_tool_is_uploaded_bought_and_run_on_the_buyers_observations,
    hostile_tools_fail_their_own_runs_while_declarations_go_on,
    one_agents_spinning_runs_leave_another_agents_tool_its_slot,
    uploads_are_counted_before_anything_compiles,
    uploads_are_let_in_before_their_bytes_are_read,
    a_small_upload_is_not_queued_behind_large_ones,
    a_trickled_upload_frees_its_place
);

/// `n` observations of every shape: cells over two dimensions, a series.
fn input(n: usize) -> ToolInput {
    let kinds = [ObservationType::EnvironmentSummary, ObservationType::AgentProfile, ObservationType::AgentTimeline];
    ToolInput {
        today: 20_500,
        observations: (0..n)
            .map(|i| Observation {
                kind: kinds[i % kinds.len()],
                resolution_level: 1 + (i % 3) as u8,
                subject_agent: (i % 2 == 0).then(|| format!("agent-{i}")),
                first_day: 20_470,
                last_day: 20_499,
                agents: (i % 3 != 2).then_some(10 + i as u64),
                declarations: Some(100),
                cells: vec![
                    Cell { dimension: "action_type".into(), value: "execute".into(), count: 7 + i as u64 },
                    Cell { dimension: "action_type".into(), value: "hold".into(), count: 3 },
                    Cell { dimension: "ee_retention_period".into(), value: "short".into(), count: 0 },
                ],
                series: vec![
                    DayCount { day: 20_490 + (i % 5) as i32, dimension: "all".into(), value: "declarations".into(), count: 2 },
                    DayCount { day: 20_498, dimension: "all".into(), value: "déclarations ✓".into(), count: 1 },
                ],
            })
            .collect(),
    }
}

fn runtime(dir: &std::path::Path, limits: ToolLimits) -> WasmTools {
    WasmTools::new(Some(dir), limits).expect("tool runtime")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("anchor-tools-{name}-{}-{}", std::process::id(), uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_and_the_javascript_tool_give_the_same_report() {
    let js = tokio::task::spawn_blocking(js_tool_component).await.unwrap();
    let rust = component_bytes("tool-example");
    let dir = temp_dir("same");
    let tools = runtime(&dir, ToolLimits::DEFAULT);
    let rust_id = tools.accept(&rust).expect("the Rust tool is accepted").sha256;
    let js_accepted = tools.accept(&js).expect("the JavaScript tool is accepted");
    assert!(
        js_accepted.imports.iter().all(|i| i.starts_with("anchor:tool/types@1.0.0") || i == "input" || i == "report"),
        "the JavaScript tool imports no WASI at all: {:?}",
        js_accepted.imports
    );
    let input = input(30);
    let (from_rust, rust_stats) = tools.run(&rust_id, None, &input).expect("the Rust tool runs");
    let (from_js, js_stats) = tools.run(&js_accepted.sha256, None, &input).expect("the JavaScript tool runs");
    assert_eq!(from_rust, from_js, "the two languages disagree");
    // What the tool computes, checked by hand on the first observation.
    assert_eq!(from_rust.columns, ["count", "share_ppm"]);
    assert_eq!(from_rust.rows[0].label, "environment-summary:action_type=execute");
    assert_eq!(from_rust.rows[0].values, [7, 700_000]);
    assert_eq!(from_rust.rows[1].values, [3, 300_000]);
    assert_eq!(from_rust.rows[2].values, [0, 0]);
    assert_eq!(from_rust.rows.len(), 90);
    let metrics: Vec<(&str, i64)> = from_rust.metrics.iter().map(|m| (m.name.as_str(), m.value)).collect();
    let agents: i64 = (0..30).filter(|i| i % 3 != 2).map(|i| 10 + i).sum();
    assert_eq!(metrics, [("observations", 30), ("cells", 90), ("agents", agents), ("series_total", 90), ("days", 6)]);
    assert!(rust_stats.fuel_used > 0 && js_stats.fuel_used > rust_stats.fuel_used, "{rust_stats:?} {js_stats:?}");
    // Both refuse an empty input with their own error.
    let empty = ToolInput { today: 0, observations: Vec::new() };
    assert_eq!(tools.run(&rust_id, None, &empty).unwrap_err(), RunFailure::Refused("no observations".into()));
    assert_eq!(tools.run(&js_accepted.sha256, None, &empty).unwrap_err(), RunFailure::Refused("no observations".into()));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_and_the_python_tool_give_the_same_report() {
    let python = tokio::task::spawn_blocking(python_tool_component).await.unwrap();
    let rust = component_bytes("tool-example");
    let dir = temp_dir("same-py");
    let tools = runtime(&dir, ToolLimits::DEFAULT);
    let rust_id = tools.accept(&rust).expect("the Rust tool is accepted").sha256;
    let py = tools.accept(&python).expect("the Python tool is accepted");
    assert!(
        py.imports.iter().all(|i| i.starts_with("anchor:tool/types@1.0.0") || i == "input" || i == "report"),
        "the Python tool imports no WASI at all: {:?}",
        py.imports
    );
    for input in [input(30), input(1)] {
        let (from_rust, rust_stats) = tools.run(&rust_id, None, &input).expect("the Rust tool runs");
        let (from_py, py_stats) = tools.run(&py.sha256, None, &input).expect("the Python tool runs");
        assert_eq!(from_rust, from_py, "the two languages disagree");
        assert!(py_stats.fuel_used > rust_stats.fuel_used, "{rust_stats:?} {py_stats:?}");
    }
    let empty = ToolInput { today: 0, observations: Vec::new() };
    assert_eq!(tools.run(&py.sha256, None, &empty).unwrap_err(), RunFailure::Refused("no observations".into()));
    let _ = std::fs::remove_dir_all(dir);
}

/// The default fuel budget, with a deadline a spinning run never reaches
/// first: burning four billion units of fuel can take longer than the
/// default's 2 s on a loaded machine, and the run would then end on its
/// deadline instead. Fuel is counted, not timed: each hostile tool fails for
/// its own reason whatever the machine's speed.
const FUEL_FIRST: ToolLimits = ToolLimits { wall_ms: 60_000, ..ToolLimits::DEFAULT };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_components_fail_their_own_runs_with_a_named_reason() {
    let dir = temp_dir("hostile");
    let tools = runtime(&dir, FUEL_FIRST);
    let input = input(3);
    for (name, expected) in
        [("tool-spin", "out_of_fuel"), ("tool-grow", "out_of_memory"), ("tool-huge", "output_too_large"), ("tool-trap", "trap")]
    {
        let id = tools.accept(&component_bytes(name)).unwrap_or_else(|r| panic!("{name}: {r:?}")).sha256;
        let failure = tools.run(&id, None, &input).expect_err(name);
        assert_eq!(failure.kind(), expected, "{name}: {failure:?}");
    }
    // A deadline ends what fuel would let run on.
    let slow = runtime(&dir, ToolLimits { fuel: u64::MAX / 2, wall_ms: 100, ..ToolLimits::DEFAULT });
    let id = slow.accept(&component_bytes("tool-spin")).unwrap().sha256;
    let started = std::time::Instant::now();
    assert_eq!(slow.run(&id, None, &input).unwrap_err(), RunFailure::Deadline);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    // Capabilities are refused before anything runs, by name.
    match tools.accept(&component_bytes("tool-wasi")) {
        Err(Rejected::ForbiddenImports(names)) => {
            assert!(names.iter().any(|n| n.starts_with("wasi:filesystem/")), "{names:?}");
            assert!(names.iter().any(|n| n.starts_with("wasi:sockets/")), "{names:?}");
            assert!(names.iter().any(|n| n.starts_with("wasi:clocks/")), "{names:?}");
        }
        other => panic!("a component importing WASI filesystem and sockets was not refused: {other:?}"),
    }
    assert!(matches!(tools.accept(b"\0asm not really"), Err(Rejected::Invalid(_))));
    assert!(matches!(tools.accept(&component_bytes("pricing-v1_3_0")), Err(Rejected::WrongWorld(_))));
    let small = runtime(&dir, ToolLimits { component_bytes: 1000, ..ToolLimits::DEFAULT });
    assert!(matches!(small.accept(&component_bytes("tool-example")), Err(Rejected::TooLarge { .. })));
    // The runtime is unharmed: the example still runs.
    let example = tools.accept(&component_bytes("tool-example")).unwrap().sha256;
    assert!(tools.run(&example, None, &input).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

/// What no compiler emits: a run that grows its table by 2^31 - 1
/// elements, or its memory without end, fails at the budget before anything
/// is allocated; components whose instances (or what they start with) are
/// over a run's limits are refused at upload, counted from their bytes, or
/// from instantiating them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_budget_holds_for_all_its_instances_memories_and_tables() {
    let dir = temp_dir("budget");
    let tools = runtime(&dir, ToolLimits::DEFAULT);
    let fine = tools.accept(&hostile::empty_tool()).expect("a well-behaved hand-written tool is accepted").sha256;
    let (report, stats) = tools.run(&fine, None, &input(2)).expect("it runs");
    assert_eq!(report, Default::default());
    assert!(stats.memory_bytes >= 65_536 && stats.memory_bytes < 1 << 20, "{stats:?}");

    let grower = tools.accept(&hostile::table_grower()).expect("nothing in its bytes shows the growth").sha256;
    let started = std::time::Instant::now();
    match tools.run(&grower, None, &input(1)) {
        Err(RunFailure::OutOfMemory(why)) => assert!(why.contains("table") && why.contains("200000"), "{why}"),
        other => panic!("a table growth of 2^31 - 1 elements was not stopped: {other:?}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "refused before allocating: {:?}", started.elapsed());
    let memory = tools.accept(&hostile::memory_grower()).unwrap().sha256;
    match tools.run(&memory, None, &input(1)) {
        Err(RunFailure::OutOfMemory(why)) => assert!(why.contains(&(128u32 << 20).to_string()) || why.contains("memory"), "{why}"),
        other => panic!("a memory growing without end was not stopped: {other:?}"),
    }

    // A hundred instances of 128 MiB each: refused from the bytes.
    match tools.accept(&hostile::with_hogs(100, 2048, 0)) {
        Err(Rejected::OverLimits(why)) => assert!(why.contains("core instances"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Twenty instances of 16 MiB from the start: 320 MiB together.
    match tools.accept(&hostile::with_hogs(20, 256, 0)) {
        Err(Rejected::OverLimits(why)) => assert!(why.contains("start at"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Twenty instances of one page that each grow to 8 MiB when instantiated:
    // nothing in the bytes says so, instantiating it once does.
    match tools.accept(&hostile::with_hogs(20, 1, 127)) {
        Err(Rejected::OverLimits(why)) => assert!(why.contains("memory bound"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Under the limits, the same shape is accepted and runs.
    let few = tools.accept(&hostile::with_hogs(4, 1, 15)).expect("four instances of 1 MiB").sha256;
    let (_, stats) = tools.run(&few, None, &input(1)).expect("runs");
    assert!(stats.memory_bytes >= 4 << 20, "every instance's memory counts: {stats:?}");
    // The runtime is unharmed.
    assert!(tools.run(&fine, None, &input(2)).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

/// The tool loader against random components, for a bounded time
/// (`ANCHOR_FUZZ_TOOLS_SECS`, 20 s by default): core modules made by
/// wasm-smith with the tool world's exports (`run`, `cabi_realloc`, a
/// memory) and random bodies, wrapped into components of the tool world.
/// Every one is refused at upload or runs within the limits: its run ends
/// (with a report or a named failure) within the deadline, holding no more
/// memory than a run may. The seed of each is printed when one breaks this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_components_are_refused_or_run_within_the_limits() {
    let seconds: u64 = std::env::var("ANCHOR_FUZZ_TOOLS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let limits = ToolLimits { wall_ms: 200, ..ToolLimits::DEFAULT };
    let dir = temp_dir("fuzz");
    let tools = runtime(&dir, limits);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let (mut made, mut refused, mut ran, mut failed) = (0, 0, 0, 0);
    let mut reasons = std::collections::BTreeMap::new();
    let mut seed: u64 = 0x5eed_0000;
    let input = input(2);
    while std::time::Instant::now() < until {
        seed += 1;
        let Some(component) = anchor_tests::smith::random_tool(seed) else { continue };
        made += 1;
        let accepted = match tools.accept(&component) {
            Ok(accepted) => accepted,
            Err(rejected) => {
                refused += 1;
                let detail = rejected.detail();
                *reasons.entry(detail.chars().take(120).collect::<String>()).or_insert(0usize) += 1;
                continue;
            }
        };
        let started = std::time::Instant::now();
        let outcome = tools.run(&accepted.sha256, None, &input);
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_millis(limits.wall_ms + 1_500),
            "seed {seed}: a run took {took:?} past its {} ms deadline",
            limits.wall_ms
        );
        match outcome {
            Ok((_, stats)) => {
                assert!(stats.memory_bytes <= limits.memory_bytes, "seed {seed}: {stats:?}");
                ran += 1;
            }
            Err(RunFailure::Unavailable(why)) => panic!("seed {seed}: an accepted component was unavailable: {why}"),
            Err(_) => failed += 1,
        }
        // Keep the cache directory small: nothing here is run twice.
        tools.retain(&[]);
    }
    eprintln!("{made} random components in {seconds} s: {refused} refused at upload, {ran} ran, {failed} failed their own run");
    let mut reasons: Vec<(usize, String)> = reasons.into_iter().map(|(r, n)| (n, r)).collect();
    reasons.sort_by(|a, b| b.cmp(a));
    for (n, reason) in reasons.iter().take(8) {
        eprintln!("  refused {n}: {reason}");
    }
    assert!(made >= 20, "only {made} random components were made");
    assert!(ran + failed >= 5, "too few random components reached a run ({made} made, {refused} refused)");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_survive_a_restart_and_a_damaged_cache() {
    let dir = temp_dir("cache");
    let wasm = component_bytes("tool-example");
    let id = runtime(&dir, ToolLimits::DEFAULT).accept(&wasm).unwrap().sha256;
    // A new runtime over the same directory runs it without its bytes.
    let restarted = runtime(&dir, ToolLimits::DEFAULT);
    assert!(restarted.ready(&id));
    assert!(restarted.preload(&id));
    assert!(restarted.run(&id, None, &input(2)).is_ok());
    // A damaged artifact is not trusted: without the bytes the run is
    // unavailable, with them the component is compiled again.
    let cached: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "cwasm")).collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    // (Replaced, not rewritten in place: the runtime above maps the old file,
    // and the service itself only ever renames complete files into place.)
    std::fs::remove_file(&cached[0]).unwrap();
    std::fs::write(&cached[0], b"not a compiled component").unwrap();
    let damaged = runtime(&dir, ToolLimits::DEFAULT);
    assert!(matches!(damaged.run(&id, None, &input(2)), Err(RunFailure::Unavailable(_))));
    assert!(damaged.run(&id, Some(&wasm), &input(2)).is_ok());
    // And bytes that are not the component's hash are refused.
    let other = runtime(&temp_dir("other"), ToolLimits::DEFAULT);
    assert!(matches!(other.run(&id, Some(&component_bytes("tool-trap")), &input(2)), Err(RunFailure::Unavailable(_))));
    let _ = std::fs::remove_dir_all(dir);
}

async fn put_component(t: &TestServer, agent: &Agent, tool: &str, wasm: Vec<u8>) -> Reply {
    put_as(t, agent, tool, wasm, "application/wasm").await
}

async fn put_as(t: &TestServer, agent: &Agent, tool: &str, wasm: Vec<u8>, media: &str) -> Reply {
    let response = t
        .http
        .put(t.url(&format!("/v1/tsl/tool/{tool}/component")))
        .header("authorization", format!("Bearer {}", agent.token))
        .header("content-type", media)
        .body(wasm)
        .send()
        .await
        .expect("upload reaches the server");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
    contract::check(&t.base, "PUT", &format!("/v1/tsl/tool/{tool}/component"), status.as_u16(), content_type, &text);
    Reply { status, headers, json: serde_json::from_str(&text).unwrap_or(Value::Null), text }
}

fn profile_tool(name: &str) -> Value {
    json!({
        "tool_name": name,
        "price_dac": 5,
        "ara_connections": [{ "observation_type": "agent_profile" }, { "observation_type": "agent_ee_pattern", "resolution_level": 2 }]
    })
}

async fn registered(t: &TestServer, seller: &Agent, body: &Value) -> String {
    let reply = t.post("/v1/tsl/tool/register", Some(&seller.token), body).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
    reply.json["tool_id"].as_str().unwrap().to_string()
}

async fn run(t: &TestServer, agent: &Agent, tool: &str, body: &Value, payment: Option<&Value>) -> Reply {
    let bearer = format!("Bearer {}", agent.token);
    let signature = payment.map(b64);
    let mut headers = vec![("authorization", bearer.as_str())];
    if let Some(signature) = &signature {
        headers.push(("payment-signature", signature.as_str()));
    }
    t.call_with("POST", &format!("/v1/tsl/tool/{tool}/run"), &headers, Some(body)).await
}

async fn a_tool_is_uploaded_bought_and_run_on_the_buyers_observations(backend: Backend) {
    let js = tokio::task::spawn_blocking(js_tool_component).await.unwrap();
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let buyer = t.register().await;
    let tool = registered(&t, &seller, &profile_tool("profile-shares")).await;

    // Refused at upload: not a component, a capability, the wrong world, not the seller.
    put_component(&t, &seller, &tool, b"\0asm\x0d\0\x01\0garbage".to_vec()).await.assert_error(400, "COMPONENT_INVALID");
    put_component(&t, &seller, &tool, Vec::new()).await.assert_error(400, "COMPONENT_INVALID");
    let wasi = put_component(&t, &seller, &tool, component_bytes("tool-wasi")).await;
    wasi.assert_error(400, "COMPONENT_FORBIDDEN_IMPORT");
    assert!(wasi.text.contains("wasi:filesystem") && wasi.text.contains("wasi:sockets"), "{}", wasi.text);
    put_component(&t, &seller, &tool, component_bytes("pricing-v1_3_0")).await.assert_error(400, "COMPONENT_WRONG_WORLD");
    put_component(&t, &buyer, &tool, component_bytes("tool-example")).await.assert_error(403, "NOT_TOOL_OWNER");
    t.get(&format!("/v1/tsl/tool/{tool}/component"), None).await.assert_error(409, "TOOL_NOT_RUNNABLE");
    let uploaded = put_component(&t, &seller, &tool, component_bytes("tool-example")).await;
    assert_eq!((uploaded.status.as_u16(), uploaded.json["version"].clone()), (201, json!(1)), "{}", uploaded.text);
    let again = put_component(&t, &seller, &tool, component_bytes("tool-example")).await;
    assert_eq!((again.status.as_u16(), again.json["version"].clone()), (200, json!(1)), "{}", again.text);
    let current = t.get(&format!("/v1/tsl/tool/{tool}/component"), None).await;
    assert_eq!(current.json["sha256"], uploaded.json["sha256"]);
    put_as(&t, &seller, &tool, component_bytes("tool-example"), "application/json").await.assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    // Ten uploads a day per tool; the versions they supersede keep their facts, not their bytes.
    let busy = registered(&t, &seller, &profile_tool("busy")).await;
    for i in 0..10 {
        let reply = put_component(&t, &seller, &busy, component_variant(&component_bytes("tool-example"), i)).await;
        assert_eq!((reply.status.as_u16(), reply.json["version"].clone()), (201, json!(i + 1)), "{}", reply.text);
    }
    let limited = put_component(&t, &seller, &busy, component_variant(&component_bytes("tool-example"), 10)).await;
    limited.assert_error(429, "RATE_LIMITED");
    assert!(limited.headers.get("retry-after").is_some());
    let kept = format!("select count(*) from tsl_tool_component where tool_id = {} and length(wasm) > 0", t.uuid_sql(&busy));
    assert_eq!(t.scalar(&kept).await, 1, "only the current version keeps its bytes");
    // A tool reading observations tools cannot receive yet is refused at upload.
    let mut unsupported = profile_tool("anomaly-reader");
    unsupported["ara_connections"] = json!([{ "observation_type": "anomaly_compare" }]);
    let unsupported = registered(&t, &seller, &unsupported).await;
    put_component(&t, &seller, &unsupported, component_bytes("tool-example")).await.assert_error(409, "TOOL_INPUT_UNSUPPORTED");
    // The same tool in JavaScript.
    let js_tool = registered(&t, &seller, &profile_tool("profile-shares-js")).await;
    let uploaded_js = put_component(&t, &seller, &js_tool, js).await;
    assert_eq!(uploaded_js.status.as_u16(), 201, "{}", uploaded_js.text);

    // Not bought: refused. Bought (both), and with records of its own, the buyer runs them for free.
    run(&t, &buyer, &tool, &json!({}), None).await.assert_error(403, "TOOL_NOT_PURCHASED");
    for tool in [&tool, &js_tool] {
        assert_eq!(buy(&t, &buyer, "/v1/tsl/purchase", &json!({ "tool_id": tool }), "15000").await.status.as_u16(), 201);
    }
    for _ in 0..2 {
        let created = t.create(&buyer, json!({ "ee_preset": "EE_basic" })).await;
        assert_eq!(t.confirm(&buyer, created["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    }
    t.wait_for_fold(2).await;
    let payments = t.scalar("select count(*) from x402_payment").await;
    let ran = run(&t, &buyer, &tool, &json!({}), None).await;
    assert_eq!(ran.status.as_u16(), 200, "{}", ran.text);
    assert!(ran.headers.get("payment-response").is_none(), "free: nothing settled");
    assert_eq!((ran.json["observations"].clone(), ran.json["dac_charged"].clone()), (json!(2), json!(0)));
    let rows = ran.json["report"]["rows"].as_array().unwrap();
    let execute = rows.iter().find(|r| r["label"] == "agent-profile:action_type=execute").expect("the buyer's action types");
    assert_eq!(execute["values"], json!([2, 1_000_000]), "{}", ran.text);
    assert!(rows.iter().any(|r| r["label"].as_str().unwrap().starts_with("agent-ee-pattern:integrity=")), "{}", ran.text);
    let ran_js = run(&t, &buyer, &js_tool, &json!({}), None).await;
    assert_eq!(ran_js.status.as_u16(), 200, "{}", ran_js.text);
    assert_eq!(ran_js.json["report"], ran.json["report"], "the JavaScript tool gives the Rust tool's report");
    assert_eq!(t.scalar("select count(*) from x402_payment").await, payments);
    // Two free observations per run are logged like ARA's own.
    assert_eq!(t.scalar("select count(*) from ara_observation where payment_id is null").await, 4);

    // Another agent's profile is paid, as in ARA: the challenge first, and nothing runs.
    let other = t.register().await;
    t.call("PUT", "/v1/agent/disclosure", Some(&other.token), Some(&json!({ "disclosure_level": "full" }))).await;
    let created = t.create(&other, json!({ "ee_preset": "EE_standard" })).await;
    t.confirm(&other, created["dd_id"].as_str().unwrap()).await;
    t.wait_for_fold(3).await;
    let about_other = json!({ "subject_agent_id": other.id });
    let runs_before = t.scalar("select count(*) from tsl_tool_run").await;
    let challenge = challenge_of(&run(&t, &buyer, &tool, &about_other, None).await);
    assert_eq!(t.scalar("select count(*) from tsl_tool_run").await, runs_before, "nothing ran before payment");
    let payment = pay(&challenge, t.clock.now().timestamp(), Twist::default());
    let paid = run(&t, &buyer, &tool, &about_other, Some(&payment)).await;
    assert_eq!(paid.status.as_u16(), 200, "{}", paid.text);
    assert!(paid.headers.get("payment-response").is_some());
    assert!(paid.json["dac_charged"].as_f64().unwrap() > 0.0, "{}", paid.text);
    assert_eq!(t.scalar("select count(*) from ara_observation where payment_id is not null").await, 2);
    let hidden = t.register().await;
    t.call("PUT", "/v1/agent/disclosure", Some(&hidden.token), Some(&json!({ "disclosure_level": "none" }))).await;
    run(&t, &buyer, &tool, &json!({ "subject_agent_id": hidden.id }), None).await.assert_error(403, "DISCLOSURE_CAP_EXCEEDED");

    // Only metadata is kept, for the runner to see.
    let runs = t.get("/v1/tsl/runs", Some(&buyer.token)).await;
    assert_eq!(runs.json["total"], 3, "{}", runs.text);
    assert_eq!(runs.json["runs"][0]["outcome"], "ok");
    assert!(runs.json["runs"][0]["fuel_used"].as_i64().unwrap() > 0);
    let limits = t.get("/v1/tsl/runtime", None).await;
    assert_eq!(limits.json["fuel_per_run"], json!(ToolLimits::DEFAULT.fuel));
    assert_eq!(limits.json["world"], "anchor:tool/tool@1.0.0");
}

async fn hostile_tools_fail_their_own_runs_while_declarations_go_on(backend: Backend) {
    let limits = FUEL_FIRST;
    let wait = std::time::Duration::from_secs(300);
    let tools = anchor_app::tools::Tools::with_waits(Arc::new(runtime(&temp_dir("hostile"), limits)), wait, wait);
    let t = TestServer::with(backend, Options { tools: Some(tools), ..Options::default() }).await;
    let seller = t.register().await;
    let created = t.create(&seller, json!({ "ee_preset": "EE_basic" })).await;
    t.confirm(&seller, created["dd_id"].as_str().unwrap()).await;
    t.wait_for_fold(1).await;
    let mut hostile = Vec::new();
    for (fixture, code) in [
        ("tool-spin", "TOOL_OUT_OF_FUEL"),
        ("tool-grow", "TOOL_OUT_OF_MEMORY"),
        ("tool-huge", "TOOL_OUTPUT_TOO_LARGE"),
        ("tool-trap", "TOOL_TRAPPED"),
    ] {
        let tool = registered(&t, &seller, &profile_tool(fixture)).await;
        let uploaded = put_component(&t, &seller, &tool, component_bytes(fixture)).await;
        assert_eq!(uploaded.status.as_u16(), 201, "{fixture}: {}", uploaded.text);
        hostile.push((tool, code));
    }
    let example = registered(&t, &seller, &profile_tool("example")).await;
    put_component(&t, &seller, &example, component_bytes("tool-example")).await;
    // Over a run's limits from its bytes: refused at upload, with the code.
    let hogs = registered(&t, &seller, &profile_tool("hogs")).await;
    let refused = put_component(&t, &seller, &hogs, hostile::with_hogs(100, 2048, 0)).await;
    refused.assert_error(400, "COMPONENT_OVER_LIMITS");
    assert!(refused.text.contains("core instances"), "{}", refused.text);
    put_component(&t, &seller, &hogs, hostile::with_hogs(20, 1, 127)).await.assert_error(400, "COMPONENT_OVER_LIMITS");
    let table = registered(&t, &seller, &profile_tool("table")).await;
    assert_eq!(put_component(&t, &seller, &table, hostile::table_grower()).await.status.as_u16(), 201);
    hostile.push((table, "TOOL_OUT_OF_MEMORY"));

    // Declarations keep coming from four agents while the hostile tools run.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for _ in 0..4 {
        let agent = t.register().await;
        let (t, stop, done) = (&t, stop.clone(), done.clone());
        load.push(async move {
            let mut failures = Vec::new();
            // Trial pays 50 declarations of each agent.
            for _ in 0..40 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let reply = t.post("/v1/dd/create", Some(&agent.token), &create_body(json!({ "ee_preset": "EE_basic" }))).await;
                if reply.status.as_u16() != 201 {
                    failures.push(reply.text);
                    continue;
                }
                let confirmed = t.confirm(&agent, reply.json["dd_id"].as_str().unwrap()).await;
                if confirmed.status.as_u16() != 200 {
                    failures.push(confirmed.text);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            failures
        });
    }
    let runs = async {
        let mut answers = Vec::new();
        for (tool, code) in &hostile {
            answers.push((run(&t, &seller, tool, &json!({}), None).await, *code));
        }
        stop.store(true, Ordering::Relaxed);
        answers
    };
    let (answers, failures) = tokio::join!(runs, futures_util::future::join_all(load));
    for (reply, code) in &answers {
        reply.assert_error(422, code);
        assert!(reply.text.contains("nothing was charged"), "{}", reply.text);
    }
    let failures: Vec<String> = failures.into_iter().flatten().collect();
    assert!(failures.is_empty(), "{} declarations failed while hostile tools ran, the first: {:?}", failures.len(), failures.first());
    assert!(done.load(Ordering::Relaxed) > 0, "no declaration was made during the runs");
    // The failures are on record, by reason; the server and the example tool are fine.
    let mut outcomes = t.strings("select outcome from tsl_tool_run").await;
    outcomes.sort();
    assert_eq!(outcomes, ["out_of_fuel", "out_of_memory", "out_of_memory", "output_too_large", "trap"]);
    let fine = run(&t, &seller, &example, &json!({}), None).await;
    assert_eq!(fine.status.as_u16(), 200, "{}", fine.text);
    let _ = t.clock.now();
}

/// Tools whose runs are one agent's only: three spinning runs at once hold
/// that agent's one slot and wait in its own line, and another agent's tool
/// finds the host's other slot.
async fn one_agents_spinning_runs_leave_another_agents_tool_its_slot(backend: Backend) {
    // Fuel without end: each spinning run lasts its whole 2 s deadline.
    let limits = ToolLimits { concurrent_runs: 2, runs_per_agent: 1, fuel: u64::MAX / 2, ..ToolLimits::DEFAULT };
    let runtime = Arc::new(runtime(&temp_dir("fair"), limits));
    // A host's line shorter than a spinning run (2 s): a run that had to wait
    // behind the spinning ones would be refused.
    let slots = anchor_app::tools::Tools::with_waits(runtime, std::time::Duration::from_secs(1), std::time::Duration::from_secs(300));
    let t = TestServer::with(backend, Options { tools: Some(slots), ..Options::default() }).await;
    let spinner = t.register().await;
    let other = t.register().await;
    let spin = registered(&t, &spinner, &profile_tool("spin")).await;
    assert_eq!(put_component(&t, &spinner, &spin, component_bytes("tool-spin")).await.status.as_u16(), 201);
    let example = registered(&t, &other, &profile_tool("example")).await;
    assert_eq!(put_component(&t, &other, &example, component_bytes("tool-example")).await.status.as_u16(), 201);
    for agent in [&spinner, &other] {
        let created = t.create(agent, json!({ "ee_preset": "EE_basic" })).await;
        t.confirm(agent, created["dd_id"].as_str().unwrap()).await;
    }
    t.wait_for_fold(2).await;

    let stop = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(AtomicUsize::new(0));
    let mut attack = Vec::new();
    for _ in 0..3 {
        let (t, stop, spinning, spinner, spin) = (&t, stop.clone(), spinning.clone(), &spinner, &spin);
        attack.push(async move {
            let mut codes = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                spinning.fetch_add(1, Ordering::Relaxed);
                let reply = run(t, spinner, spin, &json!({}), None).await;
                codes.push(reply.json["error_code"].as_str().unwrap_or("").to_string());
                if reply.status.as_u16() == 429 {
                    assert!(reply.headers.get("retry-after").is_some(), "{}", reply.text);
                }
            }
            codes
        });
    }
    let victim = async {
        // Let the three spinning runs start first.
        while spinning.load(Ordering::Relaxed) < 3 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(run(&t, &other, &example, &json!({}), None).await);
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        stop.store(true, Ordering::Relaxed);
        answers
    };
    let (answers, codes) = tokio::join!(victim, futures_util::future::join_all(attack));
    let ran = answers.iter().filter(|a| a.status.as_u16() == 200).count();
    assert!(
        ran >= 4,
        "another agent's tool ran {ran} times in 5 beside three spinning runs: {:?}",
        answers.iter().map(|a| &a.text).collect::<Vec<_>>()
    );
    let codes: Vec<String> = codes.into_iter().flatten().collect();
    assert!(codes.iter().any(|c| c == "TOOL_DEADLINE"), "{codes:?}");
    assert!(codes.iter().all(|c| c != "TOOL_RUNNER_BUSY"), "one agent's runs wait in its own line, not the host's: {codes:?}");
}

/// An upload counts before anything is compiled: the same bytes again answer
/// 200 without a compilation and still count, and a seller's uploads over all
/// its tools have a quota of their own.
async fn uploads_are_counted_before_anything_compiles(backend: Backend) {
    let t = TestServer::start(backend).await;
    let seller = t.register().await;
    let tool = registered(&t, &seller, &profile_tool("same-bytes")).await;
    let wasm = component_variant(&component_bytes("tool-example"), 777_001);
    assert_eq!(put_component(&t, &seller, &tool, wasm.clone()).await.status.as_u16(), 201);
    for _ in 0..9 {
        let again = put_component(&t, &seller, &tool, wasm.clone()).await;
        assert_eq!((again.status.as_u16(), again.json["version"].clone()), (200, json!(1)), "{}", again.text);
    }
    let limited = put_component(&t, &seller, &tool, wasm.clone()).await;
    limited.assert_error(429, "RATE_LIMITED");
    assert!(limited.headers.get("retry-after").is_some());
    // Refused components count too; the seller's 30 a day cover all its tools.
    let mut uploads = 10;
    let mut n = 0;
    while uploads < 30 {
        let other = registered(&t, &seller, &profile_tool(&format!("other-{n}"))).await;
        for _ in 0..5.min(30 - uploads) {
            put_component(&t, &seller, &other, b"\0asm\x0d\0\x01\0garbage".to_vec()).await.assert_error(400, "COMPONENT_INVALID");
            uploads += 1;
        }
        n += 1;
    }
    let fresh = registered(&t, &seller, &profile_tool("fresh")).await;
    let over = put_component(&t, &seller, &fresh, component_bytes("tool-example")).await;
    over.assert_error(429, "RATE_LIMITED");
    assert!(over.text.contains("seller"), "{}", over.text);
    assert_eq!(t.scalar("select count(*) from tsl_tool_upload").await, 30);
    // Another seller is not held by it.
    let another = t.register().await;
    let theirs = registered(&t, &another, &profile_tool("theirs")).await;
    assert_eq!(put_component(&t, &another, &theirs, component_bytes("tool-example")).await.status.as_u16(), 201);
}

/// The head of a component upload by `agent` to `tool`, declaring `length` bytes.
fn upload_head(agent: &Agent, tool: &str, length: usize) -> String {
    format!(
        "PUT /v1/tsl/tool/{tool}/component HTTP/1.1\r\nHost: anchor\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/wasm\r\nContent-Length: {length}\r\n\r\n",
        agent.token
    )
}

/// The same, asking to be told to go on before the body is sent (`Expect: 100-continue`).
fn upload_head_expecting(agent: &Agent, tool: &str, length: usize) -> String {
    upload_head(agent, tool, length).replacen("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n", 1)
}

/// Reads up to the end of one answer's head (an interim `100 Continue`, say).
async fn head_on(stream: &mut tokio::net::TcpStream, wait: std::time::Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let _ = tokio::time::timeout(wait, async {
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte).await {
                Ok(0) | Err(_) => return,
                Ok(_) => head.push(byte[0]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&head).into_owned()
}

/// An upload is let in before a byte of its body is read: someone else's
/// tool is refused at once (no upload makes the host read for a stranger);
/// the host reads and compiles four uploads at once, a seller one, and a
/// fifth seller waits its turn and is told to come back (503) instead of
/// adding its 24 MiB to memory; every upload let in is answered when its
/// bytes arrive, and the places come back.
async fn uploads_are_let_in_before_their_bytes_are_read(backend: Backend) {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt;
    let runtime = Arc::new(runtime(&temp_dir("places"), ToolLimits::DEFAULT));
    // A short wait for a place, a long one for the compiler (the four compile in turn).
    let slots = anchor_app::tools::Tools::with_waits(runtime, Duration::from_secs(5), Duration::from_secs(120))
        .with_upload_wait(Duration::from_secs(2))
        // Bodies held open on purpose: no upload rate here.
        .with_upload_rate(Duration::from_secs(120), 1 << 20);
    let http = anchor_server::listener::HttpLimits { body_read_timeout: Duration::from_secs(120), ..Default::default() };
    let t = TestServer::with(backend, Options { tools: Some(slots), http, ..Options::default() }).await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let wasm = component_variant(&component_bytes("tool-example"), 777_002);
    let owner = t.register().await;
    let owned = registered(&t, &owner, &profile_tool("placed")).await;

    // A stranger declaring 20 MiB and sending none of it: answered at once
    // (the body timeout is 120 s), and the connection closes.
    let stranger = t.register().await;
    let refused = [(owned.as_str(), "403", "NOT_TOOL_OWNER"), ("6f1c2b9e-0d4a-4c1e-9f0b-3a2d1c0b9a88", "404", "TOOL_NOT_FOUND")];
    for (n, (tool, status, code)) in refused.into_iter().enumerate() {
        let started = Instant::now();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // With or without Expect: 100-continue, the refusal is the answer.
        let head = if n == 0 { upload_head(&stranger, tool, 20 << 20) } else { upload_head_expecting(&stranger, tool, 20 << 20) };
        stream.write_all(head.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, Duration::from_secs(20)).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(code), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(10), "answered after {:?}", started.elapsed());
    }
    // A malformed tool id, a body that is not a component, a token that is
    // not one: refused the same way, before the body.
    let wrong_media = upload_head(&owner, &owned, 20 << 20).replace("application/wasm", "text/plain");
    let wrong_token = upload_head(&owner, &owned, 20 << 20).replace(&owner.token, "da_tk_not-a-token");
    for (head, status, code) in [
        (upload_head(&owner, "not-a-uuid", 20 << 20), "400", "INVALID_UUID"),
        (wrong_media, "415", "UNSUPPORTED_MEDIA_TYPE"),
        (wrong_token, "401", "INVALID_TOKEN"),
    ] {
        let started = Instant::now();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream, Duration::from_secs(20)).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(code), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(10), "answered after {:?}", started.elapsed());
    }
    assert_eq!(t.scalar("select count(*) from tsl_tool_upload").await, 0, "nothing refused before its bytes counts against a quota");

    // Four sellers' uploads under way, each with part of its body sent: the host's places.
    let mut under_way = Vec::new();
    for n in 0..4 {
        let seller = t.register().await;
        let tool = registered(&t, &seller, &profile_tool(&format!("held-{n}"))).await;
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(upload_head_expecting(&seller, &tool, wasm.len()).as_bytes()).await.unwrap();
        // Told to go on only once it is let in.
        let go_on = head_on(&mut stream, Duration::from_secs(20)).await;
        assert!(go_on.starts_with("HTTP/1.1 100"), "{go_on}");
        stream.write_all(&wasm[..1000]).await.unwrap();
        under_way.push((seller, tool, stream));
    }
    // A seller with an upload under way sends another: 429 at once.
    let (seller, tool, _) = &under_way[0];
    let again = put_component(&t, seller, tool, wasm.clone()).await;
    again.assert_error(429, "RATE_LIMITED");
    assert!(again.headers.get("retry-after").is_some() && again.text.contains("under way"), "{}", again.text);
    // A fifth seller waits for a place, then is told to try again, before its body is read.
    let fifth = t.register().await;
    let fifth_tool = registered(&t, &fifth, &profile_tool("fifth")).await;
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(upload_head(&fifth, &fifth_tool, wasm.len()).as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_secs(20)).await;
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("TOOL_RUNNER_BUSY"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after:"), "{answer}");
    assert_eq!(t.scalar("select count(*) from tsl_tool_upload").await, 0, "an upload counts once its bytes have arrived");

    // Each upload under way is answered once its bytes arrive, and counts.
    for (_, _, stream) in &mut under_way {
        stream.write_all(&wasm[1000..]).await.unwrap();
    }
    for (_, _, stream) in &mut under_way {
        let answer = read_answer(stream, Duration::from_secs(180)).await;
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    }
    assert_eq!(t.scalar("select count(*) from tsl_tool_upload").await, 4);
    // The places are back: the fifth seller's upload goes through.
    let done = put_component(&t, &fifth, &fifth_tool, wasm.clone()).await;
    assert_eq!(done.status.as_u16(), 201, "{}", done.text);
}

/// A runtime that compiles as the real one does, slowly for large components
/// (as an 18 MB compile-heavy component takes tens of seconds).
struct SlowForLarge(WasmTools);

impl ToolRuntime for SlowForLarge {
    fn limits(&self) -> ToolLimits {
        self.0.limits()
    }
    fn accept(&self, wasm: &[u8]) -> Result<anchor_domain::tools::Accepted, Rejected> {
        if wasm.len() as u64 > anchor_app::tools::SMALL_UPLOAD_BYTES {
            std::thread::sleep(std::time::Duration::from_secs(6));
        }
        self.0.accept(wasm)
    }
    fn ready(&self, sha256: &[u8; 32]) -> bool {
        self.0.ready(sha256)
    }
    fn preload(&self, sha256: &[u8; 32]) -> bool {
        self.0.preload(sha256)
    }
    fn retain(&self, keep: &[[u8; 32]]) -> usize {
        self.0.retain(keep)
    }
    fn run(
        &self,
        sha256: &[u8; 32],
        wasm: Option<&[u8]>,
        input: &ToolInput,
    ) -> Result<(anchor_domain::tools::Report, anchor_domain::tools::RunStats), RunFailure> {
        self.0.run(sha256, wasm, input)
    }
}

/// `wasm` with a custom section of `pad` bytes at its end: the same tool, larger.
fn padded(wasm: &[u8], pad: usize) -> Vec<u8> {
    let name = b"anchor-padding";
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.resize(body.len() + pad, 0);
    let mut out = wasm.to_vec();
    out.push(0);
    let mut n = body.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        out.push(if n == 0 { byte } else { byte | 0x80 });
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&body);
    out
}

/// Decision 0063: a small component (its Content-Length at most 1 MiB) has
/// places and a compiler of its own: while a large one compiles for seconds
/// and another large one waits, it is answered at once.
async fn a_small_upload_is_not_queued_behind_large_ones(backend: Backend) {
    use std::time::{Duration, Instant};
    let runtime = Arc::new(SlowForLarge(runtime(&temp_dir("lanes"), ToolLimits::DEFAULT)));
    let slots = anchor_app::tools::Tools::with_waits(runtime, Duration::from_secs(5), Duration::from_secs(3));
    let t = TestServer::with(backend, Options { tools: Some(slots), ..Options::default() }).await;
    let base = component_bytes("tool-example");
    let large = padded(&component_variant(&base, 1), 3 << 20);
    assert!(large.len() as u64 > anchor_app::tools::SMALL_UPLOAD_BYTES);
    let (big_seller, other_big, small_seller) = (t.register().await, t.register().await, t.register().await);
    let big_tool = registered(&t, &big_seller, &profile_tool("large-1")).await;
    let other_tool = registered(&t, &other_big, &profile_tool("large-2")).await;
    let small_tool = registered(&t, &small_seller, &profile_tool("small")).await;
    let started_first = Instant::now();
    let first = async {
        let answer = put_component(&t, &big_seller, &big_tool, large.clone()).await;
        (answer, started_first.elapsed())
    };
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Another large one waits for the large lane's compiler, and is told to try again.
        let queued = put_component(&t, &other_big, &other_tool, padded(&component_variant(&base, 2), 3 << 20)).await;
        // The small one is answered at once.
        let started = Instant::now();
        let small = put_component(&t, &small_seller, &small_tool, component_variant(&base, 3)).await;
        (queued, small, started.elapsed(), started_first.elapsed())
    };
    let ((first, first_done), (queued, small, took, small_done)) = tokio::join!(first, meanwhile);
    queued.assert_error(503, "TOOL_RUNNER_BUSY");
    assert_eq!(small.status.as_u16(), 201, "{}", small.text);
    assert_eq!(first.status.as_u16(), 201, "{}", first.text);
    // Queued behind the large one, the small one would wait out the rest of
    // its 6 s compile (4.5 s from the small one's start); it is answered
    // before the large one, in less than that wait, however loaded the
    // machine is that compiles it.
    assert!(small_done < first_done, "the small upload ({small_done:?}) ended after the large one ({first_done:?})");
    assert!(took < Duration::from_secs(4), "the small upload took {took:?}");
}

/// Decision 0063: a body trickled slower than the upload rate is refused
/// (408) within seconds and frees its place, so four throwaway sellers
/// trickling cannot keep an honest seller out for the body deadline.
async fn a_trickled_upload_frees_its_place(backend: Backend) {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncWriteExt;
    let runtime = Arc::new(runtime(&temp_dir("trickle"), ToolLimits::DEFAULT));
    let slots = anchor_app::tools::Tools::with_waits(runtime, Duration::from_secs(5), Duration::from_secs(60))
        .with_upload_wait(Duration::from_secs(10));
    let t = TestServer::with(backend, Options { tools: Some(slots), ..Options::default() }).await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let wasm = component_variant(&component_bytes("tool-example"), 777_003);
    let mut trickling = Vec::new();
    for n in 0..anchor_app::tools::UPLOADS_AT_ONCE {
        let seller = t.register().await;
        let tool = registered(&t, &seller, &profile_tool(&format!("trickle-{n}"))).await;
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(upload_head(&seller, &tool, wasm.len()).as_bytes()).await.unwrap();
        stream.write_all(&wasm[..10]).await.unwrap();
        trickling.push(stream);
    }
    let honest = t.register().await;
    let tool = registered(&t, &honest, &profile_tool("honest")).await;
    let started = Instant::now();
    let done = put_component(&t, &honest, &tool, wasm.clone()).await;
    assert_eq!(done.status.as_u16(), 201, "{}", done.text);
    assert!(started.elapsed() < Duration::from_secs(8), "the honest upload waited {:?}", started.elapsed());
    for stream in &mut trickling {
        let answer = read_answer(stream, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 408") && answer.contains("REQUEST_TIMEOUT"), "{answer}");
    }
    assert_eq!(t.scalar("select count(*) from tsl_tool_upload").await, 1, "a refused trickle spends no quota");
}
