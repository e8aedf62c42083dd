//! README.md and docs/runbook.md against the binary (issue 12): every `orch …` command they
//! show, in a shell block, a transcript (`$ orch …`) or inline code, is run in a temp world with
//! its placeholders filled in, and must get past the command line: a documented command that
//! clap refuses (a flag renamed, a value not accepted) is a stale doc.

use std::collections::BTreeSet;

use crate::support::World;

/// Every `orch …` command line the file documents, as written, and whether it is an inline
/// span of prose (where `orch approve` may name the command rather than show a call).
fn documented(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(f) = t.strip_prefix("```") {
            fence = if fence.is_some() {
                None
            } else {
                Some(f.to_string())
            };
            continue;
        }
        match fence.as_deref() {
            Some("sh") => {
                let t = t.trim_start_matches("$ ");
                for prefix in ["orch ", "o ", "os "] {
                    if let Some(rest) = t.strip_prefix(prefix) {
                        out.push((format!("orch {rest}"), false));
                    }
                }
            }
            Some(_) => {
                if let Some(rest) = t.strip_prefix("$ orch ") {
                    out.push((format!("orch {rest}"), false));
                }
            }
            None => {
                // Inline code spans of prose and tables.
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("orch ") {
                        out.push((span.to_string(), true));
                    }
                }
            }
        }
    }
    out
}

/// Split like a shell: whitespace, with '…' and "…" quoting.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The arguments to run, placeholders filled in; `None` for a line that is not one command.
fn runnable(line: &str, wi: &str, file: &str) -> Option<Vec<String>> {
    // Drop a trailing comment, a pipe into another program, what follows a `;`, and an input
    // redirection.
    let line = line
        .split("  #")
        .next()?
        .split(" | ")
        .next()?
        .split(';')
        .next()?
        .split(" < ")
        .next()?
        .trim();
    if line.contains("$(") || line.contains("<<") || line.contains("&&") || line.ends_with('\\') {
        return None;
    }
    let mut w = words(line);
    w.remove(0);
    let mut out = Vec::new();
    let mut prev = String::new();
    for a in w {
        let a = a.trim_end_matches([',', '.', ';', ':']).to_string();
        let filled = match a.as_str() {
            "…" | "\"…\"" | "TEXT" | "T" => "x".to_string(),
            "R" | "<repo>" | "REPO" => "shop".to_string(),
            "STAGE" | "S" | "<stage>" | "<current" => "development".to_string(),
            "stage>" => continue,
            "ROLE" => "developer".to_string(),
            "ADDR" => "127.0.0.1:0".to_string(),
            "FILE" | "F" => file.to_string(),
            "DIR" => std::env::temp_dir()
                .join(format!("orch-doc-{}", std::process::id()))
                .display()
                .to_string(),
            "L" | "LABEL" => "bug".to_string(),
            "ID" => "SHOP-99".to_string(),
            "WHEN" | "24h|7d|DATE" => "7d".to_string(),
            "<shell>" | "bash|zsh|fish" | "bash\\|zsh\\|fish" => "bash".to_string(),
            "plane|gitea" | "plane\\|gitea" | "[plane\\|gitea]" => "plane".to_string(),
            "<delivery-id>" => "d-1".to_string(),
            "'Name:" => continue,
            "value']…" => continue,
            "[--header" => continue,
            "N" => "1".to_string(),
            s if s.starts_with('<') && s.ends_with('>') && s.contains("id") => "1".to_string(),
            s if s.starts_with('<') && s.ends_with('>') => wi.to_string(),
            "<job-id" | "\\|" | "|" | "WI>" => continue,
            s if s.starts_with('[') || s.ends_with(']') || s.ends_with("]…") => continue,
            s if s.contains("|") => continue,
            s if is_work_item(s) => wi.to_string(),
            s if s.bytes().all(|b| b.is_ascii_digit())
                && ["run", "retry", "logs"].contains(&prev.as_str()) =>
            {
                "1".to_string()
            }
            s if s.ends_with("-f") && s.len() > 2 && !s.starts_with('-') => continue,
            s => s.to_string(),
        };
        prev = filled.clone();
        out.push(filled);
    }
    Some(out)
}

fn is_work_item(s: &str) -> bool {
    let Some((p, n)) = s.split_once('-') else {
        return false;
    };
    !p.is_empty()
        && p.bytes().all(|b| b.is_ascii_uppercase())
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
}

/// What clap says when it refuses a command line.
const REFUSED: [&str; 7] = [
    "unexpected argument",
    "unrecognized subcommand",
    "invalid value",
    "required arguments were not provided",
    "a value is required",
    "cannot be used with",
    "no config found",
];

#[test]
fn every_command_in_readme_and_runbook_gets_past_the_command_line() {
    let w = World::new();
    w.append_config("agent:\n  argv: [\"false\"]\n");
    let wi = w.add("Documented", &[]);
    let file = w.dir.path().join("body.json");
    std::fs::write(&file, "{}").unwrap();
    let file = file.display().to_string();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut ran = BTreeSet::new();
    let mut stale = Vec::new();
    for doc in ["README.md", "docs/runbook.md"] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        for (line, prose) in documented(&text) {
            let Some(mut args) = runnable(&line, &wi, &file) else {
                continue;
            };
            let Some(sub) = args.first().cloned() else {
                continue;
            };
            // Long-running or world-building commands are checked by their own tests; here
            // they only have to parse.
            if ["serve", "demo", "init"].contains(&sub.as_str()) || args.iter().any(|a| a == "-f") {
                args.push("--help".into());
            }
            if !ran.insert(args.clone()) {
                continue;
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = w.orch(&refs);
            // In prose, `orch approve` names the command: its arguments are not shown.
            let named = prose && r.stderr.contains("required arguments were not provided");
            if r.code == 2 && !named && REFUSED.iter().any(|m| r.stderr.contains(m)) {
                stale.push(format!(
                    "{doc}: `{line}` → orch {}\n  {}",
                    args.join(" "),
                    r.stderr.lines().next().unwrap_or("")
                ));
            }
        }
    }
    assert!(ran.len() >= 40, "too few commands found: {ran:?}");
    assert!(
        stale.is_empty(),
        "documented commands refused:\n{}",
        stale.join("\n")
    );
}
