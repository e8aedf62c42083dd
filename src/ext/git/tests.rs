//! Tests of `ext::git` on real git: a bare remote and clones in temp directories.

use tempfile::TempDir;

use super::*;

const NAME: &str = "demo";
const ID_NAME: &str = "Orch Test";
const ID_EMAIL: &str = "orch-test@example.invalid";

/// Run git with our environment in `dir`; panics on failure (tests only).
fn run(dir: &Path, args: &[&str]) -> String {
    Git::new(dir)
        .git_in(dir)
        .unwrap()
        .args(args)
        .checked()
        .unwrap()
        .stdout_text()
        .trim()
        .to_owned()
}

/// A bare remote seeded with one commit on main, a scratch clone of it
/// (`seed`) for making remote-side changes, and a `Git` over `repos/`.
struct Fx {
    tmp: TempDir,
    remote: String,
    seed: PathBuf,
    git: Git,
}

impl Fx {
    fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        let seed = tmp.path().join("seed");
        let remote_s = remote.to_str().unwrap().to_owned();
        run(
            tmp.path(),
            &["init", "--quiet", "--bare", "-b", "main", &remote_s],
        );
        run(
            tmp.path(),
            &["clone", "--quiet", &remote_s, seed.to_str().unwrap()],
        );
        let fx = Fx {
            git: Git::new(tmp.path().join("repos")),
            tmp,
            remote: remote_s,
            seed,
        };
        run(&fx.seed, &["checkout", "--quiet", "-b", "main"]);
        fx.write("README.md", "hello\n");
        fx.write("src/lib.rs", "// lib\n");
        fx.write("docs/work-items/X-0.md", "# X-0\n");
        fx.commit_push("main", "seed");
        fx
    }

    fn repo(&self) -> RepoRef<'_> {
        RepoRef {
            name: NAME,
            remote: &self.remote,
            main: "main",
        }
    }

    fn write(&self, rel: &str, content: &str) {
        write_in(&self.seed, rel, content);
    }

    /// Commit everything in seed and push it to `branch`; returns the sha.
    fn commit_push(&self, branch: &str, msg: &str) -> String {
        let sha = commit_in(&self.seed, msg);
        run(
            &self.seed,
            &[
                "push",
                "--quiet",
                "--force",
                "origin",
                &format!("HEAD:refs/heads/{branch}"),
            ],
        );
        sha
    }

    /// Point seed's checkout at `start` on local branch `branch`.
    fn seed_branch(&self, branch: &str, start: &str) {
        run(&self.seed, &["fetch", "--quiet", "origin"]);
        run(&self.seed, &["checkout", "--quiet", "-B", branch, start]);
    }

    fn locked(&self) -> RepoLock {
        let lock = self.git.lock(NAME).unwrap();
        self.git.ensure_clone(&lock, &self.repo()).unwrap();
        lock
    }

    fn clone(&self) -> PathBuf {
        self.git.clone_dir(NAME)
    }
}

fn write_in(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn commit_in(dir: &Path, msg: &str) -> String {
    run(dir, &["add", "-A"]);
    run(
        dir,
        &[
            "-c",
            &format!("user.name={ID_NAME}"),
            "-c",
            &format!("user.email={ID_EMAIL}"),
            "commit",
            "--quiet",
            "-m",
            msg,
        ],
    );
    run(dir, &["rev-parse", "HEAD"])
}

fn upstream(wt: &Path) -> Option<String> {
    let out = Git::new(wt)
        .git_in(wt)
        .ok()?
        .args(["rev-parse", "--symbolic-full-name", "@{upstream}"])
        .output()
        .unwrap();
    out.success().then(|| out.stdout_text().trim().to_owned())
}

fn origin(branch: &str) -> Source {
    Source::Ref(format!("origin/{branch}"))
}

#[test]
fn ensure_clone_twice_is_idempotent_and_cleans_a_crashed_attempt() {
    let fx = Fx::new();
    // A half clone left by a crash must not get in the way.
    let stale = fx.git.repos_dir().join("_tmp/demo.clone");
    fs::create_dir_all(&stale).unwrap();
    fs::write(stale.join("junk"), "x").unwrap();

    let lock = fx.git.lock(NAME).unwrap();
    fx.git.ensure_clone(&lock, &fx.repo()).unwrap();
    let main = run(&fx.seed, &["rev-parse", "HEAD"]);
    assert_eq!(
        run(&fx.clone(), &["rev-parse", "refs/remotes/origin/main"]),
        main
    );
    fx.git.ensure_clone(&lock, &fx.repo()).unwrap();
    assert_eq!(
        run(&fx.clone(), &["config", "--get-all", "remote.origin.fetch"]),
        "+refs/heads/*:refs/remotes/origin/*"
    );
    assert_eq!(
        run(&fx.clone(), &["config", "remote.origin.url"]),
        fx.remote
    );
    assert!(!stale.exists());
    assert_eq!(
        crate::ext::lock::holder_pid(fx.git.repos_dir().join("demo.lock")),
        Some(std::process::id())
    );
}

#[test]
fn ensure_clone_refuses_a_foreign_directory() {
    let fx = Fx::new();
    let dir = fx.clone();
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("precious"), "x").unwrap();
    let lock = fx.git.lock(NAME).unwrap();
    let err = fx.git.ensure_clone(&lock, &fx.repo()).unwrap_err();
    assert!(format!("{err:#}").contains("not a git clone"), "{err:#}");
    assert!(dir.join("precious").exists());
}

