//! ARA observations on a real PostgreSQL streaming replica: a hot standby
//! made by PostgreSQL's own `pg_basebackup`, started on a port of its own.
//! Observations are read there while every write goes to the primary; with
//! replay paused they show the replica's older state; stopped, the reads
//! fall back to the primary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anchor_tests::*;
use serde_json::json;

use crate::ara::paid;

/// The PostgreSQL server programs (`pg_basebackup`, `pg_ctl`) of the version installed.
fn pg_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql").ok()?.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    versions.sort();
    versions.into_iter().rev().map(|v| v.join("bin")).find(|bin| bin.join("pg_basebackup").exists())
}

/// Runs a PostgreSQL program, as the `postgres` user when this is root (the
/// server refuses to run as root).
fn pg(bin: &Path, program: &str, args: &[&str]) -> Output {
    let path = bin.join(program);
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    command.args(args).output().expect("a PostgreSQL program runs")
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn said(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A standby of the cluster at `primary` (host, port), stopped when dropped.
struct Standby {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    primary_port: u16,
    slot: String,
}

impl Standby {
    /// `None` (and why) when this machine's primary does not allow replication connections.
    fn start(bin: &Path, primary_port: u16) -> Result<Standby, String> {
        let dir = std::env::temp_dir().join(format!("anchor-standby-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let chown = Command::new("chown").args(["postgres:postgres", dir.to_str().unwrap()]).status().unwrap();
            assert!(chown.success());
        }
        let data = dir.join("data");
        // A replication slot of its own: the primary keeps every WAL segment
        // the standby has not received, however many checkpoints the tests
        // beside this one force (without one, a standby whose stream broke
        // under load can find its next segment removed and never catch up).
        let slot = format!("anchor_standby_{}", uuid::Uuid::new_v4().simple());
        let created = on_primary(bin, primary_port, &format!("select pg_create_physical_replication_slot('{slot}', true)"));
        if !created.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(said(&created));
        }
        // The primary is shared with the tests running beside this one: their
        // DROP DATABASE forces checkpoints, and one can end the backup's WAL
        // stream ("terminating process … to release replication slot"). Such
        // an end is retried; any other failure is returned at once.
        let cut = ["administrator command", "closed unexpectedly", "terminated unexpectedly", "unexpected termination"];
        let mut failures = Vec::new();
        let backed_up = loop {
            let base = pg(
                bin,
                "pg_basebackup",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &primary_port.to_string(),
                    "-U",
                    "postgres",
                    "-D",
                    data.to_str().unwrap(),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "-S",
                    &slot,
                ],
            );
            if base.status.success() {
                break true;
            }
            let _ = std::fs::remove_dir_all(&data);
            let why = said(&base);
            let retried = cut.iter().any(|c| why.contains(c)) && failures.len() < 2;
            failures.push(why);
            if !retried {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        };
        if !backed_up {
            let _ = std::fs::remove_dir_all(&dir);
            drop_slot(bin, primary_port, &slot);
            return Err(failures.join("\n--- then:\n"));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // Debian keeps the configuration outside the data directory: the standby gets its own.
        let conf =
            format!("listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nhot_standby = on\n", dir.display());
        write_as_postgres(&data.join("postgresql.conf"), &conf);
        write_as_postgres(&data.join("pg_hba.conf"), "local all all trust\nhost all all 127.0.0.1/32 trust\n");
        write_as_postgres(&data.join("pg_ident.conf"), "");
        let started =
            pg(bin, "pg_ctl", &["-D", data.to_str().unwrap(), "-l", dir.join("log").to_str().unwrap(), "-w", "-t", "60", "start"]);
        let standby = Standby { bin: bin.to_path_buf(), dir, port, primary_port, slot };
        assert!(started.status.success(), "the standby did not start: {}", said(&started));
        Ok(standby)
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The end of the standby's server log and its slot on the primary, for a
    /// failure's message.
    fn state(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let slot = on_primary(
            &self.bin,
            self.primary_port,
            &format!(
                "select active, restart_lsn, wal_status, pg_current_wal_lsn() from pg_replication_slots where slot_name = '{}'",
                self.slot
            ),
        );
        format!(
            "slot (active, restart_lsn, wal_status, primary's lsn): {}\nstandby log, last lines:\n{}",
            said(&slot).trim(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    fn stop(&self) {
        let data = self.dir.join("data");
        let _ = pg(&self.bin, "pg_ctl", &["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.stop();
        drop_slot(&self.bin, self.primary_port, &self.slot);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_as_postgres(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    if is_root() {
        let _ = Command::new("chown").args(["postgres:postgres", path.to_str().unwrap()]).status();
    }
}

/// Drops `slot` on the primary: a slot left behind would hold its WAL for
/// ever. The slot's walsender can outlive the standby (or a failed
/// `pg_basebackup`) for a moment, and an active slot cannot be dropped: it
/// is ended and the drop tried again, for up to 5 s; a slot gone already is
/// no error.
fn drop_slot(bin: &Path, port: u16, slot: &str) {
    let drop = format!(
        "select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = '{slot}' and active_pid is not null; \
         select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = '{slot}'"
    );
    for _ in 0..50 {
        if on_primary(bin, port, &drop).status.success() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// One statement on the primary, through its own `psql`.
fn on_primary(bin: &Path, port: u16, statement: &str) -> Output {
    pg(bin, "psql", &["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-Atc", statement])
}

async fn on_standby(url: &str, statement: &str) {
    let pool = sqlx::PgPool::connect(url).await.expect("the standby answers");
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string())).execute(&pool).await.expect(statement);
    pool.close().await;
}

/// The observed agent's `dd_count`, observed (and paid for) once.
async fn dd_count(t: &TestServer, observer: &Agent, target: &Agent) -> i64 {
    let reply = paid(t, observer, "GET", &format!("/v1/ara/agent/{}/profile", target.id), None, "3000").await;
    reply.json["dd_count"].as_i64().unwrap_or_else(|| panic!("{}", reply.text))
}

async fn replica_reads(t: &TestServer, outcome: &str) -> f64 {
    let text = t.get("/metrics", None).await.text;
    let series = format!("anchor_replica_reads_total{{outcome=\"{outcome}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observations_read_from_a_streaming_replica_and_fall_back_when_it_stops() {
    let Some(url) = postgres_or_skip("replica::observations_read_from_a_streaming_replica_and_fall_back_when_it_stops") else {
        return;
    };
    let Some(bin) = pg_bin() else {
        panic!("the read-replica test needs PostgreSQL's server programs (pg_basebackup, pg_ctl) under /usr/lib/postgresql");
    };
    let t = TestServer::with(Backend::Postgres, Options { privacy: anchor_app::ara::privacy::Privacy::Exact, ..Default::default() }).await;
    let observer = t.register().await;
    let open = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    t.call("PUT", "/v1/agent/disclosure", Some(&open.token), Some(&json!({ "disclosure_level": "full" }))).await;
    t.wait_for_fold(1).await;

    let primary_port: u16 = url.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).and_then(|p| p.parse().ok()).unwrap_or(5432);
    let standby = match Standby::start(&bin, primary_port) {
        Ok(standby) => standby,
        Err(why) if std::env::var_os("ANCHOR_TEST_REQUIRE_REPLICA").is_some() => panic!("pg_basebackup failed: {why}"),
        Err(why) => {
            skip(
                "replica::observations_read_from_a_streaming_replica_and_fall_back_when_it_stops",
                &format!(
                    "the primary refused a replication connection (add `host replication all 127.0.0.1/32 trust` to \
                     pg_hba.conf; .ci/run does): {why}"
                ),
            );
            return;
        }
    };
    let database = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
    let schema = t.strings("select current_schema()").await.remove(0);
    let replica = anchor_store::open_replica(&standby.url(&database), Some(&schema)).await.unwrap();
    t.state.app.replica.set(Some(replica));
    // What a host's readiness asks of its database: the standby answers and
    // takes no write (in recovery), the primary takes them.
    let as_is = anchor_store::inspect(&standby.url(&database)).await.unwrap();
    assert!(as_is.ping().await.is_ok());
    assert!(!as_is.writable().await.unwrap(), "a standby in recovery is not writable");
    assert!(t.store.writable().await.unwrap(), "the primary is");

    // Served from the replica; the observation's record and payment went to the primary.
    assert_eq!(dd_count(&t, &observer, &open).await, 1);
    assert!(replica_reads(&t, "replica").await >= 1.0);
    assert_eq!(t.scalar("select count(*) from ara_observation").await, 1, "the write went to the primary");

    // Replay paused: the primary moves on, the replica shows what it had.
    on_standby(&standby.url(&database), "select pg_wal_replay_pause()").await;
    for _ in 0..2 {
        let dd = t.create(&open, json!({ "ee_preset": "EE_basic" })).await;
        assert_eq!(t.confirm(&open, dd["dd_id"].as_str().unwrap()).await.status, StatusCode::OK);
    }
    t.wait_for_fold(3).await;
    assert_eq!(dd_count(&t, &observer, &open).await, 1, "read on the paused replica");
    assert_eq!(replica_reads(&t, "fell_back_to_primary").await, 0.0);

    // Replay resumed: the replica catches up.
    on_standby(&standby.url(&database), "select pg_wal_replay_resume()").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while dd_count(&t, &observer, &open).await != 3 {
        assert!(Instant::now() < deadline, "the replica never caught up\n{}", standby.state());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Replica stopped: reads fall back to the primary, and say so in the metrics.
    standby.stop();
    let dd = t.create(&open, json!({ "ee_preset": "EE_basic" })).await;
    assert_eq!(t.confirm(&open, dd["dd_id"].as_str().unwrap()).await.status, StatusCode::OK);
    t.wait_for_fold(4).await;
    assert_eq!(dd_count(&t, &observer, &open).await, 4, "read on the primary");
    assert!(replica_reads(&t, "fell_back_to_primary").await >= 1.0);
}
