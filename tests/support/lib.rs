//! Test support: a real server on a loopback port, around a fresh store on
//! either backend, a clock the test moves, and small HTTP helpers.
//!
//! PostgreSQL tests run when `ANCHOR_TEST_POSTGRES_URL` is set; each server
//! gets a schema of its own, dropped when the server is dropped.

pub mod contract;
pub mod hostile;
pub mod logs;
pub mod smith;
pub mod x402;

use std::sync::{Arc, OnceLock};

use anchor_domain::pricing::Pricing;
use anchor_domain::{Clock, ManualClock};
use anchor_plugin_host::{Limits, PluginEngine, WasmPricing};
use anchor_ports::Store;
use anchor_server::{AppState, Settings};
use anchor_store::{PostgresStore, SqliteStore};
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};

pub use reqwest::StatusCode;

pub const POSTGRES_URL_VAR: &str = "ANCHOR_TEST_POSTGRES_URL";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The PostgreSQL URL for tests, if this run has one.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR).ok().filter(|u| !u.is_empty())
}

/// Says that `test` did not run for want of `what`, and records it in the
/// file `ANCHOR_TEST_SKIP_FILE` names (scripts/test counts those as skipped,
/// not passed). Under CI (`CI=true`, or `ANCHOR_TEST_REQUIRE_POSTGRES=1`,
/// which .ci/run sets) a skip is a failure: CI must run every test.
pub fn skip(test: &str, what: &str) {
    let required =
        std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") || std::env::var("ANCHOR_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    assert!(!required, "{test} cannot run here ({what}), and under CI every test must run");
    eprintln!("SKIPPED {test}: {what}");
    if let Some(file) = std::env::var_os("ANCHOR_TEST_SKIP_FILE").filter(|f| !f.is_empty()) {
        use std::io::Write;
        if let Ok(mut out) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = writeln!(out, "{test}");
        }
    }
}

/// The PostgreSQL URL, or `None` after [`skip`]ping `test`.
pub fn postgres_or_skip(test: &str) -> Option<String> {
    let url = postgres_url();
    if url.is_none() {
        skip(test, &format!("{POSTGRES_URL_VAR} is not set"));
    }
    url
}

/// The reference interface's facts (paths, methods, parameters, schemas,
/// enums, status codes), as `scripts/reference-facts` extracted them from the
/// reference OpenAPI document into `tests/data`. The tests compare with this
/// copy, so the repository alone is enough to run them.
pub fn reference_interface() -> Value {
    serde_json::from_str(include_str!("../data/reference-interface.json")).expect("tests/data/reference-interface.json parses")
}

/// One engine and compiled components for the whole test process.
pub fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<PluginEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PluginEngine::new().expect("wasm engine"))
}

/// The bundled pricing generation, compiled once.
pub fn default_pricing() -> Arc<dyn Pricing> {
    static PRICING: OnceLock<Arc<WasmPricing>> = OnceLock::new();
    PRICING
        .get_or_init(|| WasmPricing::load(engine(), anchor_plugin_host::DEFAULT_PRICING_WASM, Limits::PRICING).expect("default pricing"))
        .clone()
}

/// A component built from `plugins/` (fixtures included), by crate name.
pub fn component_bytes(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(anchor_plugin_host::PLUGINS_DIR).join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The JavaScript example tool (`plugins/tools/example-js`), built by
/// componentize-js from npm, offline, once per test process (`scripts/test`
/// installs its packages). Blocks for the build: call it off the executor.
pub fn js_tool_component() -> Vec<u8> {
    static BUILT: OnceLock<Vec<u8>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/tools/example-js");
            assert!(
                dir.join("node_modules/@bytecodealliance/componentize-js").exists(),
                "componentize-js is not installed: run `npm ci` in {} (scripts/test does)",
                dir.display()
            );
            let out = std::env::temp_dir().join(format!("anchor-tool-js-{}.wasm", std::process::id()));
            let built = std::process::Command::new("node").arg("build.mjs").arg(&out).current_dir(&dir).output().expect("node runs");
            assert!(
                built.status.success(),
                "building the JavaScript tool failed:\n{}{}",
                String::from_utf8_lossy(&built.stdout),
                String::from_utf8_lossy(&built.stderr)
            );
            let bytes = std::fs::read(&out).expect("the built component");
            let _ = std::fs::remove_file(&out);
            bytes
        })
        .clone()
}