#[test]
fn lock_of_another_repo_is_rejected() {
    let fx = Fx::new();
    let other = fx.git.lock("other").unwrap();
    let err = fx.git.ensure_clone(&other, &fx.repo()).unwrap_err();
    assert!(err.to_string().contains("lock of repo other"), "{err}");
    assert!(fx.git.lock("../evil").is_err());
    assert!(fx.git.lock("a.lock").is_err());
}

/// The repo lock had no deadline: one stalled holder blocked every other process of the repo.
#[test]
fn a_busy_repo_lock_gives_up_at_its_deadline_with_exit_4() {
    let fx = Fx::new();
    let _held = fx.git.lock(NAME).unwrap();
    let impatient = fx.git.clone().with_limits(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(200),
    );
    let err = impatient.lock(NAME).unwrap_err();
    assert_eq!(crate::error::code_of(&err), crate::error::Code::Busy);
    let text = format!("{err:#}");
    assert!(text.contains("is busy"), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
}

#[test]
fn fetch_sees_new_remote_commits() {
    let fx = Fx::new();
    let lock = fx.locked();
    fx.write("src/new.rs", "x\n");
    let sha = fx.commit_push("main", "more");
    fx.git.fetch(&lock, &fx.repo(), &[]).unwrap();
    assert_eq!(fx.git.head(&fx.repo(), &origin("main")).unwrap(), Some(sha));
}

/// The fetch of every job once grew with the remote's branches (all of them, every time): it
/// now brings `main` and the branches it is asked for, and prunes those alone.
#[test]
fn a_fetch_brings_main_and_the_named_branches_only() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    for b in ["feature/X-1-a", "feature/X-2-b"] {
        fx.write(&format!("src/{}.rs", &b[8..]), "x\n");
        fx.commit_push(b, b);
    }
    fx.write("src/main.rs", "m\n");
    let main = fx.commit_push("main", "main moves");
    // A branch the remote does not have yet (a task's first job) is no error.
    fx.git
        .fetch(&lock, &repo, &["feature/X-1-a", "feature/X-3-new"])
        .unwrap();
    let head = |b: &str| fx.git.head(&repo, &origin(b)).unwrap();
    assert_eq!(head("main"), Some(main));
    assert!(head("feature/X-1-a").is_some());
    assert_eq!(head("feature/X-2-b"), None, "a branch nobody asked for");
    assert_eq!(head("feature/X-3-new"), None);
    // Deleted on the remote: its tracking ref goes with the next fetch of it.
    run(
        &fx.seed,
        &["push", "--quiet", "origin", "--delete", "feature/X-1-a"],
    );
    fx.git.fetch(&lock, &repo, &["feature/X-1-a"]).unwrap();
    assert_eq!(head("feature/X-1-a"), None);
}

/// What is read on disk (refs, `HEAD`, blob ids, worktree checks) answers as git does.
#[test]
fn reads_on_disk_agree_with_git() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-5-disk";
    let wt = fx.git.worktree_add(&lock, &repo, "X-5", branch).unwrap();
    assert!(fx.git.is_worktree_of(&fx.clone(), &wt).unwrap());
    assert!(!fx.git.is_worktree_of(&fx.clone(), &fx.clone()).unwrap());
    assert_eq!(fx.git.current_branch(&wt).unwrap().as_deref(), Some(branch));
    write_in(
        &wt,
        "docs/work-items/X-5/12-review.md",
        "---\nverdict: APPROVED\n---\n",
    );
    let source = Source::Worktree(wt.clone());
    let blob = fx
        .git
        .read_file(&repo, &source, "docs/work-items/X-5/12-review.md")
        .unwrap()
        .unwrap();
    let by_git = run(
        &wt,
        &[
            "hash-object",
            "--no-filters",
            "docs/work-items/X-5/12-review.md",
        ],
    );
    assert_eq!(blob.id, by_git);
    let sha = fx
        .git
        .commit_all(&wt, "x", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    assert_eq!(fx.git.head(&repo, &source).unwrap(), Some(sha.clone()));
    fx.git.push_branch(&repo, &wt, branch).unwrap();
    // The push moved the tracking ref; packed or loose, it reads the same.
    assert_eq!(
        fx.git.head(&repo, &origin(branch)).unwrap(),
        Some(sha.clone())
    );
    run(&fx.clone(), &["pack-refs", "--all"]);
    assert_eq!(
        fx.git.head(&repo, &origin(branch)).unwrap(),
        Some(sha.clone())
    );
    assert_eq!(
        fx.git.pin(&repo, origin(branch)).unwrap(),
        Source::Ref(sha.clone())
    );
    assert_eq!(
        fx.git
            .read_file(&repo, &Source::Ref(sha), "docs/work-items/X-5/12-review.md")
            .unwrap()
            .unwrap()
            .id,
        blob.id
    );
}

