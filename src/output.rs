//! The only writer to stdout: `--json` documents, comfy-table tables and plain lines. Errors go
//! to stderr as one `error: …` line with the whole context chain.

use std::io::Write;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

/// Print one JSON document (the `--json` contract: one object on stdout).
pub fn json<T: Serialize>(value: &T) {
    let mut out = std::io::stdout().lock();
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            let _ = writeln!(out, "{s}");
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot encode JSON output: {e}");
        }
    }
}

/// Print plain text lines.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Print a table; an empty table prints `empty` instead so the operator sees it ran.
pub fn table(title: Option<&str>, headers: &[&str], rows: Vec<Vec<String>>, empty: &str) {
    let mut out = std::io::stdout().lock();
    if let Some(t) = title {
        let _ = writeln!(out, "{t}");
    }
    if rows.is_empty() {
        let _ = writeln!(out, "  {empty}");
        return;
    }
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(headers.to_vec());
    for r in rows {
        table.add_row(r);
    }
    let _ = writeln!(out, "{table}");
}

/// Print an error chain on stderr.
pub fn error(err: &anyhow::Error) {
    let _ = writeln!(std::io::stderr().lock(), "error: {err:#}");
}
