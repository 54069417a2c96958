//! Every change of a DAC balance happens inside the charge pipeline, or is
//! one of the exceptions listed here with its reason.
//!
//! Read from the source, the way a reviewer would check it:
//! 1. the store's statements that change a balance: Trial
//!    (`agent.trial_balance_milli`) or Earned (`earned_lot`, the lots whose
//!    remaining amounts are the balance);
//! 2. every store function that reaches one of them, followed through its
//!    callers up to the store's trait methods (the only way in from outside);
//! 3. each trait method so found is in [`MOVERS`], either as `Pipeline`, and
//!    then every call of it in the use cases sits inside an `impl Commit`
//!    (what the pipeline calls to record a purchase) or in `charge.rs`, or as
//!    an exception whose reason is written beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

enum Kind {
    /// Called only by a commit of the charge pipeline, or by the pipeline itself.
    Pipeline,
    /// Not a purchase; why is the string.
    Exception(&'static str),
}

use Kind::{Exception, Pipeline};

/// The store's ways to change a balance, and how each is reached.
const MOVERS: &[(&str, Kind)] = &[
    ("create_declaration", Pipeline),
    ("reserve_payment", Pipeline),
    ("settle_payment", Pipeline),
    ("end_payment", Pipeline),
    ("end_sdac", Pipeline),
    ("end_sdac_free", Exception("ends a session that ran no trial: it costs nothing, takes no funding and moves no DAC")),
    ("close_ise", Pipeline),
    (
        "close_ise_unpaid",
        Exception("closes a stay with nothing to charge (free, or nothing could pay it): it takes no funding and moves no DAC"),
    ),
    ("buy_asa_with_earned", Pipeline),
    ("subscribe_retention", Pipeline),
    ("bill_retention", Pipeline),
    ("insert_agent", Exception("registration grants the Trial credit; nothing is bought")),
    (
        "close_payment",
        Exception(
            "a declaration's reservation that ends unsettled (window passed, settlement refused, proposal rejected) gives back \
             the Earned premium or Trial base fee its create took: a refund of what the pipeline reserved, not a purchase",
        ),
    ),
    (
        "release_lapsed_payment",
        Exception(
            "the release job ends a reservation nobody confirmed as close_payment does (decision 0083), giving back the \
             Earned premium or Trial base fee its create took: a refund, not a purchase",
        ),
    ),
    ("expire_earned", Exception("the lots whose days are over expire (the Earned job): time, not a purchase")),
    ("debit_earned", Exception("the store's conformance tests' own debit; no use case calls it (checked below)")),
    ("credit_earned", Exception("the store's conformance tests' own credit; no use case calls it (checked below)")),
    ("refund_earned", Exception("the store's conformance tests' own refund; no use case calls it (checked below)")),
];

/// Store methods the use cases must never call (only tests of the store do).
const TEST_ONLY: &[&str] = &["debit_earned", "credit_earned", "refund_earned"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// One function of a file: its name and its lines (up to the next function).
struct Function {
    module: String,
    name: String,
    body: String,
}

fn fn_name(line: &str) -> Option<String> {
    let at = line.find("fn ")?;
    let before = &line[..at];
    if !before.split_whitespace().all(|w| ["pub", "pub(crate)", "async", "const", "unsafe"].contains(&w)) {
        return None;
    }
    let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

fn functions(dir: &Path) -> Vec<Function> {
    let mut out = Vec::new();
    for file in rust_files(dir) {
        let module = file.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut current: Option<Function> = None;
        for line in text.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(name) = fn_name(line) {
                out.extend(current.take());
                current = Some(Function { module: module.clone(), name, body: String::new() });
            }
            if let Some(f) = current.as_mut() {
                f.body.push_str(line);
                f.body.push('\n');
            }
        }
        out.extend(current);
    }
    out
}

/// The names of the methods the store's `pub trait`s declare.
fn trait_methods(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in rust_files(dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut depth: Option<i32> = None;
        for line in text.lines() {
            if line.starts_with("pub trait ") {
                depth = Some(0);
            }
            if let Some(d) = depth.as_mut() {
                if let Some(name) = fn_name(line) {
                    names.insert(name);
                }
                *d += line.matches('{').count() as i32 - line.matches('}').count() as i32;
                if *d == 0 && line.contains('}') {
                    depth = None;
                }
            }
        }
    }
    names
}

/// Whether `body` calls `name` (as `name(`, `.name(` or `module::name(`), not
/// as a longer identifier's tail.
fn calls(body: &str, name: &str) -> bool {
    let pattern = format!("{name}(");
    body.match_indices(&pattern).any(|(at, _)| {
        let before = body[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !body[..at].ends_with("fn ")
    })
}

/// A statement that changes a Trial or Earned balance.
fn moves_dac(body: &str) -> bool {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    ["set trial_balance_milli", "update earned_lot", "\"earned_lot\",", "insert into agent ("].iter().any(|p| flat.contains(p))
}

/// The store functions that change a balance, and the trait methods through
/// which each is reached.
fn store_movers() -> (BTreeSet<String>, BTreeSet<String>) {
    let store = functions(&root().join("host/store/src"));
    let mut reaching: BTreeSet<(String, String)> =
        store.iter().filter(|f| moves_dac(&f.body)).map(|f| (f.module.clone(), f.name.clone())).collect();
    assert!(reaching.len() >= 6, "the scan finds the balance statements: {reaching:?}");
    loop {
        let before = reaching.len();
        for f in &store {
            if reaching.contains(&(f.module.clone(), f.name.clone())) {
                continue;
            }
            let reaches = reaching.iter().any(|(module, name)| {
                // A private helper is called by its bare name in its own file, or through its module elsewhere.
                (f.module == *module && calls(&f.body, name))
                    || calls(&f.body, &format!("{module}::{name}"))
                    || (f.module != *module && f.body.contains(&format!("{module}::{name}(")))
            });
            if reaches {
                reaching.insert((f.module.clone(), f.name.clone()));
            }
        }
        if reaching.len() == before {
            break;
        }
    }
    let methods = trait_methods(&root().join("host/ports/src"));
    let trait_methods: BTreeSet<String> =
        reaching.iter().filter(|(_, name)| methods.contains(name)).map(|(_, name)| name.clone()).collect();
    let helpers = reaching.into_iter().map(|(m, n)| format!("{m}::{n}")).collect();
    (trait_methods, helpers)
}

/// The line ranges of `impl Commit for …` blocks in `text`.
fn commit_blocks(text: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        if !(line.starts_with("impl") && line.contains(" Commit for ")) {
            continue;
        }
        let mut depth = 0i32;
        for (end, l) in lines.iter().enumerate().skip(start) {
            depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
            if depth == 0 && end > start {
                blocks.push((start, end));
                break;
            }
        }
    }
    blocks
}

#[test]
fn every_change_of_a_dac_balance_is_inside_the_charge_pipeline() {
    let (methods, helpers) = store_movers();
    let listed: BTreeMap<&str, &Kind> = MOVERS.iter().map(|(name, kind)| (*name, kind)).collect();
    let unlisted: Vec<&String> = methods.iter().filter(|m| !listed.contains_key(m.as_str())).collect();
    assert!(
        unlisted.is_empty(),
        "these store methods change a DAC balance and are not in MOVERS: {unlisted:?} (reached through {helpers:?})"
    );
    let stale: Vec<&&str> = listed.keys().filter(|name| !methods.contains(**name)).collect();
    assert!(stale.is_empty(), "MOVERS lists methods that change no balance (any more): {stale:?}");
    for (name, kind) in MOVERS {
        if let Exception(why) = kind {
            assert!(why.len() > 20, "the exception {name} says why");
        }
    }

    // Where the use cases call each of them.
    let mut outside = Vec::new();
    let mut pipeline_calls = 0;
    for file in rust_files(&root().join("host/app/src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        let blocks = commit_blocks(&text);
        let in_charge = file.ends_with("charge.rs");
        for (n, line) in text.lines().enumerate() {
            for (name, kind) in MOVERS {
                if !line.contains(&format!(".{name}(")) {
                    continue;
                }
                let where_ = format!("{}:{} calls {name}", file.strip_prefix(root()).unwrap_or(&file).display(), n + 1);
                assert!(!TEST_ONLY.contains(name), "{where_}, which only the store's own tests may");
                if let Pipeline = kind {
                    if in_charge || blocks.iter().any(|(a, b)| (*a..=*b).contains(&n)) {
                        pipeline_calls += 1;
                    } else {
                        outside.push(where_);
                    }
                }
            }
        }
    }
    assert!(outside.is_empty(), "balance changes outside the charge pipeline: {outside:#?}");
    assert!(pipeline_calls >= 9, "the scan sees the commits' calls ({pipeline_calls})");
}

#[test]
fn the_scan_sees_a_balance_change_outside_the_pipeline() {
    // The checks above, on a made-up use case: a debit outside any commit is seen.
    let text = "impl Commit for Good<'_> {\n    fn commit() { store.close_ise(x) }\n}\nfn bad() { store.close_ise(y) }\n";
    let blocks = commit_blocks(text);
    assert_eq!(blocks, vec![(0, 2)]);
    let lines: Vec<usize> = text.lines().enumerate().filter(|(_, l)| l.contains(".close_ise(")).map(|(n, _)| n).collect();
    let outside: Vec<&usize> = lines.iter().filter(|n| !blocks.iter().any(|(a, b)| (*a..=*b).contains(*n))).collect();
    assert_eq!(outside, vec![&3]);
    assert!(moves_dac("sql(\"update agent set trial_balance_milli = trial_balance_milli - $1\")"));
    assert!(moves_dac("tx.execute(Query::insert(\n        \"earned_lot\",\n"));
    assert!(!moves_dac("select trial_balance_milli from agent"));
    assert!(calls("x.bill_retention(a)", "bill_retention") && !calls("x.rebill_retention(a)", "bill_retention"));
}
