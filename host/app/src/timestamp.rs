//! RFC 3161 time stamps on checkpoints.
//!
//! With `--tsa-url`, the host holding the integrator lease asks a
//! time-stamping authority for a token over the newest checkpoint the
//! witness quorum cosigned (the newest signed one when no witnesses are
//! configured), at most once per `every`, so under load a token covers many
//! checkpoints' worth of records without one request per checkpoint. The
//! token is checked (`anchor_verify::timestamp::verify_token`: imprint,
//! nonce, signature, a time-stamping certificate chained to `--tsa-ca`)
//! before it is stored; receipts then carry it. TSAs are tried in the order
//! given, the next one when one fails; a failing TSA waits before it is
//! asked again. Nothing here is on the path of a create or a confirm.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anchor_domain::records::{CheckpointRecord, TimestampRecord};
use anchor_verify::timestamp::{Certificate, checkpoint_body, token_of_reply, verify_token};
use async_trait::async_trait;
use rand::RngCore;

use crate::Services;

/// How a host reaches a TSA: a `TimeStampReq` in, the `TimeStampResp` out.
#[async_trait]
pub trait TsaTransport: Send + Sync {
    async fn stamp(&self, url: &str, request: Vec<u8>) -> Result<Vec<u8>, String>;
}

/// The TSAs of this instance and the roots their tokens must chain to.
pub struct Stamping {
    pub urls: Vec<String>,
    pub roots: Vec<Certificate>,
    /// At most one token per this interval.
    pub every: Duration,
    pub transport: Arc<dyn TsaTransport>,
}

impl std::fmt::Debug for Stamping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stamping").field("urls", &self.urls).field("roots", &self.roots.len()).field("every", &self.every).finish()
    }
}

/// The newest checkpoint with a token, if time stamps are configured.
pub async fn newest_stamped(services: &Services) -> anyhow::Result<Option<CheckpointRecord>> {
    if services.trust.stamping.is_none() {
        return Ok(None);
    }
    Ok(services.store.newest_timestamped_checkpoint().await?)
}

/// The stored token of the checkpoint of `size`, base64 DER.
pub async fn token_for(services: &Services, size: i64) -> anyhow::Result<Option<TimestampRecord>> {
    if services.trust.stamping.is_none() {
        return Ok(None);
    }
    Ok(services.store.timestamp(size).await?)
}

/// Eight random bytes, a positive INTEGER with no leading zero byte.
fn nonce() -> [u8; 8] {
    let mut nonce = [0u8; 8];
    rand::rng().fill_bytes(&mut nonce);
    nonce[0] = (nonce[0] & 0x7f).max(1);
    nonce
}

/// Asks the TSAs, in order, for a token over `checkpoint`; the first
/// checked one is stored.
async fn stamp(
    services: &Services,
    stamping: &Stamping,
    checkpoint: &CheckpointRecord,
    waits: &mut [Option<Instant>],
) -> anyhow::Result<bool> {
    let body = checkpoint_body(&checkpoint.note)?;
    for (url, wait) in stamping.urls.iter().zip(waits.iter_mut()) {
        if wait.is_some_and(|until| Instant::now() < until) {
            continue;
        }
        let nonce = nonce();
        let request = anchor_verify::timestamp::request(body.as_bytes(), &nonce)?;
        let outcome = match stamping.transport.stamp(url, request).await {
            Err(why) => Err(("unavailable", why)),
            Ok(reply) => match token_of_reply(&reply) {
                Err(why) => Err(("refused", why.to_string())),
                Ok(token) => match verify_token(&token, body.as_bytes(), Some(&nonce), &stamping.roots) {
                    Err(why) => Err(("invalid", why.to_string())),
                    Ok(stamped) => Ok((token, stamped)),
                },
            },
        };
        match outcome {
            Ok((token, stamped)) => {
                let record = TimestampRecord {
                    size: checkpoint.size,
                    tsa: url.clone(),
                    token,
                    gen_time: chrono::DateTime::from_timestamp(stamped.gen_time as i64, 0).unwrap_or_default(),
                };
                services.store.record_timestamp(&record, services.clock.now()).await?;
                services.metrics.timestamped(checkpoint.size);
                *wait = None;
                tracing::debug!(size = checkpoint.size, tsa = %url, gen_time = stamped.gen_time, "checkpoint time-stamped");
                return Ok(true);
            }
            Err((reason, why)) => {
                services.metrics.tsa_failure(reason);
                *wait = Some(Instant::now() + Duration::from_secs(5));
                tracing::warn!(tsa = %url, size = checkpoint.size, reason, why = %why, "no time-stamp token from this TSA; trying the next, and this one again in 5 s");
            }
        }
    }
    Ok(false)
}

/// Time-stamps the newest witnessed (or, without witnesses, signed)
/// checkpoint while `holding` says this host holds the integrator lease,
/// at most once per `Stamping::every`, until `stop`.
pub async fn run(services: Services, holding: Arc<AtomicBool>, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(stamping) = services.trust.stamping.clone() else { return };
    let mut waits = vec![None; stamping.urls.len()];
    let mut last_try: Option<Instant> = None;
    loop {
        let due = last_try.is_none_or(|at| at.elapsed() >= stamping.every);
        if due && holding.load(Ordering::Acquire) {
            let target = if services.trust.witnessing() {
                services.trust.newest_witnessed(services.store.as_ref()).await
            } else {
                services.store.latest_checkpoint().await.map_err(Into::into)
            };
            let stamped = services.store.newest_timestamped_checkpoint().await.map(|c| c.map_or(0, |c| c.size));
            match (target, stamped) {
                (Ok(Some(target)), Ok(stamped)) if target.size > stamped => {
                    last_try = Some(Instant::now());
                    if let Err(error) = stamp(&services, &stamping, &target, &mut waits).await {
                        tracing::warn!(error = format!("{error:#}"), "time-stamping round failed");
                    }
                }
                (Err(error), _) => tracing::warn!(error = format!("{error:#}"), "time-stamping round failed"),
                (_, Err(error)) => tracing::warn!(error = %error, "time-stamping round failed"),
                _ => {}
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            Ok(_) = stop.wait_for(|stop| *stop) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamped_body_is_the_note_text_with_its_final_newline_and_nonces_are_positive() {
        let note = "log.example/a\n2\nAAAA\n\n\u{2014} log.example/a abcd\n";
        assert_eq!(checkpoint_body(note).unwrap(), "log.example/a\n2\nAAAA\n");
        assert!(checkpoint_body("no blank line\n").is_err());
        assert_eq!(nonce()[0] & 0x80, 0);
        assert_ne!(nonce()[0], 0);
    }
}
