//! YAML frontmatter of markdown artifacts, and the machine verdicts read from it.
//!
//! An artifact such as a review or a test report starts with a block of YAML
//! between a first line `---` and the next line that is exactly `---`. This
//! module finds that block, parses it into a flat map of scalar values, and
//! decides whether the artifact says "pass", "fail" or nothing usable for a
//! given [`VerdictSpec`].
//!
//! What it deliberately does not do:
//! - It performs no I/O and reads no clock; callers hand in the bytes and
//!   prepend the file name to any message they show.
//! - It never reads the prose after the closing `---`, so a sentence such as
//!   "result: FAIL was fixed" in the body cannot change a verdict, and a huge
//!   or binary body costs nothing.
//! - It never scans more than a little over 64 KiB of input, so a file
//!   without a closing line fails fast instead of being read to the end.
//! - It does not keep nested structure: sequences and mappings are reduced to
//!   a marker, because a verdict must be a plain scalar to be trusted.
//! - It does not preserve the source spelling of numbers and booleans; they
//!   are kept as serde_yaml renders them (`1.10` becomes `1.1`), which is
//!   good enough for display and irrelevant for verdicts.
//! - It never panics, whatever the input.

use std::fmt;

/// Largest frontmatter block (the bytes between the two `---` lines) accepted.
pub const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;

/// Extra bytes scanned past the size limit so that a closing line starting
/// right at the limit can still be recognised, trailing spaces included.
const DELIMITER_SLACK: usize = 256;

/// Tokens that fail every verdict, whatever the spec, so that a clearly
/// negative artifact can never be mistaken for an unknown one.
const GLOBAL_FAIL_TOKENS: &[&str] = &[
    "FAIL",
    "FAILED",
    "BLOCKED",
    "REQUEST_CHANGES",
    "REJECT",
    "RED",
];

/// Longest malformed-YAML message kept, so that one bad file cannot flood a
/// status line.
const MAX_ERROR_CHARS: usize = 200;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why an artifact's frontmatter could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FmError {
    /// The first line (after an optional BOM) is not `---`.
    Missing,
    /// There is no closing `---` line.
    Unterminated,
    /// The frontmatter block contains bytes that are not UTF-8.
    NotUtf8,
    /// The frontmatter block is larger than [`MAX_FRONTMATTER_BYTES`].
    TooLarge,
    /// The block is not YAML, or not a YAML mapping; holds a one-line reason.
    Malformed(String),
}

impl fmt::Display for FmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FmError::Missing => f.write_str("no frontmatter (first line is not `---`)"),
            FmError::Unterminated => f.write_str("frontmatter has no closing `---`"),
            FmError::NotUtf8 => f.write_str("frontmatter is not valid UTF-8"),
            FmError::TooLarge => f.write_str("frontmatter larger than 64 KiB"),
            FmError::Malformed(reason) => write!(f, "malformed YAML frontmatter: {reason}"),
        }
    }
}

impl std::error::Error for FmError {}

/// One top-level value of the frontmatter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FmValue {
    /// A string, number or boolean as trimmed text; null becomes "".
    Scalar(String),
    /// A sequence, kept only so that it reads as an unknown verdict value.
    Sequence,
    /// A mapping, kept only so that it reads as an unknown verdict value.
    Mapping,
}

impl FmValue {
    fn as_scalar(&self) -> Option<&str> {
        match self {
            FmValue::Scalar(text) => Some(text),
            FmValue::Sequence | FmValue::Mapping => None,
        }
    }
}

/// The parsed top-level mapping of a frontmatter block, in source order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frontmatter {
    entries: Vec<(String, FmValue)>,
}

impl Frontmatter {
    /// Number of top-level keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the frontmatter has no keys at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries whose key equals `key`, ignoring ASCII case. More than one
    /// can match when a file spells the same key differently (`Result` and
    /// `result`), and verdicts must see all of them.
    fn matching<'a>(&'a self, key: &str) -> impl Iterator<Item = &'a (String, FmValue)> {
        self.entries
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
    }
}

