//! Where in the file a construct is: its line and column, for a refusal
//! serde cannot place (an expression, a shell, a `uses:`).

use executor_core::expr::ExprError;

/// The line and column (1-based) of the first `needle` in `text` at or
/// after line `from` (1-based), as `line L column C`; the first anywhere
/// when none is there.
pub(super) fn locate(text: &str, needle: &str, from: usize) -> String {
    let find = |skip: usize| {
        text.lines()
            .enumerate()
            .skip(skip)
            .find_map(|(n, line)| line.find(needle).map(|at| (n, line, at)))
    };
    match find(from.saturating_sub(1)).or_else(|| find(0)) {
        Some((n, line, at)) => format!(
            "line {} column {}",
            n.saturating_add(1),
            line[..at].chars().count().saturating_add(1)
        ),
        None => "somewhere in the file".to_string(),
    }
}

/// The line (1-based) where `needle` first starts a line's text, at or
/// after line `from`: where a step or job begins.
pub(super) fn line_of(text: &str, needle: &str, from: usize) -> usize {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, line)| {
            line.trim_start()
                .trim_start_matches("- ")
                .starts_with(needle)
        })
        .map_or(from, |(n, _)| n.saturating_add(1))
}

/// An expression's refusal, placed in the file: the key, the line and
/// column, and what the parser said.
pub(super) fn expr_error(
    at: &str,
    key: &str,
    value: &str,
    err: &ExprError,
    text: &str,
    from: usize,
) -> anyhow::Error {
    // The text from the refused character to its line's end finds it in
    // the file (a block scalar's lines are the file's, indented).
    let rest: String = value.chars().skip(err.column.saturating_sub(1)).collect();
    let snippet = rest.lines().next().unwrap_or("").trim_end();
    let snippet: String = snippet.chars().take(24).collect();
    let place = if snippet.is_empty() {
        locate(text, &format!("{key}:"), from)
    } else {
        locate(text, &snippet, from)
    };
    anyhow::anyhow!("{at}: {key}: at {place}: {}", err.message)
}
