//! Credentials in URLs, masked (design §9: secrets are "redacted in URLs"). A remote such as
//! `https://user:token@host/team/shop.git` is handed to git as configured, so it comes back in
//! command lines, errors and logs; [`redact_urls`] replaces the userinfo of every `scheme://`
//! URL in a text with `***` before that text is shown, logged or stored.
//!
//! It only knows the shape of a URL: it does not know which tokens are configured (that is
//! `domain::webhook::redact_headers`' job for the inbox), and it leaves the scp-like form
//! `git@host:team/shop.git` alone, whose user is a login name, never a password.

use std::borrow::Cow;

/// What the userinfo of a URL is replaced with.
pub const MASK: &str = "***";

/// Whether `c` ends the authority (`user:pass@host:port`) of a URL: the start of its path,
/// query or fragment, or a character no URL holds (white space, controls, quotes that delimit
/// it in messages, the backslash of an escape). A `'` does not end it: RFC 3986 allows it in a
/// password, and a password cut short would leak its tail.
fn ends_authority(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(c, '/' | '?' | '#' | '\\' | '"' | '<' | '>' | '`')
}

/// `text` with the userinfo of every `scheme://userinfo@host` URL replaced by [`MASK`]
/// (`https://***@host/x.git`). The userinfo ends at the last `@` of the authority, so a
/// password holding a raw `@` is masked whole; an `@` in the path is not userinfo. Borrowed
/// when nothing changed.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    // Everything of `text` before `copied` is in `out` already.
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let authority_end = text[start..]
            .char_indices()
            .find(|&(_, c)| ends_authority(c))
            .map_or(text.len(), |(i, _)| start + i);
        from = authority_end.max(start);
        // `@` is ASCII, so its byte index is a char boundary.
        let Some(at) = text[start..authority_end].rfind('@').map(|i| start + i) else {
            continue;
        };
        if &text[start..at] == MASK {
            continue;
        }
        let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
        o.push_str(&text[copied..start]);
        o.push_str(MASK);
        copied = at;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_masked_and_everything_else_kept() {
        for (text, want) in [
            (
                "https://user:token@host/team/shop.git",
                "https://***@host/team/shop.git",
            ),
            ("ssh://user:pass@host:2222/x", "ssh://***@host:2222/x"),
            ("http://token@host", "http://***@host"),
            ("http://token@host:8080", "http://***@host:8080"),
            ("http://@host/x", "http://***@host/x"),
            // A raw `@` (or `:`) in the password: masked whole, up to the last `@`.
            ("https://u:p@ss:w@host/x", "https://***@host/x"),
            // In a message, quoted or not, at the end of a sentence, in a JSON string.
            (
                "cloning `https://u:t@h/x.git` failed",
                "cloning `https://***@h/x.git` failed",
            ),
            (
                "fatal: unable to access 'http://u:t@h/x.git/': refused",
                "fatal: unable to access 'http://***@h/x.git/': refused",
            ),
            (
                "{\"error\":\"git clone http://u:t@h failed\"}",
                "{\"error\":\"git clone http://***@h failed\"}",
            ),
            (
                "remote http://u:t@h\nnext line",
                "remote http://***@h\nnext line",
            ),
            // Several URLs, the clean one in the middle untouched.
            (
                "a https://a:1@x/ b https://y/ c ssh://c:3@z",
                "a https://***@x/ b https://y/ c ssh://***@z",
            ),
            // Any scheme (git's helpers: `git+ssh`, `https+x`), even none.
            ("git+ssh://u:p@h/r", "git+ssh://***@h/r"),
            ("://u:p@h/r", "://***@h/r"),
            // Masking is idempotent.
            ("https://***@host/x", "https://***@host/x"),
        ] {
            assert_eq!(redact_urls(text), want, "{text}");
            assert_eq!(redact_urls(want), want, "twice: {want}");
        }
    }

    #[test]
    fn texts_without_userinfo_are_borrowed_unchanged() {
        for text in [
            "",
            "no url here",
            "mail ann@example.com",
            "https://host/team/shop.git",
            // An `@` in the path, query or fragment is not userinfo.
            "https://host/a@b",
            "https://host/?who=a@b",
            "https://host#a@b",
            "https://host/x user@example.com",
            // The scp-like form carries a login name, not a secret.
            "git@forge.example:team/shop.git",
            "https://***@host/x",
            "ends with ://",
            "://",
        ] {
            assert!(
                matches!(redact_urls(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }

    #[test]
    fn multibyte_text_is_sliced_on_char_boundaries() {
        for (text, want) in [
            ("é https://ü:ö@hôst/ä é", "é https://***@hôst/ä é"),
            ("https://пароль@хост/путь", "https://***@хост/путь"),
            // A non-ASCII space ends the authority.
            ("https://u:p@h\u{3000}x@y", "https://***@h\u{3000}x@y"),
            ("日本://a@b", "日本://***@b"),
            ("https://🔑🔑@h", "https://***@h"),
            // Nothing after `://` but multibyte text.
            ("https://ü", "https://ü"),
        ] {
            assert_eq!(redact_urls(text), want, "{text}");
        }
    }

    #[test]
    fn the_token_never_survives() {
        // Whatever surrounds a URL, the token between `://` and `@host` is gone.
        let token = "s3cr3t";
        for around in ["", " ", "'", "`", "\"", "(", "[", "\n", "é", "x"] {
            for user in ["", "user:", "u@x:"] {
                let text = format!("{around}https://{user}{token}@127.0.0.1:9/x.git{around}");
                let out = redact_urls(&text);
                assert!(!out.contains(token), "{text:?} → {out:?}");
                assert!(out.contains("***@127.0.0.1:9/x.git"), "{text:?} → {out:?}");
            }
        }
    }
}
