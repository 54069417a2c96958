//! Load generator: anchored declarations per second (create + confirm) against
//! a running server, over loopback HTTP.
//!
//!     loadgen --url http://127.0.0.1:18181 --pairs 5000 --concurrency 16
//!
//! Agents are registered before the clock starts; each pays 50 EE_basic
//! declarations from its Trial, so the run registers pairs / 50 agents, and
//! the agents take turns. The server must allow the request rate
//! (`--rate-limit`). Bounded in count: it sends exactly `pairs` creates and
//! `pairs` confirms, then stops.
//!
//! `--paid`: each agent spends its Trial first, then every declaration
//! (EE_basic, as in the Trial-paid runs) is paid over x402: the create
//! carries a payment signed as the official client signs it (EIP-712
//! TransferWithAuthorization, a test key) for the price a challenge named
//! before the clock started, and the confirm settles it. With
//! `--challenge-each` every create is first sent unpaid and answered 402,
//! as by a client that asks each time. The payments are signed before the
//! clock starts.
//!
//! `--rate R` paces the pairs to R per second (pair k starts no earlier than
//! k / R seconds after the start), to measure latency below the peak; without
//! it every worker sends as fast as it is answered. Latency is reported per
//! pair and for the confirm alone.
//!
//! `--statements N --issuer ISS --issuer-key FILE` measures SCITT
//! registration instead: N signed statements (signed before the clock
//! starts with the issuer key of `anchor statement keygen`, which the
//! server allows with `--scitt-issuer`) are posted to `POST /entries`, then
//! their receipts are fetched once a checkpoint covers them all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

