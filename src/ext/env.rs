//! The environment a child of `orch` gets (design §9, "Children"): the parent's environment minus
//! a denylist, plus the variables `orch` sets.
//!
//! Responsible for: dropping every variable named by a `*_env` key of the config, every variable
//! matching a deny glob (`agent.env_deny`, by default `*_TOKEN`, `*_SECRET`, `*_PASSWORD`,
//! `*_API_KEY`) unless `agent.env_allow` keeps it, and every `ORCH_*` variable `orch` does not
//! set itself, so a child never sees a secret or steers a nested `orch` by accident; and the
//! environment of a supervisor (`supervisor_env`): the same secrets out, `ORCH_*` kept.
//!
//! Deliberately not here: reading the process environment or the config (the caller passes both
//! in, which keeps this a pure function), and deciding *what* to set (`ORCH_SANDBOX=1`,
//! `ORCH_WORK_ITEM`, ... come from the caller).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The prefix of every variable `orch` reads; children get only the ones `orch` sets for them.
pub const ORCH_PREFIX: &str = "ORCH_";

/// What is taken out of an inherited environment.
///
/// `deny_names` are exact, case-sensitive names (the config's `*_env` secrets: never kept).
/// `deny_globs` may have a `*` at the start (`*_TOKEN`: a suffix), at the end (`AWS_*`: a
/// prefix) or both (`*SECRET*`: anywhere in the name); a `*` anywhere else is an ordinary
/// character and a glob without one is an exact name. `allow` (globs of the same kind) keeps a
/// variable a deny glob would drop (`agent.env_allow`: the agent CLI's own credentials). Names
/// that are not UTF-8 are compared byte for byte.
#[derive(Debug, Clone, Copy)]
pub struct Scrub<'a> {
    pub deny_names: &'a [String],
    pub deny_globs: &'a [String],
    pub allow: &'a [String],
}

impl Scrub<'_> {
    /// Whether an inherited variable called `name` is dropped (before any `ORCH_*` rule).
    fn drops(&self, name: &[u8]) -> bool {
        self.deny_names.iter().any(|d| d.as_bytes() == name)
            || (self.deny_globs.iter().any(|g| glob_matches(g, name))
                && !self.allow.iter().any(|g| glob_matches(g, name)))
    }
}

/// The complete environment for a child: `parent` in its order without the denied variables
/// and every `ORCH_*` variable, then `set` in its order. A name in `set` replaces the parent's
/// value rather than repeating it.
pub fn child_env(
    parent: impl Iterator<Item = (OsString, OsString)>,
    scrub: &Scrub<'_>,
    set: &[(&str, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = parent
        .filter(|(name, _)| {
            let name = name.as_bytes();
            !(name.starts_with(ORCH_PREFIX.as_bytes())
                || scrub.drops(name)
                || set.iter().any(|(s, _)| s.as_bytes() == name))
        })
        .collect();
    env.extend(
        set.iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value))),
    );
    env
}

/// The environment of a supervisor (`orch job run`, started by the tick; design §9.1): the
/// tick's environment without its secrets, `ORCH_*` settings kept (they configure orch itself).
/// A supervisor reads a token it needs from its file or credential, never from a variable an
/// agent could find in `/proc/<supervisor>/environ`.
pub fn supervisor_env(
    parent: impl Iterator<Item = (OsString, OsString)>,
    scrub: &Scrub<'_>,
) -> Vec<(OsString, OsString)> {
    parent
        .filter(|(name, _)| !scrub.drops(name.as_bytes()))
        .collect()
}

/// Whether `name` matches `glob`, which may have a `*` only at its start and/or end.
fn glob_matches(glob: &str, name: &[u8]) -> bool {
    let glob = glob.as_bytes();
    let (leading, glob) = match glob.strip_prefix(b"*") {
        Some(rest) => (true, rest),
        None => (false, glob),
    };
    let (trailing, core) = match glob.strip_suffix(b"*") {
        Some(rest) => (true, rest),
        None => (false, glob),
    };
    match (leading, trailing) {
        (false, false) => name == core,
        (true, false) => name.ends_with(core),
        (false, true) => name.starts_with(core),
        (true, true) => core.is_empty() || name.windows(core.len()).any(|w| w == core),
    }
}

