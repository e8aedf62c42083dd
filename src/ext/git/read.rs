//! Reads, all without the repo lock (git's object and ref reads are safe alongside a fetch, and
//! a worktree is looked at on disk): which source holds a work item's state (`lookup_source`),
//! the commit a ref source is at (`pin`, so one evaluation reads one commit whatever a fetch
//! does meanwhile), a file and its blob id, a directory listing, a source's head and whether
//! it has commits that change code. A ref is read with one `cat-file` or `ls-tree`; a worktree
//! is read from disk without following symlinks, so an agent's worktree cannot make us read
//! outside it, and its blob ids are hashed here. Also the rev-parse and ancestry helpers the
//! clone code shares.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::local::{self, Lookup};
use super::{
    Blob, Git, MAX_FILE, Refused, RepoRef, Source, check_branch, check_repo, check_wi, exists,
    local_dirs, rel_parts, remote_ref, rev_arg,
};

impl Git {
    /// Where the current state of `wi` lives: its worktree if there is one,
    /// else `origin/<branch>` if the remote has it (as of the last fetch),
    /// else `origin/<main>`.
    pub fn lookup_source(&self, repo: &RepoRef<'_>, wi: &str, branch: &str) -> Result<Source> {
        check_repo(repo)?;
        check_wi(wi)?;
        check_branch(branch)?;
        let clone = self.require_clone(repo)?;
        let dir = self.worktree_dir(repo.name, wi);
        if exists(&dir)? && self.is_worktree_of(&clone, &dir)? {
            return Ok(Source::Worktree(dir));
        }
        if self
            .rev_parse_commit(&clone, &remote_ref(branch))?
            .is_some()
        {
            return Ok(Source::Ref(format!("origin/{branch}")));
        }
        Ok(Source::Ref(format!("origin/{}", repo.main)))
    }

    /// `source` with a ref replaced by the commit it is at now (a worktree stays as it is), so
    /// later reads see that commit even if a fetch moves the ref meanwhile. A ref that names
    /// nothing stays as it is (its reads answer as before).
    pub fn pin(&self, repo: &RepoRef<'_>, source: Source) -> Result<Source> {
        Ok(match &source {
            Source::Worktree(_) => source,
            Source::Ref(_) => match self.head(repo, &source)? {
                Some(sha) => Source::Ref(sha),
                None => source,
            },
        })
    }

