//! The layout stays as issues 33 and 55 left it: a tool function links no MCP SDK, token library
//! or HTTP client; the domain's modules import no circle, nor do the relay's and `http-api`'s
//! (module by module, and the relay's folders as layers); no source file outside the tests grows
//! past 700 lines. Each check also runs on a broken input it must reject.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The crates a tool function must not link.
const NOT_IN_A_TOOL: &[&str] = &["rmcp", "jsonwebtoken", "reqwest", "mcp-endpoint", "auth", "http-api"];

/// The packages in `cargo tree -p <package>` (normal dependencies, features as built).
fn tree(package: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-e", "normal", "--prefix", "none", "-p", package])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn a_tool_function_links_no_mcp_sdk_token_library_or_http_client() {
    let tools: Vec<String> = std::fs::read_dir(root().join("functions"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| tools::ToolName::parse(n).is_some())
        .collect();
    assert_eq!(tools.len(), 9, "{tools:?}");
    for t in &tools {
        let linked = tree(t);
        let bad: Vec<&&str> = NOT_IN_A_TOOL.iter().filter(|c| linked.contains(**c)).collect();
        assert!(bad.is_empty(), "{t} links {bad:?}");
    }
    // The check can fail: the mcp function links all of them.
    let mcp = tree("mcp");
    assert!(NOT_IN_A_TOOL.iter().filter(|c| mcp.contains(**c)).count() >= 4, "{mcp:?}");
}

/// A circle in `graph`, if it has one (a path that comes back to its start).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].iter().cloned().chain([n.to_owned()]).collect());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// Which of the domain's modules each module imports (`crate::x` outside comments).
fn domain_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = root().join("shared/domain/src");
    let mut graph = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "lib") else { continue };
        let text = std::fs::read_to_string(e.path()).unwrap();
        let mut uses = BTreeSet::new();
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                let tail = &rest[i + 7..];
                let m: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !m.is_empty() && m != module {
                    uses.insert(m);
                }
                rest = tail;
            }
        }
        graph.insert(module.to_owned(), uses);
    }
    graph
}

#[test]
fn the_domains_modules_import_no_circle() {
    let graph = domain_imports();
    assert!(graph.len() > 10 && graph.contains_key("store"), "{graph:?}");
    assert_eq!(circle(&graph), None, "the domain's modules import a circle");
    // The check can fail: the circle this issue broke (clients' traits naming the store's result).
    let mut broken = graph.clone();
    broken.get_mut("clients").unwrap().insert("store".into());
    assert!(circle(&broken).is_some_and(|c| c.contains(&"store".to_owned())), "the planted circle was not found");
}

