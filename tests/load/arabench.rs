//! ARA at scale: how long observations take with 100,000 and with 1,000,000
//! stored declarations from 10,000 agents, on SQLite and PostgreSQL.
//!
//!     arabench [DECLARATIONS ...]        (default: 100000 1000000)
//!
//! PostgreSQL is measured when ANCHOR_TEST_POSTGRES_URL is set (a schema of
//! its own, dropped afterwards). ARABENCH_REQUESTS sets the timed requests per
//! route (default 500), ARABENCH_AGENTS the agents (default 10000).
//!
//! The set-up writes rows directly, in SQL, not through the API: the agents,
//! then the declarations cloned from two real ones (one in five carries a
//! template), spread over the 80 days before the server's today (each agent
//! active on up to 20 of them), and a log entry for each. The measured parts
//! are the real ones: the fold that builds ARA's aggregate model, the cutting
//! of the day's releases, and observations over loopback HTTP, each paid with
//! a signed x402 payment where it costs something (only the paid request is
//! timed, not the 402 before it), one request at a time.

use std::time::{Duration, Instant};

use anchor_domain::{Clock, MilliDac};
use anchor_tests::*;
use uuid::Uuid;

#[path = "seed.rs"]
mod seed;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut sizes: Vec<usize> = std::env::args().skip(1).map(|n| n.parse().expect("DECLARATIONS is a number")).collect();
    if sizes.is_empty() {
        sizes = vec![100_000, 1_000_000];
    }
    let requests: usize = std::env::var("ARABENCH_REQUESTS").ok().map_or(500, |n| n.parse().expect("ARABENCH_REQUESTS")).max(1);
    let agents: usize = std::env::var("ARABENCH_AGENTS").ok().map_or(10_000, |n| n.parse().expect("ARABENCH_AGENTS"));
    let mut backends = vec![Backend::Sqlite];
    if postgres_url().is_some() {
        backends.push(Backend::Postgres);
    } else {
        eprintln!("PostgreSQL SKIPPED: ANCHOR_TEST_POSTGRES_URL is not set");
    }
    println!("| backend | stored DDs | route | p50 ms | p99 ms | mean ms | commits per request |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    for backend in backends {
        for &size in &sizes {
            run(backend, size, agents, requests).await?;
        }
    }
    Ok(())
}

/// How a route's path is made for the i-th request.
type PathOf<'a> = Box<dyn Fn(usize) -> String + 'a>;

fn name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

async fn run(backend: Backend, declarations: usize, agents: usize, requests: usize) -> anyhow::Result<()> {
    let options = Options { jobs: false, dab_default: MilliDac::from_dac(1_000_000_000), ..Default::default() };
    let t = TestServer::with(backend, options).await;
    let now = t.clock.now();
    let started = Instant::now();

    // The observer, and two real declarations of its own to clone.
    let (observer, plain, branch_one) = seed::templates(&t).await;

    seed::agents(&t, agents, now).await?;
    seed::declarations(&t, backend, declarations, agents, now, &plain, &branch_one).await;
    let stored = t.scalar("select count(*) from declaration").await;
    eprintln!("{}: {stored} declarations of {agents} agents written in {:.1} s", name(backend), started.elapsed().as_secs_f64());

    let fold_started = Instant::now();
    let folded = seed::fold_all(&t).await?;
    let fold = fold_started.elapsed();
    t.tamper("analyze").await;
    let day_rows = t.scalar("select count(*) from ara_agent_day").await;
    let total_rows = t.scalar("select count(*) from ara_agent_total").await;
    let cut_started = Instant::now();
    let cut = anchor_app::ara::releases::cut_due(&t.state.app).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let cut_time = cut_started.elapsed();
    eprintln!(
        "{}: folded {folded} in {:.1} s ({:.0}/s) into {day_rows} day rows and {total_rows} total rows; cut {cut} releases in {:.0} ms",
        name(backend),
        fold.as_secs_f64(),
        folded as f64 / fold.as_secs_f64(),
        cut_time.as_secs_f64() * 1000.0
    );

    let targets: Vec<String> = match backend {
        Backend::Sqlite => t.strings("select lower(hex(agent_id)) from bench_agent where k < 1000").await,
        Backend::Postgres => t.strings("select replace(agent_id::text, '-', '') from bench_agent where k < 1000").await,
    };
    let targets: Vec<String> =
        targets.iter().map(|hex| Uuid::parse_str(hex).expect("uuid").to_string()).filter(|id| *id != observer.id).collect();
    let routes: Vec<(&str, PathOf, bool)> = vec![
        ("environment (paid, 1 DAC)", Box::new(|_| "/v1/ara/environment".to_string()), true),
        ("pattern/ee-distribution (paid, 1 DAC)", Box::new(|_| "/v1/ara/pattern/ee-distribution".to_string()), true),
        (
            "another agent's profile, level 1 (paid, 3 DAC)",
            Box::new(|i| format!("/v1/ara/agent/{}/profile?resolution_level=1", targets[i % targets.len()])),
            true,
        ),
        ("own profile, level 3 (free)", Box::new(|_| format!("/v1/ara/agent/{}/profile?resolution_level=3", observer.id)), false),
        ("own timeline, level 3 (free)", Box::new(|_| format!("/v1/ara/agent/{}/timeline?resolution_level=3", observer.id)), false),
    ];
    // What the measurement starts from: the load's dirty pages written out,
    // so that no checkpoint of the set-up lands inside a timed request.
    match backend {
        Backend::Sqlite => t.tamper("pragma wal_checkpoint(truncate)").await,
        Backend::Postgres => t.tamper("checkpoint").await,
    }
    for (label, path, paid) in &routes {
        let commits_before = commits(&t, backend).await;
        let mut times = Vec::with_capacity(requests);
        for i in 0..requests + requests / 10 {
            let path = path(i);
            let elapsed = seed::observe(&t, &observer.token, &path, *paid).await;
            if i >= requests / 10 {
                times.push(elapsed);
            }
        }
        times.sort();
        let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1000.0;
        let mean = times.iter().map(Duration::as_secs_f64).sum::<f64>() / times.len() as f64 * 1000.0;
        let per_request = match (commits_before, commits(&t, backend).await) {
            (Some(before), Some(after)) => format!("{:.2}", (after - before) as f64 / (requests + requests / 10) as f64),
            _ => "n/a".to_string(),
        };
        println!("| {} | {stored} | {label} | {:.2} | {:.2} | {mean:.2} | {per_request} |", name(backend), at(0.50), at(0.99));
    }
    Ok(())
}

/// Transactions PostgreSQL has committed in the bench's database so far
/// (SQLite keeps no such count). Backends report their counts when idle, at
/// most once a second, hence the pause. A paid request's count includes its
/// challenge.
async fn commits(t: &TestServer, backend: Backend) -> Option<i64> {
    match backend {
        Backend::Sqlite => None,
        Backend::Postgres => {
            tokio::time::sleep(Duration::from_millis(2_000)).await;
            Some(t.scalar("select xact_commit from pg_stat_database where datname = current_database()").await)
        }
    }
}
