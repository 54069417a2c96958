//! `anchor`: the service binary. `anchor serve` (the default) runs the API;
//! `anchor tool run FILE` runs a tool component locally, as the service would;
//! `anchor pricing inspect FILE` checks a pricing component before deployment;
//! `anchor backup`, `anchor restore` and `anchor feature` are for operators.

use clap::{Parser, Subcommand};

/// The process's allocator: mimalloc, without transparent huge pages. A
/// request allocates and frees many small objects across threads (bodies,
/// JSON values, rows); glibc's malloc took 15 % of the server's samples
/// under load, and mimalloc takes 4 to 14 % off the CPU per anchored DD
/// with the same memory (decision 0074).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anchor_plugin_host::PluginEngine;
use anchor_server::config::ServeConfig;

/// `anchor --version`: the package version, the commit a packager built
/// (`ANCHOR_COMMIT` at build time; `scripts/install` and the Debian package
/// set it) and the interface version served.
fn version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let built = match option_env!("ANCHOR_COMMIT") {
            Some(commit) if !commit.is_empty() => format!("commit {commit}"),
            _ => "a development build".to_owned(),
        };
        format!("{} ({built}, interface {})", env!("CARGO_PKG_VERSION"), anchor_server::openapi::INTERFACE_VERSION)
    })
}

#[derive(Parser)]
#[command(name = "anchor", version = version(), about = "An accountability anchoring service for software agents")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand, `anchor` serves with these options.
    #[command(flatten)]
    serve: ServeConfig,
}

impl Cli {
    /// The options `anchor` serves with, when it serves (`anchor serve …`,
    /// or no subcommand).
    fn serving(&self) -> Option<&ServeConfig> {
        match &self.command {
            Some(Command::Serve(config)) => Some(config),
            None => Some(&self.serve),
            _ => None,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(Box<ServeConfig>),
    /// Operator commands for pricing components.
    Pricing {
        #[command(subcommand)]
        command: PricingCommand,
    },
    /// Operator commands for the verifiable log.
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// Check a receipt offline: record hash, leaf, inclusion proof, checkpoint
    /// signature, and (given an earlier checkpoint and a proof) consistency;
    /// or a dispute-evidence bundle (--evidence): scope, proof, order, payment.
    Verify(VerifyArgs),
    /// Fetch a declaration's dispute-evidence bundle (GET
    /// /v1/dd/{dd_id}/evidence) to a file or stdout: its scope, its proof in
    /// the log and the payments made for it, for `anchor verify --evidence`.
    Evidence(EvidenceArgs),
    /// Copy the embedded SQLite database while the server runs (`anchor
    /// backup DEST`), or check a copy or a restored database (`--check`).
    Backup(BackupArgs),
    /// Put a backup in place of the embedded database, after checking it;
    /// refused while a server runs on it.
    Restore(RestoreArgs),
    /// Switch an area off or on for every host sharing the database, while
    /// they run (in force within about a second), or list the switches.
    Feature {
        #[command(subcommand)]
        command: FeatureCommand,
    },
    /// Commands for tool authors: run a tool component locally, as the service would.
    Tool {
        #[command(subcommand)]
        command: ToolCommand,
    },
    /// Make a request, and pay it over x402 if it answers 402: the challenge is
    /// signed as the official client signs it (EIP-712 TransferWithAuthorization
    /// of USDC on Base) with the wallet key, up to --max-dac, and the same
    /// request is sent again with the payment. The answer's body goes to
    /// stdout; the status and what was paid to stderr.
    Pay(PayArgs),
    /// Read the anonymous feedback agents left (MCP submit_feedback).
    Feedback {
        #[command(subcommand)]
        command: FeedbackCommand,
    },
    /// Follow a running instance's log from outside: checks each new
    /// checkpoint's signatures, that it extends the one seen before (kept in
    /// --state) and that the hash tiles hash to its root. Exit 1 on a fork, a
    /// rollback or a missing quorum, 2 when it could not check. For cron.
    Monitor(anchor_server::monitor::MonitorArgs),
    /// A transparency-log witness (C2SP tlog-witness): cosigns the checkpoints
    /// of the logs it follows while each extends the one it cosigned before.
    Witness {
        #[command(subcommand)]
        command: WitnessCommand,
    },
    /// Signed statements for SCITT registration (POST /entries): an
    /// issuer's key, and statements signed with it.
    Statement {
        #[command(subcommand)]
        command: StatementCommand,
    },
    /// A wallet key for paying over x402 (`anchor pay`, the clients): under
    /// local settlement (the default) no money moves, so a new key is all a
    /// test needs.
    Wallet {
        #[command(subcommand)]
        command: WalletCommand,
    },
    /// Print a shell's completion script for `anchor` (bash, zsh, fish,
    /// elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page of `anchor` (roff), as `man` reads it.
    Manpage,
}

#[derive(Subcommand)]
enum WalletCommand {
    /// Create a private key (secp256k1, hex) in FILE, readable by its owner
    /// only, and print its address.
    New {
        /// Where to write the key (created, never overwritten).
        file: std::path::PathBuf,
    },
    /// Print the address of the key in FILE.
    Address { file: std::path::PathBuf },
}

#[derive(Subcommand)]
enum WitnessCommand {
    /// Create a witness key; write it to FILE and print its verifier key (the
    /// last line), which logs and verifiers are configured with.
    Keygen {
        /// The witness's name, for example witness.example.com/w1.
        #[arg(long)]
        name: String,
        /// Where to write the private key (created, never overwritten).
        file: std::path::PathBuf,
    },
    /// Serve the witness protocol for the logs given with --log.
    Serve(anchor_server::witness_server::WitnessServeArgs),
}

#[derive(clap::Args)]
struct PayArgs {
    /// A file holding the paying wallet's private key (hex, `0x` optional).
    #[arg(long)]
    wallet_key: std::path::PathBuf,
    /// The most one payment may take, in DAC (1 DAC = 0.001 USDC); a
    /// challenge asking more is refused and nothing is signed.
    #[arg(long)]
    max_dac: String,
    /// The agent's token, sent as `Authorization: Bearer`.
    #[arg(long, env = "ANCHOR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// More request headers, `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// GET, POST, PUT, DELETE, …
    method: String,
    url: String,
    /// The JSON body (`@FILE` reads it from a file, `-` from stdin).
    body: Option<String>,
}

#[derive(clap::Args)]
struct EvidenceArgs {
    /// The declaration's dd_id.
    dd_id: String,
    /// The service's base URL.
    #[arg(long, env = "ANCHOR_URL")]
    url: String,
    /// The declaring agent's token, sent as `Authorization: Bearer`.
    #[arg(long, env = "ANCHOR_TOKEN", hide_env_values = true)]
    token: String,
    /// Write the bundle here (never overwritten) instead of stdout.
    #[arg(long, short)]
    output: Option<std::path::PathBuf>,
}

async fn evidence(args: EvidenceArgs) -> anyhow::Result<()> {
    let url = format!("{}/v1/dd/{}/evidence", args.url.trim_end_matches('/'), args.dd_id);
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60)).build()?;
    let response = http.get(&url).bearer_auth(&args.token).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        eprintln!("{} {}: {}", status.as_u16(), status.canonical_reason().unwrap_or(""), String::from_utf8_lossy(&body));
        std::process::exit(1);
    }
    anchor_verify::evidence::parse_evidence(&body)
        .map_err(|e| anyhow::anyhow!("the service answered something else than a bundle: {e}"))?;
    match &args.output {
        Some(file) => {
            use std::io::Write;
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(file)
                .map_err(|e| anyhow::anyhow!("{}: {e} (never overwritten)", file.display()))?;
            out.write_all(&body)?;
            eprintln!("evidence of {} written to {}; check it with anchor verify --evidence", args.dd_id, file.display());
        }
        None => {
            use std::io::Write;
            std::io::stdout().write_all(&body)?;
        }
    }
    Ok(())
}