#[test]
fn worktree_add_cuts_from_fresh_origin_main_when_branch_is_absent() {
    let fx = Fx::new();
    let lock = fx.locked();
    // Main moves after our clone: the new branch must start from it.
    fx.write("src/later.rs", "x\n");
    let main = fx.commit_push("main", "later");

    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    assert_eq!(wt, fx.git.worktree_dir(NAME, "X-1"));
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), main);
    assert_eq!(
        Git::new(&wt).current_branch(&wt).unwrap().as_deref(),
        Some("feature/X-1-foo")
    );
    assert_eq!(
        upstream(&wt),
        None,
        "a branch cut from main must not track main"
    );
    assert!(wt.join("src/later.rs").exists());

    // Again: the same worktree, untouched.
    write_in(&wt, "scratch.txt", "keep me");
    let again = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    assert_eq!(again, wt);
    assert!(wt.join("scratch.txt").exists());
}

#[test]
fn worktree_add_checks_out_the_remote_branch_as_is() {
    let fx = Fx::new();
    let lock = fx.locked();
    fx.seed_branch("feature/X-3", "origin/main");
    fx.write("src/x3.rs", "x3\n");
    let tip = fx.commit_push("feature/X-3", "x3 work");

    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-3", "feature/X-3")
        .unwrap();
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), tip);
    assert_eq!(
        Git::new(&wt).current_branch(&wt).unwrap().as_deref(),
        Some("feature/X-3")
    );
    assert_eq!(
        upstream(&wt).as_deref(),
        Some("refs/remotes/origin/feature/X-3")
    );
}

#[test]
fn worktree_add_refuses_a_foreign_non_empty_directory() {
    let fx = Fx::new();
    let lock = fx.locked();
    let dir = fx.git.worktree_dir(NAME, "X-9");
    write_in(&dir, "precious", "x");
    let err = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-9", "feature/X-9")
        .unwrap_err();
    assert!(format!("{err:#}").contains("not a worktree"), "{err:#}");
    assert!(dir.join("precious").exists());
    assert!(fx.git.worktree_remove(&lock, &fx.repo(), "X-9").is_err());
    assert!(dir.join("precious").exists());

    // An empty leftover directory is harmless and reused.
    fs::remove_file(dir.join("precious")).unwrap();
    fx.git
        .worktree_add(&lock, &fx.repo(), "X-9", "feature/X-9")
        .unwrap();
    assert!(dir.join("README.md").exists());
}

#[test]
fn worktree_add_rejects_bad_names() {
    let fx = Fx::new();
    let lock = fx.locked();
    for (wi, branch) in [
        ("../x", "feature/ok"),
        ("", "feature/ok"),
        ("X-1", "-f"),
        ("X-1", "a..b"),
    ] {
        assert!(
            fx.git.worktree_add(&lock, &fx.repo(), wi, branch).is_err(),
            "{wi} {branch}"
        );
    }
}

#[test]
fn lookup_order_is_worktree_then_remote_branch_then_main() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-4";
    assert_eq!(
        fx.git.lookup_source(&repo, "X-4", branch).unwrap(),
        origin("main")
    );

    fx.seed_branch(branch, "origin/main");
    fx.write("src/x4.rs", "x\n");
    fx.commit_push(branch, "x4");
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    assert_eq!(
        fx.git.lookup_source(&repo, "X-4", branch).unwrap(),
        origin(branch)
    );

    let wt = fx.git.worktree_add(&lock, &repo, "X-4", branch).unwrap();
    assert_eq!(
        fx.git.lookup_source(&repo, "X-4", branch).unwrap(),
        Source::Worktree(wt.clone())
    );

    fx.git.worktree_remove(&lock, &repo, "X-4").unwrap();
    assert!(!wt.exists());
    assert_eq!(
        fx.git.lookup_source(&repo, "X-4", branch).unwrap(),
        origin(branch)
    );
    // Idempotent, and the registration is gone so the path can be reused.
    fx.git.worktree_remove(&lock, &repo, "X-4").unwrap();
    fx.git
        .worktree_remove(&lock, &repo, "never-existed")
        .unwrap();
    assert!(!run(&fx.clone(), &["worktree", "list"]).contains("X-4"));
    fx.git.worktree_add(&lock, &repo, "X-4", branch).unwrap();
}

#[test]
fn worktree_remove_discards_a_dirty_worktree() {
    let fx = Fx::new();
    let lock = fx.locked();
    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-5", "feature/X-5")
        .unwrap();
    write_in(&wt, "README.md", "changed\n");
    write_in(&wt, "untracked.txt", "u\n");
    fx.git.worktree_remove(&lock, &fx.repo(), "X-5").unwrap();
    assert!(!wt.exists());
}

#[test]
fn a_worktree_whose_directory_vanished_is_recreated() {
    let fx = Fx::new();
    let lock = fx.locked();
    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-6", "feature/X-6")
        .unwrap();
    fs::remove_dir_all(&wt).unwrap();
    let again = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-6", "feature/X-6")
        .unwrap();
    assert!(again.join("README.md").exists());
}

