//! What orch reads of a repository on disk without running git: where a directory's git dir
//! and common dir are, the branch and commit `HEAD` names, a ref of the files backend (loose,
//! then `packed-refs`), the clone's `origin` settings and object format, and the blob id of some
//! bytes. These are the reads of the supervisor's hot path; each saves a `git` process (a few
//! milliseconds, and before this, time under the repo lock).
//!
//! No program runs here, so no repository config can make one run (design §9.3), and nothing
//! here reads the system or global config. Anything unusual — the reftable backend, a ref file
//! that is neither an id nor `ref: …`, a symbolic ref chain deeper than git's own limit — is
//! [`Lookup::Unknown`], and the caller asks git instead, so the answer is git's wherever this
//! reader is not sure.
//!
//! Races: git writes a ref by renaming a lock file over it, and `pack-refs` writes the new
//! `packed-refs` before it deletes the loose files, so reading the loose file first and
//! `packed-refs` second never misses a ref that exists throughout the read.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sha2::Digest;

use crate::domain::gitconfig;
use crate::domain::names::valid_ref_name;

/// The largest file read here (a config is a few lines; a ref, `HEAD` or `gitdir:` file one).
const MAX_SMALL: u64 = 1 << 20;
/// The largest `packed-refs` read here (about 100,000 refs); a larger one is left to git.
const MAX_PACKED: u64 = 16 << 20;
/// Git follows at most this many symbolic refs in a row.
const MAX_SYMREF_DEPTH: usize = 5;

/// The git dir (`.git`, or a worktree's admin dir) and the common dir of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Dirs {
    pub gitdir: PathBuf,
    pub common: PathBuf,
}

/// The outcome of a read that may have to be left to git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lookup<T> {
    Found(T),
    Missing,
    /// Not readable here with certainty: ask git.
    Unknown,
}

/// The dirs of the repository whose top is `dir` (its `.git` directory, or the `gitdir:` file
/// of a linked worktree); `None` when `dir` has no `.git`.
pub(super) fn dirs_of(dir: &Path) -> Result<Option<Dirs>> {
    let dot = dir.join(".git");
    let gitdir = match fs::symlink_metadata(&dot) {
        Ok(m) if m.is_dir() => dot,
        Ok(m) if m.is_file() => {
            let text = read_small(&dot)?;
            let target = text
                .trim_end_matches(['\n', '\r'])
                .strip_prefix("gitdir: ")
                .with_context(|| format!("`{}` is not a `gitdir:` file", dot.display()))?;
            dir.join(target)
        }
        Ok(_) => bail!("`{}` is neither a directory nor a file", dot.display()),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("inspecting {}", dot.display())),
    };
    let common = match read_optional(&gitdir.join("commondir"))? {
        Some(rel) => gitdir.join(rel.trim_end_matches(['\n', '\r'])),
        None => gitdir.clone(),
    };
    Ok(Some(Dirs { gitdir, common }))
}

/// The admin dir (canonical) of `dir` when `dir` is the top of a linked worktree whose common
/// dir is `clone_git` (the clone's `.git`): its `.git` file names an admin dir of that clone,
/// directly under its `worktrees/`, that names `dir` back. `None` otherwise.
pub(super) fn linked_worktree_admin(clone_git: &Path, dir: &Path) -> Result<Option<PathBuf>> {
    let Some(d) = dirs_of(dir)? else {
        return Ok(None);
    };
    if d.gitdir == d.common || !exists(&d.gitdir.join("HEAD"))? {
        return Ok(None);
    }
    let (Ok(common), Ok(clone_git), Ok(admin)) = (
        fs::canonicalize(&d.common),
        fs::canonicalize(clone_git),
        fs::canonicalize(&d.gitdir),
    ) else {
        return Ok(None);
    };
    if common != clone_git || admin.parent() != Some(clone_git.join("worktrees").as_path()) {
        return Ok(None);
    }
    // The admin dir's `gitdir` names the worktree's `.git` file: a copied `.git` file of
    // another worktree is not this worktree.
    let Some(back) = read_optional(&admin.join("gitdir"))? else {
        return Ok(None);
    };
    let back = PathBuf::from(back.trim_end_matches(['\n', '\r']));
    Ok(
        match (fs::canonicalize(&back), fs::canonicalize(dir.join(".git"))) {
            (Ok(a), Ok(b)) if a == b => Some(admin),
            _ => None,
        },
    )
}