/// Exit codes of `anchor pay`: the answer was not a success; the challenge
/// asked more than --max-dac (nothing was signed).
const PAY_NOT_SUCCESS: i32 = 1;
const PAY_OVER_MAX: i32 = 3;

async fn pay(args: PayArgs) -> anyhow::Result<()> {
    let max = anchor_domain::MilliDac::parse_decimal(&args.max_dac)
        .ok_or_else(|| anyhow::anyhow!("--max-dac must be a DAC amount with at most three decimals; got {}", args.max_dac))?;
    let key = std::fs::read_to_string(&args.wallet_key).map_err(|e| anyhow::anyhow!("reading {}: {e}", args.wallet_key.display()))?;
    let signer = anchor_x402::client::signer_from_key(&key).map_err(anyhow::Error::msg)?;
    let body = match args.body.as_deref() {
        None => None,
        Some("-") => Some(std::io::read_to_string(std::io::stdin())?),
        Some(file) if file.starts_with('@') => {
            Some(std::fs::read_to_string(&file[1..]).map_err(|e| anyhow::anyhow!("reading {}: {e}", &file[1..]))?)
        }
        Some(text) => Some(text.to_string()),
    };
    let method: reqwest::Method = args.method.to_uppercase().parse().map_err(|_| anyhow::anyhow!("not an HTTP method: {}", args.method))?;
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(120)).build()?;
    let send = |payment: Option<String>| {
        let mut request = http.request(method.clone(), &args.url);
        if let Some(token) = &args.token {
            request = request.bearer_auth(token);
        }
        for header in &args.headers {
            if let Some((name, value)) = header.split_once(':') {
                request = request.header(name.trim(), value.trim());
            }
        }
        if let Some(body) = &body {
            request = request.header("content-type", "application/json").body(body.clone());
        }
        if let Some(payment) = payment {
            request = request.header("payment-signature", payment);
        }
        request.send()
    };
    let mut response = send(None).await?;
    if response.status() == reqwest::StatusCode::PAYMENT_REQUIRED {
        let header = response.headers().get("payment-required").and_then(|v| v.to_str().ok()).map(str::to_string);
        let Some(header) = header else {
            eprintln!("402 without a PAYMENT-REQUIRED header: nothing to pay");
            println!("{}", response.text().await?);
            std::process::exit(PAY_NOT_SUCCESS);
        };
        let challenge = anchor_x402::client::challenge_of(&header).map_err(anyhow::Error::msg)?;
        let asked = anchor_x402::client::asked(&challenge).map_err(anyhow::Error::msg)?;
        // USDC base units are milli-DAC.
        let amount = anchor_domain::MilliDac(asked.amount_units as i64);
        let what = challenge["resource"]["description"].as_str().unwrap_or("");
        if amount > max {
            eprintln!("REFUSED: the challenge asks {amount} DAC, more than --max-dac {max}; nothing was signed ({what})");
            std::process::exit(PAY_OVER_MAX);
        }
        let now = chrono::Utc::now().timestamp();
        let payment = anchor_x402::client::pay(&challenge, &signer, now).map_err(anyhow::Error::msg)?;
        eprintln!(
            "paying {amount} DAC ({} USDC base units) to {:#x} from {:#x}: {what}",
            asked.amount_units,
            asked.pay_to,
            signer.address()
        );
        response = send(Some(anchor_x402::client::header(&payment))).await?;
        if let Some(settled) = response.headers().get("payment-response").and_then(|v| v.to_str().ok()) {
            let decoded = anchor_x402::client::challenge_of(settled).unwrap_or(serde_json::Value::String(settled.to_string()));
            eprintln!("payment response: {decoded}");
        }
    }
    let status = response.status();
    eprintln!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    println!("{}", response.text().await?);
    if !status.is_success() {
        std::process::exit(PAY_NOT_SUCCESS);
    }
    Ok(())
}

#[derive(Subcommand)]
enum FeedbackCommand {
    /// The newest notes, newest first, with the UTC day each arrived.
    List {
        /// How many notes at most.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        database: DbLocation,
    },
}

async fn feedback(command: FeedbackCommand) -> anyhow::Result<()> {
    let FeedbackCommand::List { limit, json, database } = command;
    let url = database.url();
    ensure_existing(&url).await?;
    let store = anchor_store::open(&url).await?;
    let notes = store.feedback(limit.clamp(1, anchor_app::feedback::KEEP)).await?;
    if notes.is_empty() && !json {
        println!("no feedback yet");
    }
    for (day, f) in &notes {
        let fields = [
            ("note", &f.note),
            ("would_recommend", &f.would_recommend),
            ("recommend_reason", &f.recommend_reason),
            ("would_report_to_operator", &f.would_report_to_operator),
            ("report_reason", &f.report_reason),
            ("would_keep_as_tool", &f.would_keep_as_tool),
            ("keep_reason", &f.keep_reason),
        ];
        if json {
            let mut object = serde_json::Map::new();
            object.insert("received_on".into(), day.to_string().into());
            for (name, value) in fields {
                if let Some(value) = value {
                    object.insert(name.into(), value.clone().into());
                }
            }
            object.insert("tools_used".into(), f.tools_used.clone().into());
            println!("{}", serde_json::Value::Object(object));
        } else {
            println!("--- {day}");
            for (name, value) in fields {
                if let Some(value) = value {
                    println!("{name}: {value}");
                }
            }
            if !f.tools_used.is_empty() {
                println!("tools_used: {}", f.tools_used.join(", "));
            }
        }
    }
    store.close().await;
    Ok(())
}