struct Args {
    url: String,
    pairs: usize,
    concurrency: usize,
    /// Also measure confirm-to-checkpoint latency and receipt fetch time.
    log: bool,
    /// Pay every declaration with x402 (after spending each agent's Trial).
    paid: bool,
    /// Paid runs: ask for the challenge (a 402) before each paid create.
    challenge_each: bool,
    /// Pairs per second to pace to (open loop); unpaced when absent.
    rate: Option<f64>,
    /// Also measure confirm-to-witnessed-receipt lag: every N-th record's
    /// receipt is polled from its confirm until it says `witnessed: true`.
    witnessed_every: Option<usize>,
    /// Register this many signed statements (SCRAPI) instead of anchoring.
    statements: usize,
    issuer: String,
    issuer_key: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        url: "http://127.0.0.1:18181".into(),
        pairs: 2000,
        concurrency: 16,
        log: false,
        paid: false,
        challenge_each: false,
        rate: None,
        witnessed_every: None,
        statements: 0,
        issuer: "https://issuer.bench".into(),
        issuer_key: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--log" {
            args.log = true;
            continue;
        }
        if flag == "--paid" {
            args.paid = true;
            continue;
        }
        if flag == "--challenge-each" {
            args.challenge_each = true;
            continue;
        }
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--url" => args.url = value,
            "--pairs" => args.pairs = value.parse().expect("--pairs takes a number"),
            "--concurrency" => args.concurrency = value.parse().expect("--concurrency takes a number"),
            "--rate" => args.rate = Some(value.parse().expect("--rate takes a number of pairs per second")),
            "--witnessed-every" => args.witnessed_every = Some(value.parse::<usize>().expect("--witnessed-every takes a number").max(1)),
            "--statements" => args.statements = value.parse().expect("--statements takes a number"),
            "--issuer" => args.issuer = value,
            "--issuer-key" => args.issuer_key = Some(value),
            other => panic!(
                "unknown flag {other}; flags: --url --pairs --concurrency --rate --log --paid --challenge-each --witnessed-every N \
                 --statements N --issuer ISS --issuer-key FILE"
            ),
        }
    }
    assert!(args.url.contains("127.0.0.1") || args.url.contains("localhost") || args.url.contains("[::1]"), "loopback only");
    args
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args();
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency * 2).build()?;
    if args.statements > 0 {
        return register_statements(&args).await;
    }
    let agents_needed = args.pairs.div_ceil(50);
    let mut tokens = Vec::with_capacity(agents_needed);
    for _ in 0..agents_needed {
        let reply: Value = http.post(format!("{}/v1/agent/register", args.url)).json(&json!({})).send().await?.json().await?;
        let token = reply["auth_token"].as_str().expect("auth_token").to_string();
        if args.paid {
            // Spend the Trial (3 x EE_high + 2 x EE_basic = 492.5 of 500) so
            // that each EE_basic create (what the Trial-paid runs create) is
            // paid whole over x402: with 7.5 DAC left, under the 10 DAC base
            // fee, Trial pays no part of it, and every paid create has the
            // one challenge signed below.
            for preset in ["EE_high", "EE_high", "EE_high", "EE_basic", "EE_basic"] {
                let body = json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": { "ee_preset": preset } });
                let status = http.post(format!("{}/v1/dd/create", args.url)).bearer_auth(&token).json(&body).send().await?.status();
                assert_eq!(status.as_u16(), 201);
            }
        }
        tokens.push(token);
    }
    // Work items: each agent at most 50 times, the agents taking turns (as
    // many agents acting at once would), not one agent's 50 in a row.
    let work: Vec<String> = (0..50).flat_map(|_| tokens.iter().cloned()).take(args.pairs).collect();
    let queue = Arc::new(Mutex::new(work));
    // Paid runs: every payment signed before the clock starts (as the
    // official client signs, EIP-712 TransferWithAuthorization), so that the
    // generator's own signing does not share the measurement. The challenge
    // is the same for every EE_basic create of an agent whose Trial is spent.
    let signed = if args.paid {
        let body = json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": { "ee_preset": "EE_basic" } });
        let reply = http.post(format!("{}/v1/dd/create", args.url)).bearer_auth(&tokens[0]).json(&body).send().await?;
        assert_eq!(reply.status().as_u16(), 402, "expected a challenge");
        let challenge: Value = reply.json().await?;
        let signer: alloy_signer_local::PrivateKeySigner = TEST_KEY.parse().expect("test key");
        (0..args.pairs).map(|_| sign_payment(&signer, &challenge)).collect()
    } else {
        Vec::new()
    };
    let signed = Arc::new(Mutex::new(signed));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(args.pairs)));
    let confirm_latencies = Arc::new(Mutex::new(Vec::with_capacity(args.pairs)));
    let next_pair = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let confirmed_at = Arc::new(Mutex::new(Vec::with_capacity(args.pairs)));
    let started = Instant::now();
    // Watches the published checkpoint: when each size was first seen, from
    // the size the log had before the run (a database with history).
    let seen = Arc::new(Mutex::new(Vec::<(u64, Instant)>::new()));
    let baseline = if args.log { checkpoint_size(&http, &args.url).await.unwrap_or(0) } else { 0 };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = args.log.then(|| {
        let (http, url, seen, stop) = (http.clone(), args.url.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(size) = checkpoint_size(&http, &url).await {
                    let mut seen = seen.lock().await;
                    if seen.last().is_none_or(|(s, _)| *s < size) {
                        seen.push((size, Instant::now()));
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    });
    // Confirm-to-witnessed-receipt lags of the sampled records, polled beside the load.
    let witnessed_lags = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let pollers = Arc::new(Mutex::new(Vec::new()));
    let sampled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (witnessed_lags, pollers, sampled, witnessed_every) =
            (witnessed_lags.clone(), pollers.clone(), sampled.clone(), args.witnessed_every);
        let (http, queue, latencies, url, confirmed_at, paid) =
            (http.clone(), queue.clone(), latencies.clone(), args.url.clone(), confirmed_at.clone(), args.paid);
        let (confirm_latencies, next_pair, rate, signed) = (confirm_latencies.clone(), next_pair.clone(), args.rate, signed.clone());
        let challenge_each = args.challenge_each;
        workers.push(tokio::spawn(async move {
            loop {
                let Some(token) = queue.lock().await.pop() else { break };
                if let Some(rate) = rate {
                    let k = next_pair.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep_until((started + Duration::from_secs_f64(k as f64 / rate)).into()).await;
                }
                let t0 = Instant::now();
                let body = json!({ "request_id": uuid::Uuid::new_v4(), "dd": dd(), "ee": { "ee_preset": "EE_basic" } });
                let create = || http.post(format!("{url}/v1/dd/create")).bearer_auth(&token).json(&body);
                let mut created = if paid && !challenge_each {
                    // A client that knows the price (from an earlier challenge
                    // or /.well-known/x402.json) pays with its first request.
                    let header = signed.lock().await.pop().expect("one signed payment per pair");
                    create().header("PAYMENT-SIGNATURE", header).send().await.expect("paid create")
                } else {
                    create().send().await.expect("create")
                };
                if paid && challenge_each {
                    // The 402 and its challenge, as a client that asks each time sees them first.
                    assert_eq!(created.status().as_u16(), 402, "expected a challenge");
                    let _challenge: Value = created.json().await.expect("challenge");
                    let header = signed.lock().await.pop().expect("one signed payment per pair");
                    created = create().header("PAYMENT-SIGNATURE", header).send().await.expect("paid create");
                }
                let status = created.status().as_u16();
                let created: Value = created.json().await.expect("create body");
                assert_eq!(status, 201, "create failed: {created}");
                let confirm_started = Instant::now();
                let confirmed = http
                    .post(format!("{url}/v1/dd/confirm"))
                    .bearer_auth(&token)
                    .json(&json!({ "dd_id": created["dd_id"] }))
                    .send()
                    .await
                    .expect("confirm");
                assert_eq!(confirmed.status().as_u16(), 200, "confirm failed");
                confirm_latencies.lock().await.push(confirm_started.elapsed());
                latencies.lock().await.push(t0.elapsed());
                confirmed_at.lock().await.push((token.clone(), created["dd_id"].as_str().unwrap_or_default().to_string(), Instant::now()));
                if let Some(every) = witnessed_every
                    && sampled.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % every == 0
                {
                    let (http, url, token, lags) = (http.clone(), url.clone(), token.clone(), witnessed_lags.clone());
                    let dd_id = created["dd_id"].as_str().unwrap_or_default().to_string();
                    let confirmed_at = Instant::now();
                    pollers.lock().await.push(tokio::spawn(async move {
                        let deadline = confirmed_at + Duration::from_secs(60);
                        while Instant::now() < deadline {
                            if let Ok(reply) = http.get(format!("{url}/v1/dd/{dd_id}/receipt")).bearer_auth(&token).send().await
                                && let Ok(receipt) = reply.json::<Value>().await
                                && receipt["witnessed"] == json!(true)
                            {
                                lags.lock().await.push(confirmed_at.elapsed());
                                return;
                            }
                            // Every 50 ms: the polling must stay a small part of the load it measures.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }));
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed();
    let mut latencies = latencies.lock().await.clone();
    latencies.sort();
    let mut confirms = confirm_latencies.lock().await.clone();
    confirms.sort();
    let pct = |values: &[Duration], p: f64| {
        values.get(((values.len() as f64 * p) as usize).min(values.len().saturating_sub(1))).copied().unwrap_or(Duration::ZERO)
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "anchored {} {}DDs (create + confirm) in {:.2} s with concurrency {}{}: {:.0} DDs/s; per pair p50 {:.2} ms, p99 {:.2} ms; \
         confirm p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        if args.paid { "x402-paid " } else { "" },
        elapsed.as_secs_f64(),
        args.concurrency,
        args.rate.map(|r| format!(" paced to {r:.0} pairs/s")).unwrap_or_default(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        ms(pct(&latencies, 0.50)),
        ms(pct(&latencies, 0.99)),
        ms(pct(&confirms, 0.50)),
        ms(pct(&confirms, 0.99)),
    );
    if args.witnessed_every.is_some() {
        let pollers = std::mem::take(&mut *pollers.lock().await);
        let polled = pollers.len();
        for poller in pollers {
            poller.await?;
        }
        let mut lags = witnessed_lags.lock().await.clone();
        lags.sort();
        println!(
            "confirm -> witnessed receipt: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} of {} sampled records witnessed within 60 s)",
            ms(pct(&lags, 0.50)),
            ms(pct(&lags, 0.99)),
            ms(lags.last().copied().unwrap_or_default()),
            lags.len(),
            polled,
        );
    }
    if let Some(watcher) = watcher {
        log_report(&http, &args.url, &confirmed_at.lock().await, baseline, &seen, &stop, watcher).await?;
    }
    Ok(())
}

fn dd() -> Value {
    json!({
        "dd_unit_type": "single", "dd_declaration_mode": "self_declared",
        "decision_type": "internal_service", "decision_action_type": "execute",
        "origin_context_type": "internal", "selection_state": "SELECTED",
    })
}

/// Anvil's public test key #0: never holds real money.
const TEST_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// Signs the challenge's one requirement with `signer`, as the official client does (a fresh nonce each time).
fn sign_payment(signer: &alloy_signer_local::PrivateKeySigner, challenge: &Value) -> String {
    use alloy_signer::SignerSync;
    use alloy_sol_types::SolStruct;
    use base64::Engine;
    let accepts = &challenge["accepts"][0];
    let amount: u64 = accepts["amount"].as_str().expect("amount").parse().expect("amount");
    let to: alloy_primitives::Address = accepts["payTo"].as_str().expect("payTo").parse().expect("payTo");
    let valid_before = chrono::Utc::now().timestamp() as u64 + accepts["maxTimeoutSeconds"].as_u64().expect("timeout");
    let nonce = alloy_primitives::B256::from(*uuid::Uuid::new_v4().as_bytes().repeat(2).first_chunk::<32>().expect("32"));
    let message = anchor_x402::TransferWithAuthorization {
        from: signer.address(),
        to,
        value: alloy_primitives::U256::from(amount),
        validAfter: alloy_primitives::U256::ZERO,
        validBefore: alloy_primitives::U256::from(valid_before),
        nonce,
    };
    let domain = alloy_sol_types::Eip712Domain {
        name: Some("USD Coin".into()),
        version: Some("2".into()),
        chain_id: Some(alloy_primitives::U256::from(8453u64)),
        verifying_contract: Some(accepts["asset"].as_str().expect("asset").parse().expect("asset")),
        salt: None,
    };
    let signature = signer.sign_hash_sync(&message.eip712_signing_hash(&domain)).expect("sign");
    let payload = json!({
        "x402Version": 2,
        "resource": challenge["resource"],
        "accepted": accepts,
        "payload": {
            "authorization": {
                "from": format!("{:#x}", signer.address()), "to": format!("{to:#x}"), "value": amount.to_string(),
                "validAfter": "0", "validBefore": valid_before.to_string(), "nonce": format!("{nonce:#x}"),
            },
            "signature": format!("0x{}", hex::encode(signature.as_bytes())),
        },
    });
    base64::engine::general_purpose::STANDARD.encode(payload.to_string())
}

/// The size of the log's published checkpoint.
async fn checkpoint_size(http: &reqwest::Client, url: &str) -> Option<u64> {
    let text = http.get(format!("{url}/v1/log/checkpoint")).send().await.ok()?.text().await.ok()?;
    text.lines().nth(1)?.parse().ok()
}

/// Confirm-to-checkpoint latency (from the watcher's first sight of a
/// checkpoint covering each leaf) and receipt fetch time.
async fn log_report(
    http: &reqwest::Client,
    url: &str,
    confirmed: &[(String, String, Instant)],
    baseline: u64,
    seen: &Arc<Mutex<Vec<(u64, Instant)>>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    watcher: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    // Wait until the last checkpoint covers everything (bounded).
    let deadline = Instant::now() + Duration::from_secs(60);
    let total = baseline + confirmed.len() as u64;
    while seen.lock().await.last().map_or(0, |(s, _)| *s) < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.await?;
    let seen = seen.lock().await.clone();
    let mut inclusion = Vec::new();
    let mut fetch = Vec::new();
    let mut cose_fetch = Vec::new();
    for (token, dd_id, at) in confirmed {
        // The COSE receipt (signed at each request) beside the JSON one,
        // each fetched whole, one after the other.
        let t0 = Instant::now();
        let cose = http.get(format!("{url}/v1/dd/{dd_id}/receipt.cose")).bearer_auth(token).send().await?;
        let cose_ok = cose.status().is_success();
        cose.bytes().await?;
        if cose_ok {
            cose_fetch.push(t0.elapsed());
        }
        let t0 = Instant::now();
        let receipt: Value = http.get(format!("{url}/v1/dd/{dd_id}/receipt")).bearer_auth(token).send().await?.json().await?;
        fetch.push(t0.elapsed());
        let index = receipt["leaf_index"].as_u64().expect("receipt");
        if let Some((_, when)) = seen.iter().find(|(size, _)| *size > index) {
            inclusion.push(when.saturating_duration_since(*at));
        }
    }
    inclusion.sort();
    fetch.sort();
    cose_fetch.sort();
    let pct = |v: &[Duration], p: f64| v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or_default();
    println!(
        "confirm -> signed checkpoint: p50 {:.0} ms, p99 {:.0} ms ({} of {} seen); receipt fetch: p50 {:.2} ms, p99 {:.2} ms",
        pct(&inclusion, 0.5).as_secs_f64() * 1e3,
        pct(&inclusion, 0.99).as_secs_f64() * 1e3,
        inclusion.len(),
        confirmed.len(),
        pct(&fetch, 0.5).as_secs_f64() * 1e3,
        pct(&fetch, 0.99).as_secs_f64() * 1e3,
    );
    println!(
        "COSE receipt fetch: p50 {:.2} ms, p99 {:.2} ms ({} of {} served)",
        pct(&cose_fetch, 0.5).as_secs_f64() * 1e3,
        pct(&cose_fetch, 0.99).as_secs_f64() * 1e3,
        cose_fetch.len(),
        confirmed.len(),
    );
    Ok(())
}

/// SCITT registration: `args.statements` signed statements posted to
/// `POST /entries` by `args.concurrency` workers, then each one's receipt
/// fetched once a checkpoint covers them all.
async fn register_statements(args: &Args) -> anyhow::Result<()> {
    let key_file = args.issuer_key.as_ref().expect("--statements needs --issuer-key (anchor statement keygen)");
    let key = anchor_app::receipt_key::ReceiptKey::from_skey(&std::fs::read_to_string(key_file)?)?;
    let statements: Vec<Vec<u8>> = (0..args.statements)
        .map(|n| {
            let payload = format!("{{\"artifact\":\"bench-{n}-{}\"}}", uuid::Uuid::new_v4());
            anchor_verify::statement::sign_statement(&args.issuer, "pkg:bench@1", None, payload.as_bytes(), &key.kid(), |tbs| key.sign(tbs))
                .expect("a statement")
        })
        .collect();
    let http =
        reqwest::Client::builder().pool_max_idle_per_host(args.concurrency * 2).redirect(reqwest::redirect::Policy::none()).build()?;
    let baseline = checkpoint_size(&http, &args.url).await.unwrap_or(0);
    let queue = Arc::new(Mutex::new(statements));
    let results = Arc::new(Mutex::new(Vec::with_capacity(args.statements)));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (http, queue, results, url) = (http.clone(), queue.clone(), results.clone(), args.url.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let Some(statement) = queue.lock().await.pop() else { break };
                let t0 = Instant::now();
                let reply = http
                    .post(format!("{url}/entries"))
                    .header("content-type", "application/cose")
                    .body(statement)
                    .send()
                    .await
                    .expect("POST");
                let status = reply.status().as_u16();
                let location = reply.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
                assert!(status == 303 || status == 201, "POST /entries answered {status}: {:?}", reply.bytes().await);
                results.lock().await.push((t0.elapsed(), location.expect("a locator")));
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed();
    let results = std::mem::take(&mut *results.lock().await);
    let mut latencies: Vec<Duration> = results.iter().map(|(d, _)| *d).collect();
    latencies.sort();
    let pct = |v: &[Duration], p: f64| v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or_default();
    println!(
        "registered {} signed statements (POST /entries) in {:.2} s with concurrency {}: {:.0} statements/s; per request p50 {:.2} ms, p99 {:.2} ms",
        results.len(),
        elapsed.as_secs_f64(),
        args.concurrency,
        results.len() as f64 / elapsed.as_secs_f64(),
        pct(&latencies, 0.5).as_secs_f64() * 1e3,
        pct(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    // Every statement under a checkpoint, then each receipt fetched.
    let total = baseline + results.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoint_size(&http, &args.url).await.unwrap_or(0) < total {
        assert!(Instant::now() < deadline, "the statements were not all checkpointed within 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("registered -> all under a signed checkpoint: {:.0} ms after the first POST", started.elapsed().as_secs_f64() * 1e3);
    let mut fetch = Vec::with_capacity(results.len());
    for (_, location) in &results {
        let t0 = Instant::now();
        let reply = http.get(location).header("accept", "application/cose").send().await?;
        let status = reply.status().as_u16();
        reply.bytes().await?;
        if status == 200 {
            fetch.push(t0.elapsed());
        }
    }
    fetch.sort();
    println!(
        "statement receipt fetch (GET /entries/{{id}}): p50 {:.2} ms, p99 {:.2} ms ({} of {} served)",
        pct(&fetch, 0.5).as_secs_f64() * 1e3,
        pct(&fetch, 0.99).as_secs_f64() * 1e3,
        fetch.len(),
        results.len(),
    );
    Ok(())
}