/// Which keys carry a verdict and which tokens count as pass or fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerdictSpec {
    /// Keys consulted, in order of preference for reporting a pass.
    pub keys: &'static [&'static str],
    /// Tokens that make the verdict pass when no negative token is present.
    pub pass: &'static [&'static str],
    /// Spec-specific negative tokens, in addition to the global ones.
    pub fail: &'static [&'static str],
}

/// Code review: `verdict: APPROVED` or `verdict: REQUEST_CHANGES`.
pub const REVIEW: VerdictSpec = VerdictSpec {
    keys: &["verdict"],
    pass: &["APPROVED"],
    fail: &["REQUEST_CHANGES"],
};

/// Test report: any of `verdict`, `status`, `result` saying PASS or FAIL.
pub const TESTS: VerdictSpec = VerdictSpec {
    keys: &["verdict", "status", "result"],
    pass: &["PASS", "PASSED"],
    fail: &["FAIL"],
};

/// Staging deployment: `staging_status: SUCCESS` or `FAILED`.
pub const STAGING: VerdictSpec = VerdictSpec {
    keys: &["staging_status"],
    pass: &["SUCCESS"],
    fail: &["FAILED"],
};

/// Production deployment: `deploy_status: SUCCESS` or `FAILED`.
pub const DEPLOY: VerdictSpec = VerdictSpec {
    keys: &["deploy_status"],
    pass: &["SUCCESS"],
    fail: &["FAILED"],
};

/// Security review: `security_status: PASS` or `FAIL`.
pub const SECURITY: VerdictSpec = VerdictSpec {
    keys: &["security_status"],
    pass: &["PASS"],
    fail: &["FAIL"],
};

/// The outcome of evaluating a frontmatter against a [`VerdictSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A key holds a pass token and no key holds a negative token. `key` is
    /// spelled as in the file.
    Pass { key: String, value: String },
    /// A key holds a negative token. `key` is spelled as in the file.
    Fail { key: String, value: String },
    /// Neither verdict can be read; `reason` says why, without a file name.
    NotSatisfied { reason: String },
}

/// Parses the frontmatter at the start of `bytes`.
///
/// Only the frontmatter block is decoded, so the body may be arbitrarily
/// large or not even text.
pub fn parse(bytes: &[u8]) -> Result<Frontmatter, FmError> {
    let block = locate_block(bytes)?;
    let text = std::str::from_utf8(block).map_err(|_| FmError::NotUtf8)?;
    // The leading newline stands in for the opening `---` line, so that the
    // line numbers in serde_yaml's messages match the file.
    let doc: serde_yaml::Value = serde_yaml::from_str(&format!("\n{text}"))
        .map_err(|e| FmError::Malformed(one_line(&e.to_string())))?;
    match doc {
        // An empty block, or one holding only comments, is an empty document.
        serde_yaml::Value::Null => Ok(Frontmatter::default()),
        serde_yaml::Value::Mapping(map) => Ok(Frontmatter {
            entries: map
                .into_iter()
                .filter_map(|(k, v)| Some((key_text(k)?, convert(v))))
                .collect(),
        }),
        other => Err(FmError::Malformed(format!(
            "expected `key: value` lines, found {}",
            kind_name(&other)
        ))),
    }
}

/// Returns the scalar value of `key` (ASCII case-insensitive), or `None` when
/// the key is absent or holds a list or mapping. A null value reads as "".
pub fn field<'a>(fm: &'a Frontmatter, key: &str) -> Option<&'a str> {
    fm.matching(key).next().and_then(|(_, v)| v.as_scalar())
}