/// Where the database is, as `anchor serve` finds it.
#[derive(clap::Args)]
struct DatabaseArgs {
    #[command(flatten)]
    location: DbLocation,
    /// The log's public key (`<origin>+<id>+<base64>`, or a file holding it)
    /// to check checkpoint signatures with; defaults to the key of
    /// `<data-dir>/log-signing.key` when that file exists.
    #[arg(long)]
    key: Option<String>,
}

impl DatabaseArgs {
    fn url(&self) -> String {
        self.location.url()
    }

    fn embedded(&self) -> anyhow::Result<anchor_server::operate::Embedded> {
        let url = self.url();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            anyhow::bail!(
                "the database is PostgreSQL: back it up with pg_dump or pg_basebackup, restore it with its own tools, \
                 then check the result with `anchor backup --check postgres://…`"
            );
        }
        Ok(anchor_server::operate::Embedded::new(url.strip_prefix("sqlite://").unwrap_or(&url).into()))
    }

    fn vkey(&self) -> anyhow::Result<Option<String>> {
        if let Some(key) = &self.key {
            return Ok(Some(std::fs::read_to_string(key).map(|k| k.trim().to_string()).unwrap_or_else(|_| key.clone())));
        }
        let file = self.location.data_dir.join("log-signing.key");
        if !file.is_file() {
            return Ok(None);
        }
        let skey = std::fs::read_to_string(&file)?;
        Ok(Some(anchor_app::log::LogKey::from_skey(skey.trim())?.vkey))
    }
}