/// The Python example tool (`plugins/tools/example-py`), built by
/// componentize-py, offline, once per test process. `scripts/test` installs
/// the pinned componentize-py and names it in ANCHOR_COMPONENTIZE_PY. Blocks
/// for the build: call it off the executor.
pub fn python_tool_component() -> Vec<u8> {
    static BUILT: OnceLock<Vec<u8>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/tools/example-py");
            let componentize = std::env::var("ANCHOR_COMPONENTIZE_PY").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| {
                panic!(
                    "ANCHOR_COMPONENTIZE_PY names componentize-py (pip install -r {}/requirements.txt; scripts/test does)",
                    dir.display()
                )
            });
            let out = std::env::temp_dir().join(format!("anchor-tool-py-{}.wasm", std::process::id()));
            let built = std::process::Command::new(dir.join("build.sh"))
                .arg(&out)
                .env("COMPONENTIZE_PY", componentize)
                .output()
                .expect("build.sh runs");
            assert!(
                built.status.success(),
                "building the Python tool failed:\n{}{}",
                String::from_utf8_lossy(&built.stdout),
                String::from_utf8_lossy(&built.stderr)
            );
            let bytes = std::fs::read(&out).expect("the built component");
            let _ = std::fs::remove_file(&out);
            bytes
        })
        .clone()
}

/// `wasm` with a custom section `anchor-variant` holding `index`: the same
/// component, another hash (distinct uploads, each compiled on its own).
pub fn component_variant(wasm: &[u8], index: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
    }
    let name = b"anchor-variant";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(index.to_string().as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

pub fn load_component(name: &str) -> Arc<WasmPricing> {
    WasmPricing::load(engine(), &component_bytes(name), Limits::PRICING).expect("component loads")
}

/// A fresh, migrated store on `backend`, plus what it takes to drop it.
pub async fn fresh_store(backend: Backend) -> (Arc<dyn Store>, Cleanup) {
    match backend {
        Backend::Sqlite => {
            let dir = tempdir();
            let store = SqliteStore::open(&dir.join("anchor.db")).await.expect("sqlite store");
            (Arc::new(store), Cleanup::Dir(dir))
        }
        Backend::Postgres => {
            let url = postgres_url().expect("postgres tests need ANCHOR_TEST_POSTGRES_URL");
            let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
            let store = PostgresStore::connect(&url, Some(&schema)).await.expect("postgres store");
            (Arc::new(store), Cleanup::Schema { url, schema })
        }
    }
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("anchor-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Removes a test's database when dropped.
pub enum Cleanup {
    Dir(std::path::PathBuf),
    Schema { url: String, schema: String },
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        match self {
            Cleanup::Dir(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Cleanup::Schema { url, schema } => {
                let (url, schema) = (url.clone(), schema.clone());
                // A thread of its own: this may run inside a runtime that is shutting down.
                let _ = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                    runtime.block_on(async {
                        let pool = sqlx::PgPool::connect(&url).await.ok()?;
                        let drop = format!("drop schema if exists \"{schema}\" cascade");
                        sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&pool).await.ok()
                    })
                })
                .join();
            }
        }
    }
}

/// One tool runtime for the whole test process, with a compiled cache of its
/// own, so a component is compiled once however many servers run it.
pub fn shared_tools() -> anchor_app::tools::Tools {
    static TOOLS: OnceLock<anchor_app::tools::Tools> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("anchor-test-tool-cache-{}", std::process::id()));
            let runtime = anchor_plugin_host::WasmTools::new(Some(&dir), anchor_domain::tools::ToolLimits::DEFAULT).expect("tool runtime");
            let wait = std::time::Duration::from_secs(300);
            anchor_app::tools::Tools::with_waits(Arc::new(runtime), wait, wait)
        })
        .clone()
}