/// Evaluates the verdict described by `spec`.
///
/// A negative token under any of the spec's keys wins over any pass token,
/// so that an artifact saying both `result: PASS` and `status: FAILED` fails.
pub fn evaluate(fm: &Frontmatter, spec: &VerdictSpec) -> Verdict {
    let present: Vec<&(String, FmValue)> = spec.keys.iter().flat_map(|k| fm.matching(k)).collect();
    if present.is_empty() {
        return Verdict::NotSatisfied {
            reason: format!("missing key {}", describe_keys(spec.keys)),
        };
    }

    let is_negative = |t: &str| {
        GLOBAL_FAIL_TOKENS
            .iter()
            .chain(spec.fail)
            .any(|n| n.eq_ignore_ascii_case(t))
    };
    let is_pass = |t: &str| spec.pass.iter().any(|p| p.eq_ignore_ascii_case(t));
    let scalars = || {
        present
            .iter()
            .filter_map(|(k, v)| v.as_scalar().map(|text| (k, text)))
    };

    if let Some((key, value)) = scalars().find(|(_, text)| tokens(text).any(is_negative)) {
        return Verdict::Fail {
            key: key.to_string(),
            value: value.to_string(),
        };
    }
    if let Some((key, value)) = scalars().find(|(_, text)| tokens(text).any(is_pass)) {
        return Verdict::Pass {
            key: key.to_string(),
            value: value.to_string(),
        };
    }

    let shown: Vec<String> = present.iter().map(|(k, v)| describe_value(k, v)).collect();
    Verdict::NotSatisfied {
        reason: format!("unknown value {}", shown.join(", ")),
    }
}

/// Parses `bytes` and evaluates `spec`, turning a parse error into
/// [`Verdict::NotSatisfied`] with the error's text as the reason.
pub fn verdict_of(bytes: &[u8], spec: &VerdictSpec) -> Verdict {
    match parse(bytes) {
        Ok(fm) => evaluate(&fm, spec),
        Err(e) => Verdict::NotSatisfied {
            reason: e.to_string(),
        },
    }
}

/// Finds the bytes between the opening and closing `---` lines, looking at no
/// more than the size limit plus a little slack.
fn locate_block(bytes: &[u8]) -> Result<&[u8], FmError> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);

    // The opening line must itself be a delimiter; bounding the search keeps a
    // huge first line from being scanned to its end.
    let head = &bytes[..bytes.len().min(DELIMITER_SLACK)];
    let body = match head.iter().position(|&b| b == b'\n') {
        Some(nl) if is_delimiter(&head[..nl]) => &bytes[nl + 1..],
        Some(_) => return Err(FmError::Missing),
        // The whole input is a single line: a lone `---` opens a block that
        // is never closed.
        None if head.len() == bytes.len() && is_delimiter(head) => {
            return Err(FmError::Unterminated);
        }
        None => return Err(FmError::Missing),
    };

    let window = &body[..body.len().min(MAX_FRONTMATTER_BYTES + DELIMITER_SLACK)];
    let window_is_whole_body = window.len() == body.len();
    let mut pos = 0;
    while pos <= MAX_FRONTMATTER_BYTES {
        let rest = &window[pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(nl) if is_delimiter(&rest[..nl]) => return Ok(&body[..pos]),
            Some(nl) => pos += nl + 1,
            // The last line of the input may be the closing line without a
            // newline of its own.
            None if window_is_whole_body && !rest.is_empty() && is_delimiter(rest) => {
                return Ok(&body[..pos]);
            }
            None if window_is_whole_body => return Err(FmError::Unterminated),
            // The line runs past the window, so any closing line would start
            // beyond the size limit.
            None => return Err(FmError::TooLarge),
        }
    }
    Err(FmError::TooLarge)
}