/// Where the database is, as `anchor serve` finds it.
#[derive(clap::Args)]
struct DbLocation {
    /// The data directory whose `anchor.db` is meant.
    #[arg(long, env = "ANCHOR_DATA_DIR", default_value = "./data")]
    data_dir: std::path::PathBuf,
    /// The database, if not `<data-dir>/anchor.db` (a SQLite path or a `postgres://` URL).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

impl DbLocation {
    fn url(&self) -> String {
        match &self.database_url {
            Some(url) if !url.is_empty() => url.clone(),
            _ => self.data_dir.join("anchor.db").to_string_lossy().into_owned(),
        }
    }
}

/// The store of an existing database whose schema is this build's: an
/// operator command never creates a database (a mistyped path would) nor
/// migrates one the hosts have not.
async fn ensure_existing(url: &str) -> anyhow::Result<()> {
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    if !postgres && !std::path::Path::new(url.strip_prefix("sqlite://").unwrap_or(url)).is_file() {
        anyhow::bail!("there is no database at {url}; give the server's --data-dir or DATABASE_URL");
    }
    let inspected = anchor_store::inspect(url).await?;
    let checked = anchor_app::backup::check_migrations(inspected.as_ref(), &anchor_store::expected_migrations(url)).await;
    inspected.close().await;
    checked.map_err(|e| anyhow::anyhow!("{e:#} (run the same version as the hosts)"))?;
    Ok(())
}

async fn publish(file: &str, activate_at: Option<&str>, allow_no_services: bool, database: &DbLocation) -> anyhow::Result<()> {
    let wasm = match file {
        "bundled" => anchor_plugin_host::DEFAULT_PRICING_WASM.to_vec(),
        path => std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?,
    };
    // The checks a host would make loading it, and a quote of every preset.
    let engine = PluginEngine::new()?;
    let pricing = anchor_plugin_host::WasmPricing::load(&engine, &wasm, anchor_plugin_host::Limits::PRICING)?;
    let presets = anchor_app::pricing::check_publishable(pricing.as_ref(), allow_no_services)?;
    let now = chrono::Utc::now();
    let at = match activate_at {
        None => now,
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .map_err(|e| anyhow::anyhow!("--activate-at {text}: {e} (write e.g. 2026-12-01T00:00:00Z)"))?
            .with_timezone(&chrono::Utc),
    };
    // Hosts read publications every half second and compile them before their time.
    if activate_at.is_some() {
        anyhow::ensure!(
            at >= now + chrono::Duration::seconds(2),
            "--activate-at {at} leaves the hosts less than 2 s to load it; give a later time, or --now (in force within about a second)"
        );
    }
    use anchor_domain::pricing::Pricing as _;
    let generation = pricing.generation().clone();
    let url = database.url();
    ensure_existing(&url).await?;
    let store = anchor_store::open(&url).await?;
    let added = anchor_app::pricing::publish(store.as_ref(), pricing.as_ref(), &wasm, at, now).await;
    store.close().await;
    anyhow::ensure!(added?, "another generation is published for exactly {at}; choose another time");
    println!(
        "ok: {} (sha256 {}, {}, {} presets quoted) is published; every host prices with it from {at}",
        generation.version, generation.sha256, generation.interface, presets
    );
    Ok(())
}

async fn list(database: &DbLocation) -> anyhow::Result<()> {
    let url = database.url();
    ensure_existing(&url).await?;
    let store = anchor_store::open(&url).await?;
    let activations = anchor_app::pricing::publications(store.as_ref()).await;
    store.close().await;
    let activations = activations?;
    let now = chrono::Utc::now();
    let current = activations.iter().rposition(|a| a.activate_at <= now);
    if activations.is_empty() {
        println!("nothing published: each host prices with its --pricing-component, or the bundled generation");
    }
    for (i, a) in activations.iter().enumerate() {
        let state = match current {
            Some(c) if i == c => "in force",
            Some(c) if i < c => "past",
            _ => "scheduled",
        };
        println!(
            "{:<10} from {}  {} (sha256 {}, {}), published {}",
            state, a.activate_at, a.version, a.sha256, a.interface, a.published_at
        );
    }
    Ok(())
}

#[derive(Subcommand)]
enum FeatureCommand {
    /// Every area, whether it is on, and whether a stored switch says so.
    List(FeatureArgs),
    /// Switch an area on: retention, dap_asa_cancel, agent_owners.
    On(FeatureArgs),
    /// Switch an area off: its routes answer 503 FEATURE_NOT_AVAILABLE.
    Off(FeatureArgs),
}

#[derive(clap::Args)]
struct FeatureArgs {
    /// The area (not for list).
    name: Option<String>,
    #[command(flatten)]
    database: DbLocation,
}

async fn feature(command: FeatureCommand) -> anyhow::Result<()> {
    let (args, switch) = match command {
        FeatureCommand::List(args) => (args, None),
        FeatureCommand::On(args) => (args, Some(true)),
        FeatureCommand::Off(args) => (args, Some(false)),
    };
    let url = args.database.url();
    ensure_existing(&url).await?;
    let store = anchor_store::open(&url).await?;
    if let Some(enabled) = switch {
        let name = args.name.as_deref().ok_or_else(|| anyhow::anyhow!("name the area: {}", anchor_app::Features::NAMES.join(", ")))?;
        anchor_app::features::switch(store.as_ref(), name, enabled, chrono::Utc::now()).await?;
        println!(
            "ok: {name} switched {}; every host serving this database applies it within about a second",
            if enabled { "on" } else { "off" }
        );
    }
    let stored = anchor_app::features::stored_switches(store.as_ref()).await?;
    for name in anchor_app::Features::NAMES {
        match stored.iter().find(|(n, _)| n == name) {
            Some((_, on)) => println!("{name:<16} {:<4} (switched by the operator)", if *on { "on" } else { "off" }),
            None => println!("{name:<16} {:<4} (each host's start flags decide; on unless --features-off names it)", "-"),
        }
    }
    store.close().await;
    Ok(())
}

#[derive(clap::Args)]
struct BackupArgs {
    /// The file to write the copy to (never overwritten).
    #[arg(required_unless_present = "check")]
    dest: Option<std::path::PathBuf>,
    /// Check the copy once it is written.
    #[arg(long, requires = "dest")]
    verify: bool,
    /// Check this copy (a file) or restored database (a `postgres://` URL) instead of taking one.
    #[arg(long, conflicts_with_all = ["dest", "verify"])]
    check: Option<String>,
    #[command(flatten)]
    database: DatabaseArgs,
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The copy to restore (a file `anchor backup` wrote).
    source: std::path::PathBuf,
    /// Restore even if the database there published checkpoints past the
    /// copy's log (the log then forks: its verifiers must be told).
    #[arg(long)]
    accept_log_fork: bool,
    #[command(flatten)]
    database: DatabaseArgs,
}

#[derive(Subcommand)]
enum ToolCommand {
    /// Write a working tool project: the world's WIT, the tool, a build
    /// script, sample observations and a test that runs offline.
    New {
        /// The project's language.
        #[arg(long, value_enum)]
        lang: anchor_server::tool_kit::Language,
        /// The tool's name (lowercase letters, digits, dashes); the project's folder.
        name: String,
        /// Where to write it (default: ./NAME).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Check a component of anchor:tool@1.0.0 as an upload is checked, run it
    /// under the service's limits, print its report (JSON) and what it used
    /// (the fuel, the time).
    #[command(alias = "run")]
    Test(ToolRunArgs),
}

#[derive(clap::Args)]
struct ToolRunArgs {
    /// The component (.wasm).
    file: std::path::PathBuf,
    /// The observations, as JSON: {"today": DAY, "observations": [...]} (`-`
    /// reads stdin). Without it (or --sample), three sample observations.
    #[arg(long, alias = "input", conflicts_with = "sample")]
    observations: Option<std::path::PathBuf>,
    /// Instead of --input: N synthetic observations of every shape.
    #[arg(long)]
    sample: Option<usize>,
    /// Run N times (a fresh instance each time) and print the time per run's
    /// median and 99th percentile.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

#[derive(Subcommand)]
enum LogCommand {
    /// Create a log signing key; write it to FILE and print the public key.
    Keygen {
        /// The log's origin, for example example.com/anchor-log.
        #[arg(long)]
        origin: String,
        /// Where to write the private key (created, never overwritten).
        file: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum StatementCommand {
    /// Create an issuer's ES256 key in FILE (readable by its owner only) and
    /// its public COSE_Key beside it (FILE with the extension .pub.cbor), the
    /// file `anchor serve --scitt-issuer ISS=KEYFILE` takes; print its kid
    /// (the RFC 9679 thumbprint, base64url).
    Keygen {
        /// Where to write the private key (created, never overwritten).
        file: std::path::PathBuf,
    },
    /// Sign PAYLOAD (a file, `-` for stdin) as a statement of ISS about SUB
    /// (a tagged COSE_Sign1, ES256, the payload attached) and write it to
    /// stdout, ready for POST /entries with Content-Type: application/cose.
    Sign {
        /// The issuer's private key (from `anchor statement keygen`).
        #[arg(long)]
        key: std::path::PathBuf,
        /// The issuer (CWT claim 1), as the server's --scitt-issuer names it.
        #[arg(long)]
        iss: String,
        /// What the statement is about (CWT claim 2).
        #[arg(long)]
        sub: String,
        /// The payload's media type (COSE header 3).
        #[arg(long)]
        content_type: Option<String>,
        payload: std::path::PathBuf,
    },
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// A receipt: from GET /v1/dd/{dd_id}/receipt (JSON, or COSE with
    /// Accept: application/cose), or a signed statement's from GET
    /// /entries/{entry_id} (with --statement).
    #[arg(required_unless_present = "evidence", conflicts_with = "evidence")]
    receipt: Option<std::path::PathBuf>,
    /// A dispute-evidence bundle (GET /v1/dd/{dd_id}/evidence, `anchor
    /// evidence`) instead of a receipt: its scope, proof, order and payment
    /// checks, then the receipt's own (witnesses, time-stamp, COSE, trace).
    #[arg(long, conflicts_with_all = ["statement", "previous"])]
    evidence: Option<std::path::PathBuf>,
    /// The log's public key (`<origin>+<id>+<base64>`), or a file holding it.
    #[arg(long)]
    key: String,
    /// An earlier signed checkpoint saved by the verifier.
    #[arg(long, requires = "consistency")]
    previous: Option<std::path::PathBuf>,
    /// The consistency proof from the earlier checkpoint's size to the receipt's
    /// (GET /v1/log/consistency?from=..&to=..), as JSON.
    #[arg(long, requires = "previous")]
    consistency: Option<std::path::PathBuf>,
    /// A witness's cosignature verifier key (`<name>+<id>+<key>`, or a file
    /// holding it) whose cosignature on the receipt's checkpoint counts;
    /// repeatable.
    #[arg(long = "witness")]
    witnesses: Vec<String>,
    /// How many of the --witness keys must have cosigned (default: all of them).
    #[arg(long)]
    quorum: Option<usize>,
    /// PEM file of the CA certificates a time-stamping authority's token must
    /// chain to: the receipt's timestamp_token is then required and checked.
    #[arg(long)]
    tsa_ca: Option<std::path::PathBuf>,
    /// For a COSE receipt (RFC 9942): the receipt keys, a COSE Key Set or
    /// one COSE_Key as GET /.well-known/scitt-keys serves them (CBOR).
    #[arg(long)]
    receipt_key: Option<std::path::PathBuf>,
    /// For the COSE receipt of a signed statement registered with POST
    /// /entries (GET /entries/{entry_id}): the statement as registered.
    #[arg(long, requires = "receipt_key")]
    statement: Option<std::path::PathBuf>,
    /// The trace id (32 hex digits, or a whole traceparent) of the run the
    /// decision was made in: checks that the record's salt commits to it
    /// under the receipt's trace_key (the create carried that traceparent).
    #[arg(long, conflicts_with = "statement")]
    trace_id: Option<String>,
}

#[derive(Subcommand)]
enum PricingCommand {
    /// Load a pricing component (or the bundled one) and print its generation, presets and their prices.
    Inspect {
        /// A .wasm component; omit for the bundled v1.3.0.
        file: Option<std::path::PathBuf>,
    },
    /// Check a pricing component and publish it: every host sharing the
    /// database prices with it from the activation time (rolling back is
    /// publishing the earlier one again).
    Publish {
        /// The component (.wasm), or `bundled` for the generation built into
        /// this binary (rolling back to the built-in prices).
        file: String,
        /// When it comes into force (RFC 3339, e.g. 2026-12-01T00:00:00Z).
        #[arg(long, required_unless_present = "now", conflicts_with = "now")]
        activate_at: Option<String>,
        /// In force at once (within about a second, the hosts' refresh and load).
        #[arg(long)]
        now: bool,
        /// Publish a generation that prices no services (`anchor:pricing@1.0.0`):
        /// every paid route but DD create then answers 503.
        #[arg(long)]
        allow_no_services: bool,
        #[command(flatten)]
        database: DbLocation,
    },
    /// The published generations: past, in force, and scheduled.
    List {
        #[command(flatten)]
        database: DbLocation,
    },
    /// How prices change from one generation to another: every combination
    /// of the six EE axes (the largest changes, or all with --all), every
    /// preset and every service price.
    Diff {
        /// The generation prices move from: a .wasm component, or `bundled`.
        from: String,
        /// The generation prices move to: a .wasm component, or `bundled`.
        to: String,
        /// List every combination whose price changes.
        #[arg(long)]
        all: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(workers) = cli.serving().and_then(|config| config.worker_threads) {
        runtime.worker_threads(usize::from(workers));
    }
    runtime.build()?.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let json = cli.serving().is_some_and(|config| config.log_format == "json");
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into());
    if json {
        // One JSON object per line; a request's lines carry its span (request id, route).
        tracing_subscriber::fmt().json().with_current_span(true).with_span_list(false).with_env_filter(filter).init();
    } else {
        // Colours for a terminal only: a log written to a file or a journal
        // carries no escape codes (nor with NO_COLOR set).
        use std::io::IsTerminal;
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        tracing_subscriber::fmt().with_ansi(colour).with_env_filter(filter).init();
    }
    match cli.command {
        Some(Command::Serve(config)) => anchor_server::serve(*config).await,
        None => anchor_server::serve(cli.serve).await,
        Some(Command::Pricing { command: PricingCommand::Inspect { file } }) => inspect(file.as_deref()),
        Some(Command::Pricing { command: PricingCommand::Publish { file, activate_at, now: _, allow_no_services, database } }) => {
            publish(&file, activate_at.as_deref(), allow_no_services, &database).await
        }
        Some(Command::Pricing { command: PricingCommand::List { database } }) => list(&database).await,
        Some(Command::Pricing { command: PricingCommand::Diff { from, to, all } }) => {
            let engine = PluginEngine::new()?;
            let load = |name: &str| {
                let file = (name != "bundled").then(|| std::path::Path::new(name));
                anchor_server::load_pricing(&engine, file, None)
            };
            let (from, to) = (load(&from)?, load(&to)?);
            print!("{}", anchor_app::pricing::diff(from.as_ref(), to.as_ref())?.render(all));
            Ok(())
        }
        Some(Command::Log { command: LogCommand::Keygen { origin, file } }) => {
            if file.exists() {
                anyhow::bail!("{} exists; refusing to overwrite a signing key", file.display());
            }
            let key = anchor_app::log::LogKey::load_or_create(&file, &origin)?;
            println!("log signing key written to {}; its public key (publish it to verifiers):\n{}", file.display(), key.vkey);
            Ok(())
        }
        Some(Command::Statement { command }) => statement(command),
        Some(Command::Verify(args)) => verify(args),
        Some(Command::Evidence(args)) => evidence(args).await,
        Some(Command::Backup(args)) => backup(args).await,
        Some(Command::Feature { command }) => feature(command).await,
        Some(Command::Feedback { command }) => feedback(command).await,
        Some(Command::Pay(args)) => pay(args).await,
        Some(Command::Witness { command: WitnessCommand::Keygen { name, file } }) => {
            let vkey = anchor_server::witness_server::keygen(&name, &file)?;
            println!(
                "witness key written to {}; its verifier key (give it to the logs and verifiers that count on this witness):\n{vkey}",
                file.display()
            );
            Ok(())
        }
        Some(Command::Witness { command: WitnessCommand::Serve(args) }) => anchor_server::witness_server::serve(args).await,
        Some(Command::Wallet { command: WalletCommand::New { file } }) => {
            let (key, address) = anchor_x402::client::new_key();
            anchor_server::witness_server::write_private(&file, &format!("{key}\n"))?;
            eprintln!("wallet key written to {} (for local settlement; on a facilitator it pays real USDC on Base)", file.display());
            println!("{address}");
            Ok(())
        }
        Some(Command::Wallet { command: WalletCommand::Address { file } }) => {
            let key = std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
            let signer = anchor_x402::client::signer_from_key(&key).map_err(anyhow::Error::msg)?;
            println!("{}", signer.address());
            Ok(())
        }
        Some(Command::Completions { shell }) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "anchor", &mut script);
            print_all(&script)
        }
        Some(Command::Manpage) => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut page)?;
            print_all(&page)
        }
        Some(Command::Monitor(args)) => match anchor_server::monitor::run(&args).await {
            anchor_server::monitor::Verdict::Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                Ok(())
            }
            anchor_server::monitor::Verdict::Alarm(why) => {
                eprintln!("ALARM: {why}");
                std::process::exit(1);
            }
            anchor_server::monitor::Verdict::Unchecked(why) => {
                eprintln!("could not check: {why}");
                std::process::exit(2);
            }
        },
        Some(Command::Restore(args)) => {
            let vkey = args.database.vkey()?;
            anchor_server::operate::restore(&args.database.embedded()?, &args.source, vkey.as_deref(), args.accept_log_fork).await
        }
        Some(Command::Tool { command: ToolCommand::Test(args) }) => tool_run(args),
        Some(Command::Tool { command: ToolCommand::New { lang, name, dir } }) => {
            let dir = dir.unwrap_or_else(|| std::path::PathBuf::from(&name));
            let written = anchor_server::tool_kit::new_project(&dir, &name, lang)?;
            for file in &written {
                println!("{}", file.display());
            }
            eprintln!("a {lang:?} tool project in {}: see its README.md to test, build and run it", dir.display());
            Ok(())
        }
    }
}

