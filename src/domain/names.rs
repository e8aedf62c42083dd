//! The one place that says which names from outside (config, command line, webhooks, the
//! tracker) may become a git ref, a branch, a repo directory or a path component. Pure: the
//! rules of `git check-ref-format` are checked in-process, so no validation spawns a process.
//!
//! Work item ids are `ids`' business; this module covers what git and the file system see.

/// A repo name: `^[a-z0-9][a-z0-9._-]{0,63}$`, and not ending in `.lock`: the repo's clone sits
/// beside `<name>.lock`, its lock file, so a repo called `x.lock` would be another repo's lock
/// (and git refuses such a directory as a ref component too).
pub fn valid_repo_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok_char = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=64).contains(&b.len())
        && ok_char(&b[0])
        && b.iter().all(|c| ok_char(c) || b"._-".contains(c))
        && !name.ends_with(".lock")
}

/// Whether `name` is acceptable as a branch name: the rules of `git check-ref-format --branch`,
/// and also not `HEAD` and not starting with `-` (it could be read as an option).
pub fn valid_branch_name(name: &str) -> bool {
    !name.starts_with('-') && name != "HEAD" && valid_ref_name(name)
}

/// The `git check-ref-format` rules for a ref name (under `refs/heads/` or any other prefix),
/// plus "not `@`": no empty component, no component starting with `.` or ending in `.lock`, no
/// `..`, no `@{`, no control characters, space or any of `~^:?*[\`, no trailing `/` or `.`.
pub fn valid_ref_name(name: &str) -> bool {
    if name.is_empty() || name == "@" || name.ends_with('/') || name.ends_with('.') {
        return false;
    }
    if name.contains("..") || name.contains("@{") {
        return false;
    }
    if name
        .bytes()
        .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
    {
        return false;
    }
    name.split('/')
        .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

/// A name that becomes exactly one path component (a work item's worktree directory): ASCII
/// letters, digits, `.`, `_`, `-`, starting with a letter or digit, at most 128 bytes. So never
/// `.`, `..`, empty, or anything with a `/`.
pub fn valid_path_component(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=128).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names() {
        for ok in [
            "shop",
            "a",
            "my-repo.v2_x",
            "0day",
            "orch",
            "a.b_c-9",
            "x.lockx",
        ] {
            assert!(valid_repo_name(ok), "{ok}");
        }
        for bad in [
            "",
            "Shop",
            "A",
            "-x",
            ".x",
            "_wt",
            "a/b",
            "../a",
            "a b",
            "x.lock",
            &"a".repeat(65),
        ] {
            assert!(!valid_repo_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn branch_names_follow_git_check_ref_format() {
        let good = [
            "main",
            "feature/X-1-foo",
            "a.b",
            "a/b/c",
            "x@y",
            "ümlaut",
            "a-",
            "@a",
            "a.lockx",
        ];
        let bad = [
            "", "-x", "HEAD", "@", "a..b", "a b", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a\\b",
            "a\tb", "a\u{7f}b", "/a", "a/", "a//b", ".a", "a/.b", "a.", "a.lock", "a.lock/b",
            "a@{b",
        ];
        for name in good {
            assert!(valid_branch_name(name), "{name:?} should be valid");
        }
        for name in bad {
            assert!(!valid_branch_name(name), "{name:?} should be invalid");
        }
    }

    #[test]
    fn path_components() {
        for ok in ["X-1", "SHOP-7", "a.b"] {
            assert!(valid_path_component(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "-x", ".x", &"a".repeat(129)] {
            assert!(!valid_path_component(bad), "{bad:?}");
        }
    }
}
