//! The documents' own rules, checked like any other behaviour: every
//! relative link in a Markdown file leads to a file or folder that exists;
//! every command a `sh` block of the README or a manual shows names an
//! `anchor` subcommand, a script, a package or a target that exists; no line
//! of prose is over 600 characters; the README, the benchmark report and the
//! architecture keep to their sizes.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The longest line of prose a Markdown file may hold; tables and fenced
/// code blocks are not prose.
const LONGEST_LINE: usize = 600;

/// Folders that hold no document of the repository's own, wherever they
/// are: build output, installed packages and caches (hidden folders, such as
/// `.git`, are not walked either).
const NOT_WALKED: [&str; 3] = ["target", "node_modules", "__pycache__"];

/// Folders a run leaves behind, by their path from the root.
const NOT_WALKED_AT: [&str; 3] = ["data", "tests/artifacts", "clients/python/build"];

/// Every Markdown file of the repository, as a path from its root, sorted.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            if entry.file_type().unwrap().is_dir() {
                let skipped = name.starts_with('.')
                    || name.ends_with(".egg-info")
                    || NOT_WALKED.contains(&name.as_str())
                    || NOT_WALKED_AT.iter().any(|at| relative == Path::new(at));
                if !skipped {
                    walk(root, &path, out);
                }
            } else if name.ends_with(".md") {
                out.push(relative);
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    assert!(files.len() > 10, "the walk finds the repository's Markdown files: {files:?}");
    files
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The lines of a Markdown text outside its fenced code blocks, each with
/// its number (from 1).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    // The open fence: its character and how many of them opened it.
    let mut fence: Option<(char, usize)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let mark = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = mark.map_or(0, |mark| trimmed.chars().take_while(|c| *c == mark).count());
        match (fence, mark) {
            (None, Some(mark)) if run >= 3 => fence = Some((mark, run)),
            (None, _) => lines.push((index + 1, line)),
            (Some((open, length)), Some(mark)) if mark == open && run >= length && trimmed.trim_end().chars().all(|c| c == open) => {
                fence = None;
            }
            (Some(_), _) => {}
        }
    }
    lines
}

/// The lines of the ```sh blocks of a Markdown text, each with its number.
fn sh_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut inside = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if inside && trimmed == "```" {
            inside = false;
        } else if inside {
            lines.push((index + 1, line));
        } else if ["```sh", "```bash", "```shell"].contains(&trimmed) {
            inside = true;
        }
    }
    lines
}

/// Where the next run of exactly `length` backticks starts in `text`.
fn backtick_run(text: &str, length: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'`' {
            let run = bytes[at..].iter().take_while(|b| **b == b'`').count();
            if run == length {
                return Some(at);
            }
            at += run;
        } else {
            at += 1;
        }
    }
    None
}

/// A line with its code spans taken out: a link written inside backticks is
/// text, not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let length = rest[start..].bytes().take_while(|b| *b == b'`').count();
        let after = &rest[start + length..];
        match backtick_run(after, length) {
            Some(end) => rest = &after[end + length..],
            None => {
                out.push_str(&rest[start..start + length]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of a line's links and images (`[text](target)`), and of a
/// reference definition (`[name]: target`), code spans aside.
fn link_targets(line: &str) -> Vec<String> {
    let text = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find([')', ' ']).unwrap_or(after.len());
        targets.push(after[..end].trim_start_matches('<').trim_end_matches('>').to_owned());
        rest = &after[end..];
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[')
        && let Some((_, definition)) = trimmed.split_once("]: ")
        && let Some(target) = definition.split_whitespace().next()
    {
        targets.push(target.trim_start_matches('<').trim_end_matches('>').to_owned());
    }
    targets
}

/// A link that leaves the repository's files: a URL of any scheme, or a
/// place in the same page.
fn external(target: &str) -> bool {
    target.is_empty()
        || target.starts_with('#')
        || target.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
        })
}

/// A link's target read from the file `from` (a path from the root), as a
/// path from the root; None when it climbs out of the repository.
fn resolve(from: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['#', '?']).next().unwrap_or_default();
    let joined = match path.strip_prefix('/') {
        Some(from_root) => PathBuf::from(from_root),
        None => from.parent().unwrap_or(Path::new("")).join(path),
    };
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    Some(normal)
}

#[test]
fn every_relative_link_in_the_markdown_files_leads_to_a_file_that_exists() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        for (number, line) in prose(&text) {
            for target in link_targets(line).into_iter().filter(|target| !external(target)) {
                checked += 1;
                match resolve(&file, &target) {
                    Some(path) if root.join(&path).exists() => {}
                    Some(_) => broken.push(format!("{}:{number}: {target} does not exist", file.display())),
                    None => broken.push(format!("{}:{number}: {target} leads out of the repository", file.display())),
                }
            }
        }
    }
    assert!(checked > 50, "the relative links are found: {checked}");
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

