//! Ten million records: what anchoring, receipts, tiles, ARA observations,
//! backup and restore cost when the database holds many confirmed
//! declarations, beside an empty database, in the same run.
//!
//!     scalebench [DECLARATIONS]        (default 10000000)
//!
//! `SCALEBENCH_BACKENDS`: `postgres`, `sqlite` or both, comma-separated
//! (default: PostgreSQL when ANCHOR_TEST_POSTGRES_URL is set, else SQLite).
//! `SCALEBENCH_AGENTS` (default 50000), `SCALEBENCH_PAIRS` (anchored pairs
//! per load run, default 5000), `SCALEBENCH_CONCURRENCY` (default 16),
//! `SCALEBENCH_REQUESTS` (timed requests per read route, default 500).
//! The load generator (`loadgen`, built beside this program) runs as a child
//! process against the in-process server, at its peak and then paced to half.
//!
//! The set-up writes rows directly in SQL: agents cloned from a registered
//! one, declarations cloned from two real ones (as arabench does: one in five
//! carries a template, spread over the 80 days before today), and a pending
//! log leaf for each; the service's own integrator then takes the leaves into
//! the log, so the tiles, checkpoints and proofs are the real ones. ARA's
//! per-agent day and total counts are computed in SQL from each clone's
//! template, action type and time of day, with the contributions the fold
//! itself computes (`anchor_domain::ara::contributions`) for each such
//! combination; the band positions of branch-1 decisions (a per-record
//! sample of the agent's recent ones) are not seeded.

use std::time::{Duration, Instant};

use anchor_domain::ara::contributions;
use anchor_domain::declarations::dd::ActionType;
use anchor_domain::{Clock, MilliDac};
use anchor_tests::*;
use serde_json::json;
use uuid::Uuid;

#[path = "seed.rs"]
#[allow(dead_code)] // the shared set-up's one-by-one agents and fold are not used here
mod seed;

/// How a route's path is made for the i-th request.
type PathOf<'a> = Box<dyn Fn(usize) -> String + 'a>;

struct Config {
    agents: usize,
    pairs: usize,
    concurrency: usize,
    requests: usize,
}

