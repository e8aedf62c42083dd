//! The bubblewrap command line that confines an agent, a suite or a CI command (design §9.2),
//! as a pure function of the paths involved.
//!
//! What the child sees: the whole file system read-only; a fresh `/dev`, a `/proc` of its own
//! pid namespace (no other process of the host, its supervisor included) and a private `/tmp`;
//! the hidden directories (the state directory, `repos_dir`, the credentials directory) as empty
//! tmpfs and the hidden files (the config, secret files) as `/dev/null`; then, on top, the paths
//! it may read (`readable`) and write (`writable`, its worktree and its clone's git dir, with the
//! clone's `config` and `hooks` read-only again). The order of the mounts is the order of the
//! arguments, so what is bound later shows through what was hidden earlier.
//!
//! Its lifetime: `--die-with-parent` (the supervisor dies → bwrap dies), `--unshare-pid` (when
//! the child's main process ends, the kernel kills everything left in its namespace, a `setsid`
//! daemon included), `--new-session` (no terminal to push input into), `--unshare-ipc`. The
//! network is kept: an agent needs its API. Running as root, every capability is dropped too,
//! so the child cannot unmount what hides the secrets.
//!
//! Not here: finding `bwrap`, deciding whether to confine, reading the config (`ops::confine`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The paths of one confined run. Every path is absolute and canonical (the caller resolves
/// symbolic links, which bwrap would otherwise follow inside the new root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jail {
    /// The working directory, writable.
    pub worktree: PathBuf,
    /// The clone's git dir (commits write objects and refs there), writable but for its
    /// `config` and `hooks`.
    pub git_dir: Option<PathBuf>,
    /// Files bound read-only last, over the writable places: what tells git where the
    /// repository is (the worktree's `.git` file, its admin dir's `commondir` and `gitdir`), so
    /// the child cannot point orch's next git command at a config of its own.
    pub pinned: Vec<PathBuf>,
    /// Directories replaced by an empty tmpfs.
    pub hide_dirs: Vec<PathBuf>,
    /// Files replaced by `/dev/null`.
    pub hide_files: Vec<PathBuf>,
    /// Extra paths bound read-only (skipped when missing).
    pub readable: Vec<PathBuf>,
    /// Extra paths bound writable (skipped when missing).
    pub writable: Vec<PathBuf>,
    /// Drop every capability (the caller runs as root).
    pub drop_caps: bool,
}

/// `bwrap <options> -- <command>`.
pub fn argv(bwrap: &Path, jail: &Jail, command: &[OsString]) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![bwrap.into()];
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
        a.extend(items.iter().map(|i| i.as_ref().to_os_string()));
    };
    push(&[
        &"--die-with-parent",
        &"--new-session",
        &"--unshare-pid",
        &"--unshare-ipc",
    ]);
    if jail.drop_caps {
        push(&[&"--cap-drop", &"ALL"]);
    }
    push(&[&"--ro-bind", &"/", &"/"]);
    push(&[&"--dev", &"/dev"]);
    push(&[&"--proc", &"/proc"]);
    push(&[&"--tmpfs", &"/tmp"]);
    let tmp = Path::new("/tmp");
    // What is under a hidden place is hidden already.
    let mut hidden: Vec<&Path> = vec![tmp];
    let mut dirs: Vec<&PathBuf> = jail.hide_dirs.iter().collect();
    // Outer directories first, so an inner one is recognised as covered.
    dirs.sort_by_key(|d| d.components().count());
    for d in dirs {
        if covered(&hidden, d) {
            continue;
        }
        push(&[&"--tmpfs", d]);
        hidden.push(d);
    }
    for f in &jail.hide_files {
        if covered(&hidden, f) {
            continue;
        }
        push(&[&"--ro-bind", &"/dev/null", f]);
    }
    for r in &jail.readable {
        push(&[&"--ro-bind-try", r, r]);
    }
    for w in &jail.writable {
        push(&[&"--bind-try", w, w]);
    }
    if let Some(g) = &jail.git_dir {
        push(&[&"--bind", g, g]);
        let (config, hooks) = (g.join("config"), g.join("hooks"));
        push(&[&"--ro-bind-try", &config, &config]);
        push(&[&"--ro-bind-try", &hooks, &hooks]);
    }
    push(&[&"--bind", &jail.worktree, &jail.worktree]);
    for p in &jail.pinned {
        push(&[&"--ro-bind-try", p, p]);
    }
    push(&[&"--chdir", &jail.worktree]);
    push(&[&"--"]);
    a.extend(command.iter().cloned());
    a
}

