//! Which peers are proxies the operator trusts (`--trusted-proxies`), and
//! the client behind them: the nearest address in `X-Forwarded-For` that is
//! not one of them. Transport plumbing: the listener counts connections per
//! client with it, and `http/forwarded.rs` rewrites each request's peer.

use std::net::IpAddr;

/// Networks whose connections are proxies (an address or `address/prefix`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// Parses a comma-separated list, e.g. `10.0.0.0/8, 192.0.2.7, fd00::/8`.
    pub fn parse(list: &str) -> Result<TrustedProxies, String> {
        let mut networks = Vec::new();
        for item in list.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (address, prefix) = match item.split_once('/') {
                Some((address, prefix)) => (address, Some(prefix)),
                None => (item, None),
            };
            let address: IpAddr = address.parse().map_err(|_| format!("{item}: not an IP address or network"))?;
            let most = if address.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => most,
                Some(text) => {
                    text.parse::<u8>().ok().filter(|p| *p <= most).ok_or_else(|| format!("{item}: the prefix must be 0 to {most}"))?
                }
            };
            networks.push((address, prefix));
        }
        Ok(TrustedProxies(networks))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|(network, prefix)| match (canonical(*network), ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => masked(u32::from(net).into(), *prefix, 32) == masked(u32::from(ip).into(), *prefix, 32),
            (IpAddr::V6(net), IpAddr::V6(ip)) => masked(u128::from(net), *prefix, 128) == masked(u128::from(ip), *prefix, 128),
            _ => false,
        })
    }

    /// The client of a request from `peer` carrying these `X-Forwarded-For`
    /// values (each a comma-separated list, the nearest hop last).
    pub fn client<'a>(&self, peer: IpAddr, forwarded: impl DoubleEndedIterator<Item = &'a str>) -> IpAddr {
        if !self.contains(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in forwarded.rev().flat_map(|value| value.rsplit(',')) {
            // A hop that is not an address (a proxy's obfuscated name, or
            // garbage) ends the walk: what lies before it cannot be believed.
            let Ok(address) = hop.trim().parse::<IpAddr>() else { break };
            client = address;
            if !self.contains(address) {
                break;
            }
        }
        client
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn masked(bits: u128, prefix: u8, width: u32) -> u128 {
    if prefix == 0 { 0 } else { bits >> (width - u32::from(prefix)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_a_trusted_peer_is_believed_and_the_nearest_untrusted_hop_is_the_client() {
        let proxies = TrustedProxies::parse("10.0.0.0/8, 192.0.2.7 ,fd00::/8").unwrap();
        assert!(proxies.contains(ip("10.1.2.3")) && proxies.contains(ip("192.0.2.7")) && proxies.contains(ip("fd12::1")));
        assert!(proxies.contains(ip("::ffff:10.9.9.9")), "an IPv4-mapped peer");
        assert!(!proxies.contains(ip("11.0.0.1")) && !proxies.contains(ip("192.0.2.8")) && !proxies.contains(ip("fe80::1")));
        // A peer not trusted is the client, whatever it forwards.
        assert_eq!(proxies.client(ip("203.0.113.9"), ["198.51.100.1"].into_iter()), ip("203.0.113.9"));
        // The nearest hop that is not a proxy; what a client wrote before it is ignored.
        assert_eq!(proxies.client(ip("10.0.0.2"), ["1.1.1.1, 198.51.100.1"].into_iter()), ip("198.51.100.1"));
        assert_eq!(proxies.client(ip("10.0.0.2"), ["1.1.1.1, 198.51.100.1, 10.0.0.9"].into_iter()), ip("198.51.100.1"));
        assert_eq!(proxies.client(ip("10.0.0.2"), ["1.1.1.1", "198.51.100.1"].into_iter()), ip("198.51.100.1"), "two header lines");
        // No header, or garbage nearest: the proxy itself.
        assert_eq!(proxies.client(ip("10.0.0.2"), std::iter::empty()), ip("10.0.0.2"));
        assert_eq!(proxies.client(ip("10.0.0.2"), ["1.1.1.1, unknown"].into_iter()), ip("10.0.0.2"));
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err() && TrustedProxies::parse("proxy.local").is_err());
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        assert!(TrustedProxies::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
    }
}