/// What `HEAD` of the repository with these dirs names: the branch (`refs/heads/…` stripped)
/// or `None` when detached.
pub(super) fn head_branch(d: &Dirs) -> Result<Lookup<Option<String>>> {
    let Some(text) = read_optional(&d.gitdir.join("HEAD"))? else {
        return Ok(Lookup::Unknown);
    };
    let line = text.trim_end_matches(['\n', '\r']);
    if let Some(target) = line.strip_prefix("ref: ") {
        return Ok(match target.strip_prefix("refs/heads/") {
            Some(b) => Lookup::Found(Some(b.to_string())),
            None => Lookup::Unknown,
        });
    }
    Ok(if is_object_id(line) {
        Lookup::Found(None)
    } else {
        Lookup::Unknown
    })
}

/// The object id `name` (`HEAD` or a full ref name such as `refs/remotes/origin/main`) points
/// at, following symbolic refs, in the files backend. The id is not peeled: orch reads branch
/// refs, which name commits.
pub(super) fn resolve(d: &Dirs, name: &str) -> Result<Lookup<String>> {
    if !refs_are_files(&d.common)? {
        return Ok(Lookup::Unknown);
    }
    let mut name = name.to_string();
    for _ in 0..MAX_SYMREF_DEPTH {
        if name != "HEAD" && (!name.starts_with("refs/") || !valid_ref_name(&name)) {
            return Ok(Lookup::Unknown);
        }
        // `HEAD` is the worktree's own; every `refs/…` ref lives in the common dir (orch never
        // reads per-worktree refs such as `refs/bisect`).
        let base = if name == "HEAD" { &d.gitdir } else { &d.common };
        let text = match fs::symlink_metadata(base.join(&name)) {
            Ok(m) if m.is_file() => Some(read_small(&base.join(&name))?),
            Ok(_) => None,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => None,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("inspecting {}", base.join(&name).display()));
            }
        };
        match text {
            Some(text) => {
                let line = text.trim_end_matches(['\n', '\r']);
                if let Some(target) = line.strip_prefix("ref: ") {
                    name = target.to_string();
                    continue;
                }
                return Ok(if is_object_id(line) {
                    Lookup::Found(line.to_string())
                } else {
                    Lookup::Unknown
                });
            }
            None if name == "HEAD" => return Ok(Lookup::Unknown),
            None => return packed(&d.common, &name),
        }
    }
    Ok(Lookup::Unknown)
}

/// `name` in `<common>/packed-refs`.
fn packed(common: &Path, name: &str) -> Result<Lookup<String>> {
    let path = common.join("packed-refs");
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Lookup::Missing),
        Err(e) => return Err(e).with_context(|| format!("inspecting {}", path.display())),
    };
    if meta.len() > MAX_PACKED {
        return Ok(Lookup::Unknown);
    }
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Lookup::Missing),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    for line in bytes.split(|&b| b == b'\n') {
        if line.first().is_none_or(|&b| b == b'#' || b == b'^') {
            continue;
        }
        let Some(sp) = line.iter().position(|&b| b == b' ') else {
            return Ok(Lookup::Unknown);
        };
        let line_name = line[sp + 1..]
            .strip_suffix(b"\r")
            .unwrap_or(&line[sp + 1..]);
        if line_name == name.as_bytes() {
            let id = std::str::from_utf8(&line[..sp]).unwrap_or("");
            return Ok(if is_object_id(id) {
                Lookup::Found(id.to_string())
            } else {
                Lookup::Unknown
            });
        }
    }
    Ok(Lookup::Missing)
}

/// The files backend holds the refs (not reftable, which this reader does not know).
fn refs_are_files(common: &Path) -> Result<bool> {
    if exists(&common.join("reftable"))? {
        return Ok(false);
    }
    let Some(text) = read_optional(&common.join("config"))? else {
        return Ok(true);
    };
    let storage = gitconfig::values(&text, "extensions", None, "refstorage").unwrap_or_default();
    Ok(storage
        .iter()
        .all(|v| v.as_deref().is_none_or(|v| v.eq_ignore_ascii_case("files"))))
}

/// The object format of a repository, from its common dir's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Sha1,
    Sha256,
}

pub(super) fn object_format(common: &Path) -> Result<Lookup<Format>> {
    let Some(text) = read_optional(&common.join("config"))? else {
        return Ok(Lookup::Unknown);
    };
    let Ok(values) = gitconfig::values(&text, "extensions", None, "objectformat") else {
        return Ok(Lookup::Unknown);
    };
    Ok(match values.last() {
        None => Lookup::Found(Format::Sha1),
        Some(Some(v)) if v.eq_ignore_ascii_case("sha1") => Lookup::Found(Format::Sha1),
        Some(Some(v)) if v.eq_ignore_ascii_case("sha256") => Lookup::Found(Format::Sha256),
        Some(_) => Lookup::Unknown,
    })
}

