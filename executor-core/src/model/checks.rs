//! The checks a run's input passes before anything starts: its folders
//! and its variables' names.

use crate::ExecutorError;

/// The outputs folder must be new or empty: a run's outputs are exactly
/// what its environment produced, never a file left by an earlier run.
pub(super) fn check_outputs(path: &std::path::Path) -> Result<(), ExecutorError> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ExecutorError::InvalidInput(format!(
            "RunSpec::outputs {shown}: {e}"
        ))),
        Ok(m) if m.is_dir() => match std::fs::read_dir(path).map(|mut e| e.next().is_none()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(ExecutorError::InvalidInput(format!(
                "RunSpec::outputs {shown} is not empty: its files would be taken for this run's outputs; \
                 empty it or name a new folder"
            ))),
            Err(e) => Err(ExecutorError::InvalidInput(format!(
                "RunSpec::outputs {shown}: {e}"
            ))),
        },
        Ok(_) => Err(ExecutorError::InvalidInput(format!(
            "RunSpec::outputs {shown} is not a folder"
        ))),
    }
}

pub(super) fn check_dir(path: &std::path::Path, flag: &str) -> Result<(), ExecutorError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ExecutorError::InvalidInput(format!(
            "{flag} {} is not a folder",
            path.display()
        ))),
        Err(e) => Err(ExecutorError::InvalidInput(format!(
            "{flag} {}: {e}",
            path.display()
        ))),
    }
}

/// Checks that `key` is a portable environment variable name.
///
/// ```
/// assert!(executor_core::validate_env_key("CARGO_HOME").is_ok());
/// assert!(executor_core::validate_env_key("1BAD").is_err());
/// ```
///
/// # Errors
/// [`ExecutorError::InvalidInput`] for an empty key, one starting with a digit,
/// or one with anything but ASCII letters, digits and `_`.
pub fn validate_env_key(key: &str) -> Result<(), ExecutorError> {
    let mut chars = key.chars();
    let ok = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ExecutorError::InvalidInput(format!(
            "environment variable name {key:?} is not valid: use letters, digits and _, not starting with a digit"
        )))
    }
}