#[test]
fn read_file_gives_the_same_blob_via_worktree_and_ref() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-7", "feature/X-7")
        .unwrap();
    let via_wt = Source::Worktree(wt.clone());
    let via_ref = origin("main");

    let a = fx
        .git
        .read_file(&repo, &via_wt, "README.md")
        .unwrap()
        .unwrap();
    let b = fx
        .git
        .read_file(&repo, &via_ref, "README.md")
        .unwrap()
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.bytes, b"hello\n");
    assert_eq!(
        a.id,
        run(
            &fx.clone(),
            &["rev-parse", "refs/remotes/origin/main:README.md"]
        )
    );
    assert_eq!(
        fx.git.blob_id(&repo, &via_wt, "README.md").unwrap(),
        Some(a.id.clone())
    );
    assert_eq!(
        fx.git.blob_id(&repo, &via_ref, "README.md").unwrap(),
        Some(a.id)
    );

    // Edited in the worktree: a different id until committed.
    write_in(&wt, "README.md", "edited\n");
    let edited = fx
        .git
        .read_file(&repo, &via_wt, "README.md")
        .unwrap()
        .unwrap();
    assert_eq!(edited.bytes, b"edited\n");
    assert_ne!(edited.id, b.id);

    for source in [&via_wt, &via_ref] {
        for absent in [
            "nope.md",
            "nope/x.md",
            "README.md/x",
            "docs/work-items/X-7.md",
        ] {
            assert_eq!(
                fx.git.read_file(&repo, source, absent).unwrap(),
                None,
                "{absent}"
            );
            assert_eq!(
                fx.git.blob_id(&repo, source, absent).unwrap(),
                None,
                "{absent}"
            );
        }
        assert!(
            fx.git.read_file(&repo, source, "src").is_err(),
            "a directory"
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "./README.md",
            ".git/config",
            "a//b",
        ] {
            assert!(fx.git.read_file(&repo, source, bad).is_err(), "{bad:?}");
        }
    }
    // A ref that does not exist is an error, not an absent file.
    assert!(
        fx.git
            .read_file(&repo, &origin("nope"), "README.md")
            .is_err()
    );
    assert!(
        fx.git
            .read_file(&repo, &Source::Ref("-x".into()), "README.md")
            .is_err()
    );
}

/// A FIFO named like an artifact wedged the scheduler: the read blocked forever under the repo
/// lock. Special and oversize files are refused at once, in a worktree and in a ref alike.
#[test]
fn fifos_devices_and_huge_files_are_refused_without_blocking() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-9", "feature/X-9")
        .unwrap();
    let via_wt = Source::Worktree(wt.clone());
    nix::unistd::mkfifo(&wt.join("fifo.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink("/dev/zero", wt.join("zero.md")).unwrap();
    std::fs::write(wt.join("big.md"), vec![b'x'; MAX_FILE + 1]).unwrap();
    std::fs::write(wt.join("edge.md"), vec![b'x'; MAX_FILE]).unwrap();
    let refusal = |rel: &str| {
        let e = fx.git.read_file(&repo, &via_wt, rel).unwrap_err();
        e.chain()
            .find_map(|c| c.downcast_ref::<Refused>())
            .unwrap_or_else(|| panic!("{rel}: {e:#}"))
            .0
            .clone()
    };
    assert_eq!(refusal("fifo.md"), "is a FIFO, not a regular file");
    assert!(refusal("big.md").contains("larger than 1 MiB"));
    // A symlink is read as git stores it (its target path), never followed.
    let zero = fx
        .git
        .read_file(&repo, &via_wt, "zero.md")
        .unwrap()
        .unwrap();
    assert_eq!(zero.bytes, b"/dev/zero");
    assert_eq!(
        fx.git
            .read_file(&repo, &via_wt, "edge.md")
            .unwrap()
            .unwrap()
            .bytes
            .len(),
        MAX_FILE
    );
    // In a ref, a huge blob is refused from its size alone.
    std::fs::remove_file(wt.join("fifo.md")).unwrap();
    fx.git.commit_all(&wt, "big", ID_NAME, ID_EMAIL).unwrap();
    fx.git.push_branch(&repo, &wt, "feature/X-9").unwrap();
    fx.git.fetch(&lock, &repo, &["feature/X-9"]).unwrap();
    let via_ref = Source::Ref("origin/feature/X-9".into());
    let e = fx.git.read_file(&repo, &via_ref, "big.md").unwrap_err();
    assert!(
        e.chain().any(|c| c.downcast_ref::<Refused>().is_some()),
        "{e:#}"
    );
    assert_eq!(
        fx.git
            .read_file(&repo, &via_ref, "edge.md")
            .unwrap()
            .unwrap()
            .bytes
            .len(),
        MAX_FILE
    );
}

#[test]
fn symlinks_are_read_as_git_stores_them_not_followed() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-8";
    let wt = fx.git.worktree_add(&lock, &repo, "X-8", branch).unwrap();
    let outside = fx.tmp.path().join("outside");
    write_in(&outside, "secret.md", "secret\n");
    std::os::unix::fs::symlink(outside.join("secret.md"), wt.join("link.md")).unwrap();
    std::os::unix::fs::symlink(&outside, wt.join("linkdir")).unwrap();
    let via_wt = Source::Worktree(wt.clone());

    let link = fx
        .git
        .read_file(&repo, &via_wt, "link.md")
        .unwrap()
        .unwrap();
    assert_eq!(
        link.bytes,
        outside.join("secret.md").to_str().unwrap().as_bytes()
    );
    assert_eq!(
        fx.git
            .read_file(&repo, &via_wt, "linkdir/secret.md")
            .unwrap(),
        None
    );

    fx.git
        .commit_all(&wt, "links", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    fx.git.push_branch(&repo, &wt, branch).unwrap();
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    let via_ref = fx
        .git
        .read_file(&repo, &origin(branch), "link.md")
        .unwrap()
        .unwrap();
    assert_eq!(via_ref, link);
    assert_eq!(
        fx.git
            .read_file(&repo, &origin(branch), "linkdir/secret.md")
            .unwrap(),
        None
    );
}

#[test]
fn list_dir_lists_files_directly_in_a_directory() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    fx.write("docs/work-items/X-1.md", "1\n");
    fx.write("docs/work-items/sub/deep.md", "d\n");
    fx.commit_push("main", "items");
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-10", "feature/X-10")
        .unwrap();
    for source in [Source::Worktree(wt.clone()), origin("main")] {
        assert_eq!(
            fx.git.list_dir(&repo, &source, "docs/work-items").unwrap(),
            ["X-0.md", "X-1.md"]
        );
        assert_eq!(
            fx.git.list_dir(&repo, &source, "docs/work-items/").unwrap(),
            ["X-0.md", "X-1.md"]
        );
        assert_eq!(fx.git.list_dir(&repo, &source, "").unwrap(), ["README.md"]);
        assert!(fx.git.list_dir(&repo, &source, "nope").unwrap().is_empty());
        assert!(fx.git.list_dir(&repo, &source, "README.md").is_err());
        assert!(fx.git.list_dir(&repo, &source, "../x").is_err());
    }
    // The worktree shows its current files, committed or not.
    write_in(&wt, "docs/work-items/X-10.md", "new\n");
    assert_eq!(
        fx.git
            .list_dir(&repo, &Source::Worktree(wt), "docs/work-items")
            .unwrap(),
        ["X-0.md", "X-1.md", "X-10.md"]
    );
}

