//! The Debian package (`scripts/package-deb`), installed as an operator
//! installs it: `dpkg -i`, the service started from the installed unit's
//! command line as the `anchor` user (systemd itself need not run), a
//! declaration anchored and its receipt verified with the installed
//! `anchor`, an upgrade to a rebuilt package keeping the data, removal
//! keeping it too.
//!
//! It installs system-wide, so it runs only where that is meant: as root,
//! with `ANCHOR_TEST_PACKAGE=1` (CI sets it); elsewhere it says it skipped.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the package of this build's binary at `version`.
fn package(version: &str, out: &Path) -> PathBuf {
    let script = repository().join("scripts/package-deb");
    let output =
        run(script.to_str().unwrap(), &["--binary", env!("CARGO_BIN_EXE_anchor"), "--version", version, "--out", out.to_str().unwrap()]);
    let deb = String::from_utf8_lossy(&output.stdout).trim().lines().last().unwrap().to_owned();
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{deb}");
    PathBuf::from(deb)
}

/// The installed unit's `ExecStart` command line, and its `Environment=` pairs.
fn unit() -> (Vec<String>, Vec<(String, String)>) {
    let text = std::fs::read_to_string("/lib/systemd/system/anchor.service").unwrap();
    let exec = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart").split_whitespace().map(String::from).collect();
    let env = text
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (exec, env)
}

/// The `anchor` user's ids, as the package made them.
fn anchor_ids() -> (u32, u32) {
    let id = |flag: &str| String::from_utf8_lossy(&run("id", &[flag, "anchor"]).stdout).trim().parse::<u32>().unwrap();
    (id("-u"), id("-g"))
}

/// Starts the installed service as its unit would: its command line, its
/// environment, as the `anchor` user, in its working directory, on `port`.
fn start(port: u16) -> common::Server {
    let (exec, env) = unit();
    assert_eq!(exec[0], "/usr/bin/anchor", "the unit runs the installed binary");
    let (uid, gid) = anchor_ids();
    // setpriv executes the service in its own place (killing it kills the service).
    let mut command = Command::new("/usr/bin/setpriv");
    command.args(["--reuid", &uid.to_string(), "--regid", &gid.to_string(), "--init-groups", "--"]).args(&exec);
    command.current_dir("/var/lib/anchor");
    command.env_clear().env("PATH", "/usr/bin:/bin").envs(env).env("ANCHOR_LISTEN", format!("127.0.0.1:{port}"));
    common::Server(command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap())
}

/// The receipt of `dd_id` once the log holds it, verified with the installed `anchor`.
async fn verified(http: &reqwest::Client, base: &str, token: &str, dd_id: &str, dir: &Path) {
    let (file, key) = common::receipt_file(http, base, token, dd_id, dir).await;
    let out = run("/usr/bin/anchor", &["verify", file.to_str().unwrap(), "--key", &key]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: leaf"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debian_package_installs_serves_upgrades_and_keeps_the_data() {
    if std::env::var("ANCHOR_TEST_PACKAGE").as_deref() != Ok("1") {
        common::skip(
            "the_debian_package_installs_serves_upgrades_and_keeps_the_data",
            "it installs a package system-wide: run it as root with ANCHOR_TEST_PACKAGE=1 (CI does)",
        );
        return;
    }
    assert!(rustix::process::geteuid().is_root(), "ANCHOR_TEST_PACKAGE=1: installing a package needs root");
    // What an interrupted run of this test left, and nothing else, is cleared first.
    let installed = Command::new("dpkg-query").args(["-W", "-f", "${Version}", "anchor"]).output().unwrap();
    if String::from_utf8_lossy(&installed.stdout).contains("~test") {
        run("dpkg", &["--purge", "anchor"]);
        let _ = std::fs::remove_dir_all("/var/lib/anchor");
    }
    assert!(!Path::new("/var/lib/anchor").exists() && !Path::new("/usr/bin/anchor").exists(), "an anchor is installed here already");
    let dir = std::env::temp_dir().join(format!("anchor-package-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = package("0.1.0~test1", &dir);
    let second = package("0.1.0~test2", &dir);

    // Install: the binary, the unit, the defaults, the user, the data folder, the manual.
    run("dpkg", &["-i", first.to_str().unwrap()]);
    for file in [
        "/usr/bin/anchor",
        "/etc/default/anchor",
        "/lib/systemd/system/anchor.service",
        "/usr/share/man/man1/anchor.1.gz",
        "/usr/share/bash-completion/completions/anchor",
        "/usr/share/anchor/pricing/pricing_v1_3_0.wasm",
    ] {
        assert!(Path::new(file).exists(), "{file} is installed");
    }
    let owner = run("stat", &["-c", "%U %a", "/var/lib/anchor"]);
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), "anchor 750");
    let version = run("/usr/bin/anchor", &["--version"]);
    assert!(String::from_utf8_lossy(&version.stdout).contains("interface 1.3.42"), "{version:?}");

    // Serve as the unit does, anchor, verify.
    let http = reqwest::Client::new();
    let port = common::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let server = start(port);
    common::wait_healthy(&http, &base).await;
    let (token, dd_id) = common::anchor_one(&http, &base).await;
    verified(&http, &base, &token, &dd_id, &dir).await;
    drop(server);
    assert!(Path::new("/var/lib/anchor/anchor.db").exists(), "the data is in /var/lib/anchor");

    // Upgrade: the same data, the same log, read by the new package's binary.
    run("dpkg", &["-i", second.to_str().unwrap()]);
    let listed = run("dpkg-query", &["-W", "-f", "${Version}", "anchor"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "0.1.0~test2");
    let server = start(port);
    common::wait_healthy(&http, &base).await;
    let read = http.get(format!("{base}/v1/dd/{dd_id}")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(read.status().as_u16(), 200, "the record survived the upgrade");
    verified(&http, &base, &token, &dd_id, &dir).await;
    drop(server);

    // Remove: the program goes, the data stays.
    run("dpkg", &["-r", "anchor"]);
    assert!(!Path::new("/usr/bin/anchor").exists());
    assert!(Path::new("/var/lib/anchor/anchor.db").exists(), "removal keeps the data");
    run("dpkg", &["--purge", "anchor"]);
    assert!(Path::new("/var/lib/anchor/anchor.db").exists(), "purge keeps the data too");

    // Leave the machine as it was.
    let _ = std::fs::remove_dir_all("/var/lib/anchor");
    run("deluser", &["--system", "anchor"]);
    let _ = std::fs::remove_dir_all(&dir);
}
