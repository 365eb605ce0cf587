//! A step's outputs file, as Actions' `$GITHUB_OUTPUT` reads.

use std::collections::BTreeMap;

/// Reads a step's outputs file: `NAME=VALUE` lines and `NAME<<DELIMITER`
/// blocks (the lines up to one that is exactly `DELIMITER`), as Actions'
/// `$GITHUB_OUTPUT`. Returns the outputs (a later one of a name wins) and
/// a sentence for each line that was not taken.
///
/// ```
/// let (outputs, refused) = executor_core::expr::read_outputs("a=1\nnotes<<EOF\nx\ny\nEOF\nbad line\n");
/// assert_eq!(outputs["a"], "1");
/// assert_eq!(outputs["notes"], "x\ny");
/// assert_eq!(refused.len(), 1);
/// ```
pub fn read_outputs(text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut outputs = BTreeMap::new();
    let mut refused = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let number = number.saturating_add(1);
        if line.trim().is_empty() {
            continue;
        }
        let heredoc = line.find("<<");
        let equals = line.find('=');
        match (heredoc, equals) {
            (Some(at), eq) if eq.is_none_or(|eq| at < eq) => {
                let name = &line[..at];
                let delimiter = &line[at.saturating_add(2)..];
                if !name_ok(name) || delimiter.is_empty() {
                    refused.push(format!("line {number}: {line:?} is not NAME<<DELIMITER"));
                    continue;
                }
                let mut body: Vec<&str> = Vec::new();
                let mut closed = false;
                for (_, next) in lines.by_ref() {
                    if next == delimiter {
                        closed = true;
                        break;
                    }
                    body.push(next);
                }
                if closed {
                    outputs.insert(name.to_string(), body.join("\n"));
                } else {
                    refused.push(format!(
                        "line {number}: {name}<<{delimiter} is never closed by a line {delimiter}"
                    ));
                }
            }
            (_, Some(eq)) => {
                let name = &line[..eq];
                if name_ok(name) {
                    outputs.insert(name.to_string(), line[eq.saturating_add(1)..].to_string());
                } else {
                    refused.push(format!("line {number}: {name:?} is not an output's name"));
                }
            }
            _ => refused.push(format!(
                "line {number}: {line:?} is neither NAME=VALUE nor NAME<<DELIMITER"
            )),
        }
    }
    (outputs, refused)
}

/// Whether `name` can name a step's id or output: a letter or `_`, then
/// letters, digits, `_` and `-` (Actions' rule).
///
/// ```
/// assert!(executor_core::expr::name_ok("build-1"));
/// assert!(!executor_core::expr::name_ok("1build"));
/// ```
pub fn name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