fn covered(hidden: &[&Path], p: &Path) -> bool {
    hidden.iter().any(|h| p.starts_with(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: &[OsString]) -> Vec<String> {
        a.iter().map(|x| x.to_string_lossy().into_owned()).collect()
    }

    /// The index of the option `opt` whose next argument is `path`.
    fn at(a: &[String], opt: &str, path: &str) -> usize {
        a.windows(2)
            .position(|w| w[0] == opt && w[1] == path)
            .or_else(|| a.windows(3).position(|w| w[0] == opt && w[2] == path))
            .unwrap_or_else(|| panic!("no `{opt} {path}` in {a:?}"))
    }

    fn jail() -> Jail {
        Jail {
            worktree: "/var/lib/orch/repos/_wt/shop/SHOP-1".into(),
            git_dir: Some("/var/lib/orch/repos/shop/.git".into()),
            hide_dirs: vec![
                "/var/lib/orch/repos".into(),
                "/var/lib/orch".into(),
                "/run/credentials/orch-tick.service".into(),
            ],
            hide_files: vec!["/etc/orch/orch.yaml".into(), "/var/lib/orch/token".into()],
            readable: vec!["/var/lib/orch/prompts/job-7-developer.md".into()],
            writable: vec!["/var/lib/orch/.claude".into()],
            pinned: vec!["/var/lib/orch/repos/_wt/shop/SHOP-1/.git".into()],
            drop_caps: true,
        }
    }

    #[test]
    fn what_is_hidden_comes_before_what_shows_through() {
        let cmd = [OsString::from("claude"), OsString::from("--print")];
        let a = s(&argv(Path::new("/usr/bin/bwrap"), &jail(), &cmd));
        assert_eq!(a[0], "/usr/bin/bwrap");
        let root = at(&a, "--ro-bind", "/");
        let state = at(&a, "--tmpfs", "/var/lib/orch");
        let creds = at(&a, "--tmpfs", "/run/credentials/orch-tick.service");
        let config = at(&a, "--ro-bind", "/etc/orch/orch.yaml");
        let prompt = at(
            &a,
            "--ro-bind-try",
            "/var/lib/orch/prompts/job-7-developer.md",
        );
        let claude = at(&a, "--bind-try", "/var/lib/orch/.claude");
        let git = at(&a, "--bind", "/var/lib/orch/repos/shop/.git");
        let git_config = at(&a, "--ro-bind-try", "/var/lib/orch/repos/shop/.git/config");
        let wt = at(&a, "--bind", "/var/lib/orch/repos/_wt/shop/SHOP-1");
        assert!(root < state && state < prompt && state < claude && state < git && git < wt);
        assert!(root < creds && root < config);
        assert!(
            git < git_config,
            "the clone's config is read-only inside its git dir"
        );
        let pinned = at(
            &a,
            "--ro-bind-try",
            "/var/lib/orch/repos/_wt/shop/SHOP-1/.git",
        );
        assert!(
            wt < pinned,
            "the worktree's `.git` file is read-only inside it"
        );
        assert_eq!(a[config + 1], "/dev/null");
        // `repos` lies inside the state dir: one tmpfs covers both; so does the token file.
        assert!(!a.contains(&"/var/lib/orch/repos".to_string()));
        assert!(!a.contains(&"/var/lib/orch/token".to_string()));
        for opt in [
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
        ] {
            assert!(a.contains(&opt.to_string()), "{opt}");
        }
        assert!(
            !a.contains(&"--unshare-net".to_string()),
            "the network is kept"
        );
        assert_eq!(at(&a, "--cap-drop", "ALL"), 5);
        assert_eq!(&a[a.len() - 3..], ["--", "claude", "--print"]);
        assert!(at(&a, "--chdir", "/var/lib/orch/repos/_wt/shop/SHOP-1") > wt);
    }

    #[test]
    fn without_root_no_capability_option_and_tmp_covers_its_children() {
        let j = Jail {
            worktree: "/tmp/w/state/repos/_wt/r/X-1".into(),
            hide_dirs: vec!["/tmp/w/state".into()],
            hide_files: vec!["/tmp/w/orch.yaml".into()],
            drop_caps: false,
            ..Jail::default()
        };
        let a = s(&argv(Path::new("bwrap"), &j, &[OsString::from("true")]));
        assert!(!a.contains(&"--cap-drop".to_string()));
        // Already gone with the private /tmp; the worktree is bound after it.
        assert!(!a.contains(&"/tmp/w/state".to_string()));
        assert!(!a.contains(&"/tmp/w/orch.yaml".to_string()));
        assert!(at(&a, "--tmpfs", "/tmp") < at(&a, "--bind", "/tmp/w/state/repos/_wt/r/X-1"));
    }
}