/// Options for a test server.
pub struct Options {
    pub pricing: Arc<dyn Pricing>,
    pub rate_limit: u32,
    /// Proxies whose `X-Forwarded-For` names the client (none by default).
    pub trusted_proxies: anchor_server::proxies::TrustedProxies,
    pub dab_default: anchor_domain::MilliDac,
    /// `None`: local settlement.
    pub settler: Option<Arc<dyn anchor_x402::settlement::Settler>>,
    /// Connection and request limits.
    pub http: anchor_server::listener::HttpLimits,
    /// How ARA releases are protected (tests of the release rules use `Exact`).
    pub privacy: anchor_app::ara::privacy::Privacy,
    /// Run the background jobs (log integration, the ARA fold); off, the
    /// caller drives them itself.
    pub jobs: bool,
    /// What the operator switched off.
    pub features: anchor_app::Features,
    /// The tool runtime and its slots; `None`: the one the test process shares.
    pub tools: Option<anchor_app::tools::Tools>,
    /// The issuers whose signed statements POST /entries registers (none).
    pub scitt: anchor_app::scitt::Registry,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            pricing: default_pricing(),
            rate_limit: 1_000_000,
            trusted_proxies: Default::default(),
            dab_default: anchor_domain::MilliDac::from_dac(1000),
            settler: None,
            // Tests play many agents from one loopback address, several
            // hundred requests at once: one client here is many clients.
            http: anchor_server::listener::HttpLimits { max_connections_per_client: 4096, ..Default::default() },
            privacy: Default::default(),
            jobs: true,
            features: Default::default(),
            tools: None,
            scitt: Default::default(),
        }
    }
}

/// A running server over real loopback HTTP.
pub struct TestServer {
    pub base: String,
    pub clock: Arc<ManualClock>,
    pub store: Arc<dyn Store>,
    pub http: reqwest::Client,
    pub backend: Backend,
    pub log_key: Arc<anchor_app::log::LogKey>,
    /// The server's state, for driving its background work directly.
    pub state: AppState,
    _cleanup: Cleanup,
    _server: tokio::task::JoinHandle<()>,
    _integrator: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self._server.abort();
        if let Some(jobs) = &self._integrator {
            jobs.abort();
        }
        // The store's pools close while the runtime still runs: a pool that
        // outlives its runtime keeps sqlx's maintenance task looping through
        // the runtime's shutdown, which then never ends (seen once in CI).
        // block_in_place needs a multi-threaded runtime; a panicking test
        // skips it, and the wait is bounded.
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        if std::thread::panicking() || handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let store = self.store.clone();
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), store.close()).await;
            })
        });
    }
}

impl TestServer {
    pub async fn start(backend: Backend) -> TestServer {
        TestServer::with(backend, Options::default()).await
    }

    pub async fn with(backend: Backend, options: Options) -> TestServer {
        logs::init();
        let (store, cleanup) = fresh_store(backend).await;
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let base = format!("http://{addr}");
        let settings = Settings {
            config: Arc::new(anchor_app::Config {
                public_url: base.clone(),
                pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
                dab_default: options.dab_default,
                trial_grant: anchor_domain::agents::TRIAL_DAC,
                owners: Default::default(),
                privacy: options.privacy,
                features: options.features,
            }),
            rate_limit: options.rate_limit,
            rate_window_secs: 60,
            trusted_proxies: options.trusted_proxies.clone(),
            http: options.http,
            metrics_on_api: true,
            fiat: Default::default(),
        };
        let log_key = Arc::new(anchor_app::log::LogKey::generate("anchor.test/log").expect("log key"));
        let mut state = AppState::new(store.clone(), options.pricing, clock.clone() as Arc<dyn Clock>, log_key.clone(), settings);
        if let Some(settler) = options.settler {
            state = state.with_settler(settler);
        }
        state = state.with_tools(options.tools.unwrap_or_else(shared_tools)).with_scitt(options.scitt);
        // The background jobs, with a fast log; reconciliation and erasure
        // are driven by the tests themselves.
        let integrator = options.jobs.then(|| {
            tokio::spawn(anchor_app::jobs::run(
                state.app.clone(),
                log_key.clone(),
                uuid::Uuid::new_v4(),
                anchor_app::jobs::Schedule {
                    round: std::time::Duration::from_millis(20),
                    checkpoint_every: std::time::Duration::from_millis(50),
                    fold_every: std::time::Duration::from_millis(20),
                    reconcile_every: std::time::Duration::from_secs(3600),
                    erase_every: std::time::Duration::from_secs(3600),
                    ..Default::default()
                },
                tokio::sync::watch::channel(false).1,
            ))
        });
        let server = {
            let state = state.clone();
            tokio::spawn(async move {
                let _ = anchor_server::serve_listener(listener, state).await;
            })
        };
        // Idle connections are dropped before the server's header timeout
        // (10 s) closes them: a request sent on a connection the server is
        // closing at that moment fails with IncompleteMessage.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .pool_idle_timeout(std::time::Duration::from_secs(5))
            .build()
            .expect("http client");
        TestServer { base, clock, store, http, backend, log_key, state, _cleanup: cleanup, _server: server, _integrator: integrator }
    }

