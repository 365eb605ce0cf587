//! `knotless-tee`, the step's stream copier and recorder: a program of
//! about 5 KiB (`helper/tee.rs`, built for x86_64 Linux with no C
//! library) sent into the state folder with the step scripts. A step's
//! start runs one for both of the step's streams in place of a `tee`, a
//! joining `dd` and a recorder (a subshell and a `dd` a piece) on each:
//! in a busybox container, where each of those is a fork and busybox's
//! `tee` an exec of the whole busybox, a step's start took 3.2 ms with
//! it and 3.9 ms with a copier and recorder per stream.
//!
//! A channel looks for it once, as it opens ([`PROBE`]): on another
//! architecture, in a state folder that does not allow execs, in an
//! environment started before there was one, or where it does not copy
//! a line as it should, every start of that channel uses the image's
//! `tee`, as a start on its own exec always does.
//!
//! It is in the step's reach as the step scripts are (a step running as
//! root may replace it), and it sees only what `tee` saw: the step's own
//! output, never an end mark's key.

use std::path::Path;

use executor_core::ExecutorError;

/// The copier's file name in the state folder. The `.2` is its command
/// line's version: a runner that speaks another finds none there and uses
/// the image's `tee`, so a run resumed by another build never gives it
/// arguments it would take another way.
pub const TEE_FILE: &str = "knotless-tee.2";

/// The copier itself, for x86_64; empty where the toolchain that built
/// this crate could not build it (see `build.rs`).
pub const TEE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/knotless-tee"));

/// The copier for aarch64, staged as [`TEE_FILE`]`.aarch64`.
pub const TEE_AARCH64: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/knotless-tee.aarch64"));

/// What a channel's shell runs as it opens, with the state folder's path
/// for `DIR`: sets `_kx` to this machine's helper suffix
/// ([`MACHINE_SUFFIX`](crate::staging::MACHINE_SUFFIX)), and `_ktee` to
/// this machine's copier if it is there and runs here (a line sent
/// through it comes out whole), and to nothing otherwise.
const PROBE: &str = r#"_ktee=; MACHINE; [ "$(echo k | DIR/FILE$_kx - '' 3>&1 4>/dev/null 5</dev/null 2>/dev/null)" != k ] || _ktee=DIR/FILE$_kx"#;

/// [`PROBE`] for the state folder `state_dir`.
pub(super) fn probe(state_dir: &str) -> String {
    PROBE
        .replace("MACHINE", crate::staging::MACHINE_SUFFIX)
        .replace("DIR", state_dir)
        .replace("FILE", TEE_FILE)
}

/// Writes the copier into `dir`, a folder staged to be sent in as the
/// state folder, as an executable file; nothing when this build has none.
///
/// ```
/// use executor_container::detached::{stage_tee, TEE, TEE_FILE};
/// let dir = tempfile::tempdir().unwrap();
/// stage_tee(dir.path()).unwrap();
/// assert_eq!(dir.path().join(TEE_FILE).exists(), !TEE.is_empty());
/// ```
///
/// # Errors
/// `Io` naming the file when it cannot be written.
pub fn stage_tee(dir: &Path) -> Result<(), ExecutorError> {
    crate::staging::stage_builds(
        dir,
        TEE_FILE,
        [TEE, TEE_AARCH64],
        "writing the stream copier",
    )
}