/// One variant of a clap `Subcommand` enum: the names clap answers to (its
/// name in kebab case, and its aliases) and the text of its fields.
struct Variant {
    names: Vec<String>,
    fields: String,
}

/// `CamelCase` as clap names a subcommand: `camel-case`.
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Every `#[derive(…Subcommand…)]` enum of `source`, by name, with its
/// variants.
fn subcommand_enums(source: &str) -> BTreeMap<String, Vec<Variant>> {
    let lines: Vec<&str> = source.lines().collect();
    let mut enums = BTreeMap::new();
    for (at, line) in lines.iter().enumerate() {
        if !(line.trim_start().starts_with("#[derive(") && line.contains("Subcommand")) {
            continue;
        }
        let Some((start, header)) = lines.iter().enumerate().skip(at + 1).find(|(_, line)| line.contains("enum ")) else {
            continue;
        };
        let indent = &header[..header.len() - header.trim_start().len()];
        let name: String =
            header.split("enum ").nth(1).unwrap_or_default().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let inner = format!("{indent}    ");
        let end = format!("{indent}}}");
        let mut variants: Vec<Variant> = Vec::new();
        let mut aliases: Vec<String> = Vec::new();
        for line in &lines[start + 1..] {
            if *line == end {
                break;
            }
            let item = line.strip_prefix(inner.as_str()).filter(|item| !item.starts_with(' '));
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(item) = item
                && item.starts_with("#[")
            {
                // `#[command(alias = "run")]`, `aliases = ["a", "b"]`: every quoted name after `alias`.
                if let Some((_, quoted)) = item.split_once("alias") {
                    aliases.extend(quoted.split('"').skip(1).step_by(2).map(str::to_owned));
                }
                continue;
            }
            if let Some(item) = item
                && item.starts_with(|c: char| c.is_ascii_uppercase())
            {
                let variant: String = item.chars().take_while(|c| c.is_alphanumeric()).collect();
                let mut names = vec![kebab(&variant)];
                names.append(&mut aliases);
                variants.push(Variant { names, fields: item.to_owned() });
                continue;
            }
            if let Some(last) = variants.last_mut() {
                last.fields.push('\n');
                last.fields.push_str(line);
            }
        }
        enums.insert(name, variants);
    }
    enums
}

/// The text of every Rust file under `dir`, in path order.
fn rust_sources(dir: &Path) -> String {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    let mut text = String::new();
    for path in entries {
        if path.is_dir() {
            text.push_str(&rust_sources(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
            text.push('\n');
        }
    }
    text
}

/// The `anchor` binary's subcommands, read from its clap definitions in
/// `host/server/src`: each name of a variant of `enum Command`, with the
/// names of its own subcommands (none for `verify`, `keygen` and `serve` for
/// `witness`, …).
fn anchor_subcommands() -> BTreeMap<String, Vec<String>> {
    let enums = subcommand_enums(&rust_sources(&root().join("host/server/src")));
    let top = enums.get("Command").expect("the binary's subcommands are the variants of `enum Command` in host/server/src");
    let mut commands = BTreeMap::new();
    for variant in top {
        // A variant with subcommands of its own names their enum in its fields.
        let words: Vec<&str> = variant.fields.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
        let inner: Vec<String> = enums
            .iter()
            .filter(|(name, _)| words.contains(&name.as_str()))
            .flat_map(|(_, variants)| variants.iter().flat_map(|variant| variant.names.iter().cloned()))
            .collect();
        for name in &variant.names {
            commands.insert(name.clone(), inner.clone());
        }
    }
    assert!(commands.len() >= 10, "the subcommands are read from the source: {commands:?}");
    commands
}

/// A package of the workspace, with the names of its test and binary
/// targets (declared in its manifest, or found where cargo looks for them).
struct Package {
    name: String,
    tests: Vec<String>,
    bins: Vec<String>,
}

/// The names of the `.rs` files in `dir`, and of its folders holding a `main.rs`.
fn target_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in entries {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        if path.extension().is_some_and(|extension| extension == "rs") || path.join("main.rs").exists() {
            names.push(stem);
        }
    }
    names
}

fn packages() -> Vec<Package> {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list.to_owned())
        .expect("the workspace lists its members");
    let mut packages = Vec::new();
    for member in members.split('"').skip(1).step_by(2) {
        let dir = root.join(member);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let mut package =
            Package { name: String::new(), tests: target_names(&dir.join("tests")), bins: target_names(&dir.join("src/bin")) };
        let mut section = "";
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let Some(value) = line.strip_prefix("name = \"").and_then(|rest| rest.strip_suffix('"')) else {
                continue;
            };
            match section {
                "[package]" => package.name = value.to_owned(),
                "[[test]]" => package.tests.push(value.to_owned()),
                "[[bin]]" => package.bins.push(value.to_owned()),
                _ => {}
            }
        }
        if dir.join("src/main.rs").exists() {
            package.bins.push(package.name.clone());
        }
        packages.push(package);
    }
    packages
}

