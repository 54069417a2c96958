//! `anchor tool new`: a working tool project for a seller, in Rust,
//! JavaScript or Python, with the world's WIT, a build script, sample
//! observations and a test of its own that runs offline.

use std::path::{Path, PathBuf};

/// The languages a tool project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Js,
    Python,
}

const WIT: &str = include_str!("../../../wit/tool@1.0.0/tool.wit");
const README: &str = include_str!("tool_kit/README.md");
const OBSERVATIONS: &str = include_str!("tool_kit/observations.json");

/// The project's files for `language`: (path, text, executable).
fn files(language: Language) -> Vec<(&'static str, &'static str, bool)> {
    let mut files = vec![("README.md", README, false), ("observations.json", OBSERVATIONS, false), ("wit/tool.wit", WIT, false)];
    files.extend(match language {
        Language::Rust => vec![
            ("Cargo.toml", include_str!("tool_kit/rust/Cargo.toml"), false),
            ("src/lib.rs", include_str!("tool_kit/rust/lib.rs"), false),
            ("build.sh", include_str!("tool_kit/rust/build.sh"), true),
            (".gitignore", "/target\n", false),
        ],
        Language::Js => vec![
            ("package.json", include_str!("tool_kit/js/package.json"), false),
            ("tool.js", include_str!("tool_kit/js/tool.js"), false),
            ("test.mjs", include_str!("tool_kit/js/test.mjs"), false),
            ("build.mjs", include_str!("tool_kit/js/build.mjs"), false),
            (".gitignore", "node_modules/\n*.wasm\n", false),
        ],
        Language::Python => vec![
            ("tool.py", include_str!("tool_kit/python/tool.py"), false),
            ("figures.py", include_str!("tool_kit/python/figures.py"), false),
            ("test_tool.py", include_str!("tool_kit/python/test_tool.py"), false),
            ("build.sh", include_str!("tool_kit/python/build.sh"), true),
            (".gitignore", "__pycache__/\n*.wasm\n", false),
        ],
    });
    files
}

/// A project name: a lowercase letter, then lowercase letters, digits and
/// dashes, at most 64 (a crate, package and module name in all three).
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !first_ok || !rest_ok || name.len() > 64 || name.ends_with('-') {
        anyhow::bail!("a tool name is a lowercase letter, then lowercase letters, digits and dashes (at most 64): {name:?}");
    }
    Ok(())
}

/// Writes the project `name` in `language` under `dir` (which must not exist
/// or be empty); returns the files written.
pub fn new_project(dir: &Path, name: &str, language: Language) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!("{} exists and is not empty", dir.display());
    }
    let crate_name = name.replace('-', "_");
    let (label, test, build, wasm) = match language {
        Language::Rust => ("Rust", "cargo test", "./build.sh", format!("target/wasm32-wasip2/release/{crate_name}.wasm")),
        Language::Js => ("JavaScript", "npm test", "npm install && npm run build", "tool.wasm".to_string()),
        // componentize-py is not in a fresh Python: the README says to install it (pinned, once).
        Language::Python => {
            ("Python", "python3 -m unittest", "pip install componentize-py==0.25.1 && ./build.sh tool.wasm", "tool.wasm".to_string())
        }
    };
    let mut written = Vec::new();
    for (path, text, executable) in files(language) {
        let text = text
            .replace("{{name}}", name)
            .replace("{{crate}}", &crate_name)
            .replace("{{language}}", label)
            .replace("{{test}}", test)
            .replace("{{build}}", build)
            .replace("{{wasm}}", &wasm);
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, text)?;
        if executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
        written.push(target);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["shares", "my-tool-2", "a"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "2tools", "My", "a_b", "a-", "é", "a\0b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_language_gets_the_wit_the_observations_and_no_placeholder() {
        for language in [Language::Rust, Language::Js, Language::Python] {
            let dir = std::env::temp_dir().join(format!("anchor-tool-kit-{language:?}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let files = new_project(&dir, "my-tool", language).unwrap();
            assert!(files.iter().any(|f| f.ends_with("wit/tool.wit")));
            for file in &files {
                let text = std::fs::read_to_string(file).unwrap();
                assert!(!text.contains("{{"), "{} keeps a placeholder", file.display());
            }
            assert!(new_project(&dir, "my-tool", language).is_err(), "a second project over the first is refused");
            if language == Language::Python {
                // A fresh Python has no componentize-py: the README installs the pinned one.
                let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
                assert!(readme.contains("pip install componentize-py==0.25.1"), "{readme}");
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
