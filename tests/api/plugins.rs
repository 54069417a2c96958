//! Pricing comes from the component: swap it and quotes change with no host
//! change; a misbehaving component fails its own call and nothing else.

use std::sync::Arc;

use anchor_domain::declarations::ee::*;
use anchor_domain::pricing::{Pricing, PricingError};
use anchor_tests::*;
use serde_json::json;

fn basic_scope() -> Scope {
    Scope::BASIC
}

/// The bundled generation implements `anchor:pricing@1.1.0` and prices the
/// service's other work; components built against 1.0.0 still load, quote and
/// publish, and simply have no service prices.
#[tokio::test]
async fn the_bundled_generation_prices_services_and_1_0_0_components_still_load() {
    use anchor_domain::MilliDac;
    use anchor_domain::pricing::ObservationTier as Tier;
    let bundled = default_pricing();
    assert_eq!(bundled.generation().interface, "anchor:pricing@1.1.0");
    let services = bundled.services().unwrap().expect("a 1.1.0 generation exports its service prices");
    let other = services.observation(Tier::AgentOther, 3).unwrap();
    assert_eq!((other.base, other.surcharge), (MilliDac::from_dac(3), MilliDac::from_dac(4)));
    assert_eq!(services.observation(Tier::AgentSelf, 2).unwrap().base, MilliDac::ZERO);
    assert_eq!(services.observation(Tier::EvidenceReport, 0).unwrap().base, MilliDac::from_dac(10));
    assert!(services.observation(Tier::PatternCompare, 3).is_none(), "level 3 is not offered for pattern/compare");
    assert_eq!(services.earned_threshold, MilliDac::from_dac(30));
    assert_eq!(services.earned_expiry_days, 365);
    assert_eq!((services.asa_period, services.asa_period_days), (MilliDac::from_dac(100), 90));
    assert_eq!(services.retention_monthly, MilliDac::from_dac(50));
    assert_eq!(services.sdac_ratio_permille, 100);

    let old: Arc<dyn Pricing> = load_component("pricing-alt");
    assert_eq!(old.generation().interface, "anchor:pricing@1.0.0");
    assert!(old.services().unwrap().is_none());
    assert_eq!(old.quote(basic_scope()).unwrap().total.milli(), 20_000);

    // What /v1/pricing/current publishes follows the component.
    let t = TestServer::start(Backend::Sqlite).await;
    let current = t.get("/v1/pricing/current", None).await.json;
    assert_eq!(current["wit_package"], "anchor:pricing@1.1.0");
    assert_eq!(current["earned_dac"], json!({ "min_spend": 30, "expiry_days": 365 }));
    assert_eq!(current["retention_subscription"]["monthly_dac"], json!(50));
    let observations = current["observations"].as_array().unwrap();
    assert!(observations.contains(&json!({ "tier": "agent_other", "resolution_level": 2, "base_dac": 3, "surcharge_dac": 2 })));
    let t = TestServer::with(Backend::Sqlite, Options { pricing: old, ..Options::default() }).await;
    let current = t.get("/v1/pricing/current", None).await.json;
    assert_eq!(current["wit_package"], "anchor:pricing@1.0.0");
    assert!(current.get("observations").is_none() && current.get("earned_dac").is_none());
}

#[tokio::test]
async fn swapping_the_component_changes_the_quote() {
    let alt: Arc<dyn Pricing> = load_component("pricing-alt");
    assert_eq!(alt.generation().version, "v9.0.0-test");
    assert_eq!(alt.quote(basic_scope()).unwrap().total.milli(), 20_000);
    assert_eq!(default_pricing().quote(basic_scope()).unwrap().total.milli(), 10_000);

    // The same host code, started with the other component, prices and records with it.
    let t = TestServer::with(Backend::Sqlite, Options { pricing: alt.clone(), ..Options::default() }).await;
    let agent = t.register().await;
    let created = t.create(&agent, basic_axes()).await;
    assert_eq!(created["dac_amount"], json!(20));
    assert_eq!(created["pricing_version"], "v9.0.0-test");
    assert_eq!(created["pricing_component_sha256"], json!(alt.generation().sha256));
    let current = t.get("/v1/pricing/current", None).await;
    assert_eq!(current.json["base_fee"], json!(20));
    assert_eq!(current.json["pricing_version"], "v9.0.0-test");
    let presets = t.get("/v1/pricing/ee-presets", None).await;
    assert_eq!(presets.json["presets"][0]["dac_amount"], json!(20));
}