/// The blob id of `bytes` (`git hash-object --no-filters`): the hash of `blob <len>\0<bytes>`.
pub(super) fn blob_id(format: Format, bytes: &[u8]) -> String {
    let header = format!("blob {}\0", bytes.len());
    match format {
        Format::Sha1 => {
            let mut h = sha1::Sha1::new();
            h.update(header.as_bytes());
            h.update(bytes);
            hex::encode(h.finalize())
        }
        Format::Sha256 => {
            let mut h = sha2::Sha256::new();
            h.update(header.as_bytes());
            h.update(bytes);
            hex::encode(h.finalize())
        }
    }
}

/// `remote.origin.url` and the `remote.origin.fetch` values of the clone whose common dir is
/// `common`; `None` when its config cannot be read here.
pub(super) fn origin(common: &Path) -> Result<Option<(Vec<String>, Vec<String>)>> {
    let Some(text) = read_optional(&common.join("config"))? else {
        return Ok(None);
    };
    let Ok(entries) = gitconfig::entries(&text) else {
        return Ok(None);
    };
    let mut url = Vec::new();
    let mut fetch = Vec::new();
    for (k, v) in entries {
        if k.section != "remote" || k.subsection.as_deref() != Some("origin") {
            continue;
        }
        match (k.name.as_str(), v) {
            ("url", Some(v)) => url.push(v),
            ("fetch", Some(v)) => fetch.push(v),
            ("url" | "fetch", None) => return Ok(None),
            _ => {}
        }
    }
    Ok(Some((url, fetch)))
}

fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn exists(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(false),
        Err(e) => Err(e).with_context(|| format!("inspecting {}", path.display())),
    }
}

/// A small text file (a ref, `HEAD`, a `gitdir:` file, a config) of at most [`MAX_SMALL`]
/// bytes; larger is an error (a repository's config is refused, as git would choke on it).
pub(super) fn read_small(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut text = String::new();
    let limit = MAX_SMALL;
    f.take(limit + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (not UTF-8?)", path.display()))?;
    if text.len() as u64 > limit {
        bail!("{} is larger than {limit} bytes", path.display());
    }
    Ok(text)
}

pub(super) fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::symlink_metadata(path) {
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("inspecting {}", path.display())),
        Ok(_) => read_small(path).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin` and the same with sha256.
        assert_eq!(
            blob_id(Format::Sha1, b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            blob_id(Format::Sha1, b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            blob_id(Format::Sha256, b""),
            "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"
        );
    }

    #[test]
    fn refs_resolve_loose_then_packed_and_follow_symbolic_refs() {
        let tmp = tempfile::tempdir().unwrap();
        let common = tmp.path().join(".git");
        fs::create_dir_all(common.join("refs/remotes/origin/feature")).unwrap();
        let a = "1".repeat(40);
        let b = "2".repeat(40);
        fs::write(common.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(
            common.join("packed-refs"),
            format!(
                "# pack-refs with: peeled fully-peeled sorted \n{a} refs/heads/main\n{b} \
                 refs/remotes/origin/old\n^{a}\n"
            ),
        )
        .unwrap();
        fs::write(
            common.join("refs/remotes/origin/feature/X-1"),
            format!("{b}\n"),
        )
        .unwrap();
        let d = Dirs {
            gitdir: common.clone(),
            common: common.clone(),
        };
        assert_eq!(resolve(&d, "HEAD").unwrap(), Lookup::Found(a.clone()));
        assert_eq!(
            resolve(&d, "refs/remotes/origin/feature/X-1").unwrap(),
            Lookup::Found(b.clone())
        );
        assert_eq!(
            resolve(&d, "refs/remotes/origin/old").unwrap(),
            Lookup::Found(b.clone())
        );
        assert_eq!(
            resolve(&d, "refs/remotes/origin/feature").unwrap(),
            Lookup::Missing
        );
        assert_eq!(
            resolve(&d, "refs/remotes/origin/gone").unwrap(),
            Lookup::Missing
        );
        assert_eq!(resolve(&d, "refs/../x").unwrap(), Lookup::Unknown);
        assert_eq!(
            head_branch(&d).unwrap(),
            Lookup::Found(Some("main".to_string()))
        );
        fs::write(common.join("refs/remotes/origin/junk"), "not an id\n").unwrap();
        assert_eq!(
            resolve(&d, "refs/remotes/origin/junk").unwrap(),
            Lookup::Unknown
        );
        // Reftable is git's to read.
        fs::create_dir(common.join("reftable")).unwrap();
        assert_eq!(resolve(&d, "HEAD").unwrap(), Lookup::Unknown);
    }
}
