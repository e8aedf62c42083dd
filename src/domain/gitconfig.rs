//! Which keys of a repository's git config would make git run a program or send a request
//! somewhere else (design §9.3), as a pure reading of the file's text.
//!
//! orch's own git commands override the single-valued keys with `-c` (`ext::git`), but keys
//! that are named by the repository (`filter.<driver>.clean`, `diff.<driver>.textconv`,
//! `merge.<driver>.driver`, `credential.<url>.helper`, `include.path`, …) cannot be overridden
//! one by one. A clone or worktree whose config sets any key of [`denied`] is refused before a
//! git command runs in it: an agent that wrote `core.fsmonitor` into its worktree's config must
//! not have orch execute it, with orch's credentials, on the next `git status`.
//!
//! The reader follows git's syntax closely enough never to miss a key git would see: sections
//! `[s]`, `[s "sub"]` (with `\"` and `\\`) and the old `[s.sub]`, a key on the header's line,
//! comments after `#` or `;` outside quotes, quoted values and `\` line continuations. Anything
//! it cannot read is an error, and the caller refuses that config too.

/// One key of a config file: section and key lower-cased, the subsection as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub section: String,
    pub subsection: Option<String>,
    pub name: String,
}

impl Key {
    /// `section[.subsection].name`, the way `git config` spells it.
    pub fn dotted(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{}.{}", self.section, sub, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }
}

/// The keys of `text` that execute a program or redirect a transfer, spelled as `git config`
/// would; `Err` when the text is not a config git would read.
pub fn denied(text: &str) -> Result<Vec<String>, String> {
    Ok(keys(text)?
        .into_iter()
        .filter(is_denied)
        .map(|k| k.dotted())
        .collect())
}

/// Whether git would run a program (or send a transfer or credential elsewhere) because of `k`.
pub fn is_denied(k: &Key) -> bool {
    let name = k.name.as_str();
    let sub = k.subsection.is_some();
    match k.section.as_str() {
        // Another file's keys (which this reader never sees), drivers that run on content,
        // URL rewrites (a token sent to another host), protocol allowances.
        "include" | "includeif" | "filter" | "url" | "protocol" | "pager" => true,
        "core" => matches!(
            name,
            "fsmonitor"
                | "sshcommand"
                | "hookspath"
                | "askpass"
                | "editor"
                | "pager"
                | "gitproxy"
                | "alternaterefscommand"
                | "worktree"
        ),
        "diff" => (sub && matches!(name, "textconv" | "command")) || (!sub && name == "external"),
        "merge" => sub && name == "driver",
        "credential" => name == "helper",
        "remote" => sub && matches!(name, "uploadpack" | "receivepack" | "vcs" | "proxy"),
        "http" => name == "proxy",
        "gpg" => name == "program",
        "sequence" => name == "editor",
        "submodule" => sub && name == "update",
        "uploadpack" => name == "packobjectshook",
        "difftool" | "mergetool" => name == "cmd",
        _ => false,
    }
}

/// Every key of `text`, in order.
pub fn keys(text: &str) -> Result<Vec<Key>, String> {
    Ok(entries(text)?.into_iter().map(|(k, _)| k).collect())
}

/// Every key of `text` with its value as git reads it (quotes removed, escapes decoded, the
/// trailing blanks outside quotes dropped), in order; `None` for a key without `=` (a boolean
/// `true`).
pub fn entries(text: &str) -> Result<Vec<(Key, Option<String>)>, String> {
    let mut p = Reader {
        s: text.as_bytes(),
        i: 0,
        line: 1,
    };
    let mut out = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    loop {
        p.skip_blank();
        let Some(c) = p.peek() else {
            return Ok(out);
        };
        match c {
            b'#' | b';' => p.skip_line(),
            b'[' => section = Some(p.header()?),
            c if c.is_ascii_alphabetic() => {
                let name = p.name();
                let Some((sec, sub)) = &section else {
                    return Err(p.err("a key before any section"));
                };
                let value = p.value()?;
                out.push((
                    Key {
                        section: sec.clone(),
                        subsection: sub.clone(),
                        name,
                    },
                    value,
                ));
            }
            _ => return Err(p.err("not a section, a key or a comment")),
        }
    }
}

/// The values of `section[.subsection].name` in `text`, in order (`name` in lower case).
pub fn values(
    text: &str,
    section: &str,
    subsection: Option<&str>,
    name: &str,
) -> Result<Vec<Option<String>>, String> {
    Ok(entries(text)?
        .into_iter()
        .filter(|(k, _)| {
            k.section == section && k.subsection.as_deref() == subsection && k.name == name
        })
        .map(|(_, v)| v)
        .collect())
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
    line: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn err(&self, what: &str) -> String {
        format!("line {}: {what}", self.line)
    }

    /// Whitespace, newlines included (git skips them between entries).
    fn skip_blank(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.bump();
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.bump() {
            if c == b'\n' {
                return;
            }
        }
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.bump();
        }
    }