/// Whether a line (without its `\n`) is `---`, allowing trailing spaces, tabs
/// and the `\r` of a CRLF ending.
fn is_delimiter(line: &[u8]) -> bool {
    line.strip_prefix(b"---")
        .is_some_and(|tail| tail.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')))
}

/// Splits a value into tokens of ASCII letters, digits and `_`, so that
/// comparisons are on whole words: `stored` never contains `RED`.
fn tokens(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
}

/// Text of a mapping key; keys that are themselves lists or mappings cannot
/// be looked up by name and are dropped.
fn key_text(key: serde_yaml::Value) -> Option<String> {
    match convert(key) {
        FmValue::Scalar(text) => Some(text),
        FmValue::Sequence | FmValue::Mapping => None,
    }
}

fn convert(value: serde_yaml::Value) -> FmValue {
    use serde_yaml::Value;
    let mut value = value;
    // A tag such as `!custom PASS` says nothing about the verdict, so look
    // through it; a loop rather than recursion keeps the stack flat.
    loop {
        return match value {
            Value::Tagged(tagged) => {
                value = tagged.value;
                continue;
            }
            Value::Null => FmValue::Scalar(String::new()),
            Value::Bool(b) => FmValue::Scalar(b.to_string()),
            Value::Number(n) => FmValue::Scalar(n.to_string()),
            Value::String(s) => FmValue::Scalar(s.trim().to_string()),
            Value::Sequence(_) => FmValue::Sequence,
            Value::Mapping(_) => FmValue::Mapping,
        };
    }
}

fn kind_name(value: &serde_yaml::Value) -> &'static str {
    use serde_yaml::Value;
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "plain text",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Keeps the first line of a message and caps its length, cutting on a
/// character boundary.
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or("").trim();
    match first.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &first[..cut]),
        None => first.to_string(),
    }
}

