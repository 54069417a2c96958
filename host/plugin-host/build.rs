//! Builds the guest components in `plugins/` for `wasm32-wasip2`, so that a plain
//! `cargo build` of the host produces them; no manual step.
//!
//! The guests are their own workspace with their own profile, built into
//! `<target>/plugins` (beside this build's own output), and the directory is
//! exported to the crate as `ANCHOR_PLUGINS_DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir.join("../..").canonicalize().expect("repository root");
    let plugins = root.join("plugins");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    // OUT_DIR is <target>/<profile>/build/<pkg>/out; build the guests beside <profile>.
    let target_dir = out_dir.ancestors().nth(4).map(Path::to_path_buf).unwrap_or_else(|| out_dir.clone()).join("plugins");

    println!("cargo:rerun-if-changed={}", plugins.display());
    println!("cargo:rerun-if-changed={}", root.join("wit").display());

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    ensure_wasm_target();
    let status = Command::new(cargo)
        .current_dir(&plugins)
        .args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--target-dir"])
        .arg(&target_dir)
        // The host's flags are not the guests' flags.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("could not run cargo to build the guest components");
    assert!(
        status.success(),
        "building the guest components in plugins/ failed; is the wasm32-wasip2 target installed (rustup target add wasm32-wasip2)?"
    );
    let artifacts = target_dir.join("wasm32-wasip2").join("release");
    println!("cargo:rustc-env=ANCHOR_PLUGINS_DIR={}", artifacts.display());
}

/// The guests need the `wasm32-wasip2` standard library. `rust-toolchain.toml`
/// lists the target, but rustup only honours that when it installs the
/// toolchain: a toolchain installed earlier without it would stop the build.
/// So when the sysroot lacks the target and rustup manages the toolchain, the
/// target is added here, for the toolchain this build runs on.
fn ensure_wasm_target() {
    const TARGET: &str = "wasm32-wasip2";
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success());
    let Some(sysroot) = sysroot else { return };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(TARGET).is_dir() {
        return;
    }
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", TARGET]);
    if let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    // Said on stderr, not as a cargo warning: cargo would replay a warning on
    // every later build, long after the target was installed.
    eprintln!("installing the {TARGET} target with rustup (the guest components need it)");
    if !rustup.status().is_ok_and(|status| status.success()) {
        eprintln!("could not run `rustup target add {TARGET}`; install the target by hand");
    }
}
