//! The layers of ARCHITECTURE.md hold in the code, for the module ("Layers", over
//! `src/`) and for the Rust client ("The client's layers", over `client/src/`):
//! every file belongs to a listed layer, imports only from its own layer or below,
//! and no files import each other in a circle. Reads the sources; needs no server.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A crate held to a table of ARCHITECTURE.md: the section that has the table, and
/// the folder of the crate's sources (whose `lib.rs` is the crate's root).
struct Tree {
    section: &'static str,
    dir: &'static str,
}

/// The module.
const MODULE: Tree = Tree {
    section: "Layers",
    dir: "src",
};

/// The Rust client.
const CLIENT: Tree = Tree {
    section: "The client's layers",
    dir: "client/src",
};

/// `(layer, path prefix)` pairs from the tree's table in ARCHITECTURE.md: rows of the
/// form `| 2 | `src/waiting/` | … |`, the layer first, then the paths in backquotes.
fn layers(tree: &Tree) -> Vec<(u32, String)> {
    let text = fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the repository's root");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with(tree.section))
        .unwrap_or_else(|| panic!("a section \"## {}\" in ARCHITECTURE.md", tree.section));
    let mut layers = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(layer), Some(paths)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(layer) = layer.parse::<u32>() else {
            continue;
        };
        for path in paths.split('`').skip(1).step_by(2) {
            layers.push((layer, path.to_string()));
        }
    }
    assert!(layers.len() >= 5, "no layer table found: {layers:?}");
    layers
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file of the crate in `dir`: `src/waiting/handoff.rs` is
/// `["waiting", "handoff"]`, `src/waiting/mod.rs` is `["waiting"]`, `src/lib.rs` is
/// `[]`.
fn module_of(file: &str, dir: &str) -> Vec<String> {
    let rel = file
        .strip_prefix(dir)
        .unwrap_or(file)
        .trim_start_matches('/')
        .trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The file of the longest prefix of `path` (a module path) that is a file of `files`,
/// the crate's in `dir`.
fn file_of(path: &[String], files: &BTreeSet<String>, dir: &str) -> Option<String> {
    for len in (0..=path.len()).rev() {
        let module = path[..len].join("/");
        let candidates = if module.is_empty() {
            vec![format!("{dir}/lib.rs")]
        } else {
            vec![
                format!("{dir}/{module}.rs"),
                format!("{dir}/{module}/mod.rs"),
            ]
        };
        if let Some(found) = candidates.into_iter().find(|c| files.contains(c)) {
            return Some(found);
        }
    }
    None
}

/// The text without comments (`//` to the end of a line) or string literals.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut code = String::new();
        let mut in_string = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_string {
                if c == '\\' {
                    chars.next();
                } else if c == '"' {
                    in_string = false;
                }
                continue;
            }
            if c == '"' {
                in_string = true;
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            code.push(c);
        }
        out.push_str(&code);
        out.push('\n');
    }
    out
}

/// Every path the code names from `crate::` or `super::`, braces expanded, each as
/// module segments from the crate root.
fn named_paths(code: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let bytes: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let boundary = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let base = if boundary && rest.starts_with("crate::") {
            i += 7;
            Some(Vec::new())
        } else if boundary && rest.starts_with("super::") {
            i += 7;
            let mut parent = module.to_vec();
            // A `mod.rs` is its module; `super` is the module above it. Any other file
            // is a child module: `super` is the folder's module.
            if is_mod_file || !parent.is_empty() {
                parent.pop();
            }
            Some(parent)
        } else {
            i += 1;
            None
        };
        if let Some(base) = base {
            let (paths, end) = parse_tree(&bytes, i, base);
            found.extend(paths);
            i = end;
        }
    }
    found
}

/// Parses `a::b::{c, d::e}` from `at`, after a `crate::`/`super::` prefix.
fn parse_tree(chars: &[char], mut at: usize, mut path: Vec<String>) -> (Vec<Vec<String>>, usize) {
    loop {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        if chars.get(at) == Some(&'{') {
            let mut depth = 0;
            let start = at + 1;
            let mut end = start;
            for (j, c) in chars.iter().enumerate().skip(at) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = &chars[start..end];
            let mut paths = Vec::new();
            let mut item_start = 0;
            let mut depth = 0;
            for (j, c) in inner.iter().enumerate() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths.extend(parse_tree(&inner[item_start..j], 0, path.clone()).0);
                        item_start = j + 1;
                    }
                    _ => {}
                }
            }
            paths.extend(parse_tree(&inner[item_start..], 0, path.clone()).0);
            return (paths, end + 1);
        }
        let start = at;
        while chars
            .get(at)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            at += 1;
        }
        if at == start {
            return (vec![path], at);
        }
        let ident: String = chars[start..at].iter().collect();
        if ident != "self" {
            path.push(ident);
        }
        if chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':') {
            at += 2;
        } else {
            return (vec![path], at);
        }
    }
}

/// In a `mod.rs` (or `lib.rs`): the child modules it declares (`mod x;`) whose items
/// it names (`x::…`), each as a module path.
fn children_named(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let words: Vec<&str> = code.split_whitespace().collect();
    let children: Vec<String> = words
        .windows(2)
        .filter(|w| w[0] == "mod" && w[1].ends_with(';'))
        .map(|w| w[1].trim_end_matches(';').to_string())
        .collect();
    let mut named = Vec::new();
    for child in children {
        let needle = format!("{child}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&needle) {
            let start = from + at;
            let before = code[..start].chars().next_back();
            let boundary = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if boundary {
                let mut path = module.to_vec();
                path.push(child.clone());
                named.push(path);
                break;
            }
            from = start + needle.len();
        }
    }
    named
}

