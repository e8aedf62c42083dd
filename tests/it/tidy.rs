//! Tidy: the layering rules of `docs/ARCHITECTURE.md`, checked on the source text of `src/`.
//!
//! - `domain/` is pure: it names none of `crate::{db, ext, ops, cmd, serve, cli, ctx}`.
//! - Only `ext/proc/` spawns processes (`Command::new`, `fork`, `exec*`).
//! - Only `db/` holds SQL.
//! - No import cycle among the files of `src/` (a module never imports a module that imports
//!   it back, directly or around a longer loop).
//! - No non-test file is longer than 700 lines unless its `//!` doc says why
//!   (a line starting with `//! Long file:`).
//!
//! The checks read the files with a small lexer (comments and string literals told apart from
//! code) rather than parsing Rust; the unit tests at the bottom prove each check fails on a
//! tree that breaks its rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file, lexed: the code with comments removed and string literals blanked, and the
/// string literals on their own.
struct Source {
    /// Path relative to `src/`, with `/` separators (`ops/advance.rs`).
    rel: String,
    /// The module path (`["ops", "advance"]`; `[]` for `lib.rs`).
    module: Vec<String>,
    code: String,
    strings: Vec<String>,
    /// Lines outside `#[cfg(test)]` modules.
    non_test_lines: usize,
    doc: String,
}

/// Split `text` into code (comments dropped, string contents replaced by spaces) and string
/// literals. Handles `//`, nested `/* */`, `"…"` with escapes, `r#"…"#`, byte strings and char
/// literals (told apart from lifetimes).
fn lex(text: &str) -> (String, Vec<String>) {
    let b = text.as_bytes();
    let mut code = String::with_capacity(text.len());
    let mut strings = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        code.push('\n');
                    }
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings: r"…", r#"…"#, br#"…"#.
        let raw_start = if c == b'r' && matches!(b.get(i + 1), Some(b'"') | Some(b'#')) {
            Some(i + 1)
        } else if c == b'b'
            && b.get(i + 1) == Some(&b'r')
            && matches!(b.get(i + 2), Some(b'"') | Some(b'#'))
        {
            Some(i + 2)
        } else {
            None
        };
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if let (Some(mut j), false) = (raw_start, ident_before) {
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                let start = j + 1;
                let mut k = start;
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                while k < b.len() && !b[k..].starts_with(&close) {
                    k += 1;
                }
                strings.push(String::from_utf8_lossy(&b[start..k.min(b.len())]).into_owned());
                code.push_str("\"\"");
                for &ch in &b[start..k.min(b.len())] {
                    if ch == b'\n' {
                        code.push('\n');
                    }
                }
                i = (k + close.len()).min(b.len());
                continue;
            }
        }
        if c == b'"' {
            let mut k = i + 1;
            let mut s = Vec::new();
            while k < b.len() && b[k] != b'"' {
                if b[k] == b'\\' && k + 1 < b.len() {
                    s.push(b[k]);
                    s.push(b[k + 1]);
                    k += 2;
                    continue;
                }
                s.push(b[k]);
                k += 1;
            }
            code.push_str("\"\"");
            code.extend(s.iter().filter(|&&ch| ch == b'\n').map(|_| '\n'));
            strings.push(String::from_utf8_lossy(&s).into_owned());
            i = k + 1;
            continue;
        }
        if c == b'\'' {
            // A char literal is `'x'` or `'\…'`; anything else is a lifetime or a label.
            if b.get(i + 1) == Some(&b'\\') {
                let mut k = i + 2;
                while k < b.len() && b[k] != b'\'' {
                    k += 1;
                }
                code.push_str("' '");
                i = k + 1;
                continue;
            }
            let ch_len = text[i + 1..]
                .chars()
                .next()
                .map(char::len_utf8)
                .unwrap_or(0);
            if ch_len > 0 && b.get(i + 1 + ch_len) == Some(&b'\'') {
                code.push_str("' '");
                i += 2 + ch_len;
                continue;
            }
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        code.push(ch);
        i += ch.len_utf8();
    }
    (code, strings)
}

/// The byte range of every `#[cfg(test)]` item (a `mod … { … }` block), found by brace matching
/// in lexed code.
fn test_ranges(code: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(test)]") {
        let start = from + p;
        let Some(open_rel) = code[start..].find(['{', ';']) else {
            break;
        };
        let open = start + open_rel;
        if code.as_bytes()[open] == b';' {
            out.push((start, open + 1));
            from = open + 1;
            continue;
        }
        let mut depth = 0;
        let mut end = code.len();
        for (k, ch) in code[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((start, end));
        from = end;
    }
    out
}

