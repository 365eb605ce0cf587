//! Checking a host folder after the fact: does any link in it lead out?

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// How many links one path may pass through, as Linux's `MAXSYMLINKS`.
const MAX_HOPS: usize = 40;

/// Every entry under `root` that leads out of it: a symbolic link that,
/// resolved as the kernel would (through the links it meets, whether or
/// not its last part exists), ends outside `root`, and a file hard-linked
/// to a file that is not under `root` (more links than `root` holds).
/// Empty for a folder the untrusted unpacker wrote.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// std::os::unix::fs::symlink("../../etc/passwd", dir.path().join("out")).unwrap();
/// std::os::unix::fs::symlink("out-of-reach/../x", dir.path().join("in")).unwrap();
/// let leaving = executor_core::tar::links_leaving(dir.path()).unwrap();
/// assert_eq!(leaving, [dir.path().join("out")]);
/// ```
///
/// # Errors
/// The error of canonicalizing `root` or of reading a folder or link under it.
pub fn links_leaving(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let root = root.canonicalize()?;
    let mut leaving = Vec::new();
    let mut inodes: HashMap<(u64, u64), (u64, Vec<PathBuf>)> = HashMap::new();
    for entry in walkdir::WalkDir::new(&root).follow_links(false) {
        let entry = entry.map_err(std::io::Error::from)?;
        let meta = entry.path().symlink_metadata()?;
        if meta.file_type().is_symlink() {
            if !resolve(&root, entry.path())?.starts_with(&root) {
                leaving.push(entry.path().to_path_buf());
            }
        } else if meta.is_file() && meta.nlink() > 1 {
            let seen = inodes
                .entry((meta.dev(), meta.ino()))
                .or_insert((meta.nlink(), Vec::new()));
            seen.1.push(entry.path().to_path_buf());
        }
    }
    for (nlink, paths) in inodes.into_values() {
        if u64::try_from(paths.len()).unwrap_or(u64::MAX) < nlink {
            leaving.extend(paths);
        }
    }
    leaving.sort();
    Ok(leaving)
}

/// Where the link at `link` leads, following every link on the way; a
/// part that does not exist ends the walk with the rest taken as written.
fn resolve(root: &Path, link: &Path) -> std::io::Result<PathBuf> {
    let mut hops = 0;
    let mut at = link.parent().unwrap_or(root).to_path_buf();
    let mut todo: Vec<PathBuf> = vec![std::fs::read_link(link)?];
    while let Some(target) = todo.pop() {
        hops += 1;
        if hops > MAX_HOPS {
            // A loop leads nowhere, which is not outside.
            return Ok(root.to_path_buf());
        }
        let mut parts: Vec<Component> = target.components().collect();
        parts.reverse();
        while let Some(part) = parts.pop() {
            match part {
                Component::RootDir | Component::Prefix(_) => at = PathBuf::from("/"),
                Component::CurDir => {}
                Component::ParentDir => {
                    at.pop();
                }
                Component::Normal(name) => {
                    let next = at.join(name);
                    match next.symlink_metadata() {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            let rest: PathBuf = parts.iter().rev().collect();
                            let inner = std::fs::read_link(&next)?;
                            todo.push(rest);
                            todo.push(inner);
                            break;
                        }
                        _ => at = next,
                    }
                }
            }
        }
    }
    Ok(at)
}