/// An environment assignment in front of a command (`NAME=value`).
fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
}

/// Checks one command line of a `sh` block: `anchor SUB [SUBSUB]` must name
/// the binary's subcommands, `scripts/NAME` a script, and `cargo` its
/// package (`-p`), test target (`--test`) and binary (`--bin`). Ok(false):
/// not a command of the repository's own.
fn check_command(line: &str, commands: &BTreeMap<String, Vec<String>>, packages: &[Package]) -> Result<bool, String> {
    let mut words = line.split_whitespace().skip_while(|word| is_assignment(word));
    let Some(program) = words.next() else {
        return Ok(false);
    };
    let words: Vec<&str> = words.collect();
    if program == "anchor" {
        // Subcommand words are lowercase (`feature off|on|list` names three); a
        // flag, a file or a placeholder ends them.
        let path: Vec<&str> = words
            .iter()
            .copied()
            .take_while(|word| !word.starts_with('-') && word.chars().all(|c| c.is_ascii_lowercase() || c == '-' || c == '|'))
            .take(2)
            .collect();
        let Some(first) = path.first() else {
            return Ok(true);
        };
        let Some(inner) = commands.get(*first) else {
            return Err(format!("`anchor {first}`: the binary has no subcommand {first}"));
        };
        if let Some(second) = path.get(1)
            && !inner.is_empty()
        {
            for name in second.split('|') {
                if !inner.iter().any(|known| known.as_str() == name) {
                    return Err(format!("`anchor {first} {name}`: `anchor {first}` has no subcommand {name} (it has {inner:?})"));
                }
            }
        }
        return Ok(true);
    }
    if let Some(script) = program.strip_prefix("scripts/") {
        if !root().join("scripts").join(script).is_file() {
            return Err(format!("`{program}`: there is no such script"));
        }
        return Ok(true);
    }
    if program == "cargo" {
        let options: Vec<&str> = words.iter().copied().take_while(|word| *word != "--").collect();
        if options.contains(&"--manifest-path") {
            // Another workspace (plugins/): not this one's packages.
            return Ok(false);
        }
        let value = |flags: &[&str]| options.windows(2).find(|pair| flags.contains(&pair[0])).map(|pair| pair[1]);
        let scope: Vec<&Package> = match value(&["-p", "--package"]) {
            Some(name) => packages.iter().filter(|package| package.name == name).collect(),
            None => packages.iter().collect(),
        };
        if scope.is_empty() {
            return Err(format!("`{line}`: the workspace has no such package"));
        }
        if let Some(test) = value(&["--test"])
            && !scope.iter().any(|package| package.tests.iter().any(|name| name.as_str() == test))
        {
            return Err(format!("`{line}`: no test target {test}"));
        }
        if let Some(bin) = value(&["--bin"])
            && !scope.iter().any(|package| package.bins.iter().any(|name| name.as_str() == bin))
        {
            return Err(format!("`{line}`: no binary {bin}"));
        }
        return Ok(true);
    }
    Ok(false)
}

/// The documents whose `sh` blocks are commands a reader runs as shown: the
/// README, the manuals and the guides (not the benchmarks' dated history,
/// whose commands are a record of what was run then).
fn command_documents() -> Vec<PathBuf> {
    let guides = ["README.md", "CONTRIBUTING.md", "tests/README.md", "plugins/tools/README.md", "plugins/PRICING.md"];
    markdown_files()
        .into_iter()
        .filter(|file| guides.iter().any(|guide| file == Path::new(guide)) || file.parent() == Some(Path::new("docs")))
        .collect()
}

