//! A small client of the Telegram Bot API (the chat): `sendMessage` with HTML parse mode and
//! no link previews, through the one `Http` agent (timeouts).
//!
//! The bot token is part of the URL path (`/bot<token>/sendMessage`), so this module never
//! puts the URL in an error and redacts the token from every error text it returns. Reading
//! the token from the environment and composing the message are the caller's job.

use serde::Deserialize;

use crate::ext::http::{CallError, GetResult, Http, Method};

pub const DEFAULT_BASE_URL: &str = "https://api.telegram.org";

pub struct Telegram<'a> {
    http: &'a Http,
    base: String,
    token: String,
}

#[derive(Deserialize)]
struct RawAnswer {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    result: Option<RawMessage>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<RawParameters>,
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    message_id: i64,
}

#[derive(Deserialize)]
struct RawParameters {
    #[serde(default)]
    retry_after: Option<u64>,
}

/// A chat id as Telegram takes it: a (possibly negative) integer or `@channelname`.
pub fn valid_chat_id(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let numeric =
        !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit());
    let channel = s.strip_prefix('@').is_some_and(|n| {
        !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    numeric || channel
}

/// Escape text for Telegram's HTML parse mode (`<`, `>`, `&`, and `"` inside attributes).
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

impl<'a> Telegram<'a> {
    pub fn new(http: &'a Http, base_url: Option<&str>, token: &str) -> Telegram<'a> {
        Telegram {
            http,
            base: base_url
                .unwrap_or(DEFAULT_BASE_URL)
                .trim_end_matches('/')
                .to_string(),
            token: token.to_string(),
        }
    }

    /// Send `html` (already escaped where it holds outside text) to `chat_id`; the message id.
    pub fn send_message(&self, chat_id: &str, html: &str) -> Result<i64, CallError> {
        let what = "send telegram message";
        if !valid_chat_id(chat_id) {
            return Err(CallError::Permanent(format!(
                "{what}: invalid chat id `{}`",
                crate::domain::ids::printable(chat_id)
            )));
        }
        if self.token.is_empty() || self.token.contains('/') || self.token.contains('?') {
            return Err(CallError::Permanent(format!(
                "{what}: the bot token is malformed"
            )));
        }
        let url = format!("{}/bot{}/sendMessage", self.base, self.token);
        let body = serde_json::json!({
            "chat_id": chat_id,
            "text": html,
            "parse_mode": "HTML",
            "disable_web_page_preview": true,
            "link_preview_options": { "is_disabled": true },
        })
        .to_string();
        let r = self.http.send(Method::Post, &url, &[], Some(&body));
        if let Some(e) = CallError::from_result(what, &r) {
            return Err(e.redacted(&self.token));
        }
        let GetResult::Answer { status, body } = r else {
            unreachable!("classified above")
        };
        let answer: Option<RawAnswer> = serde_json::from_str(&body).ok();
        if (200..300).contains(&status)
            && let Some(a) = &answer
            && a.ok
        {
            return Ok(a.result.as_ref().map(|m| m.message_id).unwrap_or_default());
        }
        // Telegram's own words are more useful than the raw body; neither holds the token, but
        // redact anyway.
        let desc = answer
            .as_ref()
            .and_then(|a| a.description.clone())
            .unwrap_or(body);
        let mut e = CallError::from_status(what, status, &desc).redacted(&self.token);
        if let CallError::Transient { retry_after_s, .. } = &mut e {
            *retry_after_s = answer
                .and_then(|a| a.parameters)
                .and_then(|p| p.retry_after);
        }
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html(r#"<b>&"x"</b>"#),
            "&lt;b&gt;&amp;&quot;x&quot;&lt;/b&gt;"
        );
        assert_eq!(escape_html("plain – text"), "plain – text");
    }

    #[test]
    fn chat_ids_are_checked() {
        for ok in ["-100123", "42", "@orch_alerts"] {
            assert!(valid_chat_id(ok), "{ok}");
        }
        for bad in ["", "-", "12a", "@", "@a/b", "1 2"] {
            assert!(!valid_chat_id(bad), "{bad}");
        }
    }

    #[test]
    fn errors_never_carry_the_token() {
        let http = Http::new(std::time::Duration::from_millis(500));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let tg = Telegram::new(&http, Some(&format!("http://{addr}")), "123:SECRETTOKEN");
        let e = tg.send_message("-1", "hi").unwrap_err().to_string();
        assert!(!e.contains("SECRETTOKEN"), "{e}");
        let tg = Telegram::new(&http, Some("not a url"), "123:SECRETTOKEN");
        let e = tg.send_message("-1", "hi").unwrap_err().to_string();
        assert!(!e.contains("SECRETTOKEN"), "{e}");
    }
}