#[tokio::test]
async fn the_bundled_generation_publishes_the_v1_3_0_numbers() {
    let t = TestServer::start(Backend::Sqlite).await;
    let current = t.get("/v1/pricing/current", None).await.json;
    assert_eq!(current["pricing_version"], "v1.3.0");
    assert_eq!(current["base_fee"], json!(10));
    let axes = &current["axes"];
    let adds = |axis: &str| -> Vec<(String, serde_json::Value)> {
        axes[axis].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v["add"].clone())).collect()
    };
    assert_eq!(
        adds("ee_retention_period"),
        vec![
            ("short".into(), json!(0)),
            ("medium".into(), json!(20)),
            ("long".into(), json!(50)),
            ("extreme_long".into(), json!(100)),
            ("indefinite".into(), json!(0)),
        ]
    );
    assert_eq!(axes["ee_retention_period"]["indefinite"]["monthly"], json!(50));
    assert_eq!(
        adds("ee_disclosure_format_policy"),
        vec![("internal".into(), json!(0)), ("shareable".into(), json!(10)), ("exportable".into(), json!(30))]
    );
    assert_eq!(
        adds("ee_responsibility_scope"),
        vec![("minimal".into(), json!(0)), ("standard".into(), json!(15)), ("extended".into(), json!(35))]
    );
    assert_eq!(
        adds("content_disclosure_scope"),
        vec![("owner".into(), json!(0)), ("external".into(), json!(15)), ("public".into(), json!(40))]
    );
    assert_eq!(adds("delegation_state"), vec![("none".into(), json!(0)), ("partial".into(), json!(10)), ("full".into(), json!(30))]);
    assert_eq!(
        adds("ee_integrity_verification_level"),
        vec![("basic".into(), json!(0)), ("enhanced".into(), json!(0)), ("certifiable".into(), json!(0))]
    );
    assert_eq!(current["multiplier_conditions"]["multiplier"], json!(1.5));
    assert_eq!(current["multiplier_conditions"]["min_matches"], json!(2));
    let presets = t.get("/v1/pricing/ee-presets", None).await.json;
    let totals: Vec<(&str, &serde_json::Value)> =
        presets["presets"].as_array().unwrap().iter().map(|p| (p["name"].as_str().unwrap(), &p["dac_amount"])).collect();
    assert_eq!(totals, vec![("EE_basic", &json!(10)), ("EE_standard", &json!(45)), ("EE_high", &json!(157.5))]);
}

#[test]
fn a_trapping_component_fails_its_call_only() {
    let trap = load_component("pricing-trap");
    let error = trap.quote(basic_scope()).unwrap_err();
    assert!(matches!(&error, PricingError::Failed { reason, .. } if reason.contains("trap")), "{error}");
    // Same component, next call: a fresh instance, same clean failure; the default still works.
    assert!(trap.quote(basic_scope()).is_err());
    assert_eq!(trap.presets().unwrap().len(), 3, "other exports of the same component still answer");
    assert_eq!(default_pricing().quote(basic_scope()).unwrap().total.milli(), 10_000);
}

