//! What an owner sign-in costs the host: one argon2id hash (sign-up, password
//! change) and one verification (sign-in, password confirmation), with the
//! parameters the service uses (the argon2 crate's defaults: 19 MiB, 2 passes,
//! 1 lane).
//!
//!     cargo bench -p anchor-benches --bench owner_password

use std::hint::black_box;

use anchor_app::owners::password::{hash as hash_password, verify as verify_password};
use criterion::{Criterion, criterion_group, criterion_main};

fn password(c: &mut Criterion) {
    let stored = hash_password("a long passphrase 7").unwrap();
    assert!(verify_password(Some(&stored), "a long passphrase 7"));
    let mut group = c.benchmark_group("owner_password");
    group.sample_size(20);
    group.bench_function("argon2id_hash", |b| b.iter(|| hash_password(black_box("a long passphrase 7")).unwrap()));
    group.bench_function("argon2id_verify", |b| b.iter(|| verify_password(black_box(Some(&stored)), black_box("a long passphrase 7"))));
    group.finish();
}

criterion_group!(benches, password);
criterion_main!(benches);
