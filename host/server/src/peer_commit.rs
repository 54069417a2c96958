//! Shared group commit's transport (decision 0075): the endpoint where the
//! host holding the commit lease takes the other hosts' batches, and the
//! client they send them with.
//!
//! It listens on an address of its own (`--peer-listen`), never on the API's:
//! only hosts of the deployment reach it. Each batch is authenticated with
//! the key every host shares (`ANCHOR_PEER_KEY`): HMAC-SHA256 over the time
//! it was sent and its body. A body whose MAC does not verify, or sent more
//! than [`SKEW_SECS`] from this host's time, is refused before it is read as
//! a batch. The channel is not encrypted: it carries what the hosts write to
//! the database (metadata, never decision content), and belongs on the same
//! private network as the database connection.

use std::sync::Arc;
use std::time::Duration;

use anchor_app::peers::{Connect, Refused};
use anchor_ports::{Forwarder, StoreError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The batch endpoint's path.
const PATH: &str = "/peer/v1/batch";
/// The header carrying the MAC (hex), and the one carrying the time it covers.
const MAC_HEADER: &str = "x-anchor-peer-mac";
const TIME_HEADER: &str = "x-anchor-peer-time";
/// How far a batch's time may be from this host's.
pub const SKEW_SECS: i64 = 30;
/// The largest body taken, and the largest answer read: a batch is at
/// most 64 writes of a few KiB.
const MAX_BODY: usize = 4 << 20;
/// The shortest key accepted.
pub const MIN_KEY_LEN: usize = 32;

/// The key the hosts of a deployment share.
#[derive(Clone)]
pub struct PeerKey(Arc<Vec<u8>>);

impl PeerKey {
    pub fn new(key: &str) -> anyhow::Result<PeerKey> {
        if key.len() < MIN_KEY_LEN {
            anyhow::bail!("ANCHOR_PEER_KEY must be at least {MIN_KEY_LEN} bytes long");
        }
        Ok(PeerKey(Arc::new(key.as_bytes().to_vec())))
    }

    fn mac(&self, time: i64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(b"anchor-peer-batch\n");
        mac.update(time.to_string().as_bytes());
        mac.update(b"\n");
        mac
    }

    /// The MAC of a batch sent at `time` (hex).
    fn sign(&self, time: i64, body: &[u8]) -> String {
        let mut mac = self.mac(time);
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `headers` carry a valid MAC of `body`, sent within
    /// [`SKEW_SECS`] of `now` (compared in constant time).
    fn verifies(&self, headers: &HeaderMap, body: &[u8], now: i64) -> bool {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(time), Some(given)) = (header(TIME_HEADER).and_then(|t| t.parse::<i64>().ok()), header(MAC_HEADER)) else {
            return false;
        };
        let Ok(given) = hex::decode(given) else { return false };
        if now.abs_diff(time) > SKEW_SECS as u64 {
            return false;
        }
        let mut mac = self.mac(time);
        mac.update(body);
        mac.verify_slice(&given).is_ok()
    }
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The client a host sends its batches with: HTTP with keep-alive and a
/// bounded time per batch (past it, the batch is committed at home).
pub struct HttpForwarder {
    client: reqwest::Client,
    url: String,
    key: PeerKey,
    /// Whether a refusal of this host's key was logged (once per holder).
    refused: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Forwarder for HttpForwarder {
    async fn forward(&self, batch: Vec<u8>) -> anchor_ports::Result<Vec<u8>> {
        let time = unix_now();
        let failed = |why: String| StoreError::Unavailable(format!("the committing host at {}: {why}", self.url));
        let mut response = self
            .client
            .post(&self.url)
            .header(TIME_HEADER, time.to_string())
            .header(MAC_HEADER, self.key.sign(time, &batch))
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(batch)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        // An answer is at most a batch's records: more is not read.
        let body = crate::log_peers::read_bounded(&mut response, MAX_BODY, &self.url).await.map_err(failed)?;
        if status == StatusCode::UNAUTHORIZED && !self.refused.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(holder = %self.url, "the commit lease's holder refuses this host's batches: ANCHOR_PEER_KEY differs between them; this host commits its own");
        }
        if !status.is_success() {
            return Err(failed(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]))));
        }
        Ok(body)
    }
}

/// How a host opens the way to the lease holder at an address (`http://host:port`).
pub fn connect(key: PeerKey) -> anyhow::Result<Connect> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Ok(Arc::new(move |address: &str| {
        Arc::new(HttpForwarder {
            client: client.clone(),
            url: format!("{}{PATH}", address.trim_end_matches('/')),
            key: key.clone(),
            refused: std::sync::atomic::AtomicBool::new(false),
        }) as Arc<dyn Forwarder>
    }))
}

#[derive(Clone)]
struct Peer {
    services: anchor_app::Services,
    key: PeerKey,
}

/// The batch endpoint, alone on its router.
pub fn router(services: anchor_app::Services, key: PeerKey) -> Router {
    Router::new().route(PATH, post(take)).layer(DefaultBodyLimit::max(MAX_BODY)).with_state(Peer { services, key })
}

async fn take(State(peer): State<Peer>, headers: HeaderMap, body: Bytes) -> Response {
    if !peer.key.verifies(&headers, &body, unix_now()) {
        return (StatusCode::UNAUTHORIZED, "the batch's MAC does not verify under this host's peer key, or its time is off")
            .into_response();
    }
    match anchor_app::peers::accept(&peer.services, &body).await {
        Ok(answer) => ([(axum::http::header::CONTENT_TYPE, "application/json")], answer).into_response(),
        Err(Refused::Malformed(why)) => (StatusCode::BAD_REQUEST, why).into_response(),
        Err(Refused::Unavailable(why)) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_verifies_only_under_its_key_body_and_time() {
        let key = PeerKey::new("k".repeat(32).as_str()).unwrap();
        let now = 1_800_000_000;
        let headers = |time: i64, mac: &str| {
            let mut h = HeaderMap::new();
            h.insert(TIME_HEADER, time.to_string().parse().unwrap());
            h.insert(MAC_HEADER, mac.parse().unwrap());
            h
        };
        let mac = key.sign(now, b"batch");
        assert!(key.verifies(&headers(now, &mac), b"batch", now));
        assert!(key.verifies(&headers(now, &mac), b"batch", now + SKEW_SECS));
        assert!(!key.verifies(&headers(now, &mac), b"batch", now + SKEW_SECS + 1), "too late");
        assert!(!key.verifies(&headers(now, &mac), b"batcH", now), "another body");
        assert!(!key.verifies(&headers(now + 1, &mac), b"batch", now), "another time");
        let other = PeerKey::new("j".repeat(32).as_str()).unwrap();
        assert!(!other.verifies(&headers(now, &mac), b"batch", now), "another key");
        assert!(!key.verifies(&HeaderMap::new(), b"batch", now), "no headers");
        assert!(PeerKey::new("short").is_err());
    }
}
