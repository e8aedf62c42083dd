//! What the head of a request decides before any byte of its body is read, as pure functions
//! over the header values hyper parsed: [`framing`] (the size check of design §8: 413 from
//! `Content-Length` alone; a transfer coding other than `chunked` 501; a head that does not say
//! where its body ends 400), [`expectation`] (417 for anything but `100-continue`) and
//! [`keep_alive`].
//!
//! hyper has already refused what HTTP/1.1 forbids outright (an unparsable or conflicting
//! `Content-Length`, a `Transfer-Encoding` whose last coding is not `chunked`); these checks add
//! the shim's own limits on top. No I/O here.

/// How the body of a request is delimited, or why it is refused, from the head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    /// `Content-Length` within the limit.
    Length(usize),
    /// `Transfer-Encoding: chunked`: only reading tells the size.
    Chunked,
    /// `Content-Length` over the limit: 413 without touching the body.
    TooLarge,
    /// A transfer coding other than chunked (501).
    Unsupported,
    /// A head that does not say where the body ends (400).
    Invalid(&'static str),
}

/// The second check of §8. `content_length` and `transfer_encoding` hold every value sent.
pub fn framing(content_length: &[&str], transfer_encoding: &[&str], limit: usize) -> Framing {
    if !transfer_encoding.is_empty() {
        // Both framings at once is how requests are smuggled past proxies (RFC 9112 §6.1).
        if !content_length.is_empty() {
            return Framing::Invalid("both Content-Length and Transfer-Encoding");
        }
        let codings: Vec<String> = transfer_encoding
            .iter()
            .flat_map(|v| v.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .collect();
        return if codings == ["chunked"] {
            Framing::Chunked
        } else {
            Framing::Unsupported
        };
    }
    let Some(first) = content_length.first() else {
        return Framing::Empty;
    };
    if content_length.iter().any(|v| v.trim() != first.trim()) {
        return Framing::Invalid("conflicting Content-Length headers");
    }
    let v = first.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Framing::Invalid("Content-Length is not a number");
    }
    match v.parse::<u64>() {
        Ok(0) => Framing::Empty,
        Ok(n) if n <= limit as u64 => Framing::Length(n as usize),
        // All digits but too large even for u64 is still a size over the limit.
        Ok(_) | Err(_) => Framing::TooLarge,
    }
}

/// Whether the `Expect` values (every one sent) can be met: only `100-continue` can, and hyper
/// sends the `100 Continue` itself when the body is first read.
pub fn expectation(expect: &[&str]) -> bool {
    expect
        .iter()
        .all(|e| e.trim().eq_ignore_ascii_case("100-continue"))
}

/// Whether the client lets the connection stay open after this exchange: HTTP/1.1 unless it
/// says `close`, HTTP/1.0 only when it says `keep-alive`.
pub fn keep_alive(http11: bool, connection: &[&str]) -> bool {
    let has = |token: &str| {
        connection
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if http11 {
        !has("close")
    } else {
        has("keep-alive")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_the_body_from_the_head() {
        let limit = 1 << 20;
        let cases: &[(&[&str], &[&str], Framing)] = &[
            (&[], &[], Framing::Empty),
            (&["0"], &[], Framing::Empty),
            (&["12"], &[], Framing::Length(12)),
            (&["1048576"], &[], Framing::Length(1048576)),
            (&["1048577"], &[], Framing::TooLarge),
            (&["2097152"], &[], Framing::TooLarge),
            (&["99999999999999999999999"], &[], Framing::TooLarge),
            (&["12", " 12"], &[], Framing::Length(12)),
            (
                &["12", "13"],
                &[],
                Framing::Invalid("conflicting Content-Length headers"),
            ),
            (
                &["-1"],
                &[],
                Framing::Invalid("Content-Length is not a number"),
            ),
            (
                &["1e3"],
                &[],
                Framing::Invalid("Content-Length is not a number"),
            ),
            (
                &[""],
                &[],
                Framing::Invalid("Content-Length is not a number"),
            ),
            (&[], &["chunked"], Framing::Chunked),
            (&[], &[" Chunked "], Framing::Chunked),
            (&[], &["gzip, chunked"], Framing::Unsupported),
            (&[], &["gzip", "chunked"], Framing::Unsupported),
            (&[], &["identity"], Framing::Unsupported),
            (
                &["5"],
                &["chunked"],
                Framing::Invalid("both Content-Length and Transfer-Encoding"),
            ),
        ];
        for (cl, te, want) in cases {
            assert_eq!(framing(cl, te, limit), *want, "{cl:?} {te:?}");
        }
    }

    #[test]
    fn only_100_continue_is_an_expectation_we_meet() {
        let cases: &[(&[&str], bool)] = &[
            (&[], true),
            (&["100-continue"], true),
            (&[" 100-Continue "], true),
            (&["100-continue", "100-continue"], true),
            (&["magic"], false),
            (&["100-continue", "magic"], false),
            (&[""], false),
        ];
        for (expect, want) in cases {
            assert_eq!(expectation(expect), *want, "{expect:?}");
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_tokens() {
        let cases: &[(bool, &[&str], bool)] = &[
            (true, &[], true),
            (true, &["keep-alive"], true),
            (true, &["close"], false),
            (true, &["Upgrade, Close"], false),
            (true, &["keep-alive", "close"], false),
            (false, &[], false),
            (false, &["Keep-Alive"], true),
            (false, &["close"], false),
        ];
        for (http11, connection, want) in cases {
            assert_eq!(
                keep_alive(*http11, connection),
                *want,
                "{http11} {connection:?}"
            );
        }
    }
}