    /// `[section]`, `[section "sub"]` or `[section.sub]`, the `[` not yet consumed.
    fn header(&mut self) -> Result<(String, Option<String>), String> {
        self.bump();
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' {
                name.push(c.to_ascii_lowercase() as char);
                self.bump();
            } else {
                break;
            }
        }
        if name.is_empty() {
            return Err(self.err("an empty section name"));
        }
        match self.peek() {
            Some(b']') => {
                self.bump();
                // The old `[section.sub]` form: the subsection is lower-cased too.
                Ok(match name.split_once('.') {
                    Some((s, sub)) => (s.to_string(), Some(sub.to_string())),
                    None => (name, None),
                })
            }
            Some(b' ' | b'\t') => {
                self.skip_spaces();
                if self.bump() != Some(b'"') {
                    return Err(self.err("a section header without its quoted subsection"));
                }
                let mut sub = Vec::new();
                loop {
                    match self.bump() {
                        None | Some(b'\n') => return Err(self.err("an unterminated subsection")),
                        Some(b'"') => break,
                        Some(b'\\') => match self.bump() {
                            None | Some(b'\n') => {
                                return Err(self.err("an unterminated subsection"));
                            }
                            Some(c) => sub.push(c),
                        },
                        Some(c) => sub.push(c),
                    }
                }
                if self.bump() != Some(b']') {
                    return Err(self.err("a section header not closed by `]`"));
                }
                if name.contains('.') {
                    return Err(self.err("a dotted section name with a quoted subsection"));
                }
                Ok((name, Some(String::from_utf8_lossy(&sub).into_owned())))
            }
            _ => Err(self.err("a malformed section header")),
        }
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' {
                name.push(c.to_ascii_lowercase() as char);
                self.bump();
            } else {
                break;
            }
        }
        name
    }

    /// After a key: nothing (a boolean), or `= value` up to an unquoted, unescaped newline.
    fn value(&mut self) -> Result<Option<String>, String> {
        self.skip_spaces();
        match self.peek() {
            None | Some(b'\n') => return Ok(None),
            Some(b'#' | b';') => {
                self.skip_line();
                return Ok(None);
            }
            Some(b'=') => {
                self.bump();
            }
            Some(_) => return Err(self.err("a key followed by neither `=` nor the line's end")),
        }
        // Bytes of the value, and how many of them end in blanks outside quotes (git drops
        // those, and the ones before the first other byte).
        let mut v: Vec<u8> = Vec::new();
        let mut kept = 0;
        let mut quoted = false;
        loop {
            match self.bump() {
                None if quoted => return Err(self.err("an unterminated quoted value")),
                None => break,
                Some(b'\n') if !quoted => break,
                Some(b'\n') => return Err(self.err("a quoted value across lines")),
                Some(b'"') => {
                    quoted = !quoted;
                    kept = v.len();
                }
                Some(b'\\') => {
                    match self.bump() {
                        // A continuation: the value goes on on the next line.
                        Some(b'\n') => {}
                        Some(b'\r') if self.peek() == Some(b'\n') => {
                            self.bump();
                        }
                        Some(b'n') => v.push(b'\n'),
                        Some(b't') => v.push(b'\t'),
                        Some(b'b') => v.push(8),
                        Some(c @ (b'"' | b'\\')) => v.push(c),
                        _ => return Err(self.err("an invalid escape in a value")),
                    }
                    kept = v.len();
                }
                Some(b'#' | b';') if !quoted => {
                    self.skip_line();
                    break;
                }
                // Git writes every blank between words as one space.
                Some(b' ' | b'\t') if !quoted => {
                    if !v.is_empty() {
                        v.push(b' ');
                    }
                }
                Some(b'\r') if !quoted && self.peek() == Some(b'\n') => {}
                Some(c) => {
                    v.push(c);
                    kept = v.len();
                }
            }
        }
        v.truncate(kept);
        Ok(Some(String::from_utf8_lossy(&v).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_clone_config_has_nothing_denied() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                    \tlogallrefupdates = true\n[remote \"origin\"]\n\turl = /tmp/remote.git\n\
                    \tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\
                    \tremote = origin\n\tmerge = refs/heads/main\n";
        assert_eq!(denied(text), Ok(vec![]));
        assert_eq!(keys(text).unwrap().len(), 8);
    }

    #[test]
    fn every_executing_key_is_found_however_it_is_spelled() {
        let cases: &[(&str, &str)] = &[
            ("[core]\nfsmonitor = touch /tmp/x\n", "core.fsmonitor"),
            ("[CORE]\n  FsMonitor=x", "core.fsmonitor"),
            ("[core] sshCommand = evil", "core.sshcommand"),
            ("[core]\nhooksPath = /tmp/hooks", "core.hookspath"),
            ("[filter \"lfs\"]\nclean = evil %f", "filter.lfs.clean"),
            ("[filter.x]\nsmudge = evil", "filter.x.smudge"),
            ("[diff \"x\"]\ntextconv = evil", "diff.x.textconv"),
            ("[diff]\nexternal = evil", "diff.external"),
            ("[merge \"x\"]\ndriver = evil %A", "merge.x.driver"),
            ("[credential]\nhelper = !evil", "credential.helper"),
            (
                "[credential \"https://h\"]\nhelper = evil",
                "credential.https://h.helper",
            ),
            (
                "[remote \"origin\"]\nuploadpack = evil",
                "remote.origin.uploadpack",
            ),
            (
                "[remote \"origin\"]\nreceivepack = evil",
                "remote.origin.receivepack",
            ),
            ("[protocol \"ext\"]\nallow = always", "protocol.ext.allow"),
            ("[include]\npath = /tmp/other", "include.path"),
            (
                "[includeIf \"gitdir:/\"]\npath = x",
                "includeif.gitdir:/.path",
            ),
            (
                "[url \"https://evil/\"]\ninsteadOf = https://",
                "url.https://evil/.insteadof",
            ),
            ("[core]\naskPass = evil", "core.askpass"),
            ("[core]\nworktree = /elsewhere", "core.worktree"),
            (
                "[core]\nalternateRefsCommand = evil",
                "core.alternaterefscommand",
            ),
        ];
        for (text, key) in cases {
            assert_eq!(denied(text), Ok(vec![key.to_string()]), "{text:?}");
        }
    }

    #[test]
    fn values_are_read_as_git_reads_them() {
        let text = "[remote \"origin\"]\n\turl = /srv/git/shop.git  # a comment\n\t\
                    fetch = +refs/heads/*:refs/remotes/origin/*\n\tfetch = \"a b\" c\\\n d \n\
                    [extensions]\n\tobjectFormat = sha256\n\tworktreeConfig\n";
        let url = values(text, "remote", Some("origin"), "url").unwrap();
        assert_eq!(url, vec![Some("/srv/git/shop.git".to_string())]);
        let fetch = values(text, "remote", Some("origin"), "fetch").unwrap();
        assert_eq!(
            fetch,
            vec![
                Some("+refs/heads/*:refs/remotes/origin/*".to_string()),
                Some("a b c d".to_string())
            ]
        );
        assert_eq!(
            values(text, "extensions", None, "objectformat").unwrap(),
            vec![Some("sha256".to_string())]
        );
        assert_eq!(
            values(text, "extensions", None, "worktreeconfig").unwrap(),
            vec![None]
        );
        assert_eq!(
            values("[a]\n\tb = \"  x \"\t\n", "a", None, "b").unwrap(),
            vec![Some("  x ".to_string())]
        );
    }

    #[test]
    fn values_comments_and_continuations_do_not_hide_or_invent_keys() {
        // A continuation makes the next line part of the value, as git reads it.
        let text = "[core]\n\tbare = false \\\nfsmonitor = not-a-key\n";
        assert_eq!(denied(text), Ok(vec![]));
        // A quoted `#` is not a comment; the next line is a key.
        let text = "[core]\n\tabbrev = \"#\"\n\tfsmonitor = x\n";
        assert_eq!(denied(text), Ok(vec!["core.fsmonitor".into()]));
        // A commented-out key is nothing.
        let text = "[core]\n# fsmonitor = x\n; hooksPath = y\n\tbare = false # fsmonitor = z\n";
        assert_eq!(denied(text), Ok(vec![]));
        // A boolean key with no value.
        assert_eq!(
            denied("[core]\nfsmonitor\n"),
            Ok(vec!["core.fsmonitor".into()])
        );
        // An escaped quote in a subsection.
        assert_eq!(
            denied("[filter \"a\\\"b\"]\nclean = x\n"),
            Ok(vec!["filter.a\"b.clean".into()])
        );
        // CRLF.
        assert_eq!(
            denied("[core]\r\n\tfsmonitor = x\r\n"),
            Ok(vec!["core.fsmonitor".into()])
        );
    }

    #[test]
    fn what_cannot_be_read_is_an_error() {
        for text in [
            "fsmonitor = x\n",
            "[core\nfsmonitor = x",
            "[core \"x]\n",
            "[core]\n\tfs monitor = x\n",
            "[core]\n\tx = \"unterminated\n",
            "[]\n",
            "[core]\n=x\n",
        ] {
            assert!(denied(text).is_err(), "{text:?}");
        }
    }
}