/// What one database of one size measured.
#[derive(Default)]
struct Figures {
    stored: i64,
    peak: f64,
    pair_p99: f64,
    half_rate: f64,
    half_confirm_p99: f64,
    new_receipt: (f64, f64),
    old_receipt: (f64, f64),
    tile: (f64, f64),
    ara: Vec<(&'static str, f64, f64)>,
    backup_s: f64,
    backup_bytes: u64,
    restore_s: f64,
    /// Bytes of every table and index of the database.
    db_bytes: i64,
    /// Bytes of the declaration table with its indexes, and of its rows
    /// alone (PostgreSQL: the heap; SQLite: not told apart).
    declaration_bytes: i64,
    /// Mean bytes of a declaration row as PostgreSQL stores it
    /// (`pg_column_size` of the row: its values and its 24-byte header; a
    /// 4-byte line pointer comes on top).
    row_values: f64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let size: usize = std::env::args().nth(1).map_or(10_000_000, |n| n.parse().expect("DECLARATIONS is a number"));
    let number = |name: &str, default: usize| std::env::var(name).ok().map_or(default, |n| n.parse().expect(name));
    let config = Config {
        agents: number("SCALEBENCH_AGENTS", 50_000).max(1),
        pairs: number("SCALEBENCH_PAIRS", 5_000).max(100),
        concurrency: number("SCALEBENCH_CONCURRENCY", 16).max(1),
        requests: number("SCALEBENCH_REQUESTS", 500).max(10),
    };
    let backends: Vec<Backend> = match std::env::var("SCALEBENCH_BACKENDS") {
        Ok(list) => list
            .split(',')
            .map(|b| match b.trim() {
                "sqlite" => Backend::Sqlite,
                "postgres" => Backend::Postgres,
                other => panic!("SCALEBENCH_BACKENDS: {other} is neither sqlite nor postgres"),
            })
            .collect(),
        Err(_) if postgres_url().is_some() => vec![Backend::Postgres],
        Err(_) => {
            eprintln!("PostgreSQL SKIPPED: ANCHOR_TEST_POSTGRES_URL is not set; measuring SQLite");
            vec![Backend::Sqlite]
        }
    };
    let loadgen = std::env::current_exe()?.with_file_name("loadgen");
    anyhow::ensure!(loadgen.is_file(), "{} is missing: build it with this program", loadgen.display());
    for backend in backends {
        let empty = measure(backend, 0, &config, &loadgen).await?;
        let full = measure(backend, size, &config, &loadgen).await?;
        report(backend, &empty, &full);
    }
    Ok(())
}

fn name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

async fn measure(backend: Backend, size: usize, config: &Config, loadgen: &std::path::Path) -> anyhow::Result<Figures> {
    let options = Options { dab_default: MilliDac::from_dac(1_000_000_000), rate_limit: u32::MAX, ..Default::default() };
    let t = TestServer::with(backend, options).await;
    let now = t.clock.now();
    let (observer, plain, branch_one) = seed::templates(&t).await;
    // Another agent with a record of its own, so that even the empty database
    // has someone else to observe.
    t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    t.tamper("update agent set disclosure_level = 'full'").await;
    t.wait_for_fold(3).await;

    let mut sampled = Vec::new();
    if size > 0 {
        let started = Instant::now();
        // The fold starts after the seeded leaves: their counts are written below.
        t.tamper(&format!("update ara_fold set next_leaf = {}", size + 3)).await;
        let mut owners = Vec::new();
        for _ in 0..10 {
            owners.push(t.register().await);
        }
        agents(&t, backend, config.agents.saturating_sub(10), &observer.id).await;
        seed::rows(&t, backend, size, config.agents, now, &plain, &branch_one).await;
        let rows = started.elapsed();
        let leaf = match backend {
            Backend::Sqlite => "cast(hex(dd_id) || '|' || anchored_at || '|' || hex(ee_id) as blob)",
            Backend::Postgres => {
                "convert_to(cast(dd_id as text) || '|' || cast(anchored_at as text) || '|' || cast(ee_id as text), 'UTF8')"
            }
        };
        // The three records anchored through the service are folded already.
        let templates = "(select dd_id from log_entry where leaf_index < 3)";
        t.tamper(&format!(
            "insert into log_pending (dd_id, leaf_data, enqueued_at) select dd_id, {leaf}, anchored_at from declaration \
             where confirmed_at is not null and dd_id not in {templates}"
        ))
        .await;
        let integrating = Instant::now();
        wait_for_size(&t, (size + 3) as i64).await;
        let integrated = integrating.elapsed();
        let counting = Instant::now();
        aggregates(&t, backend, &plain, &branch_one, templates).await?;
        t.tamper("delete from ara_release").await;
        anchor_app::ara::releases::cut_due(&t.state.app).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let counted = counting.elapsed();
        sampled = sample_records(&t, backend, &owners).await;
        match backend {
            Backend::Sqlite => t.tamper("analyze; pragma wal_checkpoint(truncate)").await,
            Backend::Postgres => settle_postgres(&t).await?,
        }
        eprintln!(
            "{}: {size} declarations of {} agents written in {:.0} s, integrated into the log in {:.0} s ({:.0} leaves/s), \
             counted for ARA in {:.0} s",
            name(backend),
            config.agents,
            rows.as_secs_f64(),
            integrated.as_secs_f64(),
            size as f64 / integrated.as_secs_f64(),
            counted.as_secs_f64()
        );
    }
    let mut f = Figures { stored: t.scalar("select count(*) from declaration").await, ..Default::default() };
    disk(&t, backend, &mut f).await;
    reads(&t, &observer, &sampled, config.requests, &mut f).await;

    // Anchoring at the peak, then paced to half of it.
    let url = t.base.clone();
    let statements = Statements::reset(&t).await;
    let peak = run_loadgen(loadgen, &url, config.pairs, config.concurrency, None).await?;
    if let Some(statements) = statements {
        statements.print(config.pairs).await;
    }
    f.peak = figure(&peak, "DDs/s").unwrap_or(0.0);
    f.pair_p99 = p99_of(&peak, "per pair p50");
    f.new_receipt = (figure_after(&peak, "receipt fetch: p50"), p99_of(&peak, "receipt fetch"));
    f.half_rate = (f.peak / 2.0).max(1.0);
    let half = run_loadgen(loadgen, &url, config.pairs / 2, config.concurrency, Some(f.half_rate)).await?;
    // "confirm p50", not "confirm": the report begins "(create + confirm)".
    f.half_confirm_p99 = p99_of(&half, "; confirm p50");
    backup(&t, backend, &mut f).await?;
    Ok(f)
}

/// After the bulk set-up, the PostgreSQL tables as a database that grew over
/// time has them: vacuumed (visibility map set, dead index entries of the
/// drained `log_pending` gone), analyzed, and checkpointed, so that the
/// measurement does not share the machine with autovacuum's first visit to
/// ten million fresh rows.
async fn settle_postgres(t: &TestServer) -> anyhow::Result<()> {
    use sqlx::Connection;
    let (url, schema) = t.postgres_schema().expect("PostgreSQL schema");
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let tables: Vec<String> = sqlx::query_scalar("select tablename::text from pg_tables where schemaname = $1 order by 1")
        .bind(schema)
        .fetch_all(&mut conn)
        .await?;
    let started = Instant::now();
    for table in &tables {
        // One statement a message: VACUUM runs outside any transaction block.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("vacuum (analyze) \"{schema}\".\"{table}\""))).execute(&mut conn).await?;
    }
    sqlx::raw_sql("checkpoint").execute(&mut conn).await?;
    eprintln!("  {} tables vacuumed and analyzed, then a checkpoint, in {:.0} s", tables.len(), started.elapsed().as_secs_f64());
    Ok(())
}

/// A statement's text, calls, total and mean ms, buffers hit and read per call.
type StatementRow = (String, i64, f64, f64, f64, f64);

/// Where `pg_stat_statements` is loaded (`shared_preload_libraries`), the
/// statements of a load run with their time and buffers, so that a figure
/// that grows with the database says which statement grew. Elsewhere, nothing.
struct Statements {
    pool: sqlx::PgPool,
    schema: String,
}

impl Statements {
    async fn reset(t: &TestServer) -> Option<Statements> {
        let (url, schema) = t.postgres_schema()?;
        let pool = sqlx::PgPool::connect(url).await.ok()?;
        sqlx::raw_sql("create extension if not exists pg_stat_statements").execute(&pool).await.ok()?;
        sqlx::raw_sql("select pg_stat_statements_reset()").execute(&pool).await.ok()?;
        Some(Statements { pool, schema: schema.to_string() })
    }

