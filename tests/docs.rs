//! The contract's citations and the docs' links lead somewhere: every
//! `contract.md "Section"` in a comment, a doc or a message names a heading that
//! docs/contract.md has, no file cites the contract in an older form that names no
//! page (`SPEC "…"`, SPEC.md, "the spec"), and every relative link of a Markdown
//! page reaches a file and, after `#`, one of its headings. Reads the tree; needs no
//! server.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Directories that hold no sources of the project's own.
const SKIPPED: [&str; 9] = [
    "target",
    "node_modules",
    "corpus",
    "artifacts",
    "__pycache__",
    "venv",
    "build",
    "dist",
    "fixtures",
];

fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && !SKIPPED.contains(&name.as_str()) {
                text_files(&path, out);
            }
        } else if name == "Makefile"
            || [".rs", ".py", ".lua", ".md", ".toml", ".sh"]
                .iter()
                .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(ROOT).unwrap().display().to_string()
}

/// The headings of a Markdown page, outside code blocks, as written (without the
/// leading `#`s).
fn headings(page: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(line.trim_start_matches('#').trim().to_string());
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            _ => None,
        })
        .collect()
}

/// The sections a text cites as `contract.md "A"` or `contract.md "A", "B"` (also
/// inside a string literal, with the quotes escaped, and with the first quote on the
/// next line of a comment), with the line of each.
fn citations(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (number, line) in lines.iter().enumerate() {
        let mut rest = *line;
        while let Some(at) = rest.find("contract.md") {
            rest = &rest[at + "contract.md".len()..];
            let mut cursor = rest.trim_start_matches(' ');
            if cursor.is_empty() {
                let next = lines.get(number + 1).map_or("", |next| next.trim_start());
                cursor = next
                    .trim_start_matches(['/', '!', '-', '#', '*'])
                    .trim_start();
            }
            while let Some(quoted) = cursor
                .strip_prefix("\\\"")
                .or_else(|| cursor.strip_prefix('"'))
            {
                let Some(end) = quoted.find('"') else {
                    break;
                };
                found.push((number + 1, quoted[..end].trim_end_matches('\\').to_string()));
                cursor = &quoted[end + 1..];
                match cursor.strip_prefix(", ") {
                    Some(next) => cursor = next,
                    None => break,
                }
            }
        }
    }
    found
}

/// Citations of the contract that name no page: what the code said before the
/// contract was in the repository.
fn unnamed_citations(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        let spec_word = [
            "the spec ",
            "the spec's",
            "the spec.",
            "the spec,",
            "the spec)",
        ]
        .iter()
        .any(|form| lower.contains(form))
            || lower.ends_with("the spec");
        let old_form = [
            "SPEC \"",
            "SPEC \\\"",
            "SPEC.md",
            "(SPEC",
            " SPEC,",
            "SPEC's",
        ]
        .iter()
        .any(|form| line.contains(form))
            || ["-- SPEC:", "// SPEC:", "# SPEC:"]
                .iter()
                .any(|form| line.contains(form));
        if spec_word || old_form {
            found.push((number + 1, line.trim().to_string()));
        }
    }
    found
}

/// Relative links of a Markdown page, `[text](target)`, outside code blocks.
fn links(page: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for (number, line) in page.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") && !target.is_empty() {
                found.push((number + 1, target.to_string()));
            }
            rest = &rest[end..];
        }
    }
    found
}

fn files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    text_files(Path::new(ROOT), &mut files);
    files.sort();
    files
}

#[test]
fn every_citation_of_the_contract_names_one_of_its_sections() {
    let contract = fs::read_to_string(Path::new(ROOT).join("docs/contract.md"))
        .expect("docs/contract.md, the contract every citation names");
    let sections: BTreeSet<String> = headings(&contract).into_iter().collect();
    let this = Path::new(ROOT).join("tests/docs.rs");
    let mut cited = 0;
    let mut wrong = Vec::new();
    for file in files().into_iter().filter(|file| *file != this) {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        for (line, section) in citations(&text) {
            cited += 1;
            if !sections.contains(&section) {
                wrong.push(format!(
                    "{}:{line}: no section \"{section}\"",
                    relative(&file)
                ));
            }
        }
        for (line, text) in unnamed_citations(&text) {
            wrong.push(format!(
                "{}:{line}: cites the contract without naming docs/contract.md: {text}",
                relative(&file)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "citations of docs/contract.md that lead nowhere (its sections: {sections:?}):\n{}",
        wrong.join("\n")
    );
    assert!(
        cited >= 20,
        "only {cited} citations found: is the parser blind?"
    );
}

#[test]
fn every_relative_link_of_the_docs_reaches_its_file_and_heading() {
    let mut wrong = Vec::new();
    for page in files()
        .into_iter()
        .filter(|file| file.extension().is_some_and(|e| e == "md"))
    {
        let text = fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let at = format!("{}:{line}: {target}", relative(&page));
            if !file.exists() {
                wrong.push(format!("{at}: no such file"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let anchors: Vec<String> = headings(&fs::read_to_string(&file).unwrap())
                .iter()
                .map(|heading| slug(heading))
                .collect();
            if !anchors.iter().any(|a| a == anchor) {
                wrong.push(format!("{at}: no such heading"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "links that lead nowhere:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_parsers_read_what_the_code_writes() {
    assert_eq!(
        citations("-- contract.md \"Waiting\", \"Without the module\": grants"),
        vec![(1, "Waiting".into()), (1, "Without the module".into())]
    );
    assert_eq!(
        citations(r#"  "(docs/contract.md \"Without the module\"); load""#),
        vec![(1, "Without the module".into())]
    );
    assert_eq!(
        citations("//! what the contract allows (contract.md\n//! \"Commands\").\n"),
        vec![(1, "Commands".into())]
    );
    assert!(citations("see [the contract](docs/contract.md)").is_empty());
    assert_eq!(unnamed_citations("// SPEC \"Errors\": …").len(), 1);
    assert_eq!(unnamed_citations("against the spec's promises").len(), 1);
    assert!(unnamed_citations("pub const SPEC: Spec = Spec {").is_empty());
    assert!(unnamed_citations("    acquire::SPEC,").is_empty());
    assert!(unnamed_citations("for the key spec, Redis 7.0+").is_empty());
    assert_eq!(slug("LOCK.ACQUIRE"), "lockacquire");
    assert_eq!(
        slug("Replication, persistence, cluster, ACL"),
        "replication-persistence-cluster-acl"
    );
    assert_eq!(
        slug("The lease: what the holder can trust"),
        "the-lease-what-the-holder-can-trust"
    );
    assert_eq!(
        links("[a](commands.md#fencing-tokens) and [b](https://x.org/y#z)"),
        vec![(1, "commands.md#fencing-tokens".into())]
    );
}