/// Writes `bytes` to stdout; a reader that stopped early (`| head`) is no failure.
fn print_all(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().write_all(bytes) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
}

fn tool_run(args: ToolRunArgs) -> anyhow::Result<()> {
    use anchor_domain::tools::{ToolInput, ToolLimits, ToolRuntime};
    let wasm = std::fs::read(&args.file).map_err(|e| anyhow::anyhow!("reading {}: {e}", args.file.display()))?;
    let input: ToolInput = match (&args.observations, args.sample) {
        (_, Some(n)) => anchor_domain::tools::sample_input(n),
        (Some(path), None) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
            };
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("the input is not a tool input: {e}"))?
        }
        (None, None) => anchor_domain::tools::sample_input(3),
    };
    let limits = ToolLimits::for_this_machine();
    let tools = anchor_plugin_host::WasmTools::new(None, limits)?;
    if let Ok(shape) = anchor_plugin_host::shape(&wasm) {
        eprintln!(
            "shape: {} core instances (limit {}), {} memories (limit {}) starting at {} bytes, {} tables (limit {}) starting with {} elements",
            shape.core_instances,
            limits.instances,
            shape.memories,
            limits.memories,
            shape.initial_memory_bytes,
            shape.tables,
            limits.tables,
            shape.initial_table_elements
        );
    }
    // Compiling a component of several megabytes (JavaScript and Python
    // tools carry their interpreter) takes tens of seconds: say so first,
    // and tick while it runs.
    eprintln!(
        "compiling {:.1} MB as the service would{}...",
        wasm.len() as f64 / 1e6,
        if wasm.len() > 4 << 20 { " (a component this size takes a while)" } else { "" }
    );
    let compiling = std::time::Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut waited = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(250));
                waited += 250;
                if waited.is_multiple_of(5000) && !done.load(std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("  still compiling, {} s", waited / 1000);
                }
            }
        })
    };
    let accepted = tools.accept(&wasm);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = ticker.join();
    let accepted = match accepted {
        Ok(accepted) => accepted,
        Err(rejected) => {
            eprintln!("REFUSED: {}", rejected.detail());
            std::process::exit(2);
        }
    };
    eprintln!("accepted: {} bytes, sha256 {}, compiled in {:.1?}", accepted.size, hex::encode(accepted.sha256), compiling.elapsed());
    let mut walls = Vec::with_capacity(args.repeat.max(1));
    let mut last = None;
    for _ in 0..args.repeat.max(1) {
        match tools.run(&accepted.sha256, None, &input) {
            Ok((report, stats)) => {
                walls.push(stats.wall);
                last = Some((report, stats));
            }
            Err(failure) => {
                eprintln!("FAILED ({}): {}", failure.kind(), failure.detail());
                std::process::exit(1);
            }
        }
    }
    let (report, stats) = last.expect("at least one run");
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!(
        "ok: {} metrics, {} rows, {} output bytes, {} instructions (fuel) of {}, {:.2?} (limit {} ms), memory {} KiB at most (limit {} MiB)",
        report.metrics.len(),
        report.rows.len(),
        stats.output_bytes,
        stats.fuel_used,
        limits.fuel,
        stats.wall,
        limits.wall_ms,
        stats.memory_bytes >> 10,
        limits.memory_bytes >> 20
    );
    if walls.len() > 1 {
        walls.sort();
        let at = |q: f64| walls[((walls.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "{} runs (instantiate + run): p50 {:.2?}, p99 {:.2?}, max {:.2?}",
            walls.len(),
            at(0.5),
            at(0.99),
            walls[walls.len() - 1]
        );
    }
    Ok(())
}

async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let vkey = args.database.vkey()?;
    let target = match (&args.check, &args.dest) {
        (Some(target), _) => target.clone(),
        (None, Some(dest)) => {
            anchor_server::operate::backup(&args.database.embedded()?, dest).await?;
            if !args.verify {
                return Ok(());
            }
            dest.to_string_lossy().into_owned()
        }
        (None, None) => anyhow::bail!("give a destination file, or --check TARGET"),
    };
    match anchor_server::operate::check(&target, vkey.as_deref()).await {
        Ok(checked) => {
            anchor_server::operate::report(&target, &checked);
            Ok(())
        }
        Err(error) => {
            eprintln!("FAILED: {error:#}");
            std::process::exit(1);
        }
    }
}