    /// The file at `relpath` in `source`, `None` if there is none.
    ///
    /// Reads as git would store it: a symlink yields its target path (it is
    /// never followed, so a worktree cannot make us read outside itself), and
    /// a path under a symlinked directory does not exist. The worktree's blob
    /// id is of the raw bytes (`hash-object --no-filters`), so with clean
    /// filters (LFS, autocrlf) it can differ from the committed blob's id.
    /// A directory at `relpath` is an error. `relpath` must be relative,
    /// `/`-separated, without `.`, `..`, `.git` or empty components.
    pub fn read_file(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        relpath: &str,
    ) -> Result<Option<Blob>> {
        check_repo(repo)?;
        let parts = rel_parts(relpath, false)?;
        let ctx = || {
            format!(
                "reading {relpath} from {} in repo {}",
                show(source),
                repo.name
            )
        };
        match source {
            Source::Worktree(root) => {
                let Some(bytes) = read_worktree_file(root, &parts).with_context(ctx)? else {
                    return Ok(None);
                };
                let id = self.hash_blob(root, &bytes).with_context(ctx)?;
                Ok(Some(Blob { bytes, id }))
            }
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                // Look before reading: a huge blob is refused, never slurped.
                match self.cat_file(&clone, &spec, false).with_context(ctx)? {
                    None => {
                        self.require_rev(&clone, &rev).with_context(ctx)?;
                        return Ok(None);
                    }
                    Some(obj) if obj.kind != "blob" => {
                        return Err(Refused(format!("is a {}, not a file", obj.kind)).into());
                    }
                    Some(obj) if obj.size > MAX_FILE => {
                        return Err(
                            Refused(format!("is larger than 1 MiB ({} bytes)", obj.size)).into(),
                        );
                    }
                    Some(_) => {}
                }
                match self.cat_file(&clone, &spec, true).with_context(ctx)? {
                    Some(obj) if obj.kind == "blob" => Ok(Some(Blob {
                        bytes: obj.content,
                        id: obj.id,
                    })),
                    // Gone or changed between the two looks (a fetch): absent, as it is now.
                    _ => Ok(None),
                }
            }
        }
    }

    /// The blob id [`Git::read_file`] would return, without transferring the
    /// content for a ref (a worktree file still has to be read to be hashed).
    pub fn blob_id(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        relpath: &str,
    ) -> Result<Option<String>> {
        match source {
            Source::Worktree(_) => Ok(self.read_file(repo, source, relpath)?.map(|b| b.id)),
            Source::Ref(r) => {
                check_repo(repo)?;
                let parts = rel_parts(relpath, false)?;
                let ctx = || {
                    format!(
                        "looking up {relpath} in {} in repo {}",
                        show(source),
                        repo.name
                    )
                };
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                match self.cat_file(&clone, &spec, false).with_context(ctx)? {
                    None => {
                        self.require_rev(&clone, &rev).with_context(ctx)?;
                        Ok(None)
                    }
                    Some(obj) if obj.kind == "blob" => Ok(Some(obj.id)),
                    Some(obj) => bail!("{}: it is a {}, not a file", ctx(), obj.kind),
                }
            }
        }
    }

    /// Sorted names of the files (regular files and symlinks, not
    /// subdirectories) directly in `reldir` (`""` is the top). A missing
    /// directory gives an empty list; a file at `reldir` is an error. In a
    /// worktree this includes untracked and ignored files, never `.git`.
    /// Names that are not UTF-8 are skipped (logged).
    pub fn list_dir(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        reldir: &str,
    ) -> Result<Vec<String>> {
        check_repo(repo)?;
        let parts = rel_parts(reldir, true)?;
        let ctx = || {
            format!(
                "listing {reldir:?} in {} in repo {}",
                show(source),
                repo.name
            )
        };
        let mut names = match source {
            Source::Worktree(root) => list_worktree_dir(root, &parts).with_context(ctx)?,
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                match self.cat_file(&clone, &spec, false).with_context(ctx)? {
                    None => {
                        self.require_rev(&clone, &rev).with_context(ctx)?;
                        Vec::new()
                    }
                    Some(obj) if obj.kind == "tree" => {
                        self.list_tree(&clone, &obj.id).with_context(ctx)?
                    }
                    Some(obj) => bail!("{}: it is a {}, not a directory", ctx(), obj.kind),
                }
            }
        };
        names.sort();
        Ok(names)
    }

    /// The commit `source` is at: the worktree's HEAD or the ref's commit;
    /// `None` if the ref does not exist or the worktree has no commit.
    pub fn head(&self, repo: &RepoRef<'_>, source: &Source) -> Result<Option<String>> {
        check_repo(repo)?;
        let ctx = || format!("resolving {} in repo {}", show(source), repo.name);
        match source {
            Source::Worktree(root) => self.rev_parse_commit(root, "HEAD").with_context(ctx),
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                self.rev_parse_commit(&clone, &rev_arg(r)?)
                    .with_context(ctx)
            }
        }
    }

    /// Whether `source` has a commit of its own that changes code: a
    /// non-merge commit reachable from its head, not reachable from
    /// `main_ref`, not reachable from `since` (when `since` still names a
    /// commit that is an ancestor of the head; otherwise `since` is ignored),
    /// which changes at least one path outside `exclude_prefix` (a directory,
    /// e.g. `"docs/work-items/"`; `""` excludes nothing). Uncommitted changes
    /// do not count. Merge commits are skipped: merging main into a branch
    /// must not count as the agent changing code.
    pub fn has_code_change(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        main_ref: &str,
        since: Option<&str>,
        exclude_prefix: &str,
    ) -> Result<bool> {
        check_repo(repo)?;
        let exclude = rel_parts(exclude_prefix, true)?.join("/");
        let ctx = || {
            format!(
                "checking {} for code changes since {} in repo {}",
                show(source),
                since.unwrap_or(main_ref),
                repo.name
            )
        };
        let dir = match source {
            Source::Worktree(root) => root.clone(),
            Source::Ref(_) => self.require_clone(repo)?,
        };
        let Some(head) = self.head(repo, source)? else {
            bail!("{}: {} has no commit", ctx(), show(source));
        };
        let main_rev = rev_arg(main_ref)?;
        let Some(main) = self.rev_parse_commit(&dir, &main_rev).with_context(ctx)? else {
            bail!("{}: {main_ref} does not exist", ctx());
        };
        let mut since_commit = None;
        if let Some(s) = since {
            match self
                .rev_parse_commit(&dir, &rev_arg(s)?)
                .with_context(ctx)?
            {
                Some(c) if self.is_ancestor(&dir, &c, &head).with_context(ctx)? => {
                    since_commit = Some(c)
                }
                _ => tracing::debug!(
                    since = s,
                    "stage-entry commit gone or not an ancestor; ignoring it"
                ),
            }
        }

        let mut cmd = self
            .git_in(&dir)?
            .args(["rev-list", "--no-merges", "--full-history", "--max-count=1"])
            .arg(&head)
            .arg(format!("^{main}"));
        if let Some(c) = &since_commit {
            cmd = cmd.arg(format!("^{c}"));
        }
        cmd = cmd.args(["--", ":(top)"]);
        if !exclude.is_empty() {
            cmd = cmd.arg(format!(":(top,exclude,literal){exclude}"));
        }
        let out = cmd.checked().with_context(ctx)?;
        Ok(!out.stdout_text().trim().is_empty())
    }
}