    async fn print(&self, pairs: usize) {
        let rows: Result<Vec<StatementRow>, _> = sqlx::query_as(
            "select left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls, total_exec_time, mean_exec_time, \
             cast(shared_blks_hit as float8) / greatest(calls, 1), cast(shared_blks_read as float8) / greatest(calls, 1) \
             from pg_stat_statements where query not like '%pg_stat_statements%' order by total_exec_time desc limit 10",
        )
        .fetch_all(&self.pool)
        .await;
        let Ok(rows) = rows else { return };
        let total: f64 = rows.iter().map(|r| r.2).sum();
        eprintln!(
            "  statements of the run in schema {} (pg_stat_statements, top 10 by time: {:.0} ms, {:.2} ms a pair):",
            self.schema,
            total,
            total / pairs.max(1) as f64
        );
        eprintln!("  {:>8} {:>10} {:>8} {:>8} {:>8}  statement", "calls", "total ms", "mean ms", "hit/call", "read/call");
        for (query, calls, total, mean, hit, read) in rows {
            eprintln!("  {calls:>8} {total:>10.0} {mean:>8.3} {hit:>8.1} {read:>8.2}  {query}");
        }
    }
}

/// `agents - 1` agents cloned in SQL from the observer's row, with fresh ids
/// and secrets, numbered with every agent in `bench_agent` (k, agent_id).
async fn agents(t: &TestServer, backend: Backend, agents: usize, observer: &str) {
    let columns = seed::columns(t, backend, "agent").await;
    let observer = seed::uuid_literal(backend, t, observer);
    let (random_id, random_hash, series) = match backend {
        Backend::Sqlite => (
            "randomblob(16)",
            "randomblob(32)",
            format!("with recursive g(i) as (select 1 union all select i + 1 from g where i < {}) ", agents.saturating_sub(1)),
        ),
        Backend::Postgres => ("gen_random_uuid()", "sha256(cast(gen_random_uuid() as text)::bytea)", String::new()),
    };
    let from = match backend {
        Backend::Sqlite => "g".to_string(),
        Backend::Postgres => format!("generate_series(1, {}) as g(i)", agents.saturating_sub(1)),
    };
    let values: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "agent_id" => random_id.to_string(),
            "token_hash" | "recovery_hash" => random_hash.to_string(),
            "owner_id" => "null".to_string(),
            other => format!("o.{other}"),
        })
        .collect();
    if agents > 1 {
        t.tamper(&format!(
            "{series}insert into agent ({}) select {} from {from} join agent o on o.agent_id = {observer}",
            columns.join(", "),
            values.join(", ")
        ))
        .await;
    }
    seed::number_agents(t).await;
}