    /// The SQLite file this server's database is (`None` on PostgreSQL).
    pub fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        match &self._cleanup {
            Cleanup::Dir(dir) => Some(dir.join("anchor.db")),
            Cleanup::Schema { .. } => None,
        }
    }

    /// The PostgreSQL URL and schema this server's database is (`None` on SQLite).
    pub fn postgres_schema(&self) -> Option<(&str, &str)> {
        match &self._cleanup {
            Cleanup::Dir(_) => None,
            Cleanup::Schema { url, schema } => Some((url.as_str(), schema.as_str())),
        }
    }

    /// Runs one SQL statement directly against this server's database, behind
    /// the service's back (tamper tests).
    pub async fn tamper(&self, statement: &str) {
        match &self._cleanup {
            Cleanup::Dir(dir) => {
                let url = format!("sqlite://{}", dir.join("anchor.db").display());
                let pool = sqlx::SqlitePool::connect(&url).await.expect("sqlite");
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string())).execute(&pool).await.expect("tamper statement");
                pool.close().await;
            }
            Cleanup::Schema { url, schema } => {
                let pool = sqlx::PgPool::connect(url).await.expect("postgres");
                let sql = format!("set search_path to \"{schema}\"; {statement}");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.expect("tamper statement");
                pool.close().await;
            }
        }
    }

    /// Whether `needle` appears anywhere in what the database keeps: on
    /// SQLite its files' bytes (the database and its write-ahead log), on
    /// PostgreSQL every text and bytea column of the server's schema.
    pub async fn database_holds(&self, needle: &str) -> bool {
        match &self._cleanup {
            Cleanup::Dir(dir) => std::fs::read_dir(dir).unwrap().flatten().any(|entry| {
                let bytes = std::fs::read(entry.path()).unwrap_or_default();
                bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            }),
            Cleanup::Schema { url, schema } => {
                let pool = sqlx::PgPool::connect(url).await.expect("postgres");
                let columns: Vec<(String, String)> = sqlx::query_as(
                    "select table_name::text, column_name::text from information_schema.columns \
                     where table_schema = $1 and data_type in ('text', 'bytea', 'character varying', 'jsonb', 'json')",
                )
                .bind(schema)
                .fetch_all(&pool)
                .await
                .expect("columns");
                for (table, column) in columns {
                    let sql = format!(
                        "select count(*) from \"{schema}\".\"{table}\" where position($1 in convert_from(convert_to(\"{column}\"::text, 'UTF8'), 'UTF8')) > 0"
                    );
                    let found: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(needle).fetch_one(&pool).await.unwrap_or(0);
                    if found > 0 {
                        pool.close().await;
                        return true;
                    }
                }
                pool.close().await;
                false
            }
        }
    }

    /// How many statements of `operation` (select, update, …) on `table`
    /// the store has run, as its metrics count them.
    pub async fn statements_run(&self, operation: &str, table: &str) -> f64 {
        let series = format!(r#"anchor_store_statement_duration_seconds_count{{operation="{operation}",table="{table}"}} "#);
        let metrics = self.get("/metrics", None).await.text;
        metrics.lines().find_map(|line| line.strip_prefix(series.as_str())).map_or(0.0, |n| n.parse().expect("a count"))
    }

    /// A count (or any bigint) read directly from this server's database.
    pub async fn scalar(&self, query: &str) -> i64 {
        self.column::<i64>(query).await.into_iter().next().expect("scalar query returned no row")
    }

    /// The first column of every row of `query`, as text (the query casts it).
    pub async fn strings(&self, query: &str) -> Vec<String> {
        self.column(query).await
    }

    /// The first column of every row of `query`, read directly from this server's database.
    async fn column<T>(&self, query: &str) -> Vec<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
        T: Send + Unpin,
    {
        match &self._cleanup {
            Cleanup::Dir(dir) => {
                let url = format!("sqlite://{}", dir.join("anchor.db").display());
                let pool = sqlx::SqlitePool::connect(&url).await.expect("sqlite");
                let column = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_string())).fetch_all(&pool).await.expect("column query");
                pool.close().await;
                column
            }
            Cleanup::Schema { url, schema } => {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(url).await.expect("postgres");
                let path = format!("set search_path to \"{schema}\"");
                sqlx::raw_sql(sqlx::AssertSqlSafe(path)).execute(&pool).await.expect("search path");
                let column = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_string())).fetch_all(&pool).await.expect("column query");
                pool.close().await;
                column
            }
        }
    }

    /// A UUID as an SQL literal for this backend.
    pub fn uuid_sql(&self, id: &str) -> String {
        match self.backend {
            Backend::Sqlite => format!("X'{}'", id.replace('-', "")),
            Backend::Postgres => format!("'{id}'"),
        }
    }

    /// Waits until a signed checkpoint covers at least `size` leaves.
    pub async fn wait_for_log(&self, size: i64) -> anchor_ports::CheckpointRecord {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            if let Some(c) = self.store.latest_checkpoint().await.expect("checkpoint")
                && c.size >= size
            {
                return c;
            }
            assert!(std::time::Instant::now() < deadline, "the log did not reach {size} leaves");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits until the log holds at least `leaves` confirmed declarations and
    /// ARA has folded all of them into its aggregate model.
    pub async fn wait_for_fold(&self, leaves: i64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let (next, size) = self.store.fold_progress().await.expect("fold progress");
            if size >= leaves && next >= size {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "ARA did not fold {leaves} declarations (folded {next} of {size})");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Registers an agent and anchors one confirmed declaration of `ee` for it.
    pub async fn anchored_agent(&self, ee: Value) -> Agent {
        let agent = self.register().await;
        let created = self.create(&agent, ee).await;
        let confirmed = self.confirm(&agent, created["dd_id"].as_str().expect("dd_id")).await;
        assert_eq!(confirmed.status, StatusCode::OK, "{}", confirmed.text);
        agent
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request and returns status, headers and the JSON body (Null when empty or not JSON).
    pub async fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Reply {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = authorization.iter().map(|a| ("authorization", a.as_str())).collect();
        self.call_with(method, path, &headers, body).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.call("GET", path, token, None).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        self.call("POST", path, token, Some(body)).await
    }

    /// Registers an agent and returns it.
    /// Credits `dac` of Earned DAC to the agent, as a tool sale would, for 365 days.
    pub async fn credit_earned(&self, agent: &Agent, dac: i64) {
        let now = self.clock.now();
        let sale =
            anchor_domain::payments::Subject { domain: anchor_domain::payments::SubjectDomain::TslPurchase, id: uuid::Uuid::new_v4() };
        let id = uuid::Uuid::parse_str(&agent.id).expect("agent id");
        let expires = now + chrono::Duration::days(365);
        self.store.credit_earned(id, anchor_domain::MilliDac::from_dac(dac), "tool sale", Some(sale), expires, now).await.expect("credit");
    }

    pub async fn register(&self) -> Agent {
        let reply = self.post("/v1/agent/register", None, &json!({})).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        Agent {
            id: reply.json["agent_id"].as_str().expect("agent_id").to_string(),
            token: reply.json["auth_token"].as_str().expect("auth_token").to_string(),
            recovery: reply.json["recovery_key"].as_str().expect("recovery_key").to_string(),
        }
    }

    /// Creates a DD with `ee` (and the default dd fields), asserting 201.
    pub async fn create(&self, agent: &Agent, ee: Value) -> Value {
        let reply = self.post("/v1/dd/create", Some(&agent.token), &create_body(ee)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.json
    }

    pub async fn confirm(&self, agent: &Agent, dd_id: &str) -> Reply {
        self.post("/v1/dd/confirm", Some(&agent.token), &json!({ "dd_id": dd_id })).await
    }
}

/// A signed-in owner: its session cookie and CSRF token.
#[derive(Clone)]
pub struct Owner {
    pub email: String,
    pub password: String,
    pub owner_id: String,
    pub cookie: String,
    pub csrf: String,
}

pub const OWNER_PASSWORD: &str = "a long passphrase 7";

impl TestServer {
    /// Sends a request with extra headers.
    pub async fn call_with(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Reply {
        let method_name = method;
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        logs::remember_request(headers, body);
        let response = request.send().await.expect("request reaches the server");
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        logs::remember_response(&headers, &text);
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
        contract::check(&self.base, method_name, path, status.as_u16(), content_type, &text);
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply { status, headers, json, text }
    }

    /// Registers an owner with `email` and signs it in.
    pub async fn owner(&self, email: &str) -> Owner {
        let reply = self
            .post(
                "/dap/register",
                None,
                &json!({ "email": email, "password": OWNER_PASSWORD, "terms_agreed": true, "privacy_agreed": true }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        self.login(email, OWNER_PASSWORD).await
    }

    /// Signs in, asserting 200.
    pub async fn login(&self, email: &str, password: &str) -> Owner {
        let reply = self.post("/dap/login", None, &json!({ "email": email, "password": password })).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let set_cookie = reply.headers.get("set-cookie").expect("session cookie").to_str().unwrap().to_string();
        let cookie = set_cookie.split(';').next().unwrap().to_string();
        Owner {
            email: email.to_string(),
            password: password.to_string(),
            owner_id: reply.json["owner_id"].as_str().unwrap().to_string(),
            cookie,
            csrf: reply.json["csrf_token"].as_str().unwrap().to_string(),
        }
    }

    /// A request with the owner's session, as an API client (no browser headers).
    pub async fn as_owner(&self, owner: &Owner, method: &str, path: &str, body: Option<&Value>) -> Reply {
        self.call_with(method, path, &[("cookie", &owner.cookie)], body).await
    }

    /// A bilateral proposal paid over x402: asked without a payment, then
    /// sent again with the challenge signed.
    pub async fn propose_paid(&self, proposer: &Agent, body: &Value) -> Reply {
        let bearer = format!("Bearer {}", proposer.token);
        let asked = self.call_with("POST", "/v1/dd/bilateral/propose", &[("authorization", &bearer)], Some(body)).await;
        let payment = x402::b64(&x402::pay(&x402::challenge_of(&asked), self.clock.now().timestamp(), x402::Twist::default()));
        self.call_with("POST", "/v1/dd/bilateral/propose", &[("authorization", &bearer), ("payment-signature", &payment)], Some(body)).await
    }

    /// Links the agent to the owner; the agent's token is replaced by the new one.
    pub async fn link(&self, owner: &Owner, agent: &mut Agent) {
        let reply =
            self.as_owner(owner, "POST", "/dap/agent/link", Some(&json!({ "agent_id": agent.id, "auth_token": agent.token }))).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        agent.token = reply.json["new_auth_token"].as_str().expect("new_auth_token").to_string();
    }
}

pub struct Agent {
    pub id: String,
    pub token: String,
    pub recovery: String,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub json: Value,
    pub text: String,
}

impl Reply {
    /// Asserts status and error_code together, with the body in the message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!((self.status.as_u16(), self.json["error_code"].as_str()), (status, Some(code)), "unexpected answer: {}", self.text);
        assert!(self.json["message"].as_str().is_some_and(|m| !m.is_empty()), "no message: {}", self.text);
    }
}

/// The dd object every test starts from.
pub fn dd() -> Value {
    json!({
        "dd_unit_type": "single",
        "dd_declaration_mode": "self_declared",
        "decision_type": "internal_service",
        "decision_action_type": "execute",
        "origin_context_type": "internal",
        "selection_state": "SELECTED",
    })
}

pub fn basic_axes() -> Value {
    json!({
        "ee_retention_period": "short",
        "ee_integrity_verification_level": "basic",
        "ee_disclosure_format_policy": "internal",
        "ee_responsibility_scope": "minimal",
    })
}

pub fn create_body(ee: Value) -> Value {
    json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": ee })
}

/// Runs a test body against both backends: SQLite always, PostgreSQL when configured.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Sqlite).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if $crate::postgres_or_skip(concat!(module_path!(), "::", stringify!($name))).is_none() {
                        return;
                    }
                    super::$name($crate::Backend::Postgres).await;
                }
            )+
        }
    };
}

/// Reads one HTTP answer from `stream`: its head and as much body as its
/// Content-Length says (or until the server closes, or `wait` passes).
pub async fn read_answer(stream: &mut tokio::net::TcpStream, wait: std::time::Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(wait, async {
        let mut buffer = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)));
                if length.is_some_and(|n| body.len() >= n) {
                    return;
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}
