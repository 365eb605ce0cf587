//! Step scripts as files, and the shell snippets every container backend
//! runs: quoting, and the kill of a step's process tree. Neither Docker
//! nor Kubernetes has a call that kills an exec, so the runner finds the
//! step's processes by the pid its supervisor wrote (see
//! `executor_container::detached`, which starts the step).

/// Quotes a value for POSIX `sh`.
///
/// ```
/// assert_eq!(executor_core::script::quote("it's"), "'it'\\''s'");
/// ```
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Where a step's start finds its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script<'a> {
    /// In the command line itself: at most 128 KiB (the kernel's limit on
    /// one argument), and on Kubernetes part of the exec's URL.
    Inline(&'a str),
    /// In a file in the environment ([`ScriptFiles`]), run as `sh -e FILE`.
    File(&'a str),
}

/// The step scripts a run's environment holds as files, named by their
/// content (SHA-256), written at start with the checkout. A script of any
/// size runs from its file, and none travels in a command line (where
/// the kernel caps one argument at 128 KiB, and where an API server's
/// audit log would keep it). A command finds its script's file by the
/// script itself, so one it was not written for is never mistaken for one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptFiles {
    /// The folder in the environment that holds them.
    dir: String,
    names: std::collections::HashSet<String>,
}

impl ScriptFiles {
    /// The files `run`'s steps need, in the environment's folder `dir`,
    /// without writing anything (what a dry-run shows).
    pub fn planned(run: &crate::RunSpec, dir: &str) -> Self {
        ScriptFiles {
            dir: dir.trim_end_matches('/').to_string(),
            names: run
                .steps
                .iter()
                .map(|s| file_name(&s.script_to_run()))
                .collect(),
        }
    }

    /// Writes each distinct script of `run`'s steps into the host folder
    /// `host_dir` (created), to be copied to the environment's `dir`.
    ///
    /// # Errors
    /// The error of creating the folder or writing a file.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let run = executor_core::RunSpec::new("r", "did:plc:r", ".", "out")
    ///     .step(executor_core::Step::new("build", "make"));
    /// let files = executor_core::script::ScriptFiles::write(&run, dir.path(), "/.knotless").unwrap();
    /// let path = files.path_of("make").unwrap();
    /// assert!(path.starts_with("/.knotless/"));
    /// assert_eq!(files.path_of("make test"), None);
    /// ```
    pub fn write(
        run: &crate::RunSpec,
        host_dir: &std::path::Path,
        dir: &str,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(host_dir)?;
        let mut files = ScriptFiles {
            dir: dir.trim_end_matches('/').to_string(),
            names: std::collections::HashSet::new(),
        };
        for step in &run.steps {
            // Each script is hashed once, and one shared by steps written once.
            let script = step.script_to_run();
            let name = file_name(&script);
            if !files.names.contains(&name) {
                std::fs::write(host_dir.join(&name), script.as_bytes())?;
                files.names.insert(name);
            }
        }
        Ok(files)
    }

    /// Writes `run`'s scripts into a fresh temporary folder on the host,
    /// to be copied to the environment's `dir`: what a container backend
    /// sends in with the checkout. The folder is removed when dropped.
    ///
    /// # Errors
    /// `Io` naming the folder when it or a file cannot be written.
    pub fn staged(
        run: &crate::RunSpec,
        dir: &str,
    ) -> Result<(tempfile::TempDir, Self), crate::ExecutorError> {
        let what = "writing the step scripts";
        let host = tempfile::tempdir()
            .map_err(|e| crate::ExecutorError::io(what, std::env::temp_dir(), e))?;
        let files = Self::write(run, host.path(), dir)
            .map_err(|e| crate::ExecutorError::io(what, host.path(), e))?;
        Ok((host, files))
    }

    /// The file in the environment holding `script`, if it was written.
    pub fn path_of(&self, script: &str) -> Option<String> {
        let name = file_name(script);
        self.names
            .contains(&name)
            .then(|| format!("{}/{name}", self.dir))
    }
}

/// The file name of a step script: its SHA-256, shortened.
fn file_name(script: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(script.as_bytes());
    format!("step-{}.sh", hex::encode(&digest[..16]))
}

/// A POSIX sh script that SIGKILLs the process in `pid_file`, every
/// process that holds one of `outputs` as its stdout or stderr, and every
/// descendant of those, found through `/proc`. Each root is stopped first
/// so it cannot fork while the tree is gathered.
///
/// The holders are what a step left behind (`sleep 600 &`): once the
/// step's supervisor ends they are no longer its descendants, yet they
/// still write the step's output and hold the environment's processes.
/// The script starts no process before its kill: it must work in an
/// environment whose every pid a step holds.
///
/// It writes nothing and ignores SIGPIPE: a process that ends while the
/// tree is gathered is skipped without a word, and a kill whose own exec
/// stream is cut goes on to the end (one that died half-way would leave
/// the step stopped, not killed).
///
/// The pid file is in reach of the step, and the kill runs as root: a
/// value that is not a plain pid above 1 (`-1` would signal every process,
/// `1` the environment's keep-alive, `0` the kill's own group) is ignored.
pub fn kill_tree(pid_file: &str, outputs: &[&str]) -> String {
    let held = outputs
        .iter()
        .flat_map(|o| {
            let o = quote(o);
            [
                format!("[ \"$fd/1\" -ef {o} ]"),
                format!("[ \"$fd/2\" -ef {o} ]"),
            ]
        })
        .chain(std::iter::once("false".to_string()))
        .collect::<Vec<_>>()
        .join(" || ");
    format!(
        r#"trap '' PIPE
all=; frontier=; root=
start=; {{ read -r root start < {file}; }} 2>/dev/null
case "$root" in ''|*[!0-9]*|0*) root=;; esac
# A pid file outlives its process, and pids are reused: the root is only
# the process that still has the start time the file recorded.
if [ -n "$root" ] && [ -n "$start" ]; then
  line=; {{ read -r line < "/proc/$root/stat"; }} 2>/dev/null; rest=${{line##*) }}
  set -f; set -- $rest; set +f
  [ "${{20}}" = "$start" ] || root=
fi
if [ -n "$root" ] && [ "$root" -gt 1 ] 2>/dev/null && [ "$root" != "$$" ] && kill -STOP "$root" 2>/dev/null; then
  all=$root; frontier=$root
fi
for fd in /proc/[0-9]*/fd; do
  p=${{fd#/proc/}}; p=${{p%/fd}}
  [ "$p" -gt 1 ] 2>/dev/null && [ "$p" != "$$" ] || continue
  {{ {held}; }} 2>/dev/null || continue
  kill -STOP "$p" 2>/dev/null && {{ all="$all $p"; frontier="$frontier $p"; }}
done
while [ -n "$frontier" ]; do
  next=""
  for stat in /proc/[0-9]*/stat; do
    {{ read -r line < "$stat"; }} 2>/dev/null || continue
    rest=${{line##*) }}
    set -- $rest
    for p in $frontier; do
      if [ "$2" = "$p" ]; then pid=${{stat#/proc/}}; next="$next ${{pid%/stat}}"; fi
    done
  done
  all="$all $next"; frontier="$next"
done
[ -z "$all" ] || kill -KILL $all 2>/dev/null
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
            kill_tree(&pid_file.display().to_string(), &[])
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

    #[test]
    fn what_holds_the_steps_output_is_killed_though_its_supervisor_is_gone() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let output = dir.path().join("step.o");
        let pid_file = dir.path().join("step.pid");
        // The supervisor's pid, long gone; the leftover holds the output.
        std::fs::write(&pid_file, "999999999\n").unwrap_or_else(|e| panic!("{e}"));
        let file = std::fs::File::create(&output).unwrap_or_else(|e| panic!("{e}"));
        let mut leftover = std::process::Command::new("sleep")
            .arg("600")
            .stdout(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(kill_tree(
                &pid_file.display().to_string(),
                &[&output.display().to_string()],
            ))
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success());
        // A leftover the script missed ends by SIGTERM instead, not a hang.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &leftover.id().to_string()])
            .status();
        let ended = leftover.wait().unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(ended.signal(), Some(9), "{ended}");
    }
}
