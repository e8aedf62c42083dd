//! The journal (issue 12, item 11): an idle tick writes nothing, an action line names the task
//! and the role, and `orch serve` logs one line per request at its default level.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::World;

#[test]
fn an_idle_tick_is_silent_unless_verbose_and_action_lines_name_task_and_role() {
    let w = World::new();
    let r = w.ok(&["tick"], 0);
    assert_eq!(r.stdout, "", "an idle tick printed: {r:?}");
    let r = w.ok(&["tick", "-v"], 0);
    assert!(r.stdout.starts_with("tick: reaped 0"), "{r:?}");
    let wi = w.add("Named", &[]);
    let r = w.ok(&["tick", "--plan"], 0);
    assert!(
        r.stdout
            .contains(&format!("launch job 1 ({wi} analyst, attempt 1)")),
        "{r:?}"
    );
}

#[test]
fn serve_logs_one_line_per_request_by_default() {
    let w = World::new();
    w.ok(&["tick"], 0);
    let mut child = w
        .orch_cmd(&["serve", "--listen", "127.0.0.1:0"])
        .env_remove("ORCH_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let l = lines.next().expect("serve says where it listens").unwrap();
        if let Some(a) = l.strip_prefix("listening on ") {
            break a.trim().to_string();
        }
    };
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let started = Instant::now();
    let mut logged = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        if l.contains("request") && l.contains("/health") {
            logged = Some(l);
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    // Stop the server this test started, by its pid.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let line = logged.expect("a request line in the log");
    assert!(
        line.contains("INFO") && line.contains("status=200"),
        "{line}"
    );
    assert!(!line.contains('\u{1b}'), "{line:?}");
}

/// A task that sits in its stage past `scheduler.stage_alert_after_s` is alerted once per
/// visit: the second tick repeats nothing, a new visit (a later stage entry) alerts again.
#[test]
fn a_task_past_its_stage_age_is_alerted_once_per_visit() {
    let w = World::new();
    w.append_config("scheduler:\n  stage_alert_after_s: 1\n");
    let wi = w.add("Slow", &[]);
    // Dispatch closed: the task waits in analysis with its job queued, not paused or held.
    w.sql(&format!(
        "INSERT INTO breaker (id, open_until, reason) VALUES (1, {}, 'test')",
        crate::support::now() + 3600
    ));
    let alerts = |r: &crate::support::Run| {
        r.stdout
            .lines()
            .filter(|l| l.contains("alert:") && l.contains(&format!("`{wi}` has been in")))
            .count()
    };
    let journaled = || w.sql("SELECT count(*) FROM lessons WHERE kind = 'stage-age'");
    std::thread::sleep(Duration::from_millis(2100));
    let r = w.ok(&["tick"], 0);
    assert_eq!(alerts(&r), 1, "{r:?}");
    let r = w.ok(&["tick"], 0);
    assert_eq!(alerts(&r), 0, "{r:?}");
    assert_eq!(journaled(), "1");
    // A new visit of the stage, entered after that alert.
    w.sql("UPDATE tasks SET stage_entered_at = (SELECT max(at) FROM lessons) + 1");
    std::thread::sleep(Duration::from_millis(3100));
    let r = w.ok(&["tick"], 0);
    assert_eq!(alerts(&r), 1, "{r:?}");
    assert_eq!(journaled(), "2");
}
