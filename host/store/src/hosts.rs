//! Several PostgreSQL hosts behind one URL, the way libpq lists them
//! (`postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`):
//! the store writes to whichever of them is the primary, and follows a
//! failover to the new one.
//!
//! sqlx connects to one host only, so this module picks the host: at start
//! it asks each in turn whether it is in recovery and connects the pools to
//! the first that is not; a new connection is refused if its server is in
//! recovery (a demoted primary), and a watcher asks the pool once a second
//! whether it still reaches a primary. When it does not, the watcher asks
//! every host again and points the pools at the new primary; connections
//! opened before that switch are closed instead of being handed out.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection};

use crate::{Classified, Result, StoreError};

/// How long asking one host may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the watcher checks that the pools still reach a primary.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The hosts of one URL, each as full connection options (the same user,
/// database and settings), in the order the URL lists them.
pub fn parse(url: &str) -> Result<Vec<PgConnectOptions>> {
    let bad = |why: &str| StoreError::Unsupported(format!("the database URL {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("has no scheme"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    // libpq's own parameter; the choice it asks for is what this module does.
    let tail = strip_param(tail, "target_session_attrs");
    hosts
        .split(',')
        .map(|host| {
            if host.is_empty() {
                return Err(bad("names an empty host"));
            }
            format!("{scheme}://{user}{host}{tail}").parse::<PgConnectOptions>().classified()
        })
        .collect()
}

/// `tail` (path and query) without the query parameter `name`.
fn strip_param(tail: &str, name: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else { return tail.to_string() };
    let kept: Vec<&str> = query.split('&').filter(|p| p.split('=').next() != Some(name) && !p.is_empty()).collect();
    if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) }
}

/// Whether the server behind `executor` is in recovery (a standby).
async fn in_recovery<'e>(executor: impl sqlx::PgExecutor<'e>) -> std::result::Result<bool, sqlx::Error> {
    sqlx::query_scalar("select pg_is_in_recovery()").fetch_one(executor).await
}

/// Whether the server behind `options` takes writes: reachable, not in recovery.
async fn is_primary(options: &PgConnectOptions) -> bool {
    let asked = async {
        let mut connection = options.connect().await?;
        let standby = in_recovery(&mut connection).await?;
        let _ = connection.close().await;
        Ok::<bool, sqlx::Error>(!standby)
    };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, asked).await, Ok(Ok(true)))
}

/// The first host, in the URL's order, that is a primary.
pub async fn find_primary(hosts: &[PgConnectOptions]) -> Option<usize> {
    for (index, options) in hosts.iter().enumerate() {
        if is_primary(options).await {
            return Some(index);
        }
    }
    None
}

/// How a pool's connection options are made from a host's (the hot pool
/// adds its session settings).
pub type Adjust = fn(PgConnectOptions) -> PgConnectOptions;

/// Which host the pools use, and since when.
pub struct Following {
    hosts: Vec<PgConnectOptions>,
    current: Mutex<(usize, Instant)>,
}

impl Following {
    pub fn new(hosts: Vec<PgConnectOptions>, current: usize) -> Arc<Following> {
        Arc::new(Following { hosts, current: Mutex::new((current, Instant::now())) })
    }

    /// Whether a connection of this `age` was opened before the last switch.
    pub fn predates_switch(&self, age: Duration) -> bool {
        age > self.current.lock().expect("not poisoned").1.elapsed()
    }

    /// Checks once that `probe` reaches a primary; if not, finds the primary
    /// among the hosts and points `pools` at it (with `adjust` applied to
    /// its options, per pool). Returns the index switched to, if any.
    pub async fn check(&self, probe: &PgPool, pools: &[(&PgPool, Adjust)]) -> Option<usize> {
        let still = tokio::time::timeout(PROBE_TIMEOUT, in_recovery(probe)).await;
        if matches!(still, Ok(Ok(false))) {
            return None;
        }
        let found = find_primary(&self.hosts).await?;
        let mut current = self.current.lock().expect("not poisoned");
        if found == current.0 && matches!(still, Ok(Ok(_))) {
            return None;
        }
        *current = (found, Instant::now());
        for (pool, adjust) in pools {
            pool.set_connect_options(adjust(self.hosts[found].clone()));
        }
        tracing::warn!(host = %describe(&self.hosts[found]), "following the primary to another host");
        Some(found)
    }
}

fn describe(options: &PgConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// Refuses a new connection to a server in recovery (a demoted primary
/// still listening): the pool then tries again, on the host it is pointed at.
pub async fn refuse_standby(connection: &mut sqlx::PgConnection) -> std::result::Result<(), sqlx::Error> {
    if in_recovery(connection).await? {
        return Err(sqlx::Error::Protocol("this host is a standby now; the primary is elsewhere".into()));
    }
    Ok(())
}

/// Runs [`Following::check`] every second until the probe pool closes.
pub fn watch(following: Arc<Following>, probe: PgPool, hot: Option<PgPool>, adjust_hot: Adjust) {
    tokio::spawn(async move {
        let plain: Adjust = |o| o;
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if probe.is_closed() {
                return;
            }
            let mut pools: Vec<(&PgPool, Adjust)> = vec![(&probe, plain)];
            if let Some(hot) = &hot {
                pools.push((hot, adjust_hot));
            }
            following.check(&probe, &pools).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_one_or_several_hosts() {
        let hosts = parse("postgres://anchor:secret@db1:5433,db2,db3:6000/anchor?target_session_attrs=read-write&sslmode=disable").unwrap();
        let named: Vec<(String, u16)> = hosts.iter().map(|h| (h.get_host().to_string(), h.get_port())).collect();
        assert_eq!(named, vec![("db1".into(), 5433), ("db2".into(), 5432), ("db3".into(), 6000)]);
        assert!(hosts.iter().all(|h| h.get_username() == "anchor" && h.get_database() == Some("anchor")));
        assert_eq!(parse("postgres://postgres@127.0.0.1:5432/test").unwrap().len(), 1);
        assert!(parse("postgres://a@h1,,h2/db").is_err());
        assert_eq!(strip_param("/db?target_session_attrs=read-write", "target_session_attrs"), "/db");
        assert_eq!(strip_param("/db?a=1&target_session_attrs=any&b=2", "target_session_attrs"), "/db?a=1&b=2");
    }
}