fn show(source: &Source) -> String {
    match source {
        Source::Worktree(p) => format!("worktree {}", p.display()),
        Source::Ref(r) => r.clone(),
    }
}

/// Where `parts` leads under `root`, walking without following symlinks;
/// `None` if a component is missing or an intermediate one is not a real
/// directory (git would not have such a path either).
fn walk(root: &Path, parts: &[&str]) -> Result<Option<(PathBuf, Option<fs::Metadata>)>> {
    let root_meta =
        fs::metadata(root).with_context(|| format!("opening worktree {}", root.display()))?;
    if !root_meta.is_dir() {
        bail!("worktree {} is not a directory", root.display());
    }
    let mut path = root.to_path_buf();
    let mut meta: Option<fs::Metadata> = None;
    for part in parts {
        if meta.as_ref().is_some_and(|m| !m.is_dir()) {
            return Ok(None);
        }
        path.push(part);
        meta = match fs::symlink_metadata(&path) {
            Ok(m) => Some(m),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("inspecting {}", path.display())),
        };
    }
    Ok(Some((path, meta)))
}

/// A worktree file as git would store it, read without ever blocking: only a regular file
/// (or a symlink, as its target path) of at most [`MAX_FILE`] bytes. Anything else — a FIFO, a
/// device, a socket, a directory, a huge file — is [`Refused`]: the reader waits for nothing
/// and holds nothing while an agent plays tricks with its artifacts.
fn read_worktree_file(root: &Path, parts: &[&str]) -> Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let Some((path, Some(meta))) = walk(root, parts)? else {
        return Ok(None);
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        return match fs::read_link(&path) {
            Ok(target) => Ok(Some(target.into_os_string().into_encoded_bytes())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        };
    }
    let refuse = |why: String| -> Result<Option<Vec<u8>>> { Err(Refused(why).into()) };
    if kind.is_dir() {
        return refuse("is a directory, not a file".into());
    }
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "a special file"
        };
        return refuse(format!("is {what}, not a regular file"));
    }
    if meta.len() > MAX_FILE as u64 {
        return refuse(format!("is larger than 1 MiB ({} bytes)", meta.len()));
    }
    // The file may be swapped between the look and the open: never follow a symlink, never
    // wait on a FIFO, and judge what was actually opened.
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return refuse("changed into a symlink while it was read".into());
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let opened = file
        .metadata()
        .with_context(|| format!("inspecting {}", path.display()))?;
    if !opened.is_file() {
        return refuse("changed into something other than a regular file while it was read".into());
    }
    let mut bytes = Vec::with_capacity(opened.len().min(MAX_FILE as u64) as usize);
    file.take(MAX_FILE as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() > MAX_FILE {
        return refuse("grew past 1 MiB while it was read".into());
    }
    Ok(Some(bytes))
}

fn list_worktree_dir(root: &Path, parts: &[&str]) -> Result<Vec<String>> {
    let path = match walk(root, parts)? {
        None => return Ok(Vec::new()),
        Some((path, None)) => path,
        Some((path, Some(meta))) if meta.is_dir() => path,
        Some((path, Some(_))) => bail!("{} is not a directory", path.display()),
    };
    let entries = match fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", path.display()))?;
        let kind = entry
            .file_type()
            .with_context(|| format!("inspecting {}", entry.path().display()))?;
        if kind.is_dir() {
            continue;
        }
        match entry.file_name().into_string() {
            Ok(name) if name == ".git" => {}
            Ok(name) => names.push(name),
            Err(raw) => {
                tracing::warn!(dir = %path.display(), name = ?raw, "skipping non-UTF-8 file name")
            }
        }
    }
    Ok(names)
}

struct Object {
    id: String,
    kind: String,
    size: usize,
    content: Vec<u8>,
}

