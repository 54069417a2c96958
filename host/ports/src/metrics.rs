//! What the store measures about itself: the time of every statement by its
//! kind and table, and how often a request had to wait for a connection.
//!
//! The families are created with the store and live as long as it; the
//! service registers them with its metrics registry (see `anchor_app::metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// One statement's labels: its verb (`select`, `insert`, `update`,
/// `delete`, `with`, `begin`, `commit`, `other`) and the table it names first.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatementLabels {
    pub operation: &'static str,
    pub table: String,
}

/// Statement latencies, from 50 µs to about 10 s.
pub fn statement_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.5, 14))
}

/// The store's own measurements.
pub struct StoreMetrics {
    /// Seconds per statement (including waiting for its connection).
    pub statements: Family<StatementLabels, Histogram, fn() -> Histogram>,
    /// Statements and transactions that found the pool exhausted (no idle
    /// connection, no room for a new one) and waited for one to be returned.
    pub acquire_waits: Counter,
    /// How long those waits lasted.
    pub acquire_wait_seconds: Histogram,
    /// Writes per batch of the group committer.
    pub batch_size: Histogram,
    /// Batches that carried more than one write (shared commits).
    pub shared_batches: Counter,
    /// Reads per gathered statement of the hot path (PostgreSQL).
    pub read_batch_size: Histogram,
    /// Gathered statements that answered more than one read.
    pub shared_reads: Counter,
    /// Batch statements (a group commit's creates, or its confirmations)
    /// that failed as a whole or could not be built, whose writes then ran
    /// alone: a race with another host, a lost connection, a cancelled
    /// statement, or a defect.
    pub failed_batches: Counter,
    /// Gathered reads that failed as a whole (each read then ran alone),
    /// and SQLite reads that failed on a direct connection (then run on the
    /// pool).
    pub failed_reads: Counter,
    /// Hot-path reads answered on SQLite's direct reader connections.
    pub direct_reads: Counter,
    /// Hot-path writes this host sent to the committing host (shared group
    /// commit, [`crate::peers`]).
    pub forwarded_writes: Counter,
    /// Forwarded writes and shared reads that came back with no answer
    /// (each then ran here).
    pub forward_failures: Counter,
    /// Writes other hosts sent here, committed in this host's batches.
    pub peer_writes: Counter,
    /// Hot-path reads this host sent to the committing host (shared reads).
    pub forwarded_reads: Counter,
    /// Reads other hosts sent here, read in this host's statements.
    pub peer_reads: Counter,
    /// Confirmations that used, unread, the record this host's create stored
    /// by the same token within the last second (decision 0088).
    pub remembered_records: Counter,
}

impl Default for StoreMetrics {
    fn default() -> StoreMetrics {
        StoreMetrics {
            statements: Family::new_with_constructor(statement_histogram),
            acquire_waits: Counter::default(),
            acquire_wait_seconds: statement_histogram(),
            batch_size: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            shared_batches: Counter::default(),
            read_batch_size: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            shared_reads: Counter::default(),
            failed_batches: Counter::default(),
            failed_reads: Counter::default(),
            direct_reads: Counter::default(),
            forwarded_writes: Counter::default(),
            forward_failures: Counter::default(),
            peer_writes: Counter::default(),
            forwarded_reads: Counter::default(),
            peer_reads: Counter::default(),
            remembered_records: Counter::default(),
        }
    }
}

/// The connection pool as it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolState {
    /// Open connections, idle or not.
    pub size: u32,
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

impl StoreMetrics {
    /// Records a statement that is not SQL text of ours (`begin`, `commit`).
    pub fn observe_step(&self, operation: &'static str, seconds: f64) {
        self.observe_statement((operation, String::new()), seconds);
    }

