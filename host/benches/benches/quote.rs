//! Pricing quote time, and what loading generations costs at a host's start.
//!
//!     cargo bench -p anchor-benches --bench quote
//!
//! - `pricing_quote`: one quote through the component with a fresh instance
//!   per call (what the service does the first time it prices a scope; it
//!   keeps each scope's answer after that), through one warm instance, the
//!   same function compiled natively, and a scope's answer kept already.
//!   Before criterion's runs, each is also timed call by call (200,000
//!   calls) and its p50 and p99 printed, since a mean hides the tail.
//! - `cold_start`: a host's start with 10 published generations: a new
//!   engine and the 10 components loaded (each checked by calling it once),
//!   from a warm disk cache of compiled components, and compiled with none.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anchor_domain::declarations::ee::*;
use anchor_domain::pricing::Pricing;
use anchor_plugin_host::{CompiledCache, DEFAULT_PRICING_WASM, Limits, PluginEngine, WasmPricing};
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

/// p50 and p99 of `calls` timed one by one (after a warm-up).
fn percentiles(calls: usize, mut call: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..calls / 10 {
        call();
    }
    let mut times: Vec<Duration> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            call();
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    (times[calls / 2], times[calls * 99 / 100])
}

fn quotes(c: &mut Criterion) {
    let engine = PluginEngine::new().expect("engine");
    // QUOTE_BENCH_WASM: another build of the v1.3.0 generation to measure
    // (the comparison with the standard-library build in BENCHMARKS.md).
    let wasm =
        std::env::var_os("QUOTE_BENCH_WASM").map(|p| std::fs::read(p).expect("QUOTE_BENCH_WASM")).unwrap_or(DEFAULT_PRICING_WASM.to_vec());
    let pricing = WasmPricing::load(&engine, &wasm, Limits::PRICING).expect("component");
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

    const CALLS: usize = 200_000;
    let fresh = percentiles(CALLS, || {
        black_box(pricing.answer(black_box(scope())).unwrap().unwrap());
    });
    let warmed = percentiles(CALLS, || {
        black_box(warm.quote(black_box(scope())).unwrap());
    });
    let native = percentiles(CALLS, || {
        black_box(pricing_native::V1_3_0.quote(black_box(&native_scope)).unwrap());
    });
    let kept = percentiles(CALLS, || {
        black_box(pricing.quote(black_box(scope())).unwrap());
    });
    for (name, (p50, p99)) in [("fresh instance", fresh), ("warm instance", warmed), ("native", native), ("answer kept", kept)] {
        println!("pricing_quote/{name}: p50 {p50:?}, p99 {p99:?} ({CALLS} calls timed one by one)");
    }

    let mut group = c.benchmark_group("pricing_quote");
    group.bench_function("component_fresh_instance", |b| b.iter(|| pricing.answer(black_box(scope())).unwrap().unwrap()));
    group.bench_function("component_warm_instance", |b| b.iter(|| warm.quote(black_box(scope())).unwrap()));
    group.bench_function("native", |b| b.iter(|| pricing_native::V1_3_0.quote(black_box(&native_scope)).unwrap()));
    group.bench_function("answer_kept", |b| b.iter(|| pricing.quote(black_box(scope())).unwrap()));
    group.finish();
}

/// The bundled component with a custom section naming `n`: the same code
/// under another hash, as ten published generations would be.
fn variant(n: usize) -> Vec<u8> {
    fn leb(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"anchor-bench-generation";
    let payload = n.to_le_bytes();
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut wasm = DEFAULT_PRICING_WASM.to_vec();
    wasm.push(0); // a custom section
    leb(body.len(), &mut wasm);
    wasm.extend_from_slice(&body);
    wasm
}

fn cold_start(c: &mut Criterion) {
    let generations: Vec<Vec<u8>> = (0..10).map(variant).collect();
    let dir = std::env::temp_dir().join(format!("anchor-bench-cache-{}", std::process::id()));
    let cache = CompiledCache::new(&dir).expect("cache directory");
    let start = |cache: Option<&CompiledCache>| {
        let engine = PluginEngine::new().expect("engine");
        let loaded: Vec<_> =
            generations.iter().map(|wasm| WasmPricing::load_cached(&engine, wasm, Limits::PRICING, cache).expect("loads")).collect();
        assert_eq!(loaded.len(), 10);
        loaded
    };
    // Fill the cache, and check the ten are ten hashes of one generation.
    let filled = start(Some(&cache));
    let mut hashes: Vec<&str> = filled.iter().map(|p| p.generation().sha256.as_str()).collect();
    hashes.dedup();
    assert_eq!(hashes.len(), 10);
    assert!(filled.iter().all(|p| p.generation().version == "v1.3.0"));
    drop(filled);

    let mut group = c.benchmark_group("cold_start");
    group.sample_size(10);
    group.bench_function("engine_and_10_generations_from_the_disk_cache", |b| b.iter(|| start(Some(&cache))));
    group.bench_function("engine_and_10_generations_compiled", |b| b.iter(|| start(None)));
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, quotes, cold_start);
criterion_main!(benches);
