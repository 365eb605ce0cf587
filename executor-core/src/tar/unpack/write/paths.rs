//! Paths as an unpack shows, walks and clears them.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path};

use super::super::Op;

/// `abs` as the entry it belongs to names it: inside `dest`.
pub(super) fn shown(dest: &Path, abs: &Path) -> String {
    abs.strip_prefix(dest).unwrap_or(abs).display().to_string()
}

/// Pushes `path`'s components onto `queue` so the first is popped first.
pub(super) fn push_components(queue: &mut Vec<OsString>, path: &Path) -> Result<(), String> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("it is absolute ({})", path.display()))
            }
        }
    }
    queue.extend(parts.into_iter().rev());
    Ok(())
}

/// The archive path an operation names, for the refusal record.
pub(super) fn op_raw(op: &Op) -> String {
    match op {
        Op::Dir { raw, .. }
        | Op::File { raw, .. }
        | Op::Symlink { raw, .. }
        | Op::HardLink { raw, .. }
        | Op::Refused { raw, .. } => raw.clone(),
        Op::Data(_) | Op::EndFile | Op::Root => String::new(),
    }
}

/// Removes a file or link at `path` so the next create cannot follow it.
pub(super) fn remove_non_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "a folder is in the way",
        )),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
