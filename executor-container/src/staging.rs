//! Staging the helpers into an environment: which build for which
//! machine, under which name, in the runner's own folder. Below both the
//! container layer ([`crate::container`]) and the step protocol
//! ([`crate::detached`]), which each stage their helpers through it.

use executor_core::ExecutorError;

/// The runner's own folder in every container environment: the step
/// scripts, the run's plan and each step's files.
pub const STATE_DIR: &str = "/.knotless";

/// Shell that sets `_kx` to the file suffix of this machine's helpers
/// (`uname -m`): none on x86_64, `.aarch64` on aarch64, and on any other
/// machine one no helper has, so it finds none and uses the image's tools
/// and the shell's start. Every script that runs a helper says its path
/// as `DIR/FILE$_kx`: the kernel is never handed an ELF of another
/// machine (which a shell would then read as a script).
///
/// ```
/// use executor_container::container::MACHINE_SUFFIX;
/// let out = std::process::Command::new("sh")
///     .args(["-c", &format!("{MACHINE_SUFFIX}; echo \"[$_kx]\"")])
///     .output()
///     .unwrap();
/// let said = String::from_utf8_lossy(&out.stdout);
/// assert!(["[]\n", "[.aarch64]\n", "[.none]\n"].contains(&said.as_ref()), "{said}");
/// ```
pub const MACHINE_SUFFIX: &str =
    "case $(uname -m 2>/dev/null) in x86_64) _kx=;; aarch64) _kx=.aarch64;; *) _kx=.none;; esac";

/// The machines a helper is built for: each one's `uname -m` and the
/// suffix of its helpers' files ([`MACHINE_SUFFIX`]).
pub const HELPER_MACHINES: [(&str, &str); 2] = [("x86_64", ""), ("aarch64", ".aarch64")];

/// Writes each machine's build of a helper into `dir` as `name` with the
/// machine's suffix ([`HELPER_MACHINES`]): `builds` in the same order;
/// an empty build (one this toolchain could not make) is left out.
pub(crate) fn stage_builds(
    dir: &std::path::Path,
    name: &str,
    builds: [&[u8]; 2],
    what: &'static str,
) -> Result<(), ExecutorError> {
    for ((_, suffix), bytes) in HELPER_MACHINES.iter().zip(builds) {
        stage_executable(dir, &format!("{name}{suffix}"), bytes, what)?;
    }
    Ok(())
}

/// Writes `bytes` as the executable `dir/name`; nothing when `bytes` is
/// empty (a helper this build could not make).
pub(crate) fn stage_executable(
    dir: &std::path::Path,
    name: &str,
    bytes: &[u8],
    what: &'static str,
) -> Result<(), ExecutorError> {
    if bytes.is_empty() {
        return Ok(());
    }
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| ExecutorError::io(what, &path, e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| ExecutorError::io(what, &path, e))
}
