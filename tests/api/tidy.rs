//! Invariants of the repository itself, checked like any other behaviour.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn migration_names_match() {
    let pg = names(&root().join("migrations/postgres"));
    let sqlite = names(&root().join("migrations/sqlite"));
    assert_eq!(pg, sqlite);
    assert!(pg.iter().all(|n| n.len() > 5 && n[..4].bytes().all(|b| b.is_ascii_digit()) && n.ends_with(".sql")), "{pg:?}");
}

/// Released WIT folders never change. A new interface version is a new folder;
/// add its hash here when it is released.
#[test]
fn wit_folders_are_frozen() {
    let released = [
        ("pricing@1.0.0", "d8d62452f0d43d1052dc3d441c0ec0af665331fe92194b9d60ea720d898b2edc"),
        ("pricing@1.1.0", "3ee01fe8623e5aadc9d0e35889c082fcdd2c91a173df74baa29a68637183f468"),
        ("tool@1.0.0", "9e7e206f39e7f678f41aa9fe20c36d56a1cb37c66462d182c54d2a359edd6749"),
    ];
    for (folder, expected) in released {
        let dir = root().join("wit").join(folder);
        let mut hasher = Sha256::new();
        for name in names(&dir) {
            hasher.update(name.as_bytes());
            hasher.update(std::fs::read(dir.join(&name)).unwrap());
        }
        assert_eq!(hex::encode(hasher.finalize()), expected, "wit/{folder} changed after its release");
    }
}

#[test]
fn the_domain_does_no_io() {
    let manifest = std::fs::read_to_string(root().join("host/domain/Cargo.toml")).unwrap();
    for forbidden in ["sqlx", "axum", "wasmtime", "tokio", "reqwest"] {
        assert!(!manifest.contains(forbidden), "anchor-domain depends on {forbidden}");
    }
}

#[test]
fn only_the_plugin_host_knows_wasmtime_and_only_the_server_knows_http() {
    let cases: [(&str, &[&str]); 6] = [
        ("store", &["wasmtime", "axum", "anchor-app"]),
        // The ports say what storage does in words no engine owns.
        ("ports", &["sqlx", "rusqlite", "axum", "hyper", "wasmtime", "anchor-store", "anchor-app", "anchor-server"]),
        // The use cases know no HTTP framework, storage engine or WebAssembly
        // runtime, and storage only through its ports (`anchor-ports`).
        ("app", &["axum", "hyper", "sqlx", "rusqlite", "wasmtime", "anchor-store", "anchor-server"]),
        // x402 is the bottom of payments: no HTTP framework, storage or pricing.
        ("x402", &["axum", "hyper", "sqlx", "wasmtime", "anchor-store", "anchor-app", "anchor-server"]),
        ("plugin-host", &["sqlx", "axum"]),
        // The offline verifier needs no service, database or network.
        ("verify", &["sqlx", "axum", "wasmtime", "tokio", "reqwest", "anchor-domain", "anchor-store"]),
    ];
    for (krate, forbidden) in cases {
        let manifest = std::fs::read_to_string(root().join("host").join(krate).join("Cargo.toml")).unwrap();
        for word in forbidden.iter() {
            assert!(!manifest.contains(word), "{krate} depends on {word}");
        }
    }
}

