//! Pricing quote time: through the component with a fresh instance per call
//! (what the service does), through one warm instance, and the same function
//! compiled natively.
//!
//!     cargo bench -p anchor-plugins --bench quote

use std::hint::black_box;

use anchor_domain::declarations::ee::*;
use anchor_domain::pricing::Pricing;
use anchor_plugins::{DEFAULT_PRICING_WASM, Limits, PluginEngine, WasmPricing};
use criterion::{Criterion, criterion_group, criterion_main};

fn scope() -> Scope {
    Scope {
        retention: Retention::Long,
        integrity: Integrity::Enhanced,
        disclosure: Disclosure::Shareable,
        responsibility: Responsibility::Extended,
        content_scope: ContentScope::External,
        delegation: Delegation::Partial,
    }
}

fn quotes(c: &mut Criterion) {
    let engine = PluginEngine::new().expect("engine");
    let pricing = WasmPricing::load(&engine, DEFAULT_PRICING_WASM, Limits::PRICING).expect("component");
    let mut warm = pricing.warm().expect("warm instance");
    let expected = pricing.quote(scope()).expect("quote").total.milli();
    let native_scope = pricing_native::Scope {
        retention: pricing_native::Retention::Long,
        integrity: pricing_native::Integrity::Enhanced,
        disclosure: pricing_native::Disclosure::Shareable,
        responsibility: pricing_native::Responsibility::Extended,
        content_scope: pricing_native::ContentScope::External,
        delegation: pricing_native::Delegation::Partial,
    };
    assert_eq!(pricing_native::V1_3_0.quote(&native_scope).unwrap().total as i64, expected);
    assert_eq!(warm.quote(scope()).unwrap().total.milli(), expected);

    let mut group = c.benchmark_group("pricing_quote");
    group.bench_function("component_fresh_instance", |b| b.iter(|| pricing.quote(black_box(scope())).unwrap()));
    group.bench_function("component_warm_instance", |b| b.iter(|| warm.quote(black_box(scope())).unwrap()));
    group.bench_function("native", |b| b.iter(|| pricing_native::V1_3_0.quote(black_box(&native_scope)).unwrap()));
    group.finish();
}

criterion_group!(benches, quotes);
criterion_main!(benches);