/// Waits for the integrator to take every pending leaf (a checkpoint of `size`).
async fn wait_for_size(t: &TestServer, size: i64) {
    let started = Instant::now();
    let mut told = Instant::now();
    loop {
        let at = t.store.latest_checkpoint().await.expect("checkpoint").map_or(0, |c| c.size);
        if at >= size {
            return;
        }
        if told.elapsed() > Duration::from_secs(30) {
            eprintln!("  log at {at} of {size} leaves after {:.0} s", started.elapsed().as_secs_f64());
            told = Instant::now();
        }
        assert!(started.elapsed() < Duration::from_secs(3_600 + size as u64 / 5_000), "the log did not reach {size} leaves");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// ARA's day and total counts of the seeded declarations, in SQL: each
/// clone counts what its template would with the clone's action type and
/// time of day (`bench_contrib`, from the fold's own `contributions`).
async fn aggregates(t: &TestServer, backend: Backend, plain: &str, branch_one: &str, templates: &str) -> anyhow::Result<()> {
    t.tamper("create table bench_contrib (tpl integer, action text, zone integer, dimension text, value text, visibility integer)").await;
    let mut rows = Vec::new();
    for (tpl, id) in [(0, plain), (1, branch_one)] {
        let stored = t.store.declaration(Uuid::parse_str(id)?).await?.expect("template");
        let day = stored.declaration.anchored_at.date_naive().and_hms_opt(0, 0, 0).expect("midnight").and_utc();
        for action in [ActionType::Hold, ActionType::Reject, ActionType::Approve, ActionType::Execute] {
            for zone in 0..4 {
                let mut d = stored.declaration.clone();
                d.dd.action_type = action;
                d.anchored_at = day + chrono::Duration::hours(zone * 6 + 1);
                for c in contributions(&d) {
                    rows.push(format!(
                        "({tpl}, '{}', {zone}, '{}', '{}', {})",
                        action.as_str(),
                        c.dimension.as_str(),
                        c.value.replace('\'', "''"),
                        c.visibility.code()
                    ));
                }
            }
        }
    }
    t.tamper(&format!("insert into bench_contrib (tpl, action, zone, dimension, value, visibility) values {}", rows.join(", "))).await;
    let (day, zone, tpl) = match backend {
        Backend::Sqlite => (
            "cast(strftime('%s', d.anchored_at) as integer) / 86400",
            "cast(strftime('%H', d.anchored_at) as integer) / 6",
            "case when d.content_inclusion then 1 else 0 end",
        ),
        Backend::Postgres => (
            "cast(floor(extract(epoch from d.anchored_at) / 86400) as integer)",
            "cast(extract(hour from d.anchored_at at time zone 'UTC') as integer) / 6",
            "case when d.content_inclusion then 1 else 0 end",
        ),
    };
    // Two passes, each one sort or hash of its own: the clones counted per
    // (agent, day, template, action, time of day) in one scan of the table,
    // then those counts spread over their dimensions. On PostgreSQL with the
    // memory to hash them (the default 4 MB would spill every step to disk).
    let (memory, table) = match backend {
        Backend::Sqlite => ("", "create table"),
        Backend::Postgres => ("set work_mem = '1GB'; ", "create unlogged table"),
    };
    t.tamper(&format!(
        "{memory}{table} bench_counts as select d.agent_id, {day} as day, {tpl} as tpl, d.decision_action_type as action, \
         {zone} as zone, count(*) as n from declaration d \
         where d.confirmed_at is not null and d.dd_id not in {templates} group by 1, 2, 3, 4, 5"
    ))
    .await;
    t.tamper(&format!(
        "{memory}insert into ara_agent_day (agent_id, day, dimension, value, visibility, n) \
         select b.agent_id, b.day, c.dimension, c.value, c.visibility, sum(b.n) from bench_counts b \
         join bench_contrib c on c.tpl = b.tpl and c.action = b.action and c.zone = b.zone \
         where true group by b.agent_id, b.day, c.dimension, c.value, c.visibility \
         on conflict (agent_id, day, dimension, value, visibility) do update set n = ara_agent_day.n + excluded.n"
    ))
    .await;
    t.tamper("delete from ara_agent_total").await;
    t.tamper(&format!(
        "{memory}insert into ara_agent_total (agent_id, dimension, value, visibility, n, first_day, last_day) \
         select agent_id, dimension, value, visibility, sum(n), min(day), max(day) from ara_agent_day \
         group by agent_id, dimension, value, visibility"
    ))
    .await;
    // Every confirmed declaration counted once, as the fold counts it.
    let counted = t.scalar("select cast(sum(n) as bigint) from ara_agent_day where dimension = 'all'").await;
    let confirmed = t.scalar("select count(*) from declaration where confirmed_at is not null").await;
    anyhow::ensure!(counted == confirmed, "ARA counts {counted} declarations of {confirmed}");
    Ok(())
}

/// Records seeded for `owners` (registered before the seeding, so they are
/// among the agents the clones are spread over): (token, dd_id), twenty
/// each, for receipts of records deep in the log.
async fn sample_records(t: &TestServer, backend: Backend, owners: &[Agent]) -> Vec<(String, String)> {
    let hex = match backend {
        Backend::Sqlite => "lower(hex(dd_id))",
        Backend::Postgres => "replace(cast(dd_id as text), '-', '')",
    };
    let mut out = Vec::new();
    for owner in owners {
        let records = t
            .strings(&format!(
                "select {hex} from declaration where agent_id = {} order by anchored_at limit 20",
                seed::uuid_literal(backend, t, &owner.id)
            ))
            .await;
        for record in records {
            out.push((owner.token.clone(), Uuid::parse_str(&record).expect("dd id").to_string()));
        }
    }
    assert!(!out.is_empty(), "seeded records of the sampled owners");
    out
}

/// p50 and p99, in milliseconds, of `times`.
fn percentiles(mut times: Vec<Duration>) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1000.0;
    (at(0.50), at(0.99))
}

/// The read routes, one request at a time: receipts of seeded records (none
/// on an empty database), hash tiles across the tree, ARA observations.
async fn reads(t: &TestServer, observer: &Agent, sampled: &[(String, String)], requests: usize, f: &mut Figures) {
    if !sampled.is_empty() {
        let mut times = Vec::new();
        for i in 0..requests + requests / 10 {
            let (token, dd_id) = &sampled[i * 7919 % sampled.len()];
            let started = Instant::now();
            let reply = t.http.get(t.url(&format!("/v1/dd/{dd_id}/receipt"))).bearer_auth(token).send().await.expect("receipt");
            let status = reply.status().as_u16();
            let text = reply.text().await.expect("receipt body");
            let elapsed = started.elapsed();
            assert_eq!(status, 200, "receipt of {dd_id}: {text}");
            if i >= requests / 10 {
                times.push(elapsed);
            }
        }
        f.old_receipt = percentiles(times);
    }
    let size = t.store.latest_checkpoint().await.expect("checkpoint").map_or(0, |c| c.size) as u64;
    let full_tiles = size / 256;
    if full_tiles > 0 {
        let mut times = Vec::new();
        for i in 0..requests + requests / 10 {
            // Level-0 tiles anywhere in the tree, and level-1 tiles where there are whole ones.
            let (level, n) = if i % 4 == 3 && size / 65_536 > 0 {
                (1, (i as u64 * 104_729) % (size / 65_536))
            } else {
                (0, (i as u64 * 7_919_003) % full_tiles)
            };
            let path = format!("/v1/log/tile/{level}/{}", tile_index(n));
            let started = Instant::now();
            let reply = t.http.get(t.url(&path)).send().await.expect("tile");
            let status = reply.status().as_u16();
            let bytes = reply.bytes().await.expect("tile body");
            let elapsed = started.elapsed();
            assert_eq!((status, bytes.len()), (200, 256 * 32), "{path}");
            if i >= requests / 10 {
                times.push(elapsed);
            }
        }
        f.tile = percentiles(times);
    }
    let others = other_agents(t, &observer.id).await;
    let routes: Vec<(&'static str, PathOf, bool)> = vec![
        ("environment (paid)", Box::new(|_| "/v1/ara/environment".to_string()), true),
        ("pattern/ee-distribution (paid)", Box::new(|_| "/v1/ara/pattern/ee-distribution".to_string()), true),
        (
            "another agent's profile, level 1 (paid)",
            Box::new(move |i| format!("/v1/ara/agent/{}/profile?resolution_level=1", others[i % others.len()])),
            true,
        ),
        ("own profile, level 3", Box::new(|_| format!("/v1/ara/agent/{}/profile?resolution_level=3", observer.id)), false),
        ("own timeline, level 3", Box::new(|_| format!("/v1/ara/agent/{}/timeline?resolution_level=3", observer.id)), false),
    ];
    for (label, path, paid) in &routes {
        // Cross-agent statistics need enough agents: an empty database has not.
        let probe = t.http.get(t.url(&path(0))).bearer_auth(&observer.token).send().await.expect("probe");
        if probe.status().as_u16() == 404 {
            f.ara.push((label, f64::NAN, f64::NAN));
            continue;
        }
        let mut times = Vec::new();
        for i in 0..requests + requests / 10 {
            let elapsed = seed::observe(t, &observer.token, &path(i), *paid).await;
            if i >= requests / 10 {
                times.push(elapsed);
            }
        }
        let (p50, p99) = percentiles(times);
        f.ara.push((label, p50, p99));
    }
}

/// Up to 1,000 agents other than the observer.
async fn other_agents(t: &TestServer, observer: &str) -> Vec<String> {
    let found = match t.backend {
        Backend::Sqlite => t.strings("select lower(hex(agent_id)) from agent limit 1001").await,
        Backend::Postgres => t.strings("select replace(cast(agent_id as text), '-', '') from agent limit 1001").await,
    };
    let others: Vec<String> = found
        .iter()
        .filter_map(|hex| Uuid::parse_str(hex).ok())
        .map(|id| id.to_string())
        .filter(|id| id != observer && *id != Uuid::nil().to_string())
        .take(1000)
        .collect();
    assert!(!others.is_empty(), "another agent to observe");
    others
}

/// The C2SP path of tile number `n`: groups of three digits, all but the last `x`-prefixed.
fn tile_index(n: u64) -> String {
    let digits = n.to_string();
    let padded = format!("{}{digits}", "0".repeat((3 - digits.len() % 3) % 3));
    let groups: Vec<&str> = padded.as_bytes().chunks(3).map(|g| std::str::from_utf8(g).expect("digits")).collect();
    let last = groups.len() - 1;
    groups.iter().enumerate().map(|(i, g)| if i < last { format!("x{g}") } else { g.to_string() }).collect::<Vec<_>>().join("/")
}

/// Bytes on disk: the whole database, the declaration table, a row's values.
async fn disk(t: &TestServer, backend: Backend, f: &mut Figures) {
    match backend {
        Backend::Sqlite => {
            t.tamper("pragma wal_checkpoint(truncate)").await;
            f.db_bytes = t.scalar("select page_count * page_size from pragma_page_count(), pragma_page_size()").await;
        }
        Backend::Postgres => {
            f.db_bytes = t
                .scalar(
                    "select cast(coalesce(sum(pg_total_relation_size(c.oid)), 0) as bigint) from pg_class c \
                     join pg_namespace n on n.oid = c.relnamespace where n.nspname = current_schema() and c.relkind = 'r'",
                )
                .await;
            f.declaration_bytes = t.scalar("select pg_total_relation_size('declaration')").await;
            f.row_values = t
                .scalar("select cast(round(avg(pg_column_size(d.*))) as bigint) from (select * from declaration limit 10000) d")
                .await as f64;
        }
    }
}

/// Backup and restore: `anchor backup` / `anchor restore` on SQLite;
/// `pg_dump` (custom format) and `pg_restore` into a fresh database on
/// PostgreSQL, as deploy/README.md tells operators.
async fn backup(t: &TestServer, backend: Backend, f: &mut Figures) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("scalebench-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    match backend {
        Backend::Sqlite => {
            // The copy and the restored database are each as large as the database.
            let free = available_bytes(&dir.to_string_lossy());
            if free.is_some_and(|free| free < f.db_bytes as u64 * 5 / 2) {
                eprintln!("  backup and restore not tried: {free:?} bytes free beside {} for two copies", f.db_bytes);
                (f.backup_s, f.restore_s) = (f64::NAN, f64::NAN);
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(());
            }
            let file = t.sqlite_file().expect("SQLite file");
            let copy = dir.join("backup.db");
            let started = Instant::now();
            anchor_server::operate::backup(&anchor_server::operate::Embedded::new(file), &copy).await?;
            f.backup_s = started.elapsed().as_secs_f64();
            f.backup_bytes = std::fs::metadata(&copy)?.len();
            let started = Instant::now();
            anchor_server::operate::restore(&anchor_server::operate::Embedded::new(dir.join("restored.db")), &copy, None, false).await?;
            f.restore_s = started.elapsed().as_secs_f64();
        }
        Backend::Postgres => {
            let (url, schema) = t.postgres_schema().expect("PostgreSQL schema");
            let dump = dir.join("backup.dump");
            let started = Instant::now();
            let status = std::process::Command::new("pg_dump")
                .args(["--format=custom", "--no-owner", "--schema", schema, "--file"])
                .arg(&dump)
                .arg(url)
                .status()?;
            anyhow::ensure!(status.success(), "pg_dump failed");
            f.backup_s = started.elapsed().as_secs_f64();
            f.backup_bytes = std::fs::metadata(&dump)?.len();
            let admin = sqlx::PgPool::connect(url).await?;
            // A restored copy is as large as the database: not tried where the disk cannot hold it.
            let data_directory: String = sqlx::query_scalar("show data_directory").fetch_one(&admin).await?;
            let free = available_bytes(&data_directory);
            if free.is_some_and(|free| free < f.db_bytes as u64 * 3 / 2) {
                eprintln!("  restore not tried: {free:?} bytes free beside {} for the copy", f.db_bytes);
                f.restore_s = f64::NAN;
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(());
            }
            let database = format!("scalebench_{}", Uuid::new_v4().simple());
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("create database {database}"))).execute(&admin).await?;
            let target = match url.rsplit_once('/') {
                Some((server, _)) => format!("{server}/{database}"),
                None => anyhow::bail!("{url} names no database"),
            };
            let started = Instant::now();
            let status = std::process::Command::new("pg_restore")
                .args(["--no-owner", "--jobs", "2", "--exit-on-error", "--dbname"])
                .arg(&target)
                .arg(&dump)
                .status()?;
            f.restore_s = started.elapsed().as_secs_f64();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("drop database {database} with (force)"))).execute(&admin).await?;
            anyhow::ensure!(status.success(), "pg_restore failed");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Bytes free on the file system holding `path` (`df`), if it can be read.
