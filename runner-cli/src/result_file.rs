//! Where the result JSON goes: a file, or standard output for `-`.

use std::path::Path;

use executor_core::RunResult;

/// Writes the result to `path`, or to standard output for `-`.
pub(crate) fn write_result(result: &RunResult, path: &Path) -> Result<(), String> {
    if path != Path::new("-") {
        return result.write_to(path).map_err(|err| err.to_string());
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", result.to_json())
        .and_then(|()| out.flush())
        .map_err(|err| format!("writing the result to standard output: {err}"))
}
