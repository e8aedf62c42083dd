//! Identifiers that come from outside (command line, tracker, config) and the rules that
//! validate them before they reach SQL, git or a path (design §9). Pure; the patterns are written
//! out by hand because they are small and a regex engine would cost start-up time.

use std::fmt;

/// A validated work item id such as `SHOP-7` (`^[A-Z][A-Z0-9]{0,15}-[0-9]{1,9}$`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkItem(String);

/// A database row id of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskId(pub i64);

/// A database row id of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobId(pub i64);

impl WorkItem {
    pub fn parse(s: &str) -> Result<WorkItem, String> {
        if valid_work_item(s) {
            Ok(WorkItem(s.to_string()))
        } else {
            Err(format!(
                "invalid work item id `{}`: expected an upper-case prefix, a dash and a number, like `SHOP-7`",
                printable(s)
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The project prefix (`SHOP` of `SHOP-7`).
    pub fn prefix(&self) -> &str {
        self.0.split_once('-').map(|(p, _)| p).unwrap_or(&self.0)
    }
}

impl fmt::Display for WorkItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `^[A-Z][A-Z0-9]{0,15}-[0-9]{1,9}$`
pub fn valid_work_item(s: &str) -> bool {
    let Some((prefix, num)) = s.split_once('-') else {
        return false;
    };
    valid_prefix(prefix)
        && !num.is_empty()
        && num.len() <= 9
        && num.bytes().all(|b| b.is_ascii_digit())
}

/// A work item prefix: `^[A-Z][A-Z0-9]{0,15}$`.
pub fn valid_prefix(p: &str) -> bool {
    let b = p.as_bytes();
    !b.is_empty()
        && b.len() <= 16
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// A task reference typed by an operator: a work item, or its tombstone form
/// `SHOP-7#cancelled-12` (design §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRef {
    WorkItem(WorkItem),
    Tombstone(String),
}

impl TaskRef {
    pub fn parse(s: &str) -> Result<TaskRef, String> {
        if let Some((wi, rest)) = s.split_once("#cancelled-")
            && valid_work_item(wi)
            && !rest.is_empty()
            && rest.len() <= 18
            && rest.bytes().all(|b| b.is_ascii_digit())
        {
            return Ok(TaskRef::Tombstone(s.to_string()));
        }
        WorkItem::parse(s).map(TaskRef::WorkItem)
    }
}

pub fn tombstone(wi: &str, task_id: TaskId) -> String {
    format!("{wi}#cancelled-{}", task_id.0)
}

/// A branch-safe ASCII slug of a title: lower case letters and digits joined by single dashes,
/// at most 40 characters, `task` when nothing is left.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
            if out.len() >= 40 {
                break;
            }
        } else {
            dash = true;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "task".to_string()
    } else {
        out
    }
}

/// The task branch name, fixed when the task is added: `feature/<WI>-<slug>`.
pub fn branch_name(wi: &WorkItem, title: &str) -> String {
    format!("feature/{}-{}", wi, slug(title))
}

/// Render outside text safely inside a one-line message: control characters are escaped and
/// the text is cut at 80 characters.
pub fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_default).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// The longest title or reason an operator may type (characters).
pub const MAX_LINE: usize = 1000;

/// Bidirectional formatting characters: they make a line display in another order than it
/// reads (a reason that looks harmless in `orch task show` but says something else).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Text an operator types that is stored and shown in one table cell (`--title`, `--reason`,
/// `--by`): one non-empty line, no control or bidirectional formatting character, at most
/// `max` characters. The error names the flag.
pub fn check_line(flag: &str, s: &str, max: usize) -> Result<(), String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("`{flag}` must be non-empty"));
    }
    if t.contains(['\n', '\r']) {
        return Err(format!("`{flag}` must be one line"));
    }
    if let Some(c) = t.chars().find(|c| c.is_control() || is_bidi_control(*c)) {
        return Err(format!(
            "`{flag}` contains the control character U+{:04X}; type plain text",
            c as u32
        ));
    }
    let n = t.chars().count();
    if n > max {
        return Err(format!(
            "`{flag}` is {n} characters long; at most {max} are kept"
        ));
    }
    Ok(())
}

/// The name of the person behind an operator's command (`--by`, `SUDO_USER`, `USER`).
pub fn check_person(s: &str) -> Result<(), String> {
    check_line("--by", s, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_text_is_one_plain_line_of_bounded_length() {
        for (s, ok) in [
            ("fix the flaky test", true),
            ("", false),
            ("   ", false),
            ("two\nlines", false),
            ("tab\there", false),
            ("evil \u{202E}txt.exe", false),
            ("isolate \u{2067}x", false),
            ("caf\u{e9} \u{1F600}", true),
        ] {
            assert_eq!(check_line("--reason", s, MAX_LINE).is_ok(), ok, "{s:?}");
        }
        assert!(check_line("--title", &"x".repeat(MAX_LINE), MAX_LINE).is_ok());
        let e = check_line("--title", &"x".repeat(MAX_LINE + 1), MAX_LINE).unwrap_err();
        assert!(e.contains("1001 characters"), "{e}");
    }

    #[test]
    fn work_item_ids() {
        for ok in ["SHOP-7", "A-1", "ORCH124-123456789", "ABCDEFGHIJKLMNOP-1"] {
            assert!(valid_work_item(ok), "{ok}");
        }
        for bad in [
            "",
            "demo-1",
            "../x",
            "A-1;rm -rf /",
            "SHOP",
            "SHOP-",
            "-1",
            "1A-1",
            "SHOP-1234567890",
            "ABCDEFGHIJKLMNOPQ-1",
            "SHOP-7 ",
            "SHOP-7\n",
            "SHÖP-7",
            "SHOP-7#cancelled-1",
        ] {
            assert!(!valid_work_item(bad), "{bad:?}");
        }
    }

    #[test]
    fn tombstones_parse_and_bad_refs_do_not() {
        assert_eq!(
            TaskRef::parse("SHOP-7#cancelled-12"),
            Ok(TaskRef::Tombstone("SHOP-7#cancelled-12".into()))
        );
        assert!(TaskRef::parse("SHOP-7#cancelled-").is_err());
        assert!(TaskRef::parse("SHOP-7#cancelled-1x").is_err());
        assert!(TaskRef::parse("x#cancelled-1").is_err());
        assert!(matches!(TaskRef::parse("SHOP-7"), Ok(TaskRef::WorkItem(_))));
    }

    #[test]
    fn slugs_are_branch_safe_ascii() {
        assert_eq!(slug("Add a /health endpoint!"), "add-a-health-endpoint");
        assert_eq!(slug("  ..héllo  wörld.. "), "h-llo-w-rld");
        assert_eq!(slug("$(rm -rf /)"), "rm-rf");
        assert_eq!(slug("!!!"), "task");
        assert!(slug(&"x".repeat(200)).len() <= 40);
        let wi = WorkItem::parse("SHOP-7").unwrap();
        assert_eq!(
            branch_name(&wi, "Fix: the bug"),
            "feature/SHOP-7-fix-the-bug"
        );
    }

    #[test]
    fn printable_escapes_control_characters() {
        assert_eq!(printable("a\nb"), "a\\nb");
        assert!(printable(&"y".repeat(100)).ends_with('…'));
    }
}
