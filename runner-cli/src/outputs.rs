//! The `--outputs` folder across runs: a folder this runner filled is
//! marked, and the next run into it replaces it, so a command can run
//! twice in a row; a folder it did not fill is never touched.

use std::path::Path;

use anyhow::Context;

/// The file a run leaves in the outputs folder it filled.
pub const MARKER: &str = ".knotless-outputs";

/// Removes `folder` when it holds an earlier run's outputs (its marker is
/// a plain file in it); returns whether it did.
pub fn replace_earlier(folder: &Path) -> anyhow::Result<bool> {
    let marker = folder.join(MARKER);
    let is_marked = std::fs::symlink_metadata(&marker).is_ok_and(|m| m.file_type().is_file())
        && std::fs::symlink_metadata(folder).is_ok_and(|m| m.is_dir());
    if !is_marked {
        return Ok(false);
    }
    std::fs::remove_dir_all(folder).with_context(|| {
        format!(
            "--outputs {} holds an earlier run's outputs and cannot be replaced",
            folder.display()
        )
    })?;
    Ok(true)
}

/// Marks `folder` as run `name`'s outputs, once they are in it.
pub fn mark(folder: &Path, name: &str) {
    if !folder.is_dir() {
        return;
    }
    let text = format!(
        "The outputs of run {name}. The next run with --outputs here replaces this folder; \
         remove this file to keep it.\n"
    );
    if let Err(err) = std::fs::write(folder.join(MARKER), text) {
        tracing::warn!(%err, folder = %folder.display(), "cannot mark the outputs folder");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_folder_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("mine.txt"), "keep").unwrap();
        assert!(!replace_earlier(&out).unwrap());
        assert!(out.join("mine.txt").exists());
        // A link named as the marker does not count.
        std::os::unix::fs::symlink("/etc/hostname", out.join(MARKER)).unwrap();
        assert!(!replace_earlier(&out).unwrap());
        std::fs::remove_file(out.join(MARKER)).unwrap();
        mark(&out, "r");
        assert!(replace_earlier(&out).unwrap());
        assert!(!out.exists());
        assert!(!replace_earlier(&out).unwrap());
    }
}