#[test]
fn ff_moves_a_clean_worktree_and_leaves_a_dirty_one_alone() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-11";
    fx.seed_branch(branch, "origin/main");
    fx.write("src/a.rs", "a\n");
    fx.commit_push(branch, "a");
    let wt = fx.git.worktree_add(&lock, &repo, "X-11", branch).unwrap();

    // Nothing to do yet.
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );

    // Clean and behind: moves.
    fx.write("src/b.rs", "b\n");
    let b = fx.commit_push(branch, "b");
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    assert!(
        fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
    assert!(wt.join("src/b.rs").exists());
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );

    // Dirty (untracked file) and behind: untouched.
    fx.write("src/c.rs", "c\n");
    fx.commit_push(branch, "c");
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    write_in(&wt, "notes.txt", "agent scratch\n");
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
    // Dirty (modified tracked file): untouched.
    fs::remove_file(wt.join("notes.txt")).unwrap();
    write_in(&wt, "src/a.rs", "changed\n");
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
    assert_eq!(
        fs::read_to_string(wt.join("src/a.rs")).unwrap(),
        "changed\n"
    );

    // Ahead of / diverged from the remote: untouched.
    run(&wt, &["checkout", "--quiet", "--", "src/a.rs"]);
    write_in(&wt, "src/local.rs", "l\n");
    let local = fx
        .git
        .commit_all(&wt, "local", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
            .unwrap()
    );
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), local);

    // No worktree: nothing to do.
    assert!(
        !fx.git
            .ff_worktree_if_clean(&lock, &repo, "X-404", branch)
            .unwrap()
    );
}

