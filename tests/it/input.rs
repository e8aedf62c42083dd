//! Bad input is rejected with exit 2 and a message naming the problem, and changes nothing
//! (SPEC §9 input patterns, §12 exit codes, §11 config validation).

use crate::support::{self, Run, World, git, orch_bin};

/// Everything a rejected command could have changed.
fn fingerprint(w: &World) -> String {
    w.sql(
        "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM transitions), \
         (SELECT count(*) FROM jobs), (SELECT count(*) FROM transition_lease), \
         (SELECT count(*) FROM repo_freeze), \
         (SELECT group_concat(work_item || ':' || stage || ':' || coalesce(paused_at, '-') || ':' \
          || coalesce(approved_at, '-') || ':' || coalesce(cancelled_at, '-') || ':' \
          || updated_at, ',') FROM tasks), \
         (SELECT group_concat(id || ':' || status, ',') FROM jobs)",
    )
}

/// Run, expect exit 2 with `needle` on stderr, and prove the database did not change.
fn rejected(w: &World, args: &[&str], needle: &str) -> Run {
    let before = fingerprint(w);
    let r = w.orch(args);
    assert_eq!(r.code, 2, "orch {args:?} should be rejected:\n{r:?}");
    assert!(
        r.stderr.contains(needle),
        "orch {args:?}: stderr should name `{needle}`:\n{r:?}"
    );
    assert!(
        r.stderr.starts_with("error: ") || r.stderr.contains("error:"),
        "{r:?}"
    );
    assert_eq!(fingerprint(w), before, "orch {args:?} changed the database");
    r
}

#[test]
fn bad_and_unknown_work_items_are_rejected_everywhere() {
    let w = World::new();
    w.add("First", &[]);
    for bad in ["SHOP-99", "../x", "A-1;rm -rf /", "demo-1", ""] {
        let needle = if bad == "SHOP-99" {
            "not found"
        } else {
            "invalid work item id"
        };
        let commands: [Vec<&str>; 8] = [
            vec!["task", "show", bad],
            vec!["advance", bad],
            vec!["pause", bad, "--reason", "x"],
            vec!["resume", bad],
            vec!["approve", bad],
            vec!["cancel", bad],
            vec!["why", bad],
            vec!["lease", "release", bad],
        ];
        for args in &commands {
            let r = rejected(&w, args, needle);
            if bad == "SHOP-99" {
                assert!(r.stderr.contains("`SHOP-99`"), "{r:?}");
                assert!(r.stderr.contains("orch task list --all"), "{r:?}");
            }
            assert_eq!(r.stdout, "", "orch {args:?} printed data on a rejection");
        }
    }
    // The hostile id was printed, never executed, and the world is intact.
    assert!(w.dir.path().join("remote.git").exists());
    assert_eq!(w.stage("SHOP-1"), "analysis");
}

#[test]
fn task_add_rejects_bad_ids_repos_and_titles() {
    let w = World::new();
    w.add("First", &[]);
    let add = |extra: &[&'static str]| {
        let mut a = vec!["task", "add", "--repo", "shop", "--title", "t"];
        a.extend_from_slice(extra);
        a
    };
    for bad in ["", "../x", "shop-5", "SHOP-5;ls", "SHOP-1234567890"] {
        let mut args = vec![
            "task",
            "add",
            "--repo",
            "shop",
            "--title",
            "t",
            "--work-item",
        ];
        args.push(bad);
        rejected(&w, &args, "invalid work item id");
    }
    rejected(&w, &add(&["--work-item", "SHOP-1"]), "already exists");
    let r = rejected(
        &w,
        &["task", "add", "--repo", "nope", "--title", "t"],
        "unknown repo",
    );
    assert!(
        r.stderr.contains("shop"),
        "the message lists the configured repos: {r:?}"
    );
    rejected(
        &w,
        &["task", "add", "--repo", "../x", "--title", "t"],
        "unknown repo",
    );
    rejected(
        &w,
        &["task", "add", "--repo", "shop", "--title", ""],
        "--title",
    );
    rejected(
        &w,
        &["task", "add", "--repo", "shop", "--title", "two\nlines"],
        "--title",
    );
    rejected(&w, &add(&["--label", "a;b"]), "invalid label");
    rejected(
        &w,
        &add(&["--description-file", "/nonexistent/x.md"]),
        "cannot read",
    );
    rejected(&w, &add(&["--depends-on", "SHOP-42"]), "not found");
    assert_eq!(w.sql("SELECT count(*) FROM tasks"), "1");
}

#[test]
fn advance_rejects_unknown_stages_and_overrides_without_reason() {
    let w = World::new();
    w.add("First", &[]);
    rejected(
        &w,
        &["advance", "SHOP-1", "--to", "deploying", "--reason", "x"],
        "invalid value 'deploying' for '--to <STAGE>'",
    );
    rejected(
        &w,
        &["advance", "SHOP-1", "--to", "development"],
        "--reason",
    );
    rejected(
        &w,
        &["advance", "SHOP-1", "--to", "development", "--reason", "  "],
        "non-empty",
    );
    rejected(
        &w,
        &["advance", "SHOP-1", "--expect-stage", "nowhere"],
        "possible values: created, analysis,",
    );
    rejected(&w, &["advance", "SHOP-1", "--as", "poet"], "poet");
    rejected(
        &w,
        &["advance", "SHOP-1", "--to", "created", "--reason", "x"],
        "created",
    );
    rejected(
        &w,
        &["advance", "SHOP-1", "--to", "cancelled", "--reason", "x"],
        "orch cancel",
    );
    rejected(
        &w,
        &["pause", "SHOP-1", "--reason", "x", "--before", "nowhere"],
        "invalid value 'nowhere' for '--before <STAGE>'",
    );
    rejected(&w, &["pause", "SHOP-1"], "--reason");
    rejected(&w, &["pause", "SHOP-1", "--reason", " "], "--reason");
    assert_eq!(w.stage("SHOP-1"), "analysis");
}

