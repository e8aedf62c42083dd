//! The only writer to stdout: `--json` documents, comfy-table tables and plain lines. Errors go
//! to stderr as one `error: …` line with the whole context chain, and log lines through
//! [`LogWriter`].
//!
//! Everything written here passes through `domain::redact::redact_urls` first: a remote URL
//! with credentials is configured text that comes back in errors, job rows and git's output,
//! and this is the one door they all leave by (design §9: secrets are redacted in URLs).

use std::io::Write;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use crate::domain::redact::redact_urls;

/// Print one JSON document (the `--json` contract: one object on stdout).
pub fn json<T: Serialize>(value: &T) {
    let mut out = std::io::stdout().lock();
    match serde_json::to_string_pretty(value) {
        // The mask holds no character JSON escapes, so the document stays valid.
        Ok(s) => {
            let _ = writeln!(out, "{}", redact_urls(&s));
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot encode JSON output: {e}");
        }
    }
}

/// Write a generated document (completions, the man page) as it is.
pub fn raw(bytes: &[u8]) {
    let _ = std::io::stdout().lock().write_all(bytes);
}

/// Print text as it is (a log), masked, flushed at once (a follower shows lines as they come).
pub fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(redact_urls(text).as_bytes());
    let _ = out.flush();
}

/// Print plain text lines.
pub fn line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", redact_urls(text));
}

/// The longest cell a table shows when the width of the output is unknown (a pipe without
/// `COLUMNS`): a 16,000-character title is cut, not printed whole.
const MAX_CELL: usize = 200;

/// The width tables fit: `COLUMNS` when it is a number, else the terminal's (comfy-table asks
/// the terminal itself when stdout is one), else none.
fn columns() -> Option<u16> {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|c| *c >= 20)
}

/// One table cell as shown: its first line only, at most `max` characters, cut with `…`.
pub fn cell(text: &str, max: usize) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let more = lines.next().is_some();
    let n = first.chars().count();
    if n <= max && !more {
        return first.to_string();
    }
    let keep = if n <= max { n } else { max.saturating_sub(1) };
    let mut out: String = first.chars().take(keep).collect();
    out.push('…');
    out
}

/// Print a table; an empty table prints `empty` instead so the operator sees it ran. The table
/// fits the terminal (or `COLUMNS`): a cell that does not fit is cut with `…`, never wrapped,
/// so one long title or error cannot turn a row into hundreds of lines.
pub fn table(title: Option<&str>, headers: &[&str], rows: Vec<Vec<String>>, empty: &str) {
    let mut out = std::io::stdout().lock();
    if let Some(t) = title {
        let _ = writeln!(out, "{}", redact_urls(t));
    }
    if rows.is_empty() {
        let _ = writeln!(out, "  {empty}");
        return;
    }
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_truncation_indicator("…")
        .set_header(headers.to_vec());
    if let Some(w) = columns() {
        table.set_width(w);
    }
    for r in rows {
        // Cell by cell, so the columns are measured on what is shown.
        let mut row = comfy_table::Row::from(r.iter().map(|c| cell(&redact_urls(c), MAX_CELL)));
        row.max_height(1);
        table.add_row(row);
    }
    let _ = writeln!(out, "{table}");
}

/// The `--json` form of an error, on stdout: `{"schema_version":1,"error":{"code":…,"message":…}}`
/// (the message is the same text as the `error:` line on stderr).
pub fn json_error(code: u8, message: &str) {
    json(&serde_json::json!({
        "schema_version": 1,
        "error": { "code": code, "message": message },
    }));
}

/// Print an error chain on stderr.
pub fn error(err: &anyhow::Error) {
    let text = format!("{err:#}");
    let _ = writeln!(std::io::stderr().lock(), "error: {}", redact_urls(&text));
}

/// The writer of the log: stderr, with credentials in URLs masked. `tracing`'s fmt layer
/// formats one event into a buffer and writes it whole, so each `write` is one complete line.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_masked(&mut std::io::stderr().lock(), buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Write `buf` to `out` with credentials in URLs masked; all of `buf` counts as written. Text
/// that is not UTF-8 is written lossily rather than dropped.
fn write_masked(out: &mut impl Write, buf: &[u8]) -> std::io::Result<usize> {
    let text = String::from_utf8_lossy(buf);
    out.write_all(redact_urls(&text).as_bytes())?;
    Ok(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line_cut_with_an_ellipsis() {
        assert_eq!(cell("short", 10), "short");
        assert_eq!(cell("0123456789abc", 10), "012345678…");
        assert_eq!(cell("first\nsecond", 10), "first…");
        assert_eq!(cell(&"é".repeat(300), 5).chars().count(), 5);
        assert_eq!(cell("", 3), "");
    }

    #[test]
    fn a_log_line_is_written_whole_and_masked() {
        let mut out = Vec::new();
        let line = b"WARN alert: cloning https://u:t0ken@h/x.git failed\n";
        assert_eq!(write_masked(&mut out, line).unwrap(), line.len());
        assert_eq!(out, b"WARN alert: cloning https://***@h/x.git failed\n");
        out.clear();
        let odd = b"\xff https://u:t@h\n";
        assert_eq!(write_masked(&mut out, odd).unwrap(), odd.len());
        assert_eq!(String::from_utf8(out).unwrap(), "\u{fffd} https://***@h\n");
    }
}