/// A generation is a pure function of the scope, so the host keeps each
/// scope's answer once a call gave it: every later quote of the scope is
/// what a fresh instance of the component answers, and the first call of
/// another component (or generation) is its own.
#[test]
fn a_kept_answer_is_the_components_own() {
    let default =
        anchor_plugin_host::WasmPricing::load(engine(), anchor_plugin_host::DEFAULT_PRICING_WASM, anchor_plugin_host::Limits::PRICING)
            .unwrap();
    let alt = load_component("pricing-alt");
    for scope in anchor_app::pricing::grid() {
        for pricing in [&default, &alt] {
            let fresh = pricing.answer(scope).expect("the call succeeds").map(|quote| quote.total);
            for _ in 0..2 {
                let quoted = match pricing.quote(scope) {
                    Ok(quote) => Ok(quote.total),
                    Err(PricingError::Refused { reason, .. }) => Err(reason),
                    Err(other) => panic!("{other}"),
                };
                assert_eq!(quoted, fresh, "{scope:?}");
            }
        }
    }
    assert_ne!(default.quote(basic_scope()).unwrap().total, alt.quote(basic_scope()).unwrap().total);
}

#[test]
fn a_spinning_component_is_stopped_by_its_cpu_bound() {
    let spin = load_component("pricing-spin");
    let started = std::time::Instant::now();
    let error = spin.quote(basic_scope()).unwrap_err();
    assert!(matches!(&error, PricingError::Failed { reason, .. } if reason.contains("fuel") || reason.contains("deadline")), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "bounded: {:?}", started.elapsed());
    assert_eq!(default_pricing().quote(basic_scope()).unwrap().total.milli(), 10_000);
}

#[test]
fn a_growing_component_is_stopped_by_its_memory_bound() {
    let grow = load_component("pricing-grow");
    let error = grow.quote(basic_scope()).unwrap_err();
    assert!(
        matches!(&error, PricingError::Failed { reason, .. } if reason.contains("memory") || reason.contains("grow") || reason.contains("trap")),
        "{error}"
    );
    assert_eq!(default_pricing().quote(basic_scope()).unwrap().total.milli(), 10_000);
}

#[tokio::test]
async fn a_failing_component_answers_503_and_the_server_keeps_serving() {
    let spin: Arc<dyn Pricing> = load_component("pricing-spin");
    let t = TestServer::with(Backend::Sqlite, Options { pricing: spin, ..Options::default() }).await;
    let agent = t.register().await;
    let reply = t.post("/v1/dd/create", Some(&agent.token), &create_body(basic_axes())).await;
    reply.assert_error(503, "PRICING_UNAVAILABLE");
    assert_eq!(t.get("/health", None).await.status, StatusCode::OK);
    assert_eq!(t.get("/v1/dd/list", Some(&agent.token)).await.json["total"], json!(0));
    assert_eq!(t.get("/v1/trial/status", Some(&agent.token)).await.json["trial_dac_remaining"], json!(500));
}

#[test]
fn components_get_no_capabilities() {
    // The guest declares WASI imports (std for wasm32-wasip2 does); the host
    // links every one of them to a trap, so reaching for the clock, the
    // environment or a file fails the call instead of answering.
    let wasi = load_component("pricing-wasi");
    let error = wasi.quote(basic_scope()).unwrap_err();
    assert!(matches!(&error, PricingError::Failed { .. }), "a capability was granted: {error}");
    let engine = engine().engine();
    let component = anchor_plugin_host::wasmtime::component::Component::new(engine, component_bytes("pricing-wasi")).unwrap();
    let imports: Vec<String> = component.component_type().imports(engine).map(|(name, _)| name.to_string()).collect();
    assert!(imports.iter().any(|name| name.starts_with("wasi:clocks")), "the fixture does import the clock: {imports:?}");
    assert!(imports.iter().all(|name| name.starts_with("wasi:") || name.starts_with("anchor:pricing/")), "unexpected imports: {imports:?}");
    // Our own package's interfaces are imported for their types only: no function to call.
    use anchor_plugin_host::wasmtime::component::types::ComponentItem;
    for (name, item) in component.component_type().imports(engine) {
        if let (true, ComponentItem::ComponentInstance(instance)) = (name.starts_with("anchor:pricing/"), item.ty) {
            assert!(
                instance.exports(engine).all(|(_, export)| matches!(export.ty, ComponentItem::Type(_))),
                "{name} imports something other than types"
            );
        }
    }
}
