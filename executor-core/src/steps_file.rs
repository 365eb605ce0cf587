//! The steps file: `name<TAB>script` a line.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::Step;

/// A bad steps file, naming the file, the line and the fault.
#[derive(Debug, thiserror::Error)]
pub enum StepsFileError {
    /// The file could not be read.
    #[error("cannot read steps file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{}:{line}: {fault}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong and how to fix it.
        fault: String,
    },
}

/// Reads a steps file from disk; see [`parse_steps`] for the format.
///
/// # Errors
/// [`StepsFileError::Read`] when the file cannot be read; otherwise as
/// [`parse_steps`].
pub fn read_steps_file(path: &Path) -> Result<Vec<Step>, StepsFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| StepsFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_steps(path, &text)
}

/// Parses steps: one `name<TAB>script` per line; blank lines and lines
/// starting with `#` are ignored; `\n`, `\t` and `\\` in the script are
/// decoded. `path` is only used in error messages.
///
/// ```
/// use executor_core::parse_steps;
/// let steps = parse_steps("steps.tsv".as_ref(), "# build\nbuild\techo a\\necho b\n").unwrap();
/// assert_eq!(steps[0].name, "build");
/// assert_eq!(steps[0].script, "echo a\necho b");
///
/// let err = parse_steps("steps.tsv".as_ref(), "build echo a\n").unwrap_err();
/// assert_eq!(err.to_string(), "steps.tsv:1: no tab between the step name and its script");
/// ```
///
/// # Errors
/// [`StepsFileError::Line`] naming the file, the line and what is wrong with
/// it.
pub fn parse_steps(path: &Path, text: &str) -> Result<Vec<Step>, StepsFileError> {
    let mut steps = Vec::new();
    let mut names = HashSet::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let fault = |fault: String| StepsFileError::Line {
            path: path.to_path_buf(),
            line,
            fault,
        };
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.contains('\0') {
            // A NUL cannot reach `sh -c` intact on any backend.
            return Err(fault("a NUL byte is in the line".into()));
        }
        if raw.trim().is_empty() || raw.trim_start().starts_with('#') {
            continue;
        }
        let (name, script) = raw
            .split_once('\t')
            .ok_or_else(|| fault("no tab between the step name and its script".into()))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(fault("the step name is empty".into()));
        }
        if name.chars().any(char::is_control) {
            return Err(fault(format!(
                "the step name {name:?} has a control character; names are one plain line"
            )));
        }
        if !names.insert(name.to_string()) {
            return Err(fault(format!(
                "step name {name:?} is used twice; names must be unique"
            )));
        }
        let script = unescape(script).map_err(fault)?;
        steps.push(Step::new(name, script));
    }
    Ok(steps)
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                return Err(format!(
                    "bad escape \\{other} in the script; only \\n, \\t and \\\\ are decoded (write \\\\{other} for a literal backslash)"
                ))
            }
            None => return Err("the script ends with a lone \\; write \\\\ for a backslash".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse_steps(Path::new("s.tsv"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn every_fault_names_file_and_line() {
        assert_eq!(err("\n\tx\n"), "s.tsv:2: the step name is empty");
        assert!(err("a\tx\na\ty\n").starts_with("s.tsv:2: step name \"a\" is used twice"));
        assert!(err("a\tx\\q\n").starts_with("s.tsv:1: bad escape \\q"));
        assert!(err("a\tx\\").starts_with("s.tsv:1: the script ends with a lone"));
    }

    #[test]
    fn comments_blank_lines_and_escapes() {
        let steps = parse_steps(Path::new("s"), "# c\n\n  \na\tx\\ty\\\\z\r\n").unwrap();
        assert_eq!(steps, vec![Step::new("a", "x\ty\\z")]);
    }

    #[test]
    fn script_may_contain_more_tabs() {
        let steps = parse_steps(Path::new("s"), "a\tprintf 'x\ty'\n").unwrap();
        assert_eq!(steps[0].script, "printf 'x\ty'");
    }
}