fn statement(command: StatementCommand) -> anyhow::Result<()> {
    use base64::Engine;
    use std::io::{Read, Write};
    match command {
        StatementCommand::Keygen { file } => {
            if file.exists() {
                anyhow::bail!("{} exists; refusing to overwrite a signing key", file.display());
            }
            let key = anchor_app::receipt_key::ReceiptKey::load_or_create(&file)?;
            let public = file.with_extension("pub.cbor");
            std::fs::write(&public, key.public().cose_key()).map_err(|e| anyhow::anyhow!("{}: {e}", public.display()))?;
            println!("issuer key written to {}; its public COSE_Key to {}; its kid:", file.display(), public.display());
            println!("{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.kid()));
            Ok(())
        }
        StatementCommand::Sign { key, iss, sub, content_type, payload } => {
            let text = std::fs::read_to_string(&key).map_err(|e| anyhow::anyhow!("--key {}: {e}", key.display()))?;
            let key = anchor_app::receipt_key::ReceiptKey::from_skey(&text)?;
            let mut bytes = Vec::new();
            let limit = anchor_app::scitt::MAX_STATEMENT_BYTES as u64;
            if payload.as_os_str() == "-" {
                std::io::stdin().take(limit + 1).read_to_end(&mut bytes)?;
            } else {
                std::fs::File::open(&payload)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", payload.display()))?
                    .take(limit + 1)
                    .read_to_end(&mut bytes)?;
            }
            if bytes.len() as u64 > limit {
                anyhow::bail!("the payload is over {limit} bytes; a statement carries a claim (a hash of an artifact), not the artifact");
            }
            let signed =
                anchor_verify::statement::sign_statement(&iss, &sub, content_type.as_deref(), &bytes, &key.kid(), |tbs| key.sign(tbs))?;
            std::io::stdout().write_all(&signed)?;
            Ok(())
        }
    }
}

fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    use anchor_server::monitor::{key_or_file, read_at_most};
    let unchecked = |failure: anchor_verify::Failure| -> ! {
        eprintln!("FAILED ({} check): {failure}", failure.check());
        std::process::exit(2);
    };
    // Every input is bounded before it is parsed: a crafted file of any
    // size costs at most MAX_INPUT_BYTES of memory.
    let read = |path: &std::path::Path| {
        read_at_most(path, anchor_verify::MAX_INPUT_BYTES).map_err(|e| anchor_verify::Failure::Format(format!("{}: {e}", path.display())))
    };
    let key = key_or_file(&args.key).unwrap_or_else(|e| unchecked(anchor_verify::Failure::Format(format!("--key {e}"))));
    let witnesses = args
        .witnesses
        .iter()
        .map(|given| {
            let text = key_or_file(given).map_err(|e| anchor_verify::Failure::Format(format!("--witness {e}")))?;
            anchor_verify::cosignature::WitnessKey::parse(&text)
        })
        .collect::<Result<Vec<_>, _>>();
    let witnesses = witnesses.unwrap_or_else(|failure| unchecked(failure));
    let quorum = args.quorum.unwrap_or(witnesses.len());
    if quorum > witnesses.len() {
        anyhow::bail!("--quorum {quorum} asks for more cosignatures than the {} --witness keys given", witnesses.len());
    }
    // A COSE receipt (a tagged COSE_Sign1, first byte 0xd2) is checked as
    // such, then as the JSON receipt holding the same proof; with
    // --statement, as the receipt of that registered statement.
    let mut cose_line = None;
    let mut established = None;
    let input = args.evidence.as_ref().or(args.receipt.as_ref()).expect("clap requires a receipt or --evidence");
    let proven = read(input).and_then(|bytes| match bytes.first() {
        _ if args.evidence.is_some() => {
            let bundle = anchor_verify::evidence::parse_evidence(&bytes)?;
            established = Some(anchor_verify::evidence::verify_evidence(&bundle, &key, |payload| {
                let authorized = anchor_x402::authorization(payload).map_err(|reason| reason.as_str().to_string())?;
                Ok(anchor_verify::evidence::Authorized {
                    from: authorized.payer,
                    to: authorized.pay_to,
                    value: authorized.amount_units,
                    valid_after: authorized.valid_after,
                    valid_before: authorized.valid_before,
                })
            })?);
            if let (Some(cose), Some(file)) = (&bundle.cose_receipt, &args.receipt_key) {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(cose)
                    .map_err(|_| anchor_verify::Failure::Proof("the COSE receipt is not base64".into()))?;
                let keys = anchor_verify::cose::parse_keys(&read(file)?)?;
                let receipt = &bundle.receipt;
                anchor_verify::cose::parse_receipt(&bytes)
                    .and_then(|cose| cose.verify(&anchor_verify::leaf_data(&receipt.integrity_hash, &receipt.anchored_at), &keys))
                    .map_err(|failure| anchor_verify::Failure::Proof(format!("the COSE receipt: {failure}")))?;
                cose_line = Some("ok: the COSE receipt (RFC 9942) proves the same leaf under the receipt key".to_string());
            }
            Ok(Proven::Record(bundle.receipt))
        }
        Some(0xd2) => {
            let keys = match &args.receipt_key {
                Some(file) => anchor_verify::cose::parse_keys(&read(file)?)?,
                None => {
                    return Err(anchor_verify::Failure::Format(
                        "a COSE receipt needs --receipt-key (the COSE Key Set of GET /.well-known/scitt-keys)".into(),
                    ));
                }
            };
            let cose = anchor_verify::cose::parse_receipt(&bytes)?;
            use base64::Engine;
            cose_line = Some(format!(
                "ok: the COSE receipt (RFC 9942) is signed by receipt key {} of {} over the root of {} leaves",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&cose.kid),
                cose.claims.iss,
                cose.tree_size
            ));
            if let Some(statement) = &args.statement {
                let statement_bytes = read(statement)?;
                let verified = anchor_verify::statement::verify_statement_receipt(&cose, &statement_bytes, &keys, &key)?;
                let read = anchor_verify::statement::parse_statement(&statement_bytes)
                    .map_err(|e| anchor_verify::Failure::Record(format!("the signed statement: {e}")))?;
                let checkpoint = cose.checkpoint.clone().unwrap_or_default();
                let token = cose.timestamp_token.as_ref().map(|t| base64::engine::general_purpose::STANDARD.encode(t));
                return Ok(Proven::Statement { read: Box::new(read), verified, checkpoint, token });
            }
            let receipt = cose.as_json_receipt().ok_or_else(|| {
                anchor_verify::Failure::Format(
                    "the COSE receipt carries no record or checkpoint (-70004, -70001); a signed statement's receipt needs --statement"
                        .into(),
                )
            })?;
            let leaf = anchor_verify::leaf_data(&receipt.integrity_hash, &receipt.anchored_at);
            cose.verify(&leaf, &keys)?;
            Ok(Proven::Record(receipt))
        }
        _ if args.statement.is_some() => {
            Err(anchor_verify::Failure::Format("--statement goes with a COSE receipt (GET /entries/{entry_id})".into()))
        }
        _ => anchor_verify::parse_receipt(&bytes).map(Proven::Record),
    });
    let proven = match proven {
        Ok(proven) => proven,
        Err(failure) => {
            eprintln!("FAILED ({} check): {failure}", failure.check());
            std::process::exit(1);
        }
    };
    let (checkpoint, timestamp_token) = match &proven {
        Proven::Record(receipt) => (receipt.checkpoint.clone(), receipt.timestamp_token.clone()),
        Proven::Statement { checkpoint, token, .. } => (checkpoint.clone(), token.clone()),
    };
    let outcome = match &proven {
        Proven::Record(receipt) => anchor_verify::verify_receipt(receipt, &key),
        Proven::Statement { verified, .. } => Ok(verified.clone()),
    }
    .and_then(|verified| {
        if let (Some(previous), Some(proof)) = (&args.previous, &args.consistency) {
            let previous = String::from_utf8(read(previous)?)
                .map_err(|_| anchor_verify::Failure::Format(format!("{}: not UTF-8 text", previous.display())))?;
            let proof: anchor_verify::ConsistencyProof =
                serde_json::from_slice(&read(proof)?).map_err(|e| anchor_verify::Failure::Format(format!("the consistency proof: {e}")))?;
            anchor_verify::verify_consistency(&previous, &checkpoint, &proof, &key)?;
        }
        let cosigned =
            if witnesses.is_empty() { Vec::new() } else { anchor_verify::cosignature::verify_quorum(&checkpoint, &witnesses, quorum)? };
        let stamped = match &args.tsa_ca {
            None => None,
            Some(ca) => {
                let pem = read(ca)?;
                let roots = anchor_verify::timestamp::roots_from_pem(&pem)?;
                let token = timestamp_token
                    .as_deref()
                    .ok_or_else(|| anchor_verify::Failure::Timestamp("the receipt carries no timestamp_token".into()))?;
                let token = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token)
                    .map_err(|e| anchor_verify::Failure::Timestamp(format!("the token is not base64: {e}")))?;
                let body = anchor_verify::timestamp::checkpoint_body(&checkpoint)?;
                Some(anchor_verify::timestamp::verify_token(&token, body.as_bytes(), None, &roots)?)
            }
        };
        if let (Some(trace_id), Proven::Record(receipt)) = (&args.trace_id, &proven) {
            anchor_verify::verify_trace(receipt, trace_id)?;
        }
        Ok((verified, cosigned, stamped))
    });
    match outcome {
        Ok((verified, cosigned, stamped)) => {
            if let (Some(established), Proven::Record(receipt)) = (&established, &proven) {
                print_established(established, receipt, &cosigned, stamped.as_ref());
                return Ok(());
            }
            match &proven {
                Proven::Record(receipt) => println!("ok: record {} hashes to {}", receipt.dd_id, receipt.integrity_hash),
                Proven::Statement { read, .. } => println!(
                    "ok: statement {} of issuer {:?} about {:?} is the receipt's leaf",
                    hex::encode(read.entry_id),
                    read.issuer,
                    read.subject
                ),
            }
            println!("ok: leaf {} is in the tree of {} signed by {}", verified.leaf_index, verified.tree_size, verified.origin);
            if let Some(line) = &cose_line {
                println!("{line}");
            }
            if args.previous.is_some() {
                println!("ok: the earlier checkpoint is a prefix of this one");
            }
            for cosignature in &cosigned {
                let at = chrono::DateTime::from_timestamp(cosignature.timestamp as i64, 0).map_or_else(String::new, |t| t.to_rfc3339());
                println!("ok: cosigned by {} at {at}", cosignature.witness);
            }
            match &stamped {
                Some(stamped) => {
                    let at = chrono::DateTime::from_timestamp(stamped.gen_time as i64, 0).map_or_else(String::new, |t| t.to_rfc3339());
                    println!("ok: the checkpoint was time-stamped at {at} by {} (serial {})", stamped.tsa, stamped.serial);
                }
                None if timestamp_token.is_some() => {
                    println!("note: the receipt carries a time-stamp token; give --tsa-ca to check it")
                }
                None => {}
            }
            if !witnesses.is_empty() {
                println!("ok: {} of the {quorum} witness cosignatures required", cosigned.len());
            }
            if let Some(trace_id) = &args.trace_id {
                println!(
                    "ok: the record's salt commits to trace {}: it was declared by someone who knew that trace id when it was anchored",
                    trace_id.trim()
                );
            }
            Ok(())
        }
        Err(failure) => {
            eprintln!("FAILED ({} check): {failure}", failure.check());
            std::process::exit(1);
        }
    }
}

