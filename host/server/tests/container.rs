//! The container recipe (`deploy/container/Containerfile`, built by
//! `scripts/container`), run as an operator runs it with podman: the image
//! made from this build's Debian package on a Debian 12 base made here with
//! debootstrap (nothing is pulled), the service serving on SQLite in a
//! volume, a declaration anchored and its receipt verified offline, the
//! container replaced by a new one on the same volume with the record kept,
//! and the same image on PostgreSQL (the host's, through the host network).
//!
//! It needs root, podman, runc and debootstrap, so it runs only where that
//! is meant: with `ANCHOR_TEST_CONTAINER=1` (CI sets it); elsewhere it says
//! it skipped. This machine kind's kernel mounts cgroups in hybrid mode,
//! which podman's default runtime (crun) refuses, and lets no process raise
//! its file and process limits: runc, with limits within the host's, runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const IMAGE: &str = "localhost/anchor:suite";
/// What this machine's podman needs to run a container (see the module's note).
const RUNTIME: [&str; 2] = ["--runtime", "runc"];
const LIMITS: [&str; 4] = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"];

fn podman(args: &[&str]) -> Output {
    Command::new("podman").args(RUNTIME).args(args).output().unwrap_or_else(|e| panic!("podman: {e}"))
}

#[track_caller]
fn ok(output: Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A detached container of the image on `port`, with `args` before the image.
fn run_container(name: &str, port: u16, args: &[&str]) {
    let _ = podman(&["rm", "-f", name]);
    let mut all = vec!["run", "-d", "--name", name];
    all.extend(LIMITS);
    all.extend(args);
    all.push(IMAGE);
    let port_flag = format!("127.0.0.1:{port}:8080");
    if !args.contains(&"--network=host") {
        all.splice(4..4, ["-p", port_flag.as_str()]);
    }
    ok(podman(&all), "podman run");
}

/// The receipt of `dd_id`, once in the log, verified offline with this build's `anchor`.
async fn verified(http: &reqwest::Client, base: &str, token: &str, dd_id: &str, dir: &Path) {
    let (file, key) = common::receipt_file(http, base, token, dd_id, dir).await;
    let out = Command::new(env!("CARGO_BIN_EXE_anchor")).args(["verify", file.to_str().unwrap(), "--key", &key]).output().unwrap();
    assert!(ok(out, "anchor verify").contains("ok: leaf"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_image_serves_keeps_its_volume_and_runs_on_postgres() {
    const NAME: &str = "the_container_image_serves_keeps_its_volume_and_runs_on_postgres";
    if std::env::var("ANCHOR_TEST_CONTAINER").as_deref() != Ok("1") {
        common::skip(NAME, "it needs root, podman, runc and debootstrap: run it with ANCHOR_TEST_CONTAINER=1 (CI does)");
        return;
    }
    for tool in ["podman", "runc", "debootstrap"] {
        assert!(Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success(), "{tool} is missing");
    }
    let dir = std::env::temp_dir().join(format!("anchor-container-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let build = Command::new(repository().join("scripts/container"))
        .args(["--binary", env!("CARGO_BIN_EXE_anchor"), "--local-base", "--tag", IMAGE])
        .env("CONTAINER", "podman --runtime runc")
        .env("CONTAINER_ARGS", LIMITS.join(" "))
        .output()
        .unwrap();
    ok(build, "scripts/container");
    eprintln!("image built in {:?}", started.elapsed());
    let user = ok(podman(&["image", "inspect", "--format", "{{.Config.User}}", IMAGE]), "inspect");
    assert_eq!(user.trim(), "anchor", "the service does not run as root in its container");

    // SQLite in a volume: serve, anchor, verify.
    let volume = format!("anchor-suite-{}", std::process::id());
    let _ = podman(&["volume", "rm", "-f", &volume]);
    let http = reqwest::Client::new();
    let port = common::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mount = format!("{volume}:/var/lib/anchor");
    let public = format!("ANCHOR_PUBLIC_URL={base}");
    run_container("anchor-suite-a", port, &["-v", &mount, "-e", &public]);
    let health = common::wait_healthy(&http, &base).await;
    assert_eq!(health["storage"], "sqlite", "{health}");
    let (token, dd_id) = common::anchor_one(&http, &base).await;
    verified(&http, &base, &token, &dd_id, &dir).await;
    // Stopped (SIGTERM) and replaced by a new container on the same volume: the record is kept.
    let stopping = Instant::now();
    ok(podman(&["stop", "-t", "45", "anchor-suite-a"]), "podman stop");
    assert!(stopping.elapsed() < Duration::from_secs(30), "SIGTERM stops the service: {:?}", stopping.elapsed());
    ok(podman(&["rm", "anchor-suite-a"]), "podman rm");
    run_container("anchor-suite-b", port, &["-v", &mount, "-e", &public]);
    common::wait_healthy(&http, &base).await;
    let read = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(read.status().as_u16(), 200, "the record survived the container");
    verified(&http, &base, &token, &dd_id, &dir).await;
    let logs = podman(&["logs", "anchor-suite-b"]);
    assert!(!String::from_utf8_lossy(&logs.stdout).contains('\u{1b}'), "no colour codes in a container's log");
    let _ = podman(&["rm", "-f", "anchor-suite-b"]);
    let _ = podman(&["volume", "rm", "-f", &volume]);

    // The same image on PostgreSQL.
    if let Some(pg) = common::PgDatabase::create(&format!("container::{NAME}"), "anchor_container").await {
        let port = common::free_port();
        let base = format!("http://127.0.0.1:{port}");
        let database = format!("DATABASE_URL={}", pg.url);
        let listen = format!("ANCHOR_LISTEN=127.0.0.1:{port}");
        run_container("anchor-suite-pg", port, &["--network=host", "-e", &database, "-e", &listen]);
        let health = common::wait_healthy(&http, &base).await;
        assert_eq!(health["storage"], "postgres", "{health}");
        let (token, dd_id) = common::anchor_one(&http, &base).await;
        verified(&http, &base, &token, &dd_id, &dir).await;
        let _ = podman(&["rm", "-f", "anchor-suite-pg"]);
        pg.drop_now().await;
    }
    let _ = podman(&["rmi", "-f", IMAGE]);
    let _ = std::fs::remove_dir_all(&dir);
}