/// Every file of the tree, its layer, and the files it imports.
fn graph(tree: &Tree) -> (BTreeMap<String, u32>, BTreeMap<String, BTreeSet<String>>) {
    let layers = layers(tree);
    let mut files = Vec::new();
    sources(&Path::new(ROOT).join(tree.dir), &mut files);
    let names: BTreeSet<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(ROOT)
                .unwrap()
                .to_string_lossy()
                .trim_start_matches('/')
                .to_string()
        })
        .collect();
    let mut layer_of = BTreeMap::new();
    let mut imports = BTreeMap::new();
    for name in &names {
        let layer = layers
            .iter()
            .filter(|(_, prefix)| name.starts_with(prefix.as_str()))
            .max_by_key(|(_, prefix)| prefix.len())
            .map(|(layer, _)| *layer)
            .unwrap_or_else(|| panic!("{name} is in no layer of ARCHITECTURE.md"));
        layer_of.insert(name.clone(), layer);
        let text = fs::read_to_string(Path::new(ROOT).join(name)).unwrap();
        let module = module_of(name, tree.dir);
        let is_mod_file = name.ends_with("/mod.rs") || *name == format!("{}/lib.rs", tree.dir);
        let mut targets = BTreeSet::new();
        // A file's unit tests (`#[cfg(test)] mod tests`, at its end) are not part of
        // the layer: their `super` is the file itself.
        let text = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let code = code_of(text);
        let mut paths = named_paths(&code, &module, is_mod_file);
        if is_mod_file {
            paths.extend(children_named(&code, &module));
        }
        for path in paths {
            if let Some(target) = file_of(&path, &names, tree.dir) {
                if &target != name {
                    targets.insert(target);
                }
            }
        }
        imports.insert(name.clone(), targets);
    }
    (layer_of, imports)
}

/// Fails naming every import of a file from a layer above its own.
fn no_upward_imports(tree: &Tree) {
    let (layer_of, imports) = graph(tree);
    let mut upward = Vec::new();
    for (file, targets) in &imports {
        for target in targets {
            if layer_of[target] > layer_of[file] {
                upward.push(format!(
                    "{file} (layer {}) imports {target} (layer {})",
                    layer_of[file], layer_of[target]
                ));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

/// Fails naming the first circle of files that import each other.
fn no_circles(tree: &Tree) {
    let (_, imports) = graph(tree);
    // Depth-first search; a file met again while still on the path closes a circle.
    fn visit(
        file: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|f| f == file) {
            let mut circle = path[at..].to_vec();
            circle.push(file.to_string());
            return Some(circle);
        }
        if done.contains(file) {
            return None;
        }
        path.push(file.to_string());
        for next in imports.get(file).into_iter().flatten() {
            if let Some(circle) = visit(next, imports, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(file.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for file in imports.keys() {
        if let Some(circle) = visit(file, &imports, &mut Vec::new(), &mut done) {
            panic!("an import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn no_file_of_the_module_imports_from_a_layer_above_its_own() {
    no_upward_imports(&MODULE);
}

#[test]
fn no_files_of_the_module_import_each_other_in_a_circle() {
    no_circles(&MODULE);
}

#[test]
fn no_file_of_the_client_imports_from_a_layer_above_its_own() {
    no_upward_imports(&CLIENT);
}

#[test]
fn no_files_of_the_client_import_each_other_in_a_circle() {
    no_circles(&CLIENT);
}

#[test]
fn the_reader_of_imports_sees_what_a_file_names() {
    let names: BTreeSet<String> = [
        "src/lib.rs",
        "src/ffi/mod.rs",
        "src/ffi/key.rs",
        "src/waiting/mod.rs",
        "src/waiting/timers.rs",
        "src/state.rs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let code = code_of(
        "use crate::{state::MODULE, ffi::{key::OpenKey, Ctx}};\n// crate::reply::Reply\nuse super::timers::start;\nlet s = \"crate::x\";",
    );
    let module = module_of("src/waiting/handoff.rs", "src");
    let files: BTreeSet<String> = named_paths(&code, &module, false)
        .iter()
        .filter_map(|p| file_of(p, &names, "src"))
        .collect();
    let expected: BTreeSet<String> = [
        "src/state.rs",
        "src/ffi/key.rs",
        "src/ffi/mod.rs",
        "src/waiting/timers.rs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(files, expected);
    // The client's files, in a folder of their own.
    let client: BTreeSet<String> = ["client/src/lib.rs", "client/src/machine/mod.rs"]
        .into_iter()
        .map(String::from)
        .collect();
    let module = module_of("client/src/held/renew.rs", CLIENT.dir);
    assert_eq!(module, ["held", "renew"]);
    let named = named_paths(&code_of("use crate::machine::Extend;"), &module, false);
    let files: Vec<String> = named
        .iter()
        .filter_map(|p| file_of(p, &client, CLIENT.dir))
        .collect();
    assert_eq!(files, ["client/src/machine/mod.rs"]);
}