/// The value `name` has in `env`, for callers and tests that inspect a built environment.
pub fn lookup<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn default_globs() -> Vec<String> {
        strings(&["*_TOKEN", "*_SECRET", "*_PASSWORD", "*_API_KEY"])
    }

    fn globs_only(globs: &[String]) -> Scrub<'_> {
        Scrub {
            deny_names: &[],
            deny_globs: globs,
            allow: &[],
        }
    }

    #[test]
    fn allow_keeps_what_a_glob_drops_but_never_a_named_secret() {
        let parent = [
            ("ANTHROPIC_API_KEY", "a"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "c"),
            ("ORCH_PLANE_TOKEN", "p"),
            ("GITEA_TOKEN", "g"),
            ("PATH", "/bin"),
            ("ORCH_LOG", "debug"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let names = strings(&["ORCH_PLANE_TOKEN", "ANTHROPIC_API_KEY"]);
        let globs = default_globs();
        let allow = strings(&["ANTHROPIC_API_KEY", "CLAUDE_*"]);
        let scrub = Scrub {
            deny_names: &names,
            deny_globs: &globs,
            allow: &allow,
        };
        let names_of = |env: Vec<(OsString, OsString)>| -> Vec<String> {
            env.into_iter()
                .map(|(n, _)| n.into_string().unwrap())
                .collect()
        };
        assert_eq!(
            names_of(child_env(parent.clone().into_iter(), &scrub, &[])),
            ["CLAUDE_CODE_OAUTH_TOKEN", "PATH"]
        );
        // A supervisor keeps orch's own settings and still loses every secret.
        assert_eq!(
            names_of(supervisor_env(parent.into_iter(), &scrub)),
            ["CLAUDE_CODE_OAUTH_TOKEN", "PATH", "ORCH_LOG"]
        );
    }

    /// The names `child_env` keeps of a parent holding each of `names` (value "v").
    fn kept(names: &[&str], deny_names: &[&str], deny_globs: &[&str]) -> Vec<String> {
        let parent = names
            .iter()
            .map(|n| (OsString::from(n), OsString::from("v")));
        let (names, globs) = (strings(deny_names), strings(deny_globs));
        let scrub = Scrub {
            deny_names: &names,
            deny_globs: &globs,
            allow: &[],
        };
        child_env(parent, &scrub, &[])
            .into_iter()
            .map(|(n, _)| n.into_string().unwrap())
            .collect()
    }

    #[test]
    fn glob_matching_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("*_TOKEN", "GITEA_TOKEN", true),
            ("*_TOKEN", "_TOKEN", true),
            ("*_TOKEN", "TOKEN", false),
            ("*_TOKEN", "GITEA_TOKEN_FILE", false),
            ("*_TOKEN", "gitea_token", false),
            ("AWS_*", "AWS_ACCESS_KEY_ID", true),
            ("AWS_*", "AWS_", true),
            ("AWS_*", "MY_AWS_X", false),
            ("*SECRET*", "MY_SECRET_FILE", true),
            ("*SECRET*", "SECRET", true),
            ("*SECRET*", "SECRE", false),
            ("*", "ANYTHING", true),
            ("**", "ANYTHING", true),
            ("HOME", "HOME", true),
            ("HOME", "HOMEDIR", false),
            ("A*B", "A*B", true),
            ("A*B", "AxB", false),
            ("", "", true),
            ("", "X", false),
        ];
        for &(glob, name, want) in cases {
            assert_eq!(
                glob_matches(glob, name.as_bytes()),
                want,
                "glob `{glob}` vs `{name}`"
            );
        }
    }

    #[test]
    fn denylist_table() {
        let parent = [
            "PATH",
            "HOME",
            "GITEA_TOKEN",
            "PLANE_API_KEY",
            "DB_PASSWORD",
            "WEBHOOK_SECRET",
            "MY_FORGE_KEY",
            "AWS_REGION",
            "ORCH_LOG",
            "ORCH_STATE_DIR",
            "ORCHESTRA",
            "orch_lower",
            "TOKEN_COUNT",
        ];
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            (
                &[],
                &[],
                &[
                    "PATH",
                    "HOME",
                    "GITEA_TOKEN",
                    "PLANE_API_KEY",
                    "DB_PASSWORD",
                    "WEBHOOK_SECRET",
                    "MY_FORGE_KEY",
                    "AWS_REGION",
                    "ORCHESTRA",
                    "orch_lower",
                    "TOKEN_COUNT",
                ],
            ),
            (
                &["MY_FORGE_KEY"],
                &["*_TOKEN", "*_SECRET", "*_PASSWORD", "*_API_KEY"],
                &[
                    "PATH",
                    "HOME",
                    "AWS_REGION",
                    "ORCHESTRA",
                    "orch_lower",
                    "TOKEN_COUNT",
                ],
            ),
            (
                &["HOME", "NOT_PRESENT"],
                &["AWS_*"],
                &[
                    "PATH",
                    "GITEA_TOKEN",
                    "PLANE_API_KEY",
                    "DB_PASSWORD",
                    "WEBHOOK_SECRET",
                    "MY_FORGE_KEY",
                    "ORCHESTRA",
                    "orch_lower",
                    "TOKEN_COUNT",
                ],
            ),
        ];
        for &(names, globs, want) in cases {
            assert_eq!(
                kept(&parent, names, globs),
                want,
                "deny names {names:?}, globs {globs:?}"
            );
        }
    }

    #[test]
    fn orch_variables_pass_only_when_orch_sets_them() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("ORCH_WORK_ITEM", "STALE-1"),
            ("ORCH_LOG", "debug"),
            ("ORCH_SANDBOX", "0"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let set = [
            ("ORCH_SANDBOX", "1".to_string()),
            ("ORCH_WORK_ITEM", "SHOP-7".to_string()),
        ];
        let env = child_env(parent.into_iter(), &globs_only(&default_globs()), &set);
        let flat: Vec<(String, String)> = env
            .iter()
            .map(|(n, v)| {
                (
                    n.clone().into_string().unwrap(),
                    v.clone().into_string().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            flat,
            [
                ("PATH", "/usr/bin"),
                ("ORCH_SANDBOX", "1"),
                ("ORCH_WORK_ITEM", "SHOP-7"),
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert_eq!(lookup(&env, "ORCH_SANDBOX"), Some(OsStr::new("1")));
        assert_eq!(lookup(&env, "ORCH_LOG"), None);
    }

    #[test]
    fn set_wins_over_a_deny_glob() {
        // orch decides what it hands its child; a glob meant for inherited secrets must not
        // silently drop it.
        let set = [("ORCH_ARTIFACT_TOKEN", "t".to_string())];
        let env = child_env(std::iter::empty(), &globs_only(&default_globs()), &set);
        assert_eq!(lookup(&env, "ORCH_ARTIFACT_TOKEN"), Some(OsStr::new("t")));
    }

    #[test]
    fn non_utf8_names_and_values_pass_through_or_match_bytewise() {
        let odd_name = OsString::from_vec(b"X\xffY".to_vec());
        let odd_secret = OsString::from_vec(b"\xfe_TOKEN".to_vec());
        let odd_value = OsString::from_vec(b"\x80\x81".to_vec());
        let parent = [
            (odd_name.clone(), odd_value.clone()),
            (odd_secret, OsString::from("s")),
        ];
        let env = child_env(parent.into_iter(), &globs_only(&default_globs()), &[]);
        assert_eq!(env, [(odd_name, odd_value)]);
    }
}
