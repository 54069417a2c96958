//! A per-client request limit with IETF `RateLimit-*` headers.
//!
//! Fixed windows keyed by the client (an IPv4 address or an IPv6 /64,
//! `crate::listener::client_key`), counted before
//! authentication. The count lives in this host's memory: with several hosts
//! behind a balancer each enforces the limit on its own share of the traffic.
//! Windows follow the service clock, so tests can move them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

pub struct RateLimiter {
    limit: u32,
    window_secs: u64,
    windows: Mutex<HashMap<IpAddr, (i64, u32)>>,
}

/// What one request learned from the limiter.
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u32,
    pub reset_secs: u64,
}

impl RateLimiter {
    pub fn new(limit: u32, window_secs: u64) -> RateLimiter {
        RateLimiter { limit, window_secs: window_secs.max(1), windows: Mutex::new(HashMap::new()) }
    }

    pub fn check(&self, client: IpAddr, now_secs: i64) -> Verdict {
        let window = self.window_secs as i64;
        let start = now_secs - now_secs.rem_euclid(window);
        let mut windows = self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if windows.len() > 100_000 {
            windows.retain(|_, (s, _)| *s == start);
        }
        let entry = windows.entry(client).or_insert((start, 0));
        if entry.0 != start {
            *entry = (start, 0);
        }
        let allowed = entry.1 < self.limit;
        if allowed {
            entry.1 += 1;
        }
        Verdict { allowed, remaining: self.limit - entry.1, reset_secs: (start + window - now_secs).max(0) as u64 }
    }
}