fn available_bytes(path: &str) -> Option<u64> {
    let output = std::process::Command::new("df").args(["--output=avail", "-B1", path]).output().ok()?;
    String::from_utf8_lossy(&output.stdout).lines().nth(1)?.trim().parse().ok()
}

/// Runs the load generator against `url`; its report.
async fn run_loadgen(loadgen: &std::path::Path, url: &str, pairs: usize, concurrency: usize, rate: Option<f64>) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::new(loadgen);
    command.args(["--url", url, "--pairs", &pairs.to_string(), "--concurrency", &concurrency.to_string()]);
    match rate {
        Some(rate) => command.args(["--rate", &format!("{rate:.0}")]),
        None => command.arg("--log"),
    };
    let output = command.output().await?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    anyhow::ensure!(output.status.success(), "loadgen failed: {report}{}", String::from_utf8_lossy(&output.stderr));
    eprintln!("  {}", report.trim().replace('\n', "\n  "));
    Ok(report)
}

/// The number just before `unit` in `text` (the first such).
fn figure(text: &str, unit: &str) -> Option<f64> {
    let at = text.find(unit)?;
    text[..at].trim_end().rsplit(' ').next()?.parse().ok()
}

fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.find(marker).map(|at| &text[at + marker.len()..])
}

/// The first number after `marker`.
fn figure_after(text: &str, marker: &str) -> f64 {
    after(text, marker).and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.trim_end_matches(',').parse().ok()).unwrap_or(0.0)
}