fn module_of(rel: &str) -> Vec<String> {
    let trimmed = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod") | Some("lib") | Some("main")
    ) {
        parts.pop();
    }
    parts
}

fn load(rel: &str, text: &str) -> Source {
    let (code, strings) = lex(text);
    let ranges = test_ranges(&code);
    let mut kept = String::with_capacity(code.len());
    let mut last = 0;
    for (s, e) in &ranges {
        kept.push_str(&code[last..*s]);
        last = *e;
    }
    kept.push_str(&code[last..]);
    // Count lines of the original text outside test modules.
    let test_lines: usize = ranges
        .iter()
        .map(|(s, e)| code[*s..*e].matches('\n').count())
        .sum();
    let doc = text
        .lines()
        .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Source {
        rel: rel.to_string(),
        module: module_of(rel),
        non_test_lines: text.lines().count().saturating_sub(test_lines),
        code: kept,
        strings,
        doc,
    }
}

/// Files that are tests as a whole: `tests.rs` modules declared under `#[cfg(test)]`.
fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel == "tests.rs"
}

fn read_tree(root: &Path) -> Vec<Source> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                // `main.rs` is the binary crate, not a module of the library.
                if rel == "main.rs" || is_test_file(&rel) {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                out.push(load(&rel, &text));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Expand a `use` tree (`a::{b, c::{d as e}}`) into its paths.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut base = prefix.to_vec();
        base.extend(head);
        let mut depth = 0;
        let mut cur = String::new();
        for ch in inner.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&cur, &base, out);
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(ch);
        }
        expand_use(&cur, &base, out);
        return;
    }
    let name = tree.split(" as ").next().unwrap_or(tree);
    let mut path = prefix.to_vec();
    path.extend(
        name.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "self")
            .map(str::to_string),
    );
    out.push(path);
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every module path a file refers to: `use crate|super|self::…` trees, inline `crate::a::b`
/// and `super::a` paths, and the bare `child::…` paths of a parent that declares `mod child;`.
fn references(src: &Source) -> Vec<Vec<String>> {
    let code = &src.code;
    let mut out = Vec::new();
    let parent: Vec<String> = src.module[..src.module.len().saturating_sub(1)].to_vec();
    let mut from = 0;
    while let Some(p) = code[from..].find("use ") {
        let at = from + p;
        from = at + 4;
        if at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let body: String = code[at + 4..at + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let (base, rest) = if let Some(r) = body.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if let Some(r) = body.strip_prefix("super::") {
            (parent.clone(), r)
        } else if let Some(r) = body.strip_prefix("self::") {
            (src.module.clone(), r)
        } else {
            continue;
        };
        expand_use(rest, &base, &mut out);
    }
    for (kw, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
        let mut from = 0;
        while let Some(p) = code[from..].find(kw) {
            let at = from + p;
            from = at + kw.len();
            if at > 0 && (is_ident(code.as_bytes()[at - 1]) || code.as_bytes()[at - 1] == b':') {
                continue;
            }
            let tail: String = code[at + kw.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut path = base.clone();
            path.extend(
                tail.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            out.push(path);
        }
    }
    // A parent that declares `mod child;` and writes `child::x`.
    let mut from = 0;
    while let Some(p) = code[from..].find("mod ") {
        let at = from + p;
        from = at + 4;
        if at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue;
        }
        let name: String = code[at + 4..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = code[at + 4..].trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with(';') {
            continue;
        }
        let needle = format!("{name}::");
        let bytes = code.as_bytes();
        let used = code
            .match_indices(&needle)
            .any(|(k, _)| k == 0 || !(is_ident(bytes[k - 1]) || bytes[k - 1] == b':'));
        if used {
            let mut path = src.module.clone();
            path.push(name);
            out.push(path);
        }
    }
    out
}

/// The file-level import graph: file → files it refers to.
fn graph(files: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<Vec<String>, &str> = files
        .iter()
        .map(|f| (f.module.clone(), f.rel.as_str()))
        .collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let edges = g.entry(f.rel.clone()).or_default();
        for path in references(f) {
            // The longest prefix of the path that is a module file.
            let target = (0..=path.len())
                .rev()
                .find_map(|k| by_module.get(&path[..k]).copied());
            if let Some(t) = target
                && t != f.rel
            {
                edges.insert(t.to_string());
            }
        }
    }
    g
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

const SQL_MARKERS: &[&str] = &[
    "SELECT ",
    "INSERT INTO",
    "INSERT OR ",
    "DELETE FROM",
    "CREATE TABLE",
    "CREATE INDEX",
    "ALTER TABLE",
    "PRAGMA ",
    "BEGIN IMMEDIATE",
];

fn is_sql(s: &str) -> bool {
    SQL_MARKERS.iter().any(|m| s.contains(m)) || (s.contains("UPDATE ") && s.contains(" SET "))
}

const SPAWNS: &[&str] = &[
    "Command::new",
    "process::Command",
    "fork(",
    "execv",
    "execvp",
    "posix_spawn",
];

const PURE_FORBIDS: &[&str] = &["db", "ext", "ops", "cmd", "serve", "cli", "ctx"];

/// Every violation in `files`, one line each.
fn violations(files: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    let g = graph(files);
    for f in files {
        let top = f.module.first().map(String::as_str).unwrap_or("");
        if top == "domain" {
            for target in g.get(&f.rel).into_iter().flatten() {
                let t = module_of(target);
                if let Some(first) = t.first()
                    && PURE_FORBIDS.contains(&first.as_str())
                {
                    out.push(format!(
                        "{}: domain/ is pure but names `crate::{first}` ({target})",
                        f.rel
                    ));
                }
            }
        }
        let in_proc = f.rel.starts_with("ext/proc/") || f.rel == "ext/proc.rs";
        if !in_proc {
            for s in SPAWNS {
                if f.code.contains(s) {
                    out.push(format!(
                        "{}: spawns a process (`{s}`) outside ext/proc",
                        f.rel
                    ));
                }
            }
        }
        if top != "db" {
            for s in &f.strings {
                if is_sql(s) {
                    let line: String = s.chars().take(60).collect();
                    out.push(format!("{}: SQL outside db/: {line:?}", f.rel));
                }
            }
        }
        if f.non_test_lines > 700 && !f.doc.contains("//! Long file:") {
            out.push(format!(
                "{}: {} lines outside tests (over 700) and no `//! Long file:` reason at its top",
                f.rel, f.non_test_lines
            ));
        }
    }
    for c in cycles(&g) {
        out.push(format!("import cycle: {}", c.join(" → ")));
    }
    out
}

/// Every failpoint `orch debug failpoints` lists is reached somewhere, and every place that
/// hits one names a listed point: the kill matrix arms each name and relies on both.
#[test]
fn every_failpoint_is_listed_and_placed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_tree(&root);
    let listed: BTreeSet<String> = files
        .iter()
        .find(|f| f.rel == "ext/failpoint.rs")
        .expect("ext/failpoint.rs")
        .strings
        .iter()
        .filter(|s| {
            s.contains('.')
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'-')
        })
        .cloned()
        .collect();
    assert!(listed.len() >= 25, "{listed:?}");
    let mut placed = BTreeSet::new();
    for f in files.iter().filter(|f| f.rel != "ext/failpoint.rs") {
        let text = std::fs::read_to_string(root.join(&f.rel)).unwrap();
        for (i, _) in text.match_indices("failpoint::hit(\"") {
            let rest = &text[i + "failpoint::hit(\"".len()..];
            placed.insert(rest[..rest.find('"').unwrap()].to_string());
        }
        // `worktree::record_group(ctx, job, attempt, "<point>")` hits its point on start.
        for (i, _) in text.match_indices("record_group(") {
            let rest = &text[i..];
            let call = &rest[..rest.find(')').unwrap_or(rest.len())];
            if let Some(q) = call.find('"') {
                let name = &call[q + 1..];
                if let Some(end) = name.find('"') {
                    placed.insert(name[..end].to_string());
                }
            }
        }
    }
    let unplaced: Vec<_> = listed.difference(&placed).collect();
    let unlisted: Vec<_> = placed.difference(&listed).collect();
    assert!(unplaced.is_empty(), "listed but never hit: {unplaced:?}");
    assert!(unlisted.is_empty(), "hit but not listed: {unlisted:?}");
}

#[test]
fn the_source_tree_keeps_its_boundaries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_tree(&root);
    assert!(files.len() > 40, "read only {} files", files.len());
    let v = violations(&files);
    assert!(v.is_empty(), "boundaries broken:\n{}", v.join("\n"));
}