/// What a dispute-evidence bundle that checked out proves, and what it cannot.
fn print_established(
    established: &anchor_verify::evidence::Established,
    receipt: &anchor_verify::Receipt,
    cosigned: &[anchor_verify::cosignature::Cosigned],
    stamped: Option<&anchor_verify::timestamp::Stamped>,
) {
    let at = |seconds: u64| chrono::DateTime::from_timestamp(seconds as i64, 0).map_or_else(String::new, |t| t.to_rfc3339());
    let anchored = &established.anchored_at;
    println!(
        "ok (scope): record {} hashes to {}; the bundle's scope is the record's, anchored at {anchored}",
        receipt.dd_id, receipt.integrity_hash
    );
    println!(
        "ok (proof): leaf {} is in the tree of {} signed by {}",
        established.proof.leaf_index, established.proof.tree_size, established.proof.origin
    );
    for cosignature in cosigned {
        println!("ok (proof): cosigned by witness {} at {}", cosignature.witness, at(cosignature.timestamp));
    }
    if let Some(stamped) = stamped {
        println!("ok (proof): the checkpoint was time-stamped at {} by {}", at(stamped.gen_time), stamped.tsa);
    }
    for (transaction, payer, amount, settled_at) in &established.payments {
        println!("ok (order): payment {transaction} settled at {settled_at}, not before the scope was anchored at {anchored}");
        println!(
            "ok (payment): {payer} signed the authorization of {amount} base units; the service's offer, receipt and binding, \
             signed with the log key, tie settlement {transaction} to this record"
        );
    }
    if established.payments.is_empty() {
        println!("note: no x402 payment is tied to this declaration (Trial credit or a balance paid it)");
    }
    println!(
        "proves: this scope (DD and EE as declared) was anchored at {anchored} and is in the log unchanged{}",
        match established.payments.len() {
            0 => String::new(),
            _ => "; each payment above settled after it, for this scope, as its payer authorized".into(),
        }
    );
    let bound = cosigned.iter().map(|c| c.timestamp).chain(stamped.map(|s| s.gen_time)).min();
    println!(
        "cannot prove: anything about the decision's content (the service never had it); that a settlement is on chain (look it up \
         on its network); the anchoring time is the service's word{}",
        bound.map_or_else(
            || ", not bounded here by a witness or a time-stamp (give --witness or --tsa-ca)".to_string(),
            |seconds| format!(", and the record was in the log by {} on a witness's or time-stamping authority's word", at(seconds))
        )
    );
}

/// What a receipt proves to be in the log.
enum Proven {
    /// A declaration's record (a JSON receipt, or a COSE one carrying it).
    Record(anchor_verify::Receipt),
    /// A registered signed statement, its COSE receipt checked.
    Statement {
        read: Box<anchor_verify::statement::SignedStatement>,
        verified: anchor_verify::Verified,
        checkpoint: String,
        token: Option<String>,
    },
}

fn inspect(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let pricing = anchor_server::load_pricing(&engine, file, None)?;
    let generation = pricing.generation();
    println!("generation {} (sha256 {}, {})", generation.version, generation.sha256, generation.interface);
    for preset in pricing.presets()? {
        let quote = pricing.quote(preset.scope())?;
        println!("{:<12} {:>8} DAC  enabled={}", preset.name, quote.total, preset.enabled);
    }
    Ok(())
}