#[test]
fn has_code_change_ignores_docs_only_commits_and_honours_since() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-12";
    let wt = fx.git.worktree_add(&lock, &repo, "X-12", branch).unwrap();
    let src = Source::Worktree(wt.clone());
    let check = |since: Option<&str>| {
        fx.git
            .has_code_change(&repo, &src, "origin/main", since, "docs/work-items/")
            .unwrap()
    };
    assert!(!check(None), "no commits of its own");

    write_in(&wt, "docs/work-items/X-12.md", "plan\n");
    let docs = fx
        .git
        .commit_all(&wt, "plan", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    assert!(!check(None), "docs-only commit");
    // Uncommitted code does not count.
    write_in(&wt, "src/lib.rs", "// changed\n");
    assert!(!check(None));

    let code = fx
        .git
        .commit_all(&wt, "code", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    assert!(check(None), "src change");
    assert!(check(Some(&docs)), "src change after stage entry");
    assert!(!check(Some(&code)), "since is the head");
    // A since that no longer exists, or is not an ancestor, is ignored.
    assert!(check(Some("0123456789abcdef0123456789abcdef01234567")));
    write_in(&wt, "src/dropped.rs", "d\n");
    let dropped = fx
        .git
        .commit_all(&wt, "dropped", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    run(&wt, &["reset", "--quiet", "--hard", "HEAD~1"]);
    assert!(
        check(Some(&dropped)),
        "since is a descendant, not an ancestor"
    );
    let main = run(&wt, &["rev-parse", "refs/remotes/origin/main"]);
    fx.write("src/main-only.rs", "m\n");
    let newer_main = fx.commit_push("main", "main moves");
    fx.git.fetch(&lock, &repo, &[]).unwrap();
    assert!(check(Some(&newer_main)));
    // Excluding nothing, the docs commit alone counts too.
    assert!(
        fx.git
            .has_code_change(&repo, &src, "origin/main", Some(&main), "")
            .unwrap()
    );
    assert!(
        !fx.git
            .has_code_change(&repo, &src, "origin/main", Some(&code), "")
            .unwrap()
    );

    // Merging main (which changed code) into the branch is not the
    // branch changing code.
    run(
        &wt,
        &[
            "-c",
            &format!("user.name={ID_NAME}"),
            "-c",
            &format!("user.email={ID_EMAIL}"),
            "merge",
            "--quiet",
            "--no-edit",
            "--no-ff",
            "refs/remotes/origin/main",
        ],
    );
    assert!(!check(Some(&code)), "merge of main");

    // Same answer through the pushed ref.
    fx.git.push_branch(&repo, &wt, branch).unwrap();
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    let via_ref = origin(branch);
    assert!(
        fx.git
            .has_code_change(&repo, &via_ref, "origin/main", None, "docs/work-items")
            .unwrap()
    );
    assert!(
        !fx.git
            .has_code_change(
                &repo,
                &via_ref,
                "origin/main",
                Some(&code),
                "docs/work-items"
            )
            .unwrap()
    );
    assert!(
        fx.git
            .has_code_change(&repo, &via_ref, "origin/nope", None, "docs/work-items")
            .is_err()
    );
    assert!(
        fx.git
            .has_code_change(&repo, &via_ref, "origin/main", None, "../x")
            .is_err()
    );
}

#[test]
fn commit_all_commits_only_when_something_changed() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-13", "feature/X-13")
        .unwrap();
    assert_eq!(
        fx.git
            .commit_all(&wt, "nothing", ID_NAME, ID_EMAIL)
            .unwrap(),
        None
    );

    write_in(&wt, "src/new.rs", "n\n");
    let msg = "-starts with a dash\n\n# not a comment\n`$(echo no shell)`";
    let sha = fx
        .git
        .commit_all(&wt, msg, "Ada L", "ada@example.invalid")
        .unwrap()
        .unwrap();
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), sha);
    assert_eq!(
        run(&wt, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]),
        "Ada L <ada@example.invalid>|Ada L <ada@example.invalid>"
    );
    assert_eq!(run(&wt, &["log", "-1", "--format=%B"]), msg);
    assert_eq!(run(&wt, &["status", "--porcelain"]), "");
    assert_eq!(
        fx.git.commit_all(&wt, "again", ID_NAME, ID_EMAIL).unwrap(),
        None
    );
    // Only the named paths: an unchanged one is no commit, and what else lies around stays.
    write_in(&wt, "left.txt", "l\n");
    assert_eq!(
        fx.git
            .commit_paths(&wt, &["src/new.rs"], "same", ID_NAME, ID_EMAIL)
            .unwrap(),
        None
    );
    write_in(&wt, "report.md", "r\n");
    let sha = fx
        .git
        .commit_paths(&wt, &["report.md"], "report", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();
    assert_eq!(run(&wt, &["rev-parse", "HEAD"]), sha);
    assert_eq!(run(&wt, &["status", "--porcelain"]), "?? left.txt");
}

#[test]
fn push_refuses_main_and_pushes_work_branches() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-14";
    let wt = fx.git.worktree_add(&lock, &repo, "X-14", branch).unwrap();
    write_in(&wt, "src/x.rs", "x\n");
    let sha = fx
        .git
        .commit_all(&wt, "x", ID_NAME, ID_EMAIL)
        .unwrap()
        .unwrap();

    for refused in ["main", "master"] {
        let err = fx.git.push_branch(&repo, &wt, refused).unwrap_err();
        assert!(err.to_string().contains("refusing"), "{err}");
    }
    let trunk = RepoRef {
        main: "trunk",
        ..repo
    };
    assert!(fx.git.push_branch(&trunk, &wt, "trunk").is_err());
    assert!(fx.git.push_branch(&repo, &wt, "-f").is_err());
    assert!(!fx.git.branch_exists_remote(&repo, branch).unwrap());

    fx.git.push_branch(&repo, &wt, branch).unwrap();
    assert!(fx.git.branch_exists_remote(&repo, branch).unwrap());
    assert!(
        !fx.git.branch_exists_remote(&repo, "X-14").unwrap(),
        "exact name only"
    );
    let remote_tip = run(
        &fx.seed,
        &["ls-remote", "origin", &format!("refs/heads/{branch}")],
    );
    assert!(remote_tip.starts_with(&sha), "{remote_tip}");
    // main on the remote is untouched.
    assert_eq!(
        run(&fx.seed, &["ls-remote", "origin", "refs/heads/main"])
            .split('\t')
            .next(),
        Some(run(&fx.seed, &["rev-parse", "HEAD"]).as_str())
    );
}

#[test]
fn push_failure_names_the_command_and_git_stderr() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let branch = "feature/X-15";
    fx.seed_branch(branch, "origin/main");
    fx.write("src/remote.rs", "r\n");
    fx.commit_push(branch, "remote side");
    fx.git.fetch(&lock, &repo, &[branch]).unwrap();
    // A worktree cut from main, diverging from the remote branch.
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-15", "other/X-15")
        .unwrap();
    write_in(&wt, "src/local.rs", "l\n");
    fx.git.commit_all(&wt, "local", ID_NAME, ID_EMAIL).unwrap();
    let err = format!("{:#}", fx.git.push_branch(&repo, &wt, branch).unwrap_err());
    assert!(
        err.contains("push --no-verify --quiet origin HEAD:refs/heads/feature/X-15`"),
        "{err}"
    );
    assert!(err.contains("failed (exit 1)"), "{err}");
    assert!(err.contains("rejected"), "{err}");
}

