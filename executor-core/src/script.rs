//! Shell snippets every container backend runs: the step wrapper that
//! records the step's pid, and the kill of a step's process tree. Neither
//! Docker nor Kubernetes has a call that kills an exec, so the runner finds
//! the step's shell by the pid it wrote.

/// Quotes a value for POSIX `sh`.
///
/// ```
/// assert_eq!(executor_core::script::quote("it's"), "'it'\\''s'");
/// ```
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The argv that runs `script` as `sh -ec <script>` after writing the
/// shell's pid to `pid_file` and running `prelude` (for example exports).
///
/// The step's processes raise their own `oom_score_adj` to 1000 (raising
/// needs no privilege), so when a step outgrows the memory limit the
/// kernel kills the step, not the process that keeps the environment
/// alive: the OOM killer can strike twice before the first victim's
/// memory is freed, and its second pick among small processes was
/// otherwise as likely the keep-alive as the step's own.
///
/// ```
/// let argv = executor_core::script::step_argv("/.knotless/1.pid", "", "make");
/// assert_eq!(argv[0], "sh");
/// assert_eq!(argv.last().unwrap(), "make");
/// ```
pub fn step_argv(pid_file: &str, prelude: &str, script: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "{{ echo 1000 > /proc/self/oom_score_adj; }} 2>/dev/null || :; \
             echo $$ > \"$0\" && {prelude}exec sh -ec \"$1\""
        ),
        pid_file.into(),
        script.into(),
    ]
}

/// A POSIX sh script that SIGKILLs the process in `pid_file` and every
/// descendant, found through `/proc/*/stat`. The root is stopped first so
/// it cannot fork while the tree is gathered.
///
/// The pid file is in reach of the step, and the kill runs as root: a
/// value that is not a plain pid above 1 (`-1` would signal every process,
/// `1` the environment's keep-alive, `0` the kill's own group) is ignored.
pub fn kill_tree(pid_file: &str) -> String {
    format!(
        r#"root=$(cat {file} 2>/dev/null) || exit 0
case "$root" in ''|*[!0-9]*|0*) exit 0;; esac
[ "$root" -gt 1 ] 2>/dev/null && [ "$root" != "$$" ] || exit 0
kill -STOP "$root" 2>/dev/null || exit 0
all="$root"; frontier="$root"
while [ -n "$frontier" ]; do
  next=""
  for stat in /proc/[0-9]*/stat; do
    read -r line < "$stat" 2>/dev/null || continue
    rest=${{line##*) }}
    set -- $rest
    for p in $frontier; do
      if [ "$2" = "$p" ]; then pid=${{stat#/proc/}}; next="$next ${{pid%/stat}}"; fi
    done
  done
  all="$all $next"; frontier="$next"
done
kill -KILL $all 2>/dev/null
rm -f {file}
exit 0"#,
        file = quote(pid_file)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the kill script with `kill` replaced by a recorder, so no
    /// signal is ever sent: returns what it would have signalled.
    fn would_kill(pid_file_content: &str) -> String {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pid_file = dir.path().join("step.pid");
        std::fs::write(&pid_file, pid_file_content).unwrap_or_else(|e| panic!("{e}"));
        let record = dir.path().join("kills");
        let script = format!(
            "kill() {{ echo \"$*\" >> {}; }}\n{}",
            quote(&record.display().to_string()),
            kill_tree(&pid_file.display().to_string())
        );
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success());
        std::fs::read_to_string(record).unwrap_or_default()
    }

    #[test]
    fn a_pid_file_the_step_forged_kills_nothing() {
        for forged in ["-1", "1", "0", "00", "", "abc", "12 13", "-- -1", "0012"] {
            assert_eq!(would_kill(forged), "", "{forged:?}");
        }
    }

    #[test]
    fn a_real_pid_is_stopped_then_killed() {
        let kills = would_kill("4242\n");
        assert!(kills.starts_with("-STOP 4242"), "{kills}");
    }
}