/// The modules of the crate at `src` (`lib.rs` is the root, `a.rs` and `a/mod.rs` are `a`,
/// `a/b.rs` is `a::b`; test files — `tests.rs`, anything under a `tests/` folder — left out) and
/// the source of each.
fn crate_modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    stack.push(path);
                }
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else { continue };
            if stem == "tests" || stem == "main" || (dir == src && stem == "lib") {
                continue;
            }
            let rel = dir.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if stem != "mod" {
                parts.push(stem.to_owned());
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// Which modules each module uses (`crate::a::b…` and `super::…` outside comments, resolved to
/// the longest module path), leaving out a module's own ancestors and descendants: a file split
/// out of its parent (`agent/command.rs`, an `impl` of the parent's type) is part of it.
fn module_imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<&str> = modules.keys().map(String::as_str).collect();
    let resolve = |path: &[String]| -> Option<String> {
        (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| known.contains(p.as_str()))
    };
    let related = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"));
    let mut graph = BTreeMap::new();
    for (module, text) in modules {
        let mut uses = BTreeSet::new();
        let here: Vec<String> = module.split("::").map(str::to_owned).collect();
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .filter(|w| w.starts_with("crate::") || w.starts_with("super::"))
                .collect();
            for w in words {
                let mut parts: Vec<String> = w.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect();
                let mut base: Vec<String> = Vec::new();
                if parts.first().is_some_and(|p| p == "crate") {
                    parts.remove(0);
                } else {
                    base = here.clone();
                    while parts.first().is_some_and(|p| p == "super") {
                        parts.remove(0);
                        base.pop();
                    }
                }
                base.extend(parts);
                if let Some(target) = resolve(&base)
                    && !related(module, &target)
                {
                    uses.insert(target);
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The relay's folders as layers: cli uses everything, run uses machine and server, machine uses
/// server, server uses config and identity, config uses identity.
const RELAY_LAYERS: &[(&str, &[&str])] = &[
    ("cli", &["run", "machine", "server", "config", "identity"]),
    ("run", &["machine", "server", "config", "identity"]),
    ("machine", &["server", "config", "identity"]),
    ("server", &["config", "identity"]),
    ("config", &["identity"]),
    ("identity", &[]),
];

/// What breaks the relay's layering: each module using a folder its layer may not.
fn layer_breaks(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_owned();
    let mut breaks = Vec::new();
    for (m, uses) in graph {
        let Some((_, allowed)) = RELAY_LAYERS.iter().find(|(l, _)| *l == top(m)) else { continue };
        for u in uses {
            let t = top(u);
            if t != top(m) && t != "error" && !allowed.contains(&t.as_str()) {
                breaks.push(format!("{m} uses {u}"));
            }
        }
    }
    breaks
}

#[test]
fn the_relays_and_http_apis_modules_import_no_circle() {
    // (At least this many modules read: the parser found the crate. The panel and the relay
    // installer left http-api for crates of their own.)
    for (krate, at_least) in [("relay/src", 20), ("shared/http-api/src", 6)] {
        let graph = module_imports(&crate_modules(&root().join(krate)));
        assert!(graph.len() >= at_least, "{krate}: {graph:?}");
        assert_eq!(circle(&graph), None, "{krate}'s modules import a circle");
    }
    let relay = crate_modules(&root().join("relay/src"));
    let graph = module_imports(&relay);
    assert!(graph["run::agent"].contains("server::client"), "{:?}", graph["run::agent"]);
    assert!(!graph["run::agent"].contains("run::agent::command"), "a child is part of its parent");
    assert_eq!(layer_breaks(&graph), Vec::<String>::new(), "the relay's folders are layers");
    for folder in RELAY_LAYERS.iter().map(|(l, _)| *l) {
        assert!(relay.keys().any(|m| m == folder || m.starts_with(&format!("{folder}::"))), "no {folder}");
    }
    // The checks can fail: the circles this issue broke, planted back.
    for (module, line, expect) in [
        ("server::client", "let v = crate::machine::update::VERSION;", "machine::update"),
        ("run::live", "use crate::run::agent::Relay;", "run::agent"),
    ] {
        let mut broken = relay.clone();
        broken.get_mut(module).unwrap().push_str(&format!("\n{line}\n"));
        let g = module_imports(&broken);
        let c = circle(&g).or_else(|| (!layer_breaks(&g).is_empty()).then(Vec::new));
        assert!(c.is_some(), "{module} → {expect} was not caught");
    }
    let mut broken = relay.clone();
    broken.get_mut("cli::commands").unwrap().push_str("\nuse crate::cli::sessions::command;\n");
    broken.get_mut("cli::sessions").unwrap().push_str("\nuse super::commands::status;\n");
    assert!(circle(&module_imports(&broken)).is_some(), "a circle through super:: was not caught");
    let mut broken = crate_modules(&root().join("shared/http-api/src"));
    broken.get_mut("relay_api").unwrap().push_str("\nuse crate::openapi::find;\n");
    assert!(circle(&module_imports(&broken)).is_some(), "http-api's openapi circle was not caught");
}

#[test]
fn no_source_file_outside_the_tests_is_over_700_lines() {
    let out = std::process::Command::new("git").args(["ls-files", "*.rs"]).current_dir(root()).output().unwrap();
    let long: Vec<(String, usize)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|f| !f.starts_with("tests/") && !f.ends_with("/tests.rs"))
        .map(|f| (f.to_owned(), std::fs::read_to_string(root().join(f)).map(|t| t.lines().count()).unwrap_or(0)))
        .filter(|(_, n)| *n > 700)
        .collect();
    assert!(long.is_empty(), "split these along their seams: {long:?}");
}

/// The modules `lib` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`; not inline ones
/// such as `mod tests { … }`), and the names its `//!` table rows mention in backticks.
fn modules_and_table(lib: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let declared = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = ["pub(crate) mod ", "pub mod ", "mod "].iter().find_map(|p| l.strip_prefix(p))?;
            rest.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    let mut listed = BTreeSet::new();
    for row in lib.lines().filter_map(|l| l.strip_prefix("//! |")) {
        for (i, part) in row.split('`').enumerate() {
            if i % 2 == 1 {
                listed.extend(part.split("::").map(str::to_owned));
            }
        }
    }
    (declared, listed)
}

/// Module maps are kept where they cannot drift: each crate's `//!` table (docs/architecture.md
/// points there). A crate with modules has a table, and the table names every one of them.
#[test]
fn every_crates_module_table_names_each_of_its_modules() {
    let out =
        std::process::Command::new("git").args(["ls-files", "*/src/lib.rs"]).current_dir(root()).output().unwrap();
    let mut checked = 0;
    let mut missing = Vec::new();
    for lib in String::from_utf8_lossy(&out.stdout).lines() {
        let text = std::fs::read_to_string(root().join(lib)).unwrap();
        let (declared, listed) = modules_and_table(&text);
        if declared.is_empty() {
            continue;
        }
        checked += 1;
        missing.extend(declared.difference(&listed).map(|m| format!("{lib}: {m}")));
    }
    assert!(checked >= 10, "only {checked} crates with modules were found");
    assert!(missing.is_empty(), "add these modules to their crate's //! table: {missing:?}");
    // The check can fail: a module declared but not in the table.
    let (declared, listed) =
        modules_and_table("//! | module | what |\n//! |---|---|\n//! | [`a`] | the a |\nmod a;\npub mod b;\n");
    assert_eq!(declared.difference(&listed).collect::<Vec<_>>(), [&"b".to_owned()]);
}

/// `cargo tree --workspace -i <package>`: Some(the tree) when the package is in the workspace's
/// graph (normal and build dependencies, for this platform), None when it is not.
fn inverse_tree(package: &str) -> Option<String> {
    let out = std::process::Command::new("cargo")
        .args(["tree", "--workspace", "--locked", "--offline", "-e", "normal,build", "-i", package])
        .current_dir(root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        assert!(stderr.contains("did not match any packages"), "cargo tree failed: {stderr}");
        None
    }
}

/// One crypto library: the AWS SDKs' HTTPS client is built with rustls' *ring* provider
/// (`lambda::aws_defaults`), as the relay's and the servers' TLS are, so no crate links aws-lc
/// (a second crypto library, a C build for each target, and about a megabyte in every function:
/// docs/history.md, "Lambda build, side by side"), and jsonwebtoken's signatures are *ring*'s too. The
/// control: the same query finds *ring*.
#[test]
fn the_workspace_links_one_crypto_library() {
    for package in ["aws-lc-rs", "aws-lc-sys"] {
        if let Some(tree) = inverse_tree(package) {
            panic!("{package} is linked again (an SDK's default-https-client feature?):\n{tree}");
        }
    }
    // jsonwebtoken signs and verifies on *ring* (auth::jwt_crypto), not RustCrypto's stack.
    for package in ["rsa", "num-bigint-dig", "p256", "p384", "ed25519-dalek"] {
        if let Some(tree) = inverse_tree(package) {
            panic!("{package} is linked again (jsonwebtoken's rust_crypto feature?):\n{tree}");
        }
    }
    let ring = inverse_tree("ring").expect("the control: ring is in the graph");
    assert!(ring.contains("rustls"), "{ring}");
}