impl Git {
    /// The commit `rev` names in the repo at `dir`, `None` if it names none.
    /// `HEAD` and full ref names are read on disk when the repository lets this be done with
    /// certainty (`local::resolve`), else git answers.
    pub(super) fn rev_parse_commit(&self, dir: &Path, rev: &str) -> Result<Option<String>> {
        if (rev == "HEAD" || rev.starts_with("refs/"))
            && let Some(d) = local_dirs(dir)?
        {
            match local::resolve(&d, rev)? {
                Lookup::Found(id) => return Ok(Some(id)),
                Lookup::Missing => return Ok(None),
                Lookup::Unknown => {}
            }
        }
        let cmd = self
            .git_in(dir)?
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{rev}^{{commit}}"));
        let out = cmd.output()?;
        match out.code {
            Some(0) => Ok(Some(out.stdout_text().trim().to_owned())),
            Some(1) => Ok(None),
            _ => Err(cmd.failure(&out)),
        }
    }

    fn require_rev(&self, dir: &Path, rev: &str) -> Result<()> {
        if self.rev_parse_commit(dir, rev)?.is_none() {
            bail!("{rev} does not exist in {}", dir.display());
        }
        Ok(())
    }

    pub(super) fn is_ancestor(&self, dir: &Path, ancestor: &str, descendant: &str) -> Result<bool> {
        self.git_in(dir)?
            .args(["merge-base", "--is-ancestor"])
            .arg(ancestor)
            .arg(descendant)
            .yes_no()
    }

    /// Blob id of `bytes` in the object format of the repo at `dir`: hashed here, unless the
    /// format cannot be read with certainty.
    fn hash_blob(&self, dir: &Path, bytes: &[u8]) -> Result<String> {
        if let Some(d) = local_dirs(dir)?
            && let Lookup::Found(format) = local::object_format(&d.common)?
        {
            return Ok(local::blob_id(format, bytes));
        }
        let out = self
            .git_in(dir)?
            .args(["hash-object", "--no-filters", "--stdin"])
            .stdin(bytes)
            .checked()?;
        Ok(out.stdout_text().trim().to_owned())
    }

    /// Look `spec` (e.g. `refs/remotes/origin/main:docs/x.md`) up with one
    /// `git cat-file --batch[-check]`; `None` when it names nothing.
    fn cat_file(&self, dir: &Path, spec: &str, with_content: bool) -> Result<Option<Object>> {
        let mode = if with_content {
            "--batch"
        } else {
            "--batch-check"
        };
        let cmd = self
            .git_in(dir)?
            .args(["cat-file", mode])
            .stdin(format!("{spec}\n"));
        let out = cmd.checked()?;
        let stdout = &out.stdout;
        let header_end = stdout
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(stdout.len());
        let header = String::from_utf8_lossy(&stdout[..header_end]);
        if header.ends_with(" missing") {
            return Ok(None);
        }
        let unexpected = || anyhow::anyhow!("`{}` answered {header:?} for {spec:?}", cmd.display());
        let mut fields = header.split(' ');
        let (Some(id), Some(kind), Some(size), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(unexpected());
        };
        let size: usize = size.parse().map_err(|_| unexpected())?;
        let content = if with_content {
            let start = header_end + 1;
            match stdout.get(start..start.saturating_add(size)) {
                Some(c) => c.to_vec(),
                None => bail!(
                    "`{}` returned a truncated object for {spec:?}",
                    cmd.display()
                ),
            }
        } else {
            Vec::new()
        };
        Ok(Some(Object {
            id: id.to_owned(),
            kind: kind.to_owned(),
            size,
            content,
        }))
    }

    /// Names of the blobs (files and symlinks) directly in tree `tree`.
    fn list_tree(&self, dir: &Path, tree: &str) -> Result<Vec<String>> {
        let out = self
            .git_in(dir)?
            .args(["ls-tree", "-z"])
            .arg(tree)
            .checked()?;
        let mut names = Vec::new();
        for record in out.stdout.split(|&b| b == 0).filter(|r| !r.is_empty()) {
            // "<mode> SP <type> SP <id> TAB <name>"
            let Some(tab) = record.iter().position(|&b| b == b'\t') else {
                bail!(
                    "unexpected ls-tree record {:?}",
                    String::from_utf8_lossy(record)
                );
            };
            let meta = String::from_utf8_lossy(&record[..tab]);
            if meta.split(' ').nth(1) != Some("blob") {
                continue;
            }
            match std::str::from_utf8(&record[tab + 1..]) {
                Ok(name) => names.push(name.to_owned()),
                Err(_) => tracing::warn!(
                    tree,
                    name = %String::from_utf8_lossy(&record[tab + 1..]),
                    "skipping non-UTF-8 file name"
                ),
            }
        }
        Ok(names)
    }
}