/// The modules of one crate, each with the other modules its files name
/// (`crate::<module>` or `use crate::{…, <module>, …}`). A module is a
/// top-level file or folder of `src`; `leave_out` sit on top (`lib`, `main`, …).
fn module_edges(src: &Path, leave_out: &[&str]) -> Vec<(String, Vec<String>)> {
    fn text_of(path: &Path) -> String {
        if path.is_dir() {
            let mut all = String::new();
            for entry in std::fs::read_dir(path).unwrap() {
                all.push_str(&text_of(&entry.unwrap().path()));
            }
            all
        } else if path.extension().is_some_and(|e| e == "rs") {
            std::fs::read_to_string(path).unwrap()
        } else {
            String::new()
        }
    }
    let modules: Vec<String> = names(src)
        .into_iter()
        .filter_map(|n| if src.join(&n).is_dir() { Some(n) } else { n.strip_suffix(".rs").map(str::to_string) })
        .filter(|m| !leave_out.contains(&m.as_str()))
        .collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    modules
        .iter()
        .map(|m| {
            let path = if src.join(m).is_dir() { src.join(m) } else { src.join(format!("{m}.rs")) };
            let text = text_of(&path);
            // Every name a `crate::` path or `use crate::{…}` group starts with.
            let mut named = Vec::new();
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + 7..];
                if let Some(group) = rest.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    named.extend(group.split(',').map(|item| item.trim().split("::").next().unwrap_or("").to_string()));
                } else {
                    named.push(rest.chars().take_while(|c| is_ident(*c)).collect());
                }
            }
            let uses = modules.iter().filter(|other| *other != m && named.iter().any(|n| n == *other)).cloned().collect();
            (m.clone(), uses)
        })
        .collect()
}