#[test]
fn terminal_tasks_cannot_be_paused_or_resumed() {
    let w = World::new();
    w.add("First", &[]);
    w.add("Second", &[]);
    w.ok(&["cancel", "SHOP-1"], 0);
    let r = rejected(&w, &["pause", "SHOP-1", "--reason", "x"], "cannot pause");
    assert!(r.stderr.contains("cancelled"), "{r:?}");
    rejected(&w, &["resume", "SHOP-1"], "cancelled");
    rejected(&w, &["cancel", "SHOP-1"], "already");
    rejected(&w, &["approve", "SHOP-1"], "cancelled");

    w.ok(
        &[
            "advance",
            "SHOP-2",
            "--to",
            "done",
            "--reason",
            "shipped by hand",
        ],
        0,
    );
    assert_eq!(w.stage("SHOP-2"), "done");
    let r = rejected(&w, &["pause", "SHOP-2", "--reason", "x"], "cannot pause");
    assert!(r.stderr.contains("`done`"), "{r:?}");
    rejected(&w, &["resume", "SHOP-2"], "done");
    rejected(&w, &["advance", "SHOP-2"], "already `done`");
    rejected(&w, &["approve", "SHOP-2"], "not `analysis`");
}

#[test]
fn a_hostile_title_gives_a_safe_branch_slug() {
    let w = World::new();
    let title = "$(rm -rf /); echo";
    let wi = w.add(title, &[]);
    let branch = w.branch_of(&wi);
    assert_eq!(branch, format!("feature/{wi}-rm-rf-echo"));
    git(w.dir.path(), &["check-ref-format", "--branch", &branch]);
    assert_eq!(
        w.sql(&format!("SELECT title FROM tasks WHERE work_item = '{wi}'")),
        title,
        "the title is stored verbatim"
    );
    // Nothing but punctuation still yields a valid branch.
    let wi = w.add("'; DROP TABLE tasks; --", &[]);
    assert_eq!(w.branch_of(&wi), format!("feature/{wi}-drop-table-tasks"));
    let wi = w.add("!!! ../.. ***", &[]);
    assert_eq!(w.branch_of(&wi), format!("feature/{wi}-task"));
    assert_eq!(w.sql("SELECT count(*) FROM tasks"), "3");
}

fn with_config(yaml: &str) -> (support::TempDir, std::path::PathBuf, Run) {
    let dir = support::tempdir();
    let path = dir.path().join("orch.yaml");
    std::fs::write(&path, yaml).unwrap();
    let r = Run::of(
        std::process::Command::new(orch_bin())
            .arg("--config")
            .arg(&path)
            .args(["task", "list"])
            .env_remove("ORCH_CONFIG")
            .env_remove("ORCH_STATE_DIR")
            .env_remove("ORCH_MAX_CONCURRENCY"),
    );
    (dir, path, r)
}

#[test]
fn bad_configs_name_the_key_and_the_file() {
    for (yaml, key) in [
        ("max_concurrency: two\n", "max_concurrency"),
        ("max_concurrency: 0\n", "max_concurrency"),
        (
            "repos: [ {name: Shop, remote: /tmp/x, prefix: SHOP} ]\n",
            "repos[0].name",
        ),
        (
            "repos: [ {name: shop, remote: /tmp/x, prefix: shop} ]\n",
            "repos[0].prefix",
        ),
        (
            "repos: [ {name: shop, remote: /tmp/x, prefix: SHOP, colour: red} ]\n",
            "colour",
        ),
    ] {
        let (dir, path, r) = with_config(&format!("state_dir: st\n{yaml}"));
        assert_eq!(r.code, 2, "{yaml:?}:\n{r:?}");
        assert!(
            r.stderr.contains(key),
            "{yaml:?} should name `{key}`:\n{r:?}"
        );
        assert!(
            r.stderr.contains(&path.display().to_string()),
            "{yaml:?} should name the file:\n{r:?}"
        );
        drop(dir);
    }
    for malformed in [
        "repos: [\n  - name: shop\n",
        "max_concurrency: : :\n",
        "\t- x: [\n",
    ] {
        let (_dir, path, r) = with_config(malformed);
        assert_eq!(r.code, 2, "{malformed:?}:\n{r:?}");
        assert!(r.stderr.contains("invalid config"), "{malformed:?}:\n{r:?}");
        assert!(r.stderr.contains(&path.display().to_string()), "{r:?}");
    }
    // A config file that does not exist.
    let out = std::process::Command::new(orch_bin())
        .args(["--config", "/nonexistent/orch.yaml", "task", "list"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/orch.yaml"), "{stderr}");
}

#[test]
fn a_bad_config_leaves_the_state_alone() {
    let w = World::new();
    w.add("First", &[]);
    let before = fingerprint(&w);
    let good = std::fs::read_to_string(&w.config).unwrap();
    std::fs::write(
        &w.config,
        good.replace("max_concurrency: 2", "max_concurrency: two"),
    )
    .unwrap();
    for args in [
        vec!["cancel", "SHOP-1"],
        vec!["pause", "SHOP-1", "--reason", "x"],
        vec!["task", "add", "--repo", "shop", "--title", "t"],
    ] {
        let r = w.orch(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("max_concurrency"), "{r:?}");
        assert!(r.stderr.contains(&w.config.display().to_string()), "{r:?}");
    }
    std::fs::write(&w.config, good).unwrap();
    assert_eq!(fingerprint(&w), before);
}