// ---- the checker itself ----

fn tree(files: &[(&str, &str)]) -> Vec<Source> {
    files.iter().map(|(rel, text)| load(rel, text)).collect()
}

#[test]
fn a_domain_file_naming_the_database_is_caught() {
    let v = violations(&tree(&[
        (
            "domain/gate.rs",
            "use crate::db::tasks::TaskRow;\nfn f() {}\n",
        ),
        ("db/tasks.rs", "pub struct TaskRow;\n"),
    ]));
    assert!(v.iter().any(|l| l.contains("domain/ is pure")), "{v:?}");
    // Naming it inline is the same, but a comment or a string is not.
    let v = violations(&tree(&[
        ("domain/gate.rs", "fn f() { crate::ext::git::x(); }\n"),
        ("ext/git.rs", "pub fn x() {}\n"),
    ]));
    assert_eq!(v.len(), 1, "{v:?}");
    let v = violations(&tree(&[
        (
            "domain/gate.rs",
            "//! see `crate::db`\n/// uses crate::ops\nfn f() -> &'static str { \"crate::db\" }\n",
        ),
        ("db/mod.rs", ""),
        ("ops/mod.rs", ""),
    ]));
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_spawn_outside_ext_proc_is_caught() {
    let v = violations(&tree(&[(
        "ops/job.rs",
        "fn f() { std::process::Command::new(\"git\").spawn(); }\n",
    )]));
    assert!(v.iter().any(|l| l.contains("spawns a process")), "{v:?}");
    let v = violations(&tree(&[(
        "ext/proc/cmd.rs",
        "fn f() { std::process::Command::new(\"git\"); }\n",
    )]));
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn sql_outside_db_is_caught_and_raw_strings_count() {
    let v = violations(&tree(&[(
        "ops/queue.rs",
        "fn f(c: &C) { c.execute(r#\"UPDATE jobs SET status = 'x'\"#, []); }\n",
    )]));
    assert!(v.iter().any(|l| l.contains("SQL outside db/")), "{v:?}");
    let v = violations(&tree(&[(
        "db/jobs.rs",
        "const Q: &str = \"SELECT id FROM jobs\";\n",
    )]));
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn an_import_cycle_is_caught_whatever_its_length() {
    let v = violations(&tree(&[
        ("ops/a.rs", "use crate::ops::b::X;\npub struct Y;\n"),
        ("ops/b.rs", "use crate::ops::c::Z;\npub struct X;\n"),
        (
            "ops/c.rs",
            "pub struct Z; fn f() { let _ = crate::ops::a::Y; }\n",
        ),
    ]));
    assert!(
        v.iter()
            .any(|l| l.contains("import cycle: ops/a.rs → ops/b.rs → ops/c.rs")),
        "{v:?}"
    );
    // Grouped use trees and `super::` count too.
    let v = violations(&tree(&[
        ("ops/mod.rs", "pub mod a;\npub mod b;\n"),
        ("ops/a.rs", "use super::{b::X, c};\npub struct Y;\n"),
        ("ops/b.rs", "use crate::{ops::a::Y};\npub struct X;\n"),
    ]));
    assert!(v.iter().any(|l| l.contains("import cycle")), "{v:?}");
    // A one-way dependency is fine; so is a test module importing back.
    let v = violations(&tree(&[
        ("ops/a.rs", "use crate::ops::b::X;\n"),
        (
            "ops/b.rs",
            "pub struct X;\n#[cfg(test)]\nmod tests {\n    use crate::ops::a;\n}\n",
        ),
    ]));
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_long_file_needs_a_reason() {
    let body = "fn f() {}\n".repeat(710);
    let v = violations(&tree(&[("ops/big.rs", &body)]));
    assert!(v.iter().any(|l| l.contains("over 700")), "{v:?}");
    let with_reason = format!("//! Big.\n//! Long file: one state machine.\n{body}");
    assert!(violations(&tree(&[("ops/big.rs", &with_reason)])).is_empty());
    // Test modules do not count.
    let tests = format!(
        "fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        "fn g() {}\n".repeat(900)
    );
    assert!(violations(&tree(&[("ops/big.rs", &tests)])).is_empty());
}

#[test]
fn the_lexer_tells_chars_from_lifetimes_and_keeps_string_contents() {
    let (code, strings) = lex("fn f<'a>(x: &'a str) -> char { let _ = \"a//b\"; '\"' }\n");
    assert!(code.contains("&'a str"), "{code}");
    assert_eq!(strings, vec!["a//b".to_string()]);
    assert!(!code.contains("a//b"));
}