#[test]
fn ls_remote_lists_heads_without_a_clone_and_answers_for_a_missing_remote() {
    let fx = Fx::new();
    let main = run(&fx.seed, &["rev-parse", "HEAD"]);
    let out = fx
        .git
        .ls_remote(fx.tmp.path(), &fx.remote, "-o BatchMode=yes")
        .unwrap();
    assert!(out.success(), "{}", out.diagnostic_tail());
    assert_eq!(out.stdout_text(), format!("{main}\trefs/heads/main\n"));
    assert!(!fx.git.clone_dir(NAME).exists(), "ls_remote made a clone");

    let gone = fx.tmp.path().join("gone.git");
    let out = fx
        .git
        .ls_remote(fx.tmp.path(), gone.to_str().unwrap(), "")
        .unwrap();
    assert!(!out.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not appear to be a git repository"),
        "{}",
        out.diagnostic_tail()
    );
    for bad in ["", "-uhack", "a\nb"] {
        assert!(fx.git.ls_remote(fx.tmp.path(), bad, "").is_err(), "{bad:?}");
    }
}

#[test]
fn branch_name_rules_agree_with_git() {
    let names = [
        "main",
        "feature/X-1-foo",
        "a.b",
        "a/b/c",
        "x@y",
        "ümlaut",
        "a-",
        "@a",
        "a.lockx",
        "",
        "a..b",
        "a b",
        "a~b",
        "a^b",
        "a:b",
        "a?b",
        "a*b",
        "a[b",
        "a\\b",
        "a\tb",
        "a\u{7f}b",
        "/a",
        "a/",
        "a//b",
        ".a",
        "a/.b",
        "a.",
        "a.lock",
        "a.lock/b",
        "a@{b",
    ];
    // Same verdict as git itself (our extra rules aside).
    let tmp = tempfile::tempdir().unwrap();
    for name in &names {
        if ["-x", "HEAD", "@"].contains(name) {
            continue;
        }
        let git_says = Cmd::new("git")
            .args(["check-ref-format", &format!("refs/heads/{name}")])
            .cwd(tmp.path())
            .output()
            .unwrap()
            .success();
        assert_eq!(valid_branch_name(name), git_says, "{name:?}");
    }
}

#[test]
fn refs_and_names_are_validated() {
    assert_eq!(rev_arg("origin/main").unwrap(), "refs/remotes/origin/main");
    assert_eq!(rev_arg("refs/tags/v1").unwrap(), "refs/tags/v1");
    assert_eq!(rev_arg("0123abcd").unwrap(), "0123abcd");
    for bad in ["-x", "a:b", "HEAD^", "a..b", "@{-1}", ""] {
        assert!(rev_arg(bad).is_err(), "{bad}");
    }
    assert!(check_wi("X-1").is_ok());
    for bad in ["", ".", "..", "a/b", "-x"] {
        assert!(check_wi(bad).is_err(), "{bad}");
    }
}

// ---- design §9.3: a repository's config never makes orch's git run a program ----

