//! `anchor`: the service binary. `anchor serve` (the default) runs the API;
//! `anchor tool run FILE` runs a tool component locally, as the service would;
//! `anchor pricing inspect FILE` checks a pricing component before deployment.

use clap::{Parser, Subcommand};

use anchor_plugins::PluginEngine;
use anchor_server::config::ServeConfig;

#[derive(Parser)]
#[command(name = "anchor", version, about = "An accountability anchoring service for software agents")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand, `anchor` serves with these options.
    #[command(flatten)]
    serve: ServeConfig,
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
    /// signature, and (given an earlier checkpoint and a proof) consistency.
    Verify(VerifyArgs),
    /// Commands for tool authors: run a tool component locally, as the service would.
    Tool {
        #[command(subcommand)]
        command: ToolCommand,
    },
}

#[derive(Subcommand)]
enum ToolCommand {
    /// Check a component of anchor:tool@1.0.0 as an upload is checked, run it
    /// under the service's limits, print its report (JSON) and what it used.
    Run(ToolRunArgs),
}

#[derive(clap::Args)]
struct ToolRunArgs {
    /// The component (.wasm).
    file: std::path::PathBuf,
    /// The observations, as JSON: {"today": DAY, "observations": [...]} (`-` reads stdin).
    #[arg(long, conflicts_with = "sample")]
    input: Option<std::path::PathBuf>,
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

#[derive(clap::Args)]
struct VerifyArgs {
    /// A receipt from GET /v1/dd/{dd_id}/receipt, as JSON.
    receipt: std::path::PathBuf,
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
}

#[derive(Subcommand)]
enum PricingCommand {
    /// Load a pricing component (or the bundled one) and print its generation, presets and their prices.
    Inspect {
        /// A .wasm component; omit for the bundled v1.3.0.
        file: Option<std::path::PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Serve(config)) => anchor_server::serve(*config).await,
        None => anchor_server::serve(cli.serve).await,
        Some(Command::Pricing { command: PricingCommand::Inspect { file } }) => inspect(file.as_deref()),
        Some(Command::Log { command: LogCommand::Keygen { origin, file } }) => {
            if file.exists() {
                anyhow::bail!("{} exists; refusing to overwrite a signing key", file.display());
            }
            anchor_app::log::LogKey::load_or_create(&file, &origin)?;
            Ok(())
        }
        Some(Command::Verify(args)) => verify(args),
        Some(Command::Tool { command: ToolCommand::Run(args) }) => tool_run(args),
    }
}

fn tool_run(args: ToolRunArgs) -> anyhow::Result<()> {
    use anchor_domain::tools::{ToolInput, ToolLimits, ToolRuntime};
    let wasm = std::fs::read(&args.file).map_err(|e| anyhow::anyhow!("reading {}: {e}", args.file.display()))?;
    let input: ToolInput = match (&args.input, args.sample) {
        (_, Some(n)) => anchor_domain::tools::sample_input(n),
        (Some(path), None) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
            };
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("the input is not a tool input: {e}"))?
        }
        (None, None) => anyhow::bail!("give the observations with --input FILE (or --sample N)"),
    };
    let limits = ToolLimits::DEFAULT;
    let tools = anchor_plugins::WasmTools::new(None, limits)?;
    let compiling = std::time::Instant::now();
    let accepted = match tools.accept(&wasm) {
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
        "ok: {} metrics, {} rows, {} output bytes, {} instructions (fuel) of {}, {:.2?} (limits: {} ms, {} MiB)",
        report.metrics.len(),
        report.rows.len(),
        stats.output_bytes,
        stats.fuel_used,
        limits.fuel,
        stats.wall,
        limits.wall_ms,
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

fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let key = match std::fs::read_to_string(&args.key) {
        Ok(text) => text.trim().to_string(),
        Err(_) => args.key.clone(),
    };
    let receipt: anchor_verify::Receipt = serde_json::from_slice(&std::fs::read(&args.receipt)?)?;
    let outcome = anchor_verify::verify_receipt(&receipt, &key).and_then(|verified| {
        if let (Some(previous), Some(proof)) = (&args.previous, &args.consistency) {
            let previous = std::fs::read_to_string(previous).map_err(|e| anchor_verify::Failure::Format(e.to_string()))?;
            let proof: anchor_verify::ConsistencyProof =
                serde_json::from_slice(&std::fs::read(proof).map_err(|e| anchor_verify::Failure::Format(e.to_string()))?)
                    .map_err(|e| anchor_verify::Failure::Format(e.to_string()))?;
            anchor_verify::verify_consistency(&previous, &receipt.checkpoint, &proof, &key)?;
        }
        Ok(verified)
    });
    match outcome {
        Ok(verified) => {
            println!("ok: record {} hashes to {}", receipt.dd_id, receipt.integrity_hash);
            println!("ok: leaf {} is in the tree of {} signed by {}", verified.leaf_index, verified.tree_size, verified.origin);
            if args.previous.is_some() {
                println!("ok: the earlier checkpoint is a prefix of this one");
            }
            Ok(())
        }
        Err(failure) => {
            eprintln!("FAILED ({} check): {failure}", failure.check());
            std::process::exit(1);
        }
    }
}

fn inspect(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let pricing = anchor_server::load_pricing(&engine, file)?;
    let generation = pricing.generation();
    println!("generation {} (sha256 {}, {})", generation.version, generation.sha256, generation.interface);
    for preset in pricing.presets()? {
        let quote = pricing.quote(preset.scope())?;
        println!("{:<12} {:>8} DAC  enabled={}", preset.name, quote.total, preset.enabled);
    }
    Ok(())
}
