//! Who acted (issue 12, item 7) and what an operator may type (items 10 and 12): history rows
//! name the person, `--reason` and titles are one plain line, `--reason` needs `--to`, a second
//! breakpoint says it replaced the first.

use crate::support::{World, transitions};

#[test]
fn history_rows_record_the_person_not_just_operator() {
    let w = World::new();
    let wi = w.add("Audit me", &[]);
    // sudo: the person behind it, not root.
    let r = w.orch_with(
        &["pause", &wi, "--reason", "lunch"],
        &[("SUDO_USER", "alice"), ("USER", "root")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = w.orch_with(&["resume", &wi], &[("SUDO_USER", ""), ("USER", "bob")]);
    assert_eq!(r.code, 0, "{r:?}");
    w.push_analysis(&wi);
    let r = w.orch_with(
        &[
            "advance",
            &wi,
            "--to",
            "architecture",
            "--reason",
            "ok",
            "--by",
            "carol",
        ],
        &[("SUDO_USER", "alice")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let show = w.show(&wi);
    let rows = transitions(&show);
    let by: Vec<(&str, &str)> = rows
        .iter()
        .map(|t| {
            (
                t["outcome"].as_str().unwrap(),
                t["by"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert!(by.contains(&("paused", "alice")), "{by:?}");
    assert!(by.contains(&("resumed", "bob")), "{by:?}");
    assert!(by.contains(&("override", "carol")), "{by:?}");
    let text = w.ok(&["task", "show", &wi], 0).stdout;
    assert!(text.contains("operator (alice)"), "{text}");
    let rep = w.ok(&["report", "overrides", "--json"], 0).json();
    assert_eq!(rep["overrides"][0]["by"], "carol", "{rep:#}");
    let rep = w.ok(&["report", "overrides"], 0).stdout;
    assert!(rep.contains("carol"), "{rep}");
    // A name that is no name is refused.
    let r = w.orch(&["pause", &wi, "--reason", "x", "--by", "eve\u{202e}"]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn reasons_and_titles_are_one_plain_line_of_at_most_1000_characters() {
    let w = World::new();
    let wi = w.add("Fine", &[]);
    let long = "x".repeat(1001);
    for args in [
        vec!["task", "add", "--repo", "shop", "--title", long.as_str()],
        vec!["task", "add", "--repo", "shop", "--title", "two\nlines"],
        vec!["pause", wi.as_str(), "--reason", "a\u{202e}b"],
        vec!["pause", wi.as_str(), "--reason", long.as_str()],
        vec!["freeze", "shop", "--reason", "bell\u{7}"],
        vec!["cancel", wi.as_str(), "--reason", "one\ntwo"],
        vec![
            "advance",
            wi.as_str(),
            "--to",
            "architecture",
            "--reason",
            "a\rb",
        ],
    ] {
        let r = w.orch(&args);
        assert_eq!(r.code, 2, "orch {args:?}: {r:?}");
    }
    assert_eq!(w.sql("SELECT count(*) FROM tasks"), "1");
    assert_eq!(w.stage(&wi), "analysis");
}

#[test]
fn reason_without_to_is_bad_usage_not_a_silent_gate_run() {
    let w = World::new();
    let wi = w.add("Gate", &[]);
    let before = w.sql("SELECT count(*) FROM transitions");
    let r = w.orch(&["advance", &wi, "--reason", "because"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--to"), "{r:?}");
    assert_eq!(w.sql("SELECT count(*) FROM transitions"), before);
}

#[test]
fn a_second_breakpoint_says_it_replaced_the_first() {
    let w = World::new();
    let wi = w.add("Breakpoints", &[]);
    let r = w.ok(
        &["pause", &wi, "--reason", "look", "--before", "testing"],
        0,
    );
    assert!(!r.stdout.contains("replaces"), "{r:?}");
    let r = w.ok(&["pause", &wi, "--reason", "look", "--before", "review"], 0);
    assert!(
        r.stdout
            .contains("replaces the breakpoint before `testing`"),
        "{r:?}"
    );
    assert_eq!(w.show(&wi)["pause_before"], "review");
}

#[test]
fn tables_fit_the_width_and_cut_long_cells_with_an_ellipsis() {
    let w = World::new();
    let title = "A very long title ".repeat(55);
    let title = title.trim();
    assert!(title.chars().count() <= 1000);
    w.add(title, &[]);
    let r = w.orch_with(&["task", "list"], &[("COLUMNS", "80")]);
    assert_eq!(r.code, 0, "{r:?}");
    for l in r.stdout.lines() {
        assert!(l.chars().count() <= 80, "a line wider than COLUMNS: {l:?}");
    }
    assert!(r.stdout.contains('…'), "{r:?}");
    assert!(r.stdout.lines().count() <= 6, "the row wrapped: {r:?}");
    // Without a terminal or COLUMNS, a cell is still cut.
    let r = w.ok(&["task", "list"], 0);
    assert!(r.stdout.lines().all(|l| l.chars().count() < 400), "{r:?}");
    assert!(r.stdout.contains('…'), "{r:?}");
}

#[test]
fn an_empty_task_list_points_at_all() {
    let w = World::new();
    let wi = w.add("Soon gone", &[]);
    w.ok(&["cancel", &wi], 0);
    let r = w.ok(&["task", "list"], 0);
    assert!(r.stdout.contains("orch task list --all"), "{r:?}");
    let r = w.ok(&["task", "list", "--all"], 0);
    assert!(r.stdout.contains(&wi), "{r:?}");
}

/// `advance --to` on a done task suggested `orch task add --work-item` for the same id, which
/// `task add` then refused (the id is taken); only a cancelled task's id is free again.
#[test]
fn a_hint_never_points_at_a_command_that_is_refused() {
    let w = World::new();
    let done = w.add("Finished", &[]);
    w.ok(
        &[
            "advance",
            &done,
            "--to",
            "done",
            "--reason",
            "shipped by hand",
        ],
        0,
    );
    let r = w.orch(&["advance", &done, "--to", "development", "--reason", "more"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!r.stderr.contains("--work-item"), "{r:?}");
    assert!(
        r.stderr.contains("orch task add --repo shop --title"),
        "{r:?}"
    );

    let gone = w.add("Cancelled", &[]);
    w.ok(&["cancel", &gone], 0);
    let r = w.orch(&["advance", &gone, "--to", "development", "--reason", "again"]);
    assert_eq!(r.code, 2, "{r:?}");
    let hint = r
        .stderr
        .split('`')
        .find(|s| s.starts_with("orch task add"))
        .unwrap();
    assert_eq!(
        hint,
        format!("orch task add --repo shop --work-item {gone} --title …")
    );
    // The hint works as written.
    w.ok(
        &[
            "task",
            "add",
            "--repo",
            "shop",
            "--work-item",
            &gone,
            "--title",
            "Again",
        ],
        0,
    );
}
