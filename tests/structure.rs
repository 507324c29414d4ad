//! The code's structure: within each crate, the modules import one another without a circle
//! (a module that needs something of a module that needs it back gets it from a third one
//! below both). Each crate's modules are its `src/*.rs` files and `src/*/` folders; a module's
//! imports are the `crate::NAME` paths in its file(s), its own tests left out (they may use
//! anything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's code: its source without its `#[cfg(test)] mod tests { ... }` (which closes the
/// file) and without comments (a doc link is no import).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `crate::NAME` modules a source refers to.
fn refers_to(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        // `sonograph_x::crate::` cannot occur; `$crate::` in macros is the crate itself.
        if text[..at].ends_with('$')
            || text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    // `use crate::{a, b::c}`: each first segment of the group.
    for (at, _) in text.match_indices("crate::{") {
        let group = &text[at + "crate::{".len()..];
        let mut depth = 1;
        let mut segment = String::new();
        let mut first = true;
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => {
                    if first && !segment.is_empty() {
                        out.insert(std::mem::take(&mut segment));
                    }
                    first = true;
                    segment.clear();
                    continue;
                }
                _ => {}
            }
            if depth == 1 && first {
                if c.is_alphanumeric() || c == '_' {
                    segment.push(c);
                } else if !segment.is_empty() {
                    out.insert(std::mem::take(&mut segment));
                    first = false;
                }
            }
        }
        if !segment.is_empty() {
            out.insert(segment);
        }
    }
    out
}

/// Every module of the crate at `src` and the modules it imports.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let inner: Vec<PathBuf> = walk(&path);
            files.entry(name).or_default().extend(inner);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            files.entry(name).or_default().push(path);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(name, paths)| {
            let mut deps = BTreeSet::new();
            for p in paths {
                let text = std::fs::read_to_string(p).unwrap();
                deps.extend(refers_to(&code(&text)));
            }
            deps.retain(|d| d != name && modules.contains(d));
            (name.clone(), deps)
        })
        .collect()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// A circle of `graph`, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.push(root.join("src"));
    crates.push(root.join("python/src"));
    crates.sort();
    let mut seen = 0;
    for src in &crates {
        let g = graph(src);
        seen += g.len();
        if let Some(c) = circle(&g) {
            panic!("{}: an import circle: {}", src.display(), c.join(" -> "));
        }
    }
    assert!(
        seen > 50,
        "only {seen} modules found: the walk looks in the wrong place"
    );
}

#[test]
fn the_check_sees_a_circle() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(circle(&g).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(
        refers_to("use crate::{alpha::X, beta, gamma::{d, e}};\nfn f() { crate::delta::g() }"),
        ["alpha", "beta", "delta", "gamma"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

/// The binary parses, validates and calls the libraries; no job engine lives in it. Its size
/// is the check that one has not grown back (issue 19 set the bar at 1,500 lines).
#[test]
fn the_binary_stays_a_thin_door() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = walk(&src);
    assert!(
        files.len() >= 5,
        "{} files under {}",
        files.len(),
        src.display()
    );
    let lines: usize = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    assert!(
        lines < 1500,
        "src/ holds {lines} lines: move what is not parsing, validating or calling into a library"
    );
}
