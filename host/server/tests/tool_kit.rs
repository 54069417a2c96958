//! `anchor tool new` for each language writes a project whose own test
//! passes offline; built, its component passes `anchor tool test` (the
//! upload's checks and a run under the service's limits) with the report
//! its test expects.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn anchor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_anchor")).args(args).output().unwrap()
}

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn project(language: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("anchor-tool-new-{language}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().unwrap();
    let listed = ok(anchor(&["tool", "new", "--lang", language, "share-of-dimension", "--dir", dir_arg]), "anchor tool new");
    assert!(listed.contains("wit/tool.wit") && listed.contains("observations.json"), "{listed}");
    dir
}

/// `anchor tool test` on the built component with the project's own observations.
fn tool_test(dir: &Path, wasm: &Path) {
    let observations = dir.join("observations.json");
    let report =
        ok(anchor(&["tool", "test", wasm.to_str().unwrap(), "--observations", observations.to_str().unwrap()]), "anchor tool test");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["rows"][0]["label"], "action_type=execute", "{report}");
    assert_eq!(report["rows"][0]["values"], serde_json::json!([30, 750_000]));
    assert_eq!(report["rows"][1]["values"], serde_json::json!([10, 250_000]));
}

#[test]
fn a_python_project_tests_offline_and_builds_a_tool_the_service_accepts() {
    let dir = project("python");
    ok(Command::new("python3").args(["-m", "unittest", "-v"]).current_dir(&dir).output().unwrap(), "python3 -m unittest");
    // componentize-py, pinned (scripts/test installs it and names it here).
    let componentize = std::env::var("ANCHOR_COMPONENTIZE_PY")
        .expect("ANCHOR_COMPONENTIZE_PY names componentize-py (pip install -r plugins/tools/example-py/requirements.txt)");
    let bin = Path::new(&componentize).parent().unwrap().to_str().unwrap().to_string();
    let path = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
    ok(Command::new("./build.sh").arg("tool.wasm").current_dir(&dir).env("PATH", path).output().unwrap(), "build.sh");
    tool_test(&dir, &dir.join("tool.wasm"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_javascript_project_tests_offline_and_builds_a_tool_the_service_accepts() {
    let dir = project("js");
    ok(Command::new("node").args(["--test", "test.mjs"]).current_dir(&dir).output().unwrap(), "node --test");
    // The same pinned componentize-js the example tool builds with, offline.
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/tools/example-js/node_modules");
    assert!(modules.join("@bytecodealliance/componentize-js").exists(), "run `npm ci` in plugins/tools/example-js (scripts/test does)");
    std::os::unix::fs::symlink(modules.canonicalize().unwrap(), dir.join("node_modules")).unwrap();
    ok(Command::new("node").args(["build.mjs", "tool.wasm"]).current_dir(&dir).output().unwrap(), "node build.mjs");
    tool_test(&dir, &dir.join("tool.wasm"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rust_project_tests_offline_and_builds_a_tool_the_service_accepts() {
    let dir = project("rust");
    // Its own target directory, kept between runs where the suite keeps one.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| PathBuf::from(t).join("tool-kit"))
        .unwrap_or_else(|| std::env::temp_dir().join("anchor-tool-kit-target"));
    // The repository's toolchain, which has the wasm32-wasip2 target.
    let pinned = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rust-toolchain.toml")).unwrap();
    let channel = pinned.lines().find_map(|l| l.strip_prefix("channel = ")).unwrap().trim_matches('"').to_string();
    let cargo = |args: &[&str]| {
        Command::new("cargo")
            .args(args)
            .arg("--offline")
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .env("RUSTUP_TOOLCHAIN", &channel)
            .output()
            .unwrap()
    };
    let tested = ok(cargo(&["test"]), "cargo test --offline");
    assert!(tested.contains("test result: ok. 1 passed"), "{tested}");
    ok(cargo(&["build", "--release", "--target", "wasm32-wasip2"]), "cargo build --target wasm32-wasip2");
    tool_test(&dir, &target.join("wasm32-wasip2/release/share_of_dimension.wasm"));
    let _ = std::fs::remove_dir_all(&dir);
}