#[test]
fn every_command_the_readme_and_the_manuals_show_exists() {
    let commands = anchor_subcommands();
    let packages = packages();
    let mut wrong = Vec::new();
    let mut checked = BTreeMap::new();
    for file in command_documents() {
        let text = read(&file);
        let mut continued = false;
        for (number, line) in sh_lines(&text) {
            let continuation = continued;
            continued = line.trim_end().ends_with('\\');
            let command = line.trim();
            if continuation || command.starts_with('#') {
                continue;
            }
            match check_command(command, &commands, &packages) {
                Ok(true) => *checked.entry(file.clone()).or_insert(0) += 1,
                Ok(false) => {}
                Err(what) => wrong.push(format!("{}:{number}: {what}", file.display())),
            }
        }
    }
    assert!(checked.get(Path::new("README.md")).is_some_and(|count| *count >= 3), "the README's commands are read: {checked:?}");
    assert!(checked.values().sum::<usize>() >= 30, "the commands are read: {checked:?}");
    assert!(wrong.is_empty(), "commands that name nothing:\n{}", wrong.join("\n"));
}

/// The lines of prose of a Markdown text over the longest allowed, tables
/// aside: each line's number and length in characters.
fn long_lines(text: &str) -> Vec<(usize, usize)> {
    prose(text)
        .into_iter()
        .filter(|(_, line)| !line.trim_start().starts_with('|'))
        .map(|(number, line)| (number, line.chars().count()))
        .filter(|(_, length)| *length > LONGEST_LINE)
        .collect()
}

#[test]
fn no_markdown_line_of_prose_is_over_600_characters() {
    let mut long = Vec::new();
    for file in markdown_files() {
        for (number, length) in long_lines(&read(&file)) {
            long.push(format!("{}:{number}: {length} characters", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "lines over {LONGEST_LINE} characters outside tables and code blocks (write a sentence or a short paragraph a line):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_readme_the_benchmark_report_and_the_architecture_keep_to_their_sizes() {
    for (file, most) in [("README.md", 15_000), ("BENCHMARKS.md", 20_000), ("ARCHITECTURE.md", 30_000)] {
        let size = std::fs::metadata(root().join(file)).unwrap().len();
        assert!(size <= most, "{file} is {size} bytes, over its {most}");
    }
}

/// The checks above on made-up input: each finds what it looks for.
#[test]
fn the_document_checks_find_what_they_look_for() {
    let text = "A [link](docs/missing.md#part) and `[code](not/a/link)`.\n```sh\n[fenced](not/a/link)\n```\n| [cell](x.md) |\n";
    let lines = prose(text);
    assert_eq!(lines.iter().map(|(number, _)| *number).collect::<Vec<_>>(), [1, 5]);
    assert_eq!(link_targets(lines[0].1), ["docs/missing.md#part"]);
    assert_eq!(link_targets(lines[1].1), ["x.md"]);
    assert_eq!(link_targets("[name]: ../README.md"), ["../README.md"]);
    assert_eq!(sh_lines(text), [(3, "[fenced](not/a/link)")]);
    assert_eq!(resolve(Path::new("docs/a.md"), "../README.md#top"), Some(PathBuf::from("README.md")));
    assert_eq!(resolve(Path::new("docs/a.md"), "../../outside.md"), None);
    assert!(external("https://example.com") && external("#part") && external("mailto:a@example.com"));
    assert!(!external("docs/operating.md") && !external("../README.md"));

    let commands = anchor_subcommands();
    let packages = packages();
    let check = |line: &str| check_command(line, &commands, &packages);
    assert_eq!(check("anchor pricing inspect FILE.wasm"), Ok(true));
    assert_eq!(check("anchor feature off|on|list [NAME]"), Ok(true));
    assert_eq!(check("anchor verify receipt.json --key \"$VKEY\""), Ok(true));
    assert_eq!(check("ANCHOR_TEST_POSTGRES_URL=postgres://db/test scripts/test"), Ok(true));
    assert_eq!(check("cargo test -p anchor-tests --test api -- docs::"), Ok(true));
    assert_eq!(check("cargo run --bin anchor"), Ok(true));
    assert_eq!(check("curl -s $BASE/health"), Ok(false));
    for wrong in [
        "anchor frobnicate",
        "anchor pricing launch FILE.wasm",
        "anchor feature off|on|toggle",
        "scripts/no-such-script",
        "cargo test -p anchor-tests --test no_such_target",
        "cargo test -p no-such-package",
        "cargo run --bin no-such-binary",
    ] {
        assert!(check(wrong).is_err(), "{wrong} is refused");
    }
    assert_eq!(long_lines(&format!("short\n{}\n", "x".repeat(LONGEST_LINE + 1))), [(2, LONGEST_LINE + 1)]);
    assert!(long_lines(&format!("| {} |\n```\n{}\n```\n", "x".repeat(700), "y".repeat(700))).is_empty());
}
