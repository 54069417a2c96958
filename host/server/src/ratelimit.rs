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

/// The most clients one window keeps a count of (about 20 MiB of table): past it,
/// clients not yet counted in the window share one count until the window
/// ends, so memory stays bounded and the newcomers are limited together,
/// never let through unlimited (which also means a flood of distinct clients
/// can hold newcomers to that one count for the rest of a window).
pub const MAX_CLIENTS: usize = 250_000;

pub struct RateLimiter {
    limit: u32,
    window_secs: u64,
    max_clients: usize,
    windows: Mutex<Windows>,
}

/// The counts, and the window they were last cleared of older windows in.
struct Windows {
    counts: HashMap<Key, (i64, u32)>,
    cleared: i64,
}

/// Whose count: a client's, or the one the clients past the bound share.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Client(IpAddr),
    Overflow,
}

/// What one request learned from the limiter.
pub struct Verdict {
    pub allowed: bool,
    pub remaining: u32,
    pub reset_secs: u64,
}

impl RateLimiter {
    pub fn new(limit: u32, window_secs: u64) -> RateLimiter {
        RateLimiter::with_max_clients(limit, window_secs, MAX_CLIENTS)
    }

    /// The same with another bound on the clients a window counts.
    pub fn with_max_clients(limit: u32, window_secs: u64, max_clients: usize) -> RateLimiter {
        let windows = Windows { counts: HashMap::new(), cleared: i64::MIN };
        RateLimiter { limit, window_secs: window_secs.max(1), max_clients: max_clients.max(1), windows: Mutex::new(windows) }
    }

    pub fn check(&self, client: IpAddr, now_secs: i64) -> Verdict {
        let window = self.window_secs as i64;
        let start = now_secs - now_secs.rem_euclid(window);
        let mut windows = self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Older windows' counts go once a window, when it is first seen full
        // (never on every request: the scan is as long as the map).
        if windows.counts.len() >= self.max_clients && windows.cleared != start {
            windows.counts.retain(|_, (s, _)| *s == start);
            windows.counts.shrink_to_fit();
            windows.cleared = start;
        }
        let key = Key::Client(client);
        let key = if windows.counts.len() >= self.max_clients && !windows.counts.contains_key(&key) { Key::Overflow } else { key };
        let entry = windows.counts.entry(key).or_insert((start, 0));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn each_client_has_its_own_window() {
        let limiter = RateLimiter::new(2, 60);
        assert!(limiter.check(client(1), 0).allowed && limiter.check(client(1), 1).allowed);
        let third = limiter.check(client(1), 2);
        assert!(!third.allowed && third.remaining == 0 && third.reset_secs == 58);
        assert!(limiter.check(client(2), 3).allowed, "another client");
        assert!(limiter.check(client(1), 60).allowed, "the next window");
    }

    /// Past the bound, newcomers share one count: limited together, and the
    /// map grows no further; the next window clears the old counts once.
    #[test]
    fn clients_past_the_bound_share_one_count() {
        let limiter = RateLimiter::with_max_clients(3, 60, 100);
        // The client `::` (IPv6 loopback's /64) spends its own count, not the shared one.
        let unspecified = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
        assert!((0..3).all(|_| limiter.check(unspecified, 0).allowed));
        for n in 1..100 {
            assert!(limiter.check(client(n), 0).allowed);
        }
        let shared: Vec<bool> = (100..110).map(|n| limiter.check(client(n), 1).allowed).collect();
        assert_eq!(shared, [true, true, true, false, false, false, false, false, false, false]);
        assert!(limiter.check(client(5), 2).allowed, "a client counted before keeps its own count");
        assert_eq!(limiter.windows.lock().unwrap().counts.len(), 101);
        // The next window: the old counts go, and newcomers have their own again.
        assert!(limiter.check(client(500), 60).allowed);
        assert!(limiter.check(client(501), 60).allowed && limiter.check(client(501), 61).allowed);
        assert_eq!(limiter.windows.lock().unwrap().counts.len(), 2);
    }
}