/// "`a`", "`a` or `b`", "`a`, `b` or `c`".
fn describe_keys(keys: &[&str]) -> String {
    let quoted: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    match quoted.split_last() {
        None => "(no keys configured)".to_string(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

fn describe_value(key: &str, value: &FmValue) -> String {
    match value {
        FmValue::Scalar(text) if text.is_empty() => format!("`{key}` (empty)"),
        FmValue::Scalar(text) => format!("`{key}: {text}`"),
        FmValue::Sequence => format!("`{key}` (a list)"),
        FmValue::Mapping => format!("`{key}` (a mapping)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a verdict test expects; `Unsatisfied` holds fragments that must
    /// all appear in the reason.
    #[derive(Debug)]
    enum Want {
        Pass(&'static str, &'static str),
        Fail(&'static str, &'static str),
        Unsatisfied(&'static [&'static str]),
    }

    fn check(name: &str, input: &[u8], spec: &VerdictSpec, want: &Want) {
        let got = verdict_of(input, spec);
        let ok = match (want, &got) {
            (Want::Pass(k, v), Verdict::Pass { key, value }) => key == k && value == v,
            (Want::Fail(k, v), Verdict::Fail { key, value }) => key == k && value == v,
            (Want::Unsatisfied(parts), Verdict::NotSatisfied { reason }) => {
                parts.iter().all(|p| reason.contains(p))
            }
            _ => false,
        };
        assert!(ok, "case {name:?}: wanted {want:?}, got {got:?}");
    }

    fn fm(yaml: &str) -> Vec<u8> {
        format!("---\n{yaml}---\n# Body\n").into_bytes()
    }

    /// The shipped specs only list fail tokens that are also global, so this
    /// one checks that a spec's own fail tokens are honoured.
    const CUSTOM: VerdictSpec = VerdictSpec {
        keys: &["outcome"],
        pass: &["GREEN"],
        fail: &["BROKEN"],
    };

    #[test]
    fn verdicts() {
        use Want::*;
        #[rustfmt::skip]
        let cases: &[(&str, &str, VerdictSpec, Want)] = &[
            ("review approved", "verdict: APPROVED\n", REVIEW, Pass("verdict", "APPROVED")),
            ("review changes", "verdict: REQUEST_CHANGES\n", REVIEW, Fail("verdict", "REQUEST_CHANGES")),
            ("review comment names the other value", "verdict: APPROVED # or REQUEST_CHANGES\n", REVIEW, Pass("verdict", "APPROVED")),
            ("review global negative", "verdict: REJECT\n", REVIEW, Fail("verdict", "REJECT")),
            ("review PASS is not APPROVED", "verdict: PASS\n", REVIEW, Unsatisfied(&["unknown value", "`verdict: PASS`"])),
            ("tests pass", "result: PASS\n", TESTS, Pass("result", "PASS")),
            ("tests passed via status", "status: PASSED\n", TESTS, Pass("status", "PASSED")),
            ("tests pass via verdict", "verdict: pass\n", TESTS, Pass("verdict", "pass")),
            ("tests fail", "result: FAIL\n", TESTS, Fail("result", "FAIL")),
            ("negative beats pass", "result: PASS\nstatus: FAILED\n", TESTS, Fail("status", "FAILED")),
            ("negative beats pass, reversed order", "status: FAILED\nresult: PASS\n", TESTS, Fail("status", "FAILED")),
            ("stored is not RED", "status: stored\nresult: PASS\n", TESTS, Pass("result", "PASS")),
            ("lowercase value", "result: pass\n", TESTS, Pass("result", "pass")),
            ("double quoted", "result: \"PASS\"\n", TESTS, Pass("result", "PASS")),
            ("single quoted and padded", "result: '  PASS  '\n", TESTS, Pass("result", "PASS")),
            ("inline comment", "result: PASS   # PASS | FAIL\n", TESTS, Pass("result", "PASS")),
            ("inline comment naming FAIL", "result: PASS # FAIL\n", TESTS, Pass("result", "PASS")),
            ("quoted then comment", "result: \"PASS\" # FAIL\n", TESTS, Pass("result", "PASS")),
            ("key case-insensitive", "Result: PASS\n", TESTS, Pass("Result", "PASS")),
            ("upper-case key", "RESULT: FAIL\n", TESTS, Fail("RESULT", "FAIL")),
            ("differently cased duplicates", "result: PASS\nResult: FAIL\n", TESTS, Fail("Result", "FAIL")),
            ("PASSING is not PASS", "result: PASSING\n", TESTS, Unsatisfied(&["unknown value", "`result: PASSING`"])),
            ("underscore joins a token", "result: NOT_PASS\n", TESTS, Unsatisfied(&["`result: NOT_PASS`"])),
            ("punctuation splits tokens", "result: PASS (12/12)\n", TESTS, Pass("result", "PASS (12/12)")),
            ("negative inside a sentence", "result: PASS, then RED again\n", TESTS, Fail("result", "PASS, then RED again")),
            ("FAILURES is not FAIL", "result: no FAILURES\n", TESTS, Unsatisfied(&["`result: no FAILURES`"])),
            ("missing key", "title: report\n", TESTS, Unsatisfied(&["missing key", "`verdict`, `status` or `result`"])),
            ("missing single key", "result: PASS\n", REVIEW, Unsatisfied(&["missing key `verdict`"])),
            ("empty frontmatter", "", TESTS, Unsatisfied(&["missing key"])),
            ("list value", "result: [PASS]\n", TESTS, Unsatisfied(&["unknown value", "`result` (a list)"])),
            ("block list value", "result:\n  - FAIL\n", TESTS, Unsatisfied(&["`result` (a list)"])),
            ("mapping value", "result: {tests: PASS}\n", TESTS, Unsatisfied(&["`result` (a mapping)"])),
            ("list beside a pass", "verdict: [x]\nresult: PASS\n", TESTS, Pass("result", "PASS")),
            ("null value", "result:\n", TESTS, Unsatisfied(&["unknown value", "`result` (empty)"])),
            ("tilde null", "result: ~\n", TESTS, Unsatisfied(&["`result` (empty)"])),
            ("number value", "result: 42\n", TESTS, Unsatisfied(&["`result: 42`"])),
            ("number beside a pass", "status: 0\nresult: PASS\n", TESTS, Pass("result", "PASS")),
            ("boolean value", "result: true\n", TESTS, Unsatisfied(&["`result: true`"])),
            ("tagged value", "result: !outcome PASS\n", TESTS, Pass("result", "PASS")),
            ("staging success", "staging_status: SUCCESS\n", STAGING, Pass("staging_status", "SUCCESS")),
            ("staging failed", "staging_status: FAILED\n", STAGING, Fail("staging_status", "FAILED")),
            ("staging ignores result", "result: PASS\n", STAGING, Unsatisfied(&["missing key `staging_status`"])),
            ("deploy success", "deploy_status: success\n", DEPLOY, Pass("deploy_status", "success")),
            ("deploy failed", "deploy_status: FAILED\n", DEPLOY, Fail("deploy_status", "FAILED")),
            ("deploy global negative", "deploy_status: BLOCKED\n", DEPLOY, Fail("deploy_status", "BLOCKED")),
            ("security pass", "security_status: PASS\n", SECURITY, Pass("security_status", "PASS")),
            ("security fail", "security_status: FAIL\n", SECURITY, Fail("security_status", "FAIL")),
            ("security SUCCESS is unknown", "security_status: SUCCESS\n", SECURITY, Unsatisfied(&["`security_status: SUCCESS`"])),
            ("custom pass", "outcome: green\n", CUSTOM, Pass("outcome", "green")),
            ("custom fail token", "outcome: GREEN but BROKEN\n", CUSTOM, Fail("outcome", "GREEN but BROKEN")),
            ("custom spec keeps global tokens", "outcome: GREEN, BLOCKED\n", CUSTOM, Fail("outcome", "GREEN, BLOCKED")),
        ];
        for (name, yaml, spec, want) in cases {
            check(name, &fm(yaml), spec, want);
        }
    }

    #[test]
    fn framing() {
        use Want::*;
        #[rustfmt::skip]
        let cases: &[(&str, &[u8], Want)] = &[
            ("CRLF", b"---\r\nstatus: done\r\nresult: PASS\r\n---\r\nbody\r\n", Pass("result", "PASS")),
            ("BOM", b"\xEF\xBB\xBF---\nresult: PASS\n---\n", Pass("result", "PASS")),
            ("BOM and CRLF", b"\xEF\xBB\xBF---\r\nresult: FAIL\r\n---\r\n", Fail("result", "FAIL")),
            ("trailing spaces on delimiters", b"--- \t\nresult: PASS\n---   \nbody\n", Pass("result", "PASS")),
            ("closing line at end of file", b"---\nresult: PASS\n---", Pass("result", "PASS")),
            ("prose is never read", b"---\nresult: PASS\n---\nresult: FAIL\nstatus: FAILED\n", Pass("result", "PASS")),
            ("later block is prose", b"---\nresult: PASS\n---\n---\nresult: FAIL\n---\n", Pass("result", "PASS")),
            ("invalid UTF-8 in prose", b"---\nresult: PASS\n---\n\xFF\xFE body\n", Pass("result", "PASS")),
            ("four dashes do not close", b"---\nresult: PASS\n----\n", Unsatisfied(&["no closing `---`"])),
            ("indented dashes do not close", b"---\nresult: PASS\n ---\n", Unsatisfied(&["no closing `---`"])),
        ];
        for (name, input, want) in cases {
            check(name, input, &TESTS, want);
        }
    }

    #[test]
    fn parse_errors() {
        #[rustfmt::skip]
        let cases: &[(&str, &[u8], FmError)] = &[
            ("empty file", b"", FmError::Missing),
            ("only a BOM", b"\xEF\xBB\xBF", FmError::Missing),
            ("only ---", b"---", FmError::Unterminated),
            ("only --- and newline", b"---\n", FmError::Unterminated),
            ("missing closing", b"---\nresult: PASS\n", FmError::Unterminated),
            ("missing closing, no final newline", b"---\nresult: PASS", FmError::Unterminated),
            ("no frontmatter", b"# Report\nresult: PASS\n", FmError::Missing),
            ("frontmatter not on first line", b"\n---\nresult: PASS\n---\n", FmError::Missing),
            ("dashes with text", b"--- yaml\nresult: PASS\n---\n", FmError::Missing),
            ("non-UTF-8 in block", b"---\nresult: PA\xFFSS\n---\n", FmError::NotUtf8),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse(input).as_ref(), Err(want), "case {name:?}");
        }
    }

    #[test]
    fn malformed_yaml_is_one_line() {
        let cases: &[(&str, &str)] = &[
            ("unclosed flow list", "result: [unclosed\n"),
            ("list document", "- PASS\n- FAIL\n"),
            ("scalar document", "just some text\n"),
            ("bad indentation", "result: PASS\n  status: FAIL\n"),
            ("exact duplicate key", "result: PASS\nresult: FAIL\n"),
        ];
        for (name, yaml) in cases {
            match parse(&fm(yaml)) {
                Err(FmError::Malformed(reason)) => {
                    assert!(!reason.is_empty(), "case {name:?}: empty reason");
                    assert!(!reason.contains('\n'), "case {name:?}: {reason:?}");
                }
                other => panic!("case {name:?}: expected Malformed, got {other:?}"),
            }
            assert!(
                matches!(verdict_of(&fm(yaml), &TESTS), Verdict::NotSatisfied { ref reason }
                    if reason.starts_with("malformed YAML frontmatter: ")),
                "case {name:?}"
            );
        }
    }

    #[test]
    fn malformed_yaml_names_the_file_line() {
        let input = b"---\ntitle: report\nresult: [unclosed\n---\n";
        match parse(input) {
            Err(FmError::Malformed(reason)) => {
                assert!(reason.contains("line 3 column 9"), "{reason:?}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn empty_frontmatter_is_an_empty_map() {
        for input in [
            &b"---\n---"[..],
            b"---\n---\n",
            b"---\r\n---\r\nbody",
            b"---\n# nothing yet\n---\n",
        ] {
            let parsed = parse(input);
            assert_eq!(parsed, Ok(Frontmatter::default()), "{input:?}");
        }
    }

    #[test]
    fn error_messages() {
        let cases = [
            (FmError::Missing, "no frontmatter (first line is not `---`)"),
            (FmError::Unterminated, "frontmatter has no closing `---`"),
            (FmError::NotUtf8, "frontmatter is not valid UTF-8"),
            (FmError::TooLarge, "frontmatter larger than 64 KiB"),
            (
                FmError::Malformed("oops".into()),
                "malformed YAML frontmatter: oops",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
        assert_eq!(
            verdict_of(b"hello", &TESTS),
            Verdict::NotSatisfied {
                reason: "no frontmatter (first line is not `---`)".into()
            }
        );
    }

    #[test]
    fn field_reads_scalars() {
        let parsed = parse(&fm(
            "Result: PASS # FAIL\ncount: 42\nratio: 0.5\nflag: false\nempty:\nlist: [a]\nmap: {a: b}\nnote: '  padded  '\n",
        ))
        .expect("valid frontmatter");
        assert_eq!(parsed.len(), 8);
        assert_eq!(field(&parsed, "result"), Some("PASS"));
        assert_eq!(field(&parsed, "RESULT"), Some("PASS"));
        assert_eq!(field(&parsed, "count"), Some("42"));
        assert_eq!(field(&parsed, "ratio"), Some("0.5"));
        assert_eq!(field(&parsed, "flag"), Some("false"));
        assert_eq!(field(&parsed, "empty"), Some(""));
        assert_eq!(field(&parsed, "note"), Some("padded"));
        assert_eq!(field(&parsed, "list"), None);
        assert_eq!(field(&parsed, "map"), None);
        assert_eq!(field(&parsed, "absent"), None);
    }

    #[test]
    fn crlf_values_carry_no_carriage_return() {
        let parsed = parse(b"---\r\nresult: PASS\r\nnote: hi   \r\n---\r\n").expect("valid");
        assert_eq!(field(&parsed, "result"), Some("PASS"));
        assert_eq!(field(&parsed, "note"), Some("hi"));
    }

    const TEN_MB: usize = 10 * 1024 * 1024;

    #[test]
    fn huge_body_after_small_frontmatter() {
        let mut input = b"---\nresult: PASS\n---\n".to_vec();
        input.extend(b"result: FAIL\n---\n".iter().cycle().take(TEN_MB));
        check(
            "10 MB text body",
            &input,
            &TESTS,
            &Want::Pass("result", "PASS"),
        );

        let mut binary = b"---\nresult: PASS\n---\n".to_vec();
        binary.resize(binary.len() + TEN_MB, 0xFF);
        check(
            "10 MB binary body",
            &binary,
            &TESTS,
            &Want::Pass("result", "PASS"),
        );
    }

    #[test]
    fn huge_input_without_closing_stops_at_limit() {
        let mut lines = b"---\n".to_vec();
        lines.extend(b"key: value\n".iter().cycle().take(TEN_MB));
        assert_eq!(parse(&lines), Err(FmError::TooLarge));

        // A closing line far beyond the limit must not be found, which shows
        // the scan stopped instead of reading on.
        let mut far_close = b"---\n".to_vec();
        far_close.extend(b"key: value\n".iter().cycle().take(TEN_MB / 2));
        far_close.extend(b"\n---\n");
        far_close.extend(b"key: value\n".iter().cycle().take(TEN_MB / 2));
        assert_eq!(parse(&far_close), Err(FmError::TooLarge));

        let mut one_line = b"---\n".to_vec();
        one_line.resize(one_line.len() + TEN_MB, b'x');
        assert_eq!(parse(&one_line), Err(FmError::TooLarge));

        let mut long_first_line = b"---".to_vec();
        long_first_line.resize(TEN_MB, b' ');
        assert_eq!(parse(&long_first_line), Err(FmError::Missing));
    }

    /// Builds a block of exactly `size` bytes (a verdict plus a padding
    /// comment) wrapped in delimiters.
    fn block_of_size(size: usize) -> Vec<u8> {
        let head = "result: PASS\n# ";
        let padding = "x".repeat(size - head.len() - 1);
        format!("---\n{head}{padding}\n---\n").into_bytes()
    }

    #[test]
    fn size_limit_is_exact() {
        let at_limit = block_of_size(MAX_FRONTMATTER_BYTES);
        check("at limit", &at_limit, &TESTS, &Want::Pass("result", "PASS"));
        let over = block_of_size(MAX_FRONTMATTER_BYTES + 1);
        assert_eq!(parse(&over), Err(FmError::TooLarge));
    }

    #[test]
    fn hostile_yaml_does_not_panic() {
        let deep = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n\
                      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n\
                      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                      g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
        for yaml in [
            deep.as_str(),
            laughs,
            "? [a]\n: b\nresult: PASS\n",
            "*undefined\n",
            "result: \"\\xZZ\"\n",
        ] {
            // Any outcome is acceptable here except a panic or a pass that
            // the input does not state.
            let verdict = verdict_of(&fm(yaml), &TESTS);
            if yaml.contains("result: PASS") {
                assert_eq!(
                    verdict,
                    Verdict::Pass {
                        key: "result".into(),
                        value: "PASS".into()
                    }
                );
            } else {
                assert!(
                    !matches!(verdict, Verdict::Pass { .. }),
                    "{yaml:?}: {verdict:?}"
                );
            }
        }
    }
}
