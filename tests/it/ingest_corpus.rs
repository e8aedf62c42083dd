//! A corpus of well over 1,000 malformed or hostile, correctly signed deliveries (every prefix
//! of valid payloads, wrong types for every field routing reads, huge numbers, 10,000-deep
//! nesting, path-like ids, shell-like branch names, control characters, invalid UTF-8, empty
//! bodies) fed through the real `orch ingest plane|gitea`: no panic, no task, and every one in
//! the inbox as `rejected` or `ignored` (or `duplicate`, a copy of an ignored one) with a
//! reason. The unmutated payloads, sent last, do act, so the corpus exercises the live routing
//! path and not a dead end.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::support::webhooks::{self, PLANE_PROJECT, signed_headers, signed_services};
use crate::support::{Run, World, feed, lanes};
use serde_json::{Value, json};

const PLANE_VAR: &str = "ORCH_CORPUS_PLANE_SECRET";
const GITEA_VAR: &str = "ORCH_CORPUS_GITEA_SECRET";
const SECRET: &str = "corpus-secret";

/// `orch ingest <source> [--json]` of a delivery of `event` signed with [`SECRET`].
fn ingest(w: &World, source: &str, event: &str, delivery: &str, body: &[u8], json: bool) -> Run {
    let mut args = vec!["ingest".to_string(), source.to_string()];
    if json {
        args.push("--json".into());
    }
    for (name, value) in signed_headers(source, delivery, event, SECRET, body) {
        args.push("--header".into());
        args.push(format!("{name}: {value}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    feed(
        w.orch_cmd(&args)
            .env(PLANE_VAR, SECRET)
            .env(GITEA_VAR, SECRET),
        body,
    )
}

/// A Plane *To Analyse* issue for a mapped project: sent as is, it creates a task.
fn plane_base() -> Value {
    json!({
        "event": "issue",
        "action": "updated",
        "webhook_id": "0c5e2a4c-1111-4222-8333-944455556666",
        "workspace_id": "d2d97c94-a6ad-4012-b526-5577c0d7c769",
        "data": {
            "id": "1a2b3c4d-0000-4000-8000-000000000060",
            "sequence_id": 60,
            "name": "Corpus base",
            "project": PLANE_PROJECT,
            "project_detail": {"identifier": "SHOP"},
            "state": "5e6f",
            "state_detail": {"id": "5e6f", "name": "To Analyse", "group": "unstarted"},
            "labels": [{"id": "l-1", "name": "bug"}],
            "description_stripped": "base"
        }
    })
}

/// A Gitea commit status for the configured repo (recorded when sent as is).
fn status_base() -> Value {
    json!({
        "sha": "0123456789abcdef0123456789abcdef01234567",
        "state": "success",
        "context": "ci/build",
        "description": "Build passed",
        "target_url": "http://ci.invalid/1",
        "repository": {"name": "shop", "full_name": "team/shop",
                       "clone_url": "http://forge.invalid/team/shop.git", "ssh_url": "git@forge:team/shop.git"}
    })
}

/// A merged Gitea pull request into `main` (ignored: no merge lease is held).
fn pr_base() -> Value {
    json!({
        "action": "closed",
        "number": 3,
        "pull_request": {"merged": true, "head": {"ref": "feature/SHOP-60-corpus-base"},
                         "base": {"ref": "main"}, "merge_commit_sha": "d".repeat(40)},
        "repository": {"name": "shop"}
    })
}

fn set(v: &Value, path: &str, x: Value) -> Value {
    let mut v = v.clone();
    *v.pointer_mut(path)
        .unwrap_or_else(|| panic!("no `{path}` in the base")) = x;
    v
}

/// `v` without the object member at `path` (`None` for an array element).
fn remove(v: &Value, path: &str) -> Option<Value> {
    let mut v = v.clone();
    let (parent, key) = path.rsplit_once('/').unwrap();
    v.pointer_mut(parent)?.as_object_mut()?.remove(key);
    Some(v)
}

/// Values of every JSON type, and hostile strings.
fn candidates() -> Vec<Value> {
    let mut c = vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(1e300),
        json!(u64::MAX),
        json!(i64::MIN),
        json!([]),
        json!([[]]),
        json!([1, "a"]),
        json!({}),
        json!({"a": {"b": []}}),
    ];
    c.extend(hostile_strings().into_iter().map(Value::String));
    c
}

fn hostile_strings() -> Vec<String> {
    [
        "",
        " ",
        "x",
        "../../x",
        "..",
        "/etc/passwd",
        "feature/x;rm -rf ~",
        "feature/x;id",
        "$(touch /tmp/orch-pwned)",
        "$(id)",
        "`id`",
        "a\nb",
        "a\r\nX-Injected: 1",
        "tab\there",
        "nul\u{0}byte",
        "esc\u{1b}[31mred",
        "SHOP-1",
        "shop",
        "ＳＨＯＰ",
        "To Analyse\n",
        "\u{202e}txet",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        "A".repeat(17),
        "9".repeat(40),
        "x".repeat(70_000),
        "é".repeat(300),
    ])
    .collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A field routing reads, and which values are still valid there (the payload would act).
type Field<'a> = (&'a str, &'a dyn Fn(&Value) -> bool);

struct Body {
    source: &'static str,
    event: &'static str,
    bytes: Vec<u8>,
    what: String,
}

fn corpus() -> Vec<Body> {
    let mut out = Vec::new();
    let mut push = |source: &'static str, event: &'static str, bytes: Vec<u8>, what: String| {
        out.push(Body {
            source,
            event,
            bytes,
            what,
        })
    };
    let plane = serde_json::to_vec(&plane_base()).unwrap();
    let status = serde_json::to_vec(&status_base()).unwrap();
    let pr = serde_json::to_vec(&pr_base()).unwrap();

    // Every proper prefix of the Plane payload (the empty body included), every other one of
    // the Gitea payloads (they exercise the same parser; this keeps the run short).
    for (source, event, full, step) in [
        ("plane", "issue", &plane, 1),
        ("gitea", "status", &status, 2),
        ("gitea", "pull_request", &pr, 2),
    ] {
        for n in (0..full.len()).step_by(step) {
            push(
                source,
                event,
                full[..n].to_vec(),
                format!("{event} prefix {n}"),
            );
        }
    }

    // Wrong types (and hostile strings) for every field routing reads. `skip` lists what is
    // still a valid value there, so the payload would rightly act.
    let plane_fields: &[Field] = &[
        ("/event", &|v| {
            v.is_null() || v == "issue" || v == "work_item"
        }),
        ("/action", &|_| false),
        ("/data", &|_| false),
        ("/data/id", &|v| {
            v.is_null() || v.as_str().is_some_and(opaque_id)
        }),
        ("/data/sequence_id", &|_| false),
        ("/data/name", &|v| {
            v.as_str()
                .is_some_and(|s| s.chars().any(|c| !c.is_whitespace() && !c.is_control()))
        }),
        ("/data/project", &|_| false),
        ("/data/project_detail", &|v| v.is_null() || v.is_object()),
        ("/data/project_detail/identifier", &|v| {
            v.is_null() || v == "SHOP"
        }),
        // A string state is a UUID: the name then comes from `state_detail`.
        ("/data/state", &|v| v.is_null() || v.is_string()),
        ("/data/state_detail", &|_| false),
        ("/data/state_detail/name", &|_| false),
        ("/data/labels", &|v| v.is_null() || v == &json!([])),
        ("/data/labels/0", &|v| v.is_string() || v.is_object()),
        ("/data/labels/0/name", &|v| v.is_null() || v.is_string()),
        ("/data/description_stripped", &|v| {
            v.is_null() || v.is_string()
        }),
    ];
    for (path, valid) in plane_fields {
        for c in candidates() {
            if valid(&c) {
                continue;
            }
            let body = set(&plane_base(), path, c.clone());
            push(
                "plane",
                "issue",
                serde_json::to_vec(&body).unwrap(),
                format!("plane {path} = {} {}", kind(&c), trunc(&c)),
            );
        }
        if !valid(&Value::Null)
            && let Some(body) = remove(&plane_base(), path)
        {
            push(
                "plane",
                "issue",
                serde_json::to_vec(&body).unwrap(),
                format!("plane without {path}"),
            );
        }
    }
    let status_fields: &[Field] = &[
        ("/sha", &|v| {
            v.as_str().is_some_and(|s| {
                s.len() == 40
                    && s.bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            })
        }),
        ("/state", &|_| false),
        ("/context", &|v| {
            v.is_null() || v.as_str().is_some_and(|s| line_of(s, 255))
        }),
        ("/description", &|v| v.is_null() || v.is_string()),
        ("/repository", &|_| false),
        // The repo is matched by its full name (`owner/name`), so any name of the right shape
        // still acts, and only `team/shop` as the full name does.
        ("/repository/name", &|v| {
            v.as_str().is_some_and(|s| line_of(s, 256))
        }),
        ("/repository/full_name", &|v| {
            v.as_str()
                .is_some_and(|s| s.eq_ignore_ascii_case("team/shop"))
        }),
        ("/repository/clone_url", &|v| {
            v.is_null() || v.as_str().is_some_and(|s| line_of(s, 1024))
        }),
        ("/repository/ssh_url", &|v| {
            v.is_null() || v.as_str().is_some_and(|s| line_of(s, 1024))
        }),
    ];
    let pr_fields: &[Field] = &[
        ("/action", &|_| false),
        ("/pull_request", &|_| false),
        ("/pull_request/merged", &|_| false),
        ("/pull_request/head", &|_| false),
        ("/pull_request/head/ref", &|_| false),
        ("/pull_request/base", &|_| false),
        ("/pull_request/base/ref", &|_| false),
        ("/pull_request/merge_commit_sha", &|_| false),
        ("/repository", &|_| false),
        ("/repository/name", &|_| false),
    ];
    for (event, base, fields) in [
        ("status", status_base(), status_fields),
        ("pull_request", pr_base(), pr_fields),
    ] {
        for (path, valid) in fields {
            for c in candidates() {
                if valid(&c) {
                    continue;
                }
                let body = set(&base, path, c.clone());
                push(
                    "gitea",
                    event,
                    serde_json::to_vec(&body).unwrap(),
                    format!("{event} {path} = {} {}", kind(&c), trunc(&c)),
                );
            }
        }
    }

    // Numbers no field can hold, written as raw JSON text.
    let plane_text = String::from_utf8(plane.clone()).unwrap();
    for n in [
        "1e400",
        "-1e400",
        "123456789012345678901234567890",
        "-0",
        "1e-400",
        "0.0000001",
        "7e2",
        "NaN",
        "Infinity",
        "0x10",
        "00060",
    ] {
        push(
            "plane",
            "issue",
            plane_text
                .replace("\"sequence_id\":60", &format!("\"sequence_id\":{n}"))
                .into_bytes(),
            format!("sequence_id {n}"),
        );
    }

    // Deep nesting, alone and inside an otherwise plausible payload.
    for (source, event) in [("plane", "issue"), ("gitea", "status")] {
        let deep = 10_000;
        push(
            source,
            event,
            "[".repeat(deep).into_bytes(),
            "[[[[ open".into(),
        );
        push(
            source,
            event,
            format!("{}{}", "[".repeat(deep), "]".repeat(deep)).into_bytes(),
            "[[[[ closed".into(),
        );
        push(
            source,
            event,
            format!(
                "{{\"event\":\"issue\",\"data\":{}1{}}}",
                "{\"a\":".repeat(deep),
                "}".repeat(deep)
            )
            .into_bytes(),
            "{\"a\": nested".into(),
        );
    }

    // Invalid UTF-8 and bad escapes inside strings.
    for (i, bad) in [
        &b"\xff"[..],
        b"\xc3",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\\ud800",
        b"\\x41",
        b"\x00",
    ]
    .iter()
    .enumerate()
    {
        let mut b = Vec::new();
        let at = plane_text.find("Corpus base").unwrap();
        b.extend_from_slice(&plane[..at]);
        b.extend_from_slice(bad);
        b.extend_from_slice(&plane[at..]);
        push("plane", "issue", b, format!("bad bytes {i} in a string"));
        let mut b = status.clone();
        b.insert(0, bad[0]);
        push("gitea", "status", b, format!("bad byte {i} first"));
    }

    // Not objects at all, and trailing garbage.
    for (i, text) in [
        "",
        " ",
        "\n",
        "null",
        "true",
        "0",
        "\"issue\"",
        "[]",
        "{}",
        "[{}]",
        "{\"event\":null}",
        "{} {}",
        "{}x",
        "\u{feff}{}",
    ]
    .iter()
    .enumerate()
    {
        push(
            "plane",
            "issue",
            text.as_bytes().to_vec(),
            format!("plane scalar {i}"),
        );
        push(
            "gitea",
            "status",
            text.as_bytes().to_vec(),
            format!("gitea scalar {i}"),
        );
    }
    let mut trailing = plane.clone();
    trailing.extend_from_slice(b" {}");
    push("plane", "issue", trailing, "trailing object".into());
    out
}

/// A free one-line label of at most `max` characters (a status context, a URL): every such
/// value is valid there.
fn line_of(s: &str, max: usize) -> bool {
    s.chars().count() <= max && !s.chars().any(char::is_control)
}

/// What Plane ids look like: 1–64 characters of `[A-Za-z0-9_-]`.
fn opaque_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn trunc(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(40).collect()
}

#[test]
fn a_thousand_hostile_signed_deliveries_never_panic_and_never_create_a_task() {
    // Eight `orch ingest` at a time for over a thousand deliveries: nothing else runs meanwhile.
    let _alone = lanes::alone();
    let w = webhooks::world(&signed_services(PLANE_VAR, GITEA_VAR));
    w.ok(&["tick"], 0); // creates the state database (the read commands never do)

    let bodies = corpus();
    assert!(bodies.len() >= 1000, "only {} bodies", bodies.len());
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(b) = bodies.get(i) else { break };
                    let delivery = format!("corpus-{i}");
                    let r = ingest(&w, b.source, b.event, &delivery, &b.bytes, false);
                    if r.code != 0 && r.code != 2 {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("#{i} ({}): {r:?}", b.what));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} deliveries crashed or failed, first: {}",
        failures.len(),
        failures[0]
    );
    eprintln!(
        "{} hostile deliveries in {:.1}s",
        bodies.len(),
        started.elapsed().as_secs_f64()
    );

    assert_eq!(
        w.sql("SELECT count(*) FROM tasks"),
        "0",
        "no task was created"
    );
    assert_eq!(
        w.sql("SELECT count(*) FROM events"),
        bodies.len().to_string(),
        "every delivery has its inbox row"
    );
    // Some mutations give the same bytes (a field set to `[]` or removed, say): the later copy
    // of an ignored body is a duplicate, which acts no more than the first.
    let wrong = w.sql(
        "SELECT delivery_id || ' ' || outcome || ' ' || reason FROM events \
         WHERE outcome NOT IN ('rejected', 'ignored', 'duplicate') OR trim(reason) = '' LIMIT 5",
    );
    assert_eq!(
        w.sql(
            "SELECT count(*) FROM events d WHERE d.outcome = 'duplicate' AND NOT EXISTS \
             (SELECT 1 FROM events a WHERE a.source = d.source AND a.body_sha256 = d.body_sha256 \
              AND a.outcome = 'ignored' AND a.id < d.id)"
        ),
        "0",
        "a duplicate is a copy of an earlier ignored body"
    );
    if !wrong.is_empty() {
        let first: usize = wrong
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("corpus-"))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        panic!(
            "deliveries accepted or without a reason:\n{wrong}\nfirst body: {}",
            bodies[first].what
        );
    }
    let by_outcome =
        w.sql("SELECT outcome, count(*) FROM events GROUP BY outcome ORDER BY outcome");
    assert!(
        by_outcome.contains("ignored|") && by_outcome.contains("rejected|"),
        "both outcomes occur: {by_outcome}"
    );
    assert!(
        !std::path::Path::new("/tmp/orch-pwned").exists(),
        "nothing from a payload ran"
    );

    // The control: the unmutated payloads do act, so the corpus probed the live path.
    for (source, event, body, outcome) in [
        ("plane", "issue", plane_base(), "processed"),
        ("gitea", "status", status_base(), "processed"),
    ] {
        let body = serde_json::to_vec(&body).unwrap();
        let r = ingest(&w, source, event, &format!("control-{source}"), &body, true);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.json()["outcome"], outcome, "{r:?}");
    }
    assert_eq!(
        w.sql("SELECT work_item, stage FROM tasks"),
        "SHOP-60|analysis"
    );
}
