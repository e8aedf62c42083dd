//! Typed reads of webhook JSON, shared by the Plane and Gitea parsers: every read checks the
//! type and the size, and a wrong one is a reason to ignore the delivery, never a panic. Also
//! `RepoEntry`, the configured repo as the routing sees it.

use serde_json::{Map, Value};

use crate::domain::ids::printable;

pub(super) fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("`{path}` must be an object"))
}

/// A field that may be absent or null.
pub(super) fn field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// A one-line string of at most `max` characters (absent or null → `None`).
pub(super) fn opt_line<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<Option<&'a str>, String> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => {
            if s.chars().count() > max {
                Err(format!("`{path}` is longer than {max} characters"))
            } else if s.chars().any(char::is_control) {
                Err(format!(
                    "`{path}` contains control characters: `{}`",
                    printable(s)
                ))
            } else {
                Ok(Some(s.as_str()))
            }
        }
        Some(_) => Err(format!("`{path}` must be a string")),
    }
}

pub(super) fn req_line<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<&'a str, String> {
    opt_line(m, key, path, max)?.ok_or_else(|| format!("`{path}` is missing"))
}

/// A free text (control characters other than newlines and tabs replaced by spaces).
pub(super) fn opt_text(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<Option<String>, String> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(
            s.chars()
                .take(max)
                .map(|c| {
                    if c.is_control() && c != '\n' && c != '\t' {
                        ' '
                    } else {
                        c
                    }
                })
                .collect(),
        )),
        Some(_) => Err(format!("`{path}` must be a string")),
    }
}

/// A configured repo as the routing sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoEntry<'a> {
    pub name: &'a str,
    pub remote: &'a str,
    pub prefix: &'a str,
    pub plane_project: Option<&'a str>,
    /// `owner/name` on the forge (`repos[].forge_repo`, else read from `remote`), when known.
    pub forge: Option<String>,
}