/// The p99 (ms) loadgen reports after `what` (e.g. "; confirm p50", "per pair p50").
fn p99_of(text: &str, what: &str) -> f64 {
    after(text, what).map_or(0.0, |rest| figure_after(rest, "p99"))
}

fn report(backend: Backend, empty: &Figures, full: &Figures) {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!("\n### {}: {} stored declarations beside an empty database\n", name(backend), full.stored);
    println!("| figure | empty | {} stored | ratio |", full.stored);
    println!("|---|---:|---:|---:|");
    println!("| anchored DDs/s at the peak | {:.0} | {:.0} | {:.2} |", empty.peak, full.peak, ratio(full.peak, empty.peak));
    println!(
        "| per pair p99 at the peak, ms | {:.2} | {:.2} | {:.2} |",
        empty.pair_p99,
        full.pair_p99,
        ratio(full.pair_p99, empty.pair_p99)
    );
    println!(
        "| confirm p99 at half the peak ({:.0} / {:.0} pairs/s), ms | {:.2} | {:.2} | {:.2} |",
        empty.half_rate,
        full.half_rate,
        empty.half_confirm_p99,
        full.half_confirm_p99,
        ratio(full.half_confirm_p99, empty.half_confirm_p99)
    );
    println!(
        "| receipt of a new record p50 / p99, ms | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} |",
        empty.new_receipt.0,
        empty.new_receipt.1,
        full.new_receipt.0,
        full.new_receipt.1,
        ratio(full.new_receipt.1, empty.new_receipt.1)
    );
    println!("| receipt of a seeded record p50 / p99, ms | — | {:.2} / {:.2} | — |", full.old_receipt.0, full.old_receipt.1);
    println!(
        "| hash tile p50 / p99, ms | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} |",
        empty.tile.0,
        empty.tile.1,
        full.tile.0,
        full.tile.1,
        ratio(full.tile.1, empty.tile.1)
    );
    for ((label, p50, p99), (_, full50, full99)) in empty.ara.iter().zip(&full.ara) {
        println!("| ARA {label} p50 / p99, ms | {p50:.2} / {p99:.2} | {full50:.2} / {full99:.2} | {:.2} |", ratio(*full99, *p99));
    }
    println!("| backup, s (bytes) | {:.2} ({}) | {:.1} ({}) | — |", empty.backup_s, empty.backup_bytes, full.backup_s, full.backup_bytes);
    println!("| restore, s | {:.2} | {:.1} | — |", empty.restore_s, full.restore_s);
    let per_dd = |bytes: i64| if full.stored > empty.stored { (bytes as f64) / (full.stored - empty.stored) as f64 } else { 0.0 };
    println!("| bytes on disk per declaration (all tables and indexes) | — | {:.0} | — |", per_dd(full.db_bytes - empty.db_bytes));
    if full.declaration_bytes > 0 {
        println!(
            "| of which the declaration table and its indexes | — | {:.0} | — |",
            per_dd(full.declaration_bytes - empty.declaration_bytes)
        );
        println!(
            "| a declaration row (pg_column_size: values and 24-byte header), plus its 4-byte line pointer | — | {:.0} + 4 | — |",
            full.row_values
        );
    }
}