/// Panics with the cycle if the module graph has one.
fn assert_no_cycle(edges: &[(String, Vec<String>)]) {
    // Depth-first search for a back edge.
    fn visit(m: &str, edges: &[(String, Vec<String>)], path: &mut Vec<String>, done: &mut Vec<String>) {
        if done.iter().any(|d| d == m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("module cycle: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_string());
        for next in edges.iter().find(|(name, _)| name == m).map(|(_, uses)| uses.clone()).unwrap_or_default() {
            visit(&next, edges, path, done);
        }
        path.pop();
        done.push(m.to_string());
    }
    let mut done = Vec::new();
    for (m, _) in edges {
        visit(m, edges, &mut Vec::new(), &mut done);
    }
}

/// The server's top-level modules, `http` included, depend on one another
/// without cycles: the transport below (the listener, trusted proxies, body
/// limits as data the routes declare) names no area.
#[test]
fn server_modules_form_no_cycle() {
    // Every module but the crate roots (the composition root assembles them all).
    let edges = module_edges(&root().join("host/server/src"), &["lib", "main"]);
    assert_no_cycle(&edges);
    assert!(edges.iter().any(|(m, uses)| m == "state" && uses.iter().any(|u| u == "ratelimit")), "the check sees edges: {edges:?}");
    assert!(edges.iter().any(|(m, uses)| m == "http" && uses.iter().any(|u| u == "listener")), "the check sees http: {edges:?}");
}

/// The server in three layers: the plumbing (listener, body reader,
/// extractors, wire scalars, errors, state, …) at the bottom; the areas
/// (`areas/`: each area's wire types, operations, route table and
/// handlers) on it; the two transports on the areas, REST (`http`, which
/// assembles the route tables) and MCP (`mcp`), neither naming the other.
/// Nothing names a layer above its own.
#[test]
fn the_server_stands_in_layers() {
    let edges = module_edges(&root().join("host/server/src"), &["lib", "main"]);
    let offenders = layer_offenders(&edges);
    assert!(offenders.is_empty(), "modules naming a layer above their own: {offenders:?}");
    assert!(edges.iter().any(|(m, uses)| m == "mcp" && uses.iter().any(|u| u == "areas")), "the check sees edges: {edges:?}");
    let broken = vec![("listener".to_string(), vec!["areas".to_string()]), ("areas".to_string(), vec!["mcp".to_string()])];
    assert_eq!(layer_offenders(&broken), ["listener names areas", "areas names mcp"], "the check finds a module naming a layer above");
}

fn layer_offenders(edges: &[(String, Vec<String>)]) -> Vec<String> {
    let layer = |m: &str| match m {
        "http" | "mcp" => 2,
        "areas" => 1,
        _ => 0,
    };
    let mut offenders = Vec::new();
    for (m, uses) in edges {
        for u in uses {
            // Above its own layer, or the other transport.
            if layer(u) > layer(m) || (layer(m) == 2 && layer(u) == 2) {
                offenders.push(format!("{m} names {u}"));
            }
        }
    }
    offenders
}

/// Wire types live in their area: a serde type of the server is declared in
/// `areas/`, or is one of the few every area shares or no client sees (the
/// error bodies, the monitor's state file, a key file, a test's shapes);
/// the transports declare none.
#[test]
fn wire_types_live_in_their_area() {
    let src = root().join("host/server/src");
    let shared = ["error.rs", "monitor.rs", "x402_headers.rs", "body.rs"];
    let mut offenders = Vec::new();
    for path in crate::tidy_charges::rust_files(&src) {
        let in_area = path.strip_prefix(&src).unwrap().starts_with("areas");
        if in_area || shared.iter().any(|s| path.ends_with(s)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if derives_serde(&text) {
            offenders.push(path.display().to_string());
        }
    }
    assert!(offenders.is_empty(), "serde types outside an area: {offenders:?}");
    assert!(derives_serde("#[derive(Debug, Serialize, JsonSchema)]\nstruct A;"), "the check finds one");
}

fn derives_serde(text: &str) -> bool {
    text.lines().map(str::trim).any(|l| l.starts_with("#[derive(") && (l.contains("Serialize") || l.contains("Deserialize")))
}

/// No server module re-exports another's items wholesale (`pub use
/// crate::…::*`): a wire type is named by the module that declares it.
#[test]
fn no_server_module_re_exports_another_wholesale() {
    let mut offenders = Vec::new();
    for path in crate::tidy_charges::rust_files(&root().join("host/server/src")) {
        offenders.extend(wholesale_re_exports(&std::fs::read_to_string(&path).unwrap()).map(|l| format!("{}: {l}", path.display())));
    }
    assert!(offenders.is_empty(), "wholesale re-exports: {offenders:?}");
    assert_eq!(wholesale_re_exports("pub(crate) use crate::api::tsl::*;\nuse crate::api::tsl::*;\n").count(), 1, "the check finds one");
}

fn wholesale_re_exports(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|l| l.starts_with("pub") && l.contains(" use crate::") && l.ends_with("::*;"))
}

/// Neither the use cases nor the store has an import circle among its modules.
#[test]
fn app_and_store_modules_form_no_cycle() {
    let app = module_edges(&root().join("host/app/src"), &["lib"]);
    assert_no_cycle(&app);
    assert!(app.iter().any(|(m, uses)| m == "bilateral" && uses.iter().any(|u| u == "declarations")), "the check sees edges: {app:?}");
    let store = module_edges(&root().join("host/store/src"), &["lib"]);
    assert_no_cycle(&store);
    assert!(store.iter().any(|(m, uses)| m == "batch" && uses.iter().any(|u| u == "rows")), "the check sees edges: {store:?}");
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let edges = vec![("a".to_string(), vec!["b".to_string()]), ("b".to_string(), vec!["a".to_string()])];
    assert!(std::panic::catch_unwind(|| assert_no_cycle(&edges)).is_err());
}

/// Handlers parse, call one use case and render: nothing in the server
/// reaches the store itself (the state only builds the use cases' `Services`).
#[test]
fn the_server_reaches_storage_only_through_use_cases() {
    let mut offenders = Vec::new();
    for path in crate::tidy_charges::rust_files(&root().join("host/server/src")) {
        if path.ends_with("state.rs") || path.ends_with("lib.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("state.store")
            || text.contains("app.store")
            || text.contains("anchor_store::Store")
            || text.contains("anchor_ports::Store")
        {
            offenders.push(path.display().to_string());
        }
    }
    assert!(offenders.is_empty(), "these files reach the store directly: {offenders:?}");
}

/// The store crate is named only where a process assembles its store: the
/// service's (`lib.rs`, `main.rs`), the backup and restore commands'
/// (`operate.rs`) and the witness server's (`witness_server.rs`); the state
/// holds the store as the application's port (`anchor_ports::Store`).
#[test]
fn only_the_composition_roots_name_the_store_crate() {
    let roots = ["lib.rs", "main.rs", "operate.rs", "witness_server.rs"];
    let src = root().join("host/server/src");
    let mut offenders = Vec::new();
    for path in crate::tidy_charges::rust_files(&src) {
        let top = path.strip_prefix(&src).unwrap().components().count() == 1;
        if top && roots.iter().any(|r| path.ends_with(r)) {
            continue;
        }
        if std::fs::read_to_string(&path).unwrap().contains("anchor_store") {
            offenders.push(path.display().to_string());
        }
    }
    assert!(offenders.is_empty(), "these name anchor_store outside a composition root: {offenders:#?}");
}

/// The application's public items (its use cases' signatures, results and
/// requests) name no type of the store crate: what they hand out is the
/// domain's (`anchor_domain::records`) or the ports' (`anchor_ports`), and
/// the application does not depend on `anchor-store` at all (the manifest
/// check above), so no file of it names the crate.
#[test]
fn the_applications_public_items_name_no_store_type() {
    let mut offenders = Vec::new();
    for path in crate::tidy_charges::rust_files(&root().join("host/app/src")) {
        let text = std::fs::read_to_string(&path).unwrap();
        for item in public_items_naming_the_store(&text, &[]) {
            offenders.push(format!("{}: {item}", path.display()));
        }
        if text.contains("anchor_store") {
            offenders.push(format!("{}: names anchor_store", path.display()));
        }
    }
    assert!(offenders.is_empty(), "public items naming a store type: {offenders:#?}");
    let sample = "use anchor_store::{Store, EarnedBalance};\npub fn balance(store: &dyn Store) -> EarnedBalance {\n    todo\n}\n";
    assert_eq!(public_items_naming_the_store(sample, &[]).len(), 1, "the check finds one");
}

/// The public items of one file (its tests left out) that name a type it
/// imports from `anchor_store`, or any `anchor_store::` path, other than `allowed`.
fn public_items_naming_the_store(text: &str, allowed: &[&str]) -> Vec<String> {
    let text = text.split("#[cfg(test)]").next().unwrap_or(text);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut imported: Vec<&str> = Vec::new();
    for (at, _) in text.match_indices("use anchor_store::") {
        let statement = &text[at + "use anchor_store::".len()..];
        let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
        imported.extend(statement.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty() && *w != "self" && *w != "as"));
    }
    let names_the_store = |item: &str| {
        let words: Vec<&str> = item.split(|c: char| !is_ident(c)).collect();
        let inline = item.match_indices("anchor_store::").any(|(at, _)| {
            let name: String = item[at + "anchor_store::".len()..].chars().take_while(|c| is_ident(*c)).collect();
            !allowed.contains(&name.as_str())
        });
        inline || imported.iter().any(|n| !allowed.contains(n) && words.contains(n))
    };
    let mut found = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let line = line.trim_start();
        if !line.starts_with("pub ") || line.starts_with("pub use ") || line.starts_with("pub mod ") {
            continue;
        }
        // A field is its line; any other item runs to its body or its end.
        let field = line.split_once(':').is_some_and(|(head, _)| head.trim_start_matches("pub ").chars().all(is_ident));
        let item = if field {
            line.to_string()
        } else {
            let rest = lines[index..].join("\n");
            rest[..rest.find(['{', ';']).unwrap_or(rest.len())].to_string()
        };
        if names_the_store(&item) {
            found.push(item.lines().next().unwrap_or_default().to_string());
        }
    }
    found
}

/// `unsafe` appears in one place: deserializing compiled components this
/// host wrote (`host/plugin-host/src/cache.rs`, each block with its SAFETY note).
#[test]
fn unsafe_code_stays_in_the_compiled_cache() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("host"), &mut files);
    walk(&root().join("tests"), &mut files);
    let allowed = root().join("host/plugin-host/src/cache.rs");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let blocks = text.matches(concat!("unsafe", " {")).count();
        if file == allowed {
            assert_eq!(blocks, text.matches("// SAFETY:").count(), "every unsafe block in {} says why it is sound", file.display());
        } else {
            assert_eq!(blocks, 0, "{} uses unsafe code", file.display());
        }
    }
}
