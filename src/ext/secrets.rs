//! Reading a secret (a service token, a webhook secret) at the moment of use (design §9.1), from
//! the first of:
//! 1. the file the config names (`token_file`, `webhook_secret_file`),
//! 2. `$CREDENTIALS_DIRECTORY/<variable name>`: a credential systemd's `LoadCredential=` put
//!    there for this unit (the shipped units use it; an empty one counts as absent),
//! 3. the environment variable the config names (`token_env`, `webhook_secret_env`; kept for
//!    compatibility: a variable is inherited by every child unless removed, a file is not).
//!
//! A value is trimmed of surrounding whitespace (a trailing newline in a file); an empty one is
//! no value. Errors name the file or the variable, never the value.
//!
//! Deliberately not here: which secret a use-case needs (the caller passes the `*_file` and
//! `*_env` keys of its config block) and keeping a value out of children's environments
//! (`ext::env`, and the tick's scrubbed supervisors).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where one secret may be found.
#[derive(Debug, Clone, Copy)]
pub struct Where<'a> {
    pub file: Option<&'a Path>,
    pub env: Option<&'a str>,
}

/// The largest secret file read: a token is a line, not a document.
const MAX_SECRET: u64 = 64 * 1024;

/// The secret, or `None` when no source holds one.
pub fn read(w: Where<'_>) -> Result<Option<String>> {
    if let Some(f) = w.file {
        return read_file(f).map(Some);
    }
    let Some(name) = w.env else {
        return Ok(None);
    };
    if let Some(path) = credential_path(name) {
        // An empty credential is "not set here" (the shipped units load an empty file for every
        // secret the operator has not filled in).
        match read_file(&path) {
            Ok(v) => return Ok(Some(v)),
            Err(_) if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty()))
}

/// Whether some source holds the secret, without reading it into memory for long.
pub fn available(w: Where<'_>) -> bool {
    matches!(read(w), Ok(Some(_)))
}

/// `$CREDENTIALS_DIRECTORY/<name>` when that file exists.
pub fn credential_path(name: &str) -> Option<PathBuf> {
    // A name becomes a path component: only a plain variable name may.
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty())?;
    let p = PathBuf::from(dir).join(name);
    p.is_file().then_some(p)
}

/// The directory systemd put this unit's credentials in, if any.
pub fn credentials_dir() -> Option<PathBuf> {
    std::env::var_os("CREDENTIALS_DIRECTORY")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

fn read_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot read the secret file `{}`", path.display()))?;
    let mut text = String::new();
    f.take(MAX_SECRET + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read the secret file `{}`", path.display()))?;
    if text.len() as u64 > MAX_SECRET {
        bail!(
            "the secret file `{}` is larger than {MAX_SECRET} bytes",
            path.display()
        );
    }
    let v = text.trim();
    if v.is_empty() {
        bail!("the secret file `{}` is empty", path.display());
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_wins_and_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "  s3cret\n").unwrap();
        let w = Where {
            file: Some(&f),
            env: Some("ORCH_TEST_SECRET_NEVER_SET_1"),
        };
        assert_eq!(read(w).unwrap().as_deref(), Some("s3cret"));
    }

    #[test]
    fn errors_name_the_file_not_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("missing");
        let e = read(Where {
            file: Some(&f),
            env: None,
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("missing"));
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(MAX_SECRET as usize + 10)).unwrap();
        let e = read(Where {
            file: Some(&big),
            env: None,
        })
        .unwrap_err();
        assert!(!format!("{e:#}").contains("xxxx"));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(
            read(Where {
                file: Some(&empty),
                env: None
            })
            .is_err()
        );
    }

    #[test]
    fn nothing_configured_is_none() {
        let w = Where {
            file: None,
            env: None,
        };
        assert_eq!(read(w).unwrap(), None);
        assert!(!available(w));
        assert_eq!(
            read(Where {
                file: None,
                env: Some("ORCH_TEST_SECRET_NEVER_SET_2")
            })
            .unwrap(),
            None
        );
    }

    #[test]
    fn a_hostile_name_is_never_a_path() {
        assert_eq!(credential_path("../etc/passwd"), None);
        assert_eq!(credential_path(""), None);
    }
}
