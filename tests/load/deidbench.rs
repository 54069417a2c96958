//! De-identification at scale: how fast the job converts 1,000,000 records
//! past their retention end, and what it does to DD creates running beside it.
//!
//!     deidbench [DECLARATIONS]        (default: 1000000)
//!
//! PostgreSQL when ANCHOR_TEST_POSTGRES_URL is set (a schema of its own,
//! dropped afterwards), else SQLite. DEIDBENCH_AGENTS sets the agents the
//! records belong to (default 10000), DEIDBENCH_CLIENTS the concurrent
//! clients creating DDs (default 8), DEIDBENCH_BEFORE_SECS how long creates
//! are measured alone first (default 20).
//!
//! The set-up writes the agents and the records in SQL (as `arabench` does:
//! cloned from two real ones, one in five with a template, each with a log
//! entry), folds them into ARA with the real fold, then moves the clock so
//! that every one of them is past its retention end. Then, over loopback
//! HTTP, clients create DDs (Trial-paid, each as soon as its previous one was
//! answered): first alone, then while the job de-identifies the backlog as
//! it does on the lease holder (a few batches a round, a round every 100 ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anchor_domain::{Clock, MilliDac};
use anchor_tests::*;
use serde_json::json;

#[path = "seed.rs"]
mod seed;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let declarations: usize = std::env::args().nth(1).map_or(1_000_000, |n| n.parse().expect("DECLARATIONS is a number"));
    let var = |name: &str, default: usize| std::env::var(name).ok().map_or(default, |n| n.parse().expect(name));
    let agents = var("DEIDBENCH_AGENTS", 10_000);
    let clients = var("DEIDBENCH_CLIENTS", 8).max(1);
    let before_secs = var("DEIDBENCH_BEFORE_SECS", 20) as u64;
    let backend = if postgres_url().is_some() { Backend::Postgres } else { Backend::Sqlite };
    if backend == Backend::Sqlite {
        eprintln!("PostgreSQL SKIPPED: ANCHOR_TEST_POSTGRES_URL is not set; measuring SQLite");
    }

    // The rate limit counts in the server's clock, which the set-up stops: it
    // is lifted, or a million creates would reach it.
    let options = Options { jobs: false, rate_limit: u32::MAX, dab_default: MilliDac::from_dac(1_000_000_000), ..Default::default() };
    let t = TestServer::with(backend, options).await;
    let now = t.clock.now();
    let started = Instant::now();
    let owner = t.register().await;
    let plain = t.create(&owner, json!({ "ee_preset": "EE_basic" })).await["dd_id"].as_str().expect("dd_id").to_string();
    let mut body = create_body(json!({ "ee_preset": "EE_standard" }));
    body["content_inclusion_flag"] = json!(1);
    body["template"] = json!({ "decision_class": "payment", "decision_scale_value": 1, "decision_scale_unit": "USDC" });
    let branch_one = t.post("/v1/dd/create", Some(&owner.token), &body).await.json["dd_id"].as_str().expect("dd_id").to_string();
    for dd in [&plain, &branch_one] {
        assert_eq!(t.confirm(&owner, dd).await.status.as_u16(), 200);
    }
    seed::agents(&t, agents, now).await?;
    seed::declarations(&t, backend, declarations, agents, now, &plain, &branch_one).await;
    let interval = match backend {
        Backend::Sqlite => "strftime('%Y-%m-%dT%H:%M:%S+00:00', anchored_at, '+90 days')",
        Backend::Postgres => "anchored_at + interval '90 days'",
    };
    // Every record is kept 90 days (short), whatever its template said.
    t.tamper(&format!("update declaration set retention_expires_at = {interval}")).await;
    let stored = t.scalar("select count(*) from declaration").await;
    eprintln!("{stored} declarations of {agents} agents written in {:.1} s", started.elapsed().as_secs_f64());

    let fold_started = Instant::now();
    let folded = seed::fold_all(&t).await?;
    eprintln!("folded {folded} in {:.1} s", fold_started.elapsed().as_secs_f64());
    match backend {
        Backend::Sqlite => t.tamper("pragma wal_checkpoint(truncate)").await,
        Backend::Postgres => t.tamper("analyze; checkpoint").await,
    }

    // Everything is past its retention end once the clock moves 200 days.
    t.clock.advance(chrono::Duration::days(200));
    let due = t.store.deidentify_backlog(t.clock.now()).await?;
    eprintln!("{due} records due for de-identification");

    // The clients' agents: fresh, with a Trial that does not run out here.
    let mut tokens = Vec::new();
    for _ in 0..clients {
        tokens.push(t.register().await.token);
    }
    t.tamper("update agent set trial_balance_milli = 1000000000000").await;
    let t = Arc::new(t);
    eprintln!("creating DDs alone for {before_secs} s");

    let (alone, alone_secs) = creates(&t, &tokens, Duration::from_secs(before_secs), None).await;
    eprintln!("{} creates alone; de-identifying with creates beside", alone.len());
    let running = Arc::new(AtomicBool::new(true));
    let job = {
        let (t, running) = (t.clone(), running.clone());
        tokio::spawn(async move {
            let schedule = anchor_app::jobs::Schedule::default();
            let started = Instant::now();
            let mut records = 0;
            loop {
                let (n, more) = anchor_app::retention::deidentify_due(&t.state.app, schedule.deidentify_batches).await.expect("batch");
                records += n;
                if !more {
                    break;
                }
                tokio::time::sleep(schedule.round).await;
            }
            running.store(false, Ordering::SeqCst);
            (records, started.elapsed())
        })
    };
    let (during, during_secs) = creates(&t, &tokens, Duration::from_secs(24 * 3600), Some(running)).await;
    let (records, took) = job.await?;
    let left = t.store.deidentify_backlog(t.clock.now()).await?;
    let months = t.scalar("select cast(coalesce(sum(n), 0) as bigint) from ara_deidentified_month where dimension = 'all'").await;

    let backend_name = if backend == Backend::Postgres { "PostgreSQL" } else { "SQLite" };
    println!(
        "{backend_name}: de-identified {records} of {due} records in {:.1} s: {:.0} records/s ({left} left; {months} counted in the id-free buckets)",
        took.as_secs_f64(),
        records as f64 / took.as_secs_f64()
    );
    println!("| DD creates ({clients} clients) | requests | per second | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, times, secs) in [("alone", alone, alone_secs), ("during de-identification", during, during_secs)] {
        let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1000.0;
        println!("| {label} | {} | {:.0} | {:.2} | {:.2} | {:.2} |", times.len(), times.len() as f64 / secs, at(0.5), at(0.99), at(1.0));
    }
    Ok(())
}

/// Clients creating DDs back to back for `length`, or while `running` holds;
/// every answer's time, sorted, and the seconds it took.
async fn creates(t: &Arc<TestServer>, tokens: &[String], length: Duration, running: Option<Arc<AtomicBool>>) -> (Vec<Duration>, f64) {
    let started = Instant::now();
    let mut clients = Vec::new();
    for token in tokens {
        let (t, token, running) = (t.clone(), token.clone(), running.clone());
        clients.push(tokio::spawn(async move {
            let mut times = Vec::new();
            while started.elapsed() < length && running.as_ref().is_none_or(|r| r.load(Ordering::SeqCst)) {
                let body = create_body(json!({ "ee_preset": "EE_basic" }));
                let sent = Instant::now();
                let reply = t.post("/v1/dd/create", Some(&token), &body).await;
                times.push(sent.elapsed());
                assert_eq!(reply.status.as_u16(), 201, "{}", reply.text);
            }
            times
        }));
    }
    let mut times = Vec::new();
    for client in clients {
        times.extend(client.await.expect("client"));
    }
    times.sort();
    (times, started.elapsed().as_secs_f64())
}