    /// Records a statement's duration under its label ([`classify`]).
    pub fn observe_statement(&self, (operation, table): (&'static str, String), seconds: f64) {
        self.statements.get_or_create(&StatementLabels { operation, table }).observe(seconds);
    }
}

/// The verb of a statement and the first table it names: `insert into t`,
/// `update t`, `delete from t`, `select … from t`; a `with` statement that
/// writes is labelled by its write (the final statement's, else the first
/// write inside the clause: PostgreSQL's one-statement create and confirm), one
/// that only reads by its first common table expression. The label stays short and
/// made of identifier characters, so a statement cannot grow the label set
/// beyond the schema's names.
pub fn classify(sql: &str) -> (&'static str, String) {
    // A `with` statement that writes is labelled by its write: the final
    // statement's if it is one, else the first one inside the clause.
    if sql.trim_start().get(..4).is_some_and(|w| w.eq_ignore_ascii_case("with")) {
        let (mut depth, mut inner, mut outer) = (0usize, Vec::new(), None);
        for (i, c) in sql.char_indices() {
            match c {
                '(' => {
                    depth += 1;
                    if depth == 1 {
                        inner.push(i + 1);
                    }
                }
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 && !inner.is_empty() && outer.is_none() => {
                    let rest = sql[i..].trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                    let word = rest.split_whitespace().next().unwrap_or("");
                    if ["insert", "update", "delete", "select"].iter().any(|v| word.eq_ignore_ascii_case(v)) {
                        outer = Some(sql.len() - rest.len());
                    }
                }
                _ => {}
            }
        }
        let labelled = |at: Option<usize>| at.map(|at| classify_plain(&sql[at..])).filter(|(op, _)| *op != "select" && *op != "other");
        if let Some(label) = labelled(outer).or_else(|| inner.iter().find_map(|at| labelled(Some(*at)))) {
            return label;
        }
    }
    classify_plain(sql)
}

fn classify_plain(sql: &str) -> (&'static str, String) {
    let mut words = sql.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',' || c == ';').filter(|w| !w.is_empty());
    let verb = words.next().unwrap_or("");
    let operation = ["select", "insert", "update", "delete", "with", "pragma"]
        .into_iter()
        .find(|known| verb.eq_ignore_ascii_case(known))
        .unwrap_or("other");
    let after = |keyword: &str, words: &mut dyn Iterator<Item = &str>| -> String {
        let mut found = false;
        for word in words {
            if found {
                return word.to_string();
            }
            found = word.eq_ignore_ascii_case(keyword);
        }
        String::new()
    };
    let table = match operation {
        "insert" => after("into", &mut words),
        "delete" | "select" => after("from", &mut words),
        "update" | "with" | "pragma" => words.next().unwrap_or("").to_string(),
        _ => String::new(),
    };
    let table: String = table.trim_matches('"').chars().take(48).collect();
    let table = if table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') { table.to_ascii_lowercase() } else { "other".into() };
    (operation, table)
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn statements_are_named_by_verb_and_first_table() {
        assert_eq!(classify("select a, b from declaration where x = $1"), ("select", "declaration".into()));
        assert_eq!(classify("insert into log_entry (a) values ($1)"), ("insert", "log_entry".into()));
        assert_eq!(classify("  UPDATE trial_account set x = 1"), ("update", "trial_account".into()));
        assert_eq!(classify("delete from agreement where id = $1"), ("delete", "agreement".into()));
        assert_eq!(classify("with fresh as (select 1) insert into x select * from fresh"), ("insert", "x".into()));
        assert_eq!(
            classify("with t as (update agent set a = 1 returning b) insert into declaration (a) select t.b from t"),
            ("insert", "declaration".into())
        );
        assert_eq!(
            classify(
                "with d as (update declaration set a = (1) returning c), l as (insert into log_pending (x) select 1 from d) select c from d"
            ),
            ("update", "declaration".into())
        );
        assert_eq!(
            classify(
                "with input as (select * from unnest($1::uuid[]) as input (b_id)), d as (update declaration set a = 1 from input \
                 returning c) select c from d"
            ),
            ("update", "declaration".into())
        );
        assert_eq!(classify("with q as (select 1) select * from q"), ("with", "q".into()));
        assert_eq!(classify("select 1"), ("select", String::new()));
        assert_eq!(classify("select count(*) from (select 1) q"), ("select", "select".into()));
        assert_eq!(classify("vacuum"), ("other", String::new()));
        assert_eq!(classify("select * from \"weird-name\""), ("select", "other".into()));
    }
}