/// A script that leaves `marker` behind when something runs it.
fn payload(dir: &Path, marker: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("payload.sh");
    fs::write(&p, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn executing_config_written_into_a_worktree_is_refused_and_never_run() {
    let fx = Fx::new();
    let lock = fx.locked();
    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    let marker = fx.tmp.path().join("pwned");
    let evil = payload(fx.tmp.path(), &marker);
    let evil = evil.to_str().unwrap();
    let source = Source::Worktree(wt.clone());
    // Each of these, written where git reads it, would run `evil` on the next status, fetch
    // or commit.
    let cases = [
        ("core.fsmonitor", evil.to_string()),
        ("core.sshCommand", evil.to_string()),
        ("credential.helper", format!("!{evil}")),
        ("filter.x.clean", evil.to_string()),
        ("remote.origin.uploadpack", evil.to_string()),
        (
            "include.path",
            fx.tmp.path().join("other").display().to_string(),
        ),
    ];
    let config = fx.clone().join(".git/config");
    let clean = fs::read_to_string(&config).unwrap();
    for (key, value) in &cases {
        fs::write(
            &config,
            format!("{clean}\n[{}]\n", section_of(key)) + &format!("\t{} = {value}\n", last(key)),
        )
        .unwrap();
        write_in(&wt, "src/new.rs", "// new\n");
        let e = fx.git.head(&fx.repo(), &source).unwrap_err();
        assert!(
            format!("{e:#}").contains(&key.to_lowercase()),
            "{key}: {e:#}"
        );
        assert!(
            fx.git.commit_all(&wt, "x", ID_NAME, ID_EMAIL).is_err(),
            "{key}"
        );
        assert!(fx.git.fetch(&lock, &fx.repo(), &[]).is_err(), "{key}");
        assert!(!marker.exists(), "{key} ran its program");
    }
    // A worktree whose `.git` file points at a git dir the agent wrote is read the same way.
    fs::write(&config, &clean).unwrap();
    let fake = wt.join("fake-gitdir");
    fs::create_dir_all(&fake).unwrap();
    fs::write(
        fake.join("config"),
        format!("[core]\n\tfsmonitor = {evil}\n"),
    )
    .unwrap();
    fs::write(wt.join(".git"), "gitdir: fake-gitdir\n").unwrap();
    assert!(fx.git.head(&fx.repo(), &source).is_err());
    // And one with no `.git` at all is not the repository of whatever holds it.
    fs::remove_file(wt.join(".git")).unwrap();
    assert!(fx.git.head(&fx.repo(), &source).is_err());
    assert!(!marker.exists());
}

#[test]
fn the_forced_overrides_win_over_orchs_own_global_config() {
    let fx = Fx::new();
    let marker = fx.tmp.path().join("pwned");
    let evil = payload(fx.tmp.path(), &marker);
    let global = fx.tmp.path().join("gitconfig");
    fs::write(
        &global,
        format!("[core]\n\tfsmonitor = {}\n", evil.display()),
    )
    .unwrap();
    let git = fx.git.clone().with_config(Some(global), vec![]);
    let lock = git.lock(NAME).unwrap();
    git.ensure_clone(&lock, &fx.repo()).unwrap();
    let wt = git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    write_in(&wt, "src/new.rs", "// new\n");
    git.commit_all(&wt, "x", ID_NAME, ID_EMAIL).unwrap();
    assert!(
        !marker.exists(),
        "core.fsmonitor from the global config ran"
    );
}

fn section_of(key: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.len() {
        2 => parts[0].to_string(),
        _ => format!("{} \"{}\"", parts[0], parts[1..parts.len() - 1].join(".")),
    }
}

fn last(key: &str) -> &str {
    key.rsplit('.').next().unwrap()
}

#[test]
fn worktree_remove_is_done_on_disk_and_leaves_a_locked_worktree_to_git() {
    let fx = Fx::new();
    let lock = fx.locked();
    let repo = fx.repo();
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-6", "feature/X-6")
        .unwrap();
    let admin = fx.clone().join(".git/worktrees/X-6");
    assert!(admin.join("gitdir").exists(), "{}", admin.display());
    fx.git.worktree_remove(&lock, &repo, "X-6").unwrap();
    assert!(!wt.exists());
    assert!(!admin.exists(), "the registration goes with the directory");
    assert!(!run(&fx.clone(), &["worktree", "list"]).contains("X-6"));

    // `git worktree lock` is someone's deliberate act: git refuses the removal, and so do we.
    let wt = fx
        .git
        .worktree_add(&lock, &repo, "X-6", "feature/X-6")
        .unwrap();
    run(
        &fx.clone(),
        &["worktree", "lock", &wt.display().to_string()],
    );
    assert!(fx.git.worktree_remove(&lock, &repo, "X-6").is_err());
    assert!(wt.join(".git").exists(), "a locked worktree stays");
}

#[test]
fn the_changes_of_a_run_are_listed_and_put_back() {
    let fx = Fx::new();
    let lock = fx.locked();
    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    let start = fx.git.rev_parse(&wt, "HEAD").unwrap();
    assert!(fx.git.changes_since(&wt, &start).unwrap().is_empty());
    // A commit of its own, an edit, a deletion and an untracked file in a new directory.
    write_in(&wt, "committed.txt", "c\n");
    commit_in(&wt, "agent commit");
    write_in(&wt, "README.md", "changed\n");
    std::fs::remove_file(wt.join("src/lib.rs")).unwrap();
    write_in(&wt, "new/dir/file.txt", "n\n");
    assert_eq!(
        fx.git.changes_since(&wt, &start).unwrap(),
        [
            "README.md",
            "committed.txt",
            "new/dir/file.txt",
            "src/lib.rs"
        ]
    );
    fx.git.discard_since(&wt, &start).unwrap();
    assert_eq!(fx.git.rev_parse(&wt, "HEAD").unwrap(), start);
    assert!(fx.git.changes_since(&wt, &start).unwrap().is_empty());
    assert!(wt.join("src/lib.rs").exists() && !wt.join("new").exists());
    assert!(
        fx.git.changes_since(&wt, "not-a-sha").is_err(),
        "a sha is checked"
    );
}

#[test]
fn the_branch_changes_name_their_authors() {
    let fx = Fx::new();
    let lock = fx.locked();
    let wt = fx
        .git
        .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
        .unwrap();
    assert!(
        fx.git
            .branch_changes(&wt, "origin/main")
            .unwrap()
            .is_empty()
    );
    write_in(&wt, "a.txt", "a\n");
    write_in(&wt, "b/c.txt", "c\n");
    let commit_as = |name: &str| {
        run(&wt, &["add", "-A"]);
        run(
            &wt,
            &[
                "-c",
                &format!("user.name={name}"),
                "-c",
                "user.email=x@example.invalid",
                "commit",
                "--quiet",
                "-m",
                "x",
            ],
        );
    };
    commit_as("orch-developer");
    write_in(&wt, ".github/workflows/ci.yml", "on: push\n");
    commit_as("orch-reviewer");
    assert_eq!(
        fx.git.branch_changes(&wt, "origin/main").unwrap(),
        [
            (
                "orch-reviewer".to_string(),
                vec![".github/workflows/ci.yml".to_string()]
            ),
            (
                "orch-developer".to_string(),
                vec!["a.txt".to_string(), "b/c.txt".to_string()]
            ),
        ]
    );
}
