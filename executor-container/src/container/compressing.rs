//! Whether a backend's transfers go gzip-compressed, decided by the
//! engine's round trip ([`Compression::applies`]), which may still be
//! being timed when the backend is made: the first transfer waits for it,
//! not the calls before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use executor_core::tar::{Compression, UnpackSummary};
use executor_core::{ExecutorError, FailureKind};
use tokio::task::JoinHandle;

/// The compressor's file name in the state folder.
pub const GZ_FILE: &str = "knotless-gz";

/// The compressor of copies out (`helper/gz.rs`: `gzip -1`'s matching at
/// four times busybox `gzip`'s pace, built for x86_64 Linux with no C
/// library); empty where the toolchain that built this crate could not
/// build it (see `build.rs`).
pub const GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/knotless-gz"));

/// The compressor for aarch64, staged as [`GZ_FILE`]`.aarch64`.
pub const GZ_AARCH64: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/knotless-gz.aarch64"));

/// What a compressed copy out runs in the environment (`sh -c PACK_OUT
/// DIR GZ`, as [`pack_out_argv`] makes it): packs `DIR` and compresses it
/// with `GZ` (with this machine's suffix, [`MACHINE_SUFFIX`](crate::staging::MACHINE_SUFFIX)),
/// the compressor sent in with the step scripts, where it runs
/// here (x86_64 or aarch64, a folder that allows execs), else with the
/// image's `gzip -1`, else not at all. It exits with tar's own status
/// (not the pipe's last, the compressor's: POSIX `sh` has no
/// `pipefail`). The runner tells a compressed stream from a plain one by
/// its first bytes ([`executor_core::tar::gunzip_if_gzipped`]), so no
/// exec of its own asks first (one round trip or more over a link). A
/// compressor that fails leaves a short stream, which the decoder
/// refuses.
///
/// Why a compressor of its own: Debian's busybox `gzip` ignores its level
/// options and compresses at level 6, about 40 MB/s on a core, where a
/// 100 Mbit/s link would take a source tree at five times that.
///
/// ```
/// use executor_container::container::compressing::PACK_OUT;
/// let out = std::process::Command::new("sh")
///     .args(["-c", PACK_OUT, env!("CARGO_MANIFEST_DIR"), "/nowhere/knotless-gz"])
///     .output()
///     .unwrap();
/// assert!(out.status.success());
/// let has_gzip = std::process::Command::new("sh")
///     .args(["-c", "command -v gzip"])
///     .output()
///     .unwrap()
///     .status
///     .success();
/// assert_eq!(out.stdout.starts_with(&[0x1f, 0x8b]), has_gzip);
/// ```
pub const PACK_OUT: &str = r#"z=gzip; case $(uname -m 2>/dev/null) in x86_64) _kx=;; aarch64) _kx=.aarch64;; *) _kx=.none;; esac; ! "$1$_kx" < /dev/null > /dev/null 2>&1 || z=$1$_kx
[ "$z" != gzip ] || command -v gzip > /dev/null 2>&1 || exec tar c -C "$0" .
{ s=$( { { tar c -C "$0" .; echo $? >&3; } | "$z" -1 >&4; } 3>&1 ); } 4>&1; [ "$s" = 0 ]"#;

/// The command that packs `dir` in the environment: [`PACK_OUT`] with
/// the compressor staged in the state folder.
///
/// ```
/// use executor_container::container::compressing::{pack_out_argv, PACK_OUT};
/// let argv = pack_out_argv("/outputs");
/// assert_eq!(argv[..4], ["sh", "-c", PACK_OUT, "/outputs"]);
/// assert_eq!(argv[4], "/.knotless/knotless-gz");
/// ```
pub fn pack_out_argv(dir: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        PACK_OUT.into(),
        dir.into(),
        format!("{}/{GZ_FILE}", crate::staging::STATE_DIR),
    ]
}

/// How a copy out went, from its two halves run together: the stream
/// from the environment (`produced`) and the untrusted unpacker reading
/// it (`unpacked`). A stream that broke ([`FailureKind::Unreachable`]: no
/// answer, a connection cut) cut the archive short, so it is the cause
/// and the copy may go again; otherwise the unpacker's refusal comes
/// first, then the stream's own failure.
///
/// ```
/// use executor_container::container::compressing::copied_out;
/// use executor_core::tar::UnpackSummary;
/// use executor_core::{ExecutorError, FailureKind};
/// let cut = ExecutorError::unreachable("copying /outputs out", "connection reset");
/// let short: Result<UnpackSummary, ExecutorError> =
///     Err(ExecutorError::backend("unpacking", "the archive ended early"));
/// assert_eq!(copied_out(Err(cut), short).unwrap_err().kind(), FailureKind::Unreachable);
/// assert!(copied_out(Ok(()), Ok::<_, ExecutorError>(UnpackSummary::default())).is_ok());
/// ```
///
/// # Errors
/// The broken stream's, else the unpacker's, else the stream's error.
pub fn copied_out<E>(
    produced: Result<(), ExecutorError>,
    unpacked: Result<UnpackSummary, E>,
) -> Result<UnpackSummary, ExecutorError>
where
    ExecutorError: From<E>,
{
    match produced {
        Err(err) if err.kind() == FailureKind::Unreachable => Err(err),
        produced => {
            let summary = unpacked?;
            produced?;
            Ok(summary)
        }
    }
}

/// Writes the compressor into `dir`, a folder staged to be sent in as the
/// state folder, as an executable file; nothing when this build has none.
///
/// ```
/// use executor_container::container::compressing::{stage_gz, GZ, GZ_FILE};
/// let dir = tempfile::tempdir().unwrap();
/// stage_gz(dir.path()).unwrap();
/// assert_eq!(dir.path().join(GZ_FILE).exists(), !GZ.is_empty());
/// ```
///
/// # Errors
/// `Io` naming the file when it cannot be written.
pub fn stage_gz(dir: &std::path::Path) -> Result<(), executor_core::ExecutorError> {
    crate::staging::stage_builds(dir, GZ_FILE, [GZ, GZ_AARCH64], "writing the compressor")
}

/// A backend's compression choice; see the module docs.
///
/// ```
/// use executor_container::container::compressing::Compressing;
/// use executor_core::tar::Compression;
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let choice = Compressing::new(Compression::Auto);
/// assert!(!choice.compresses().await, "no round trip known");
/// choice.measured(Duration::from_millis(50));
/// assert!(choice.compresses().await, "a link between machines");
/// # }
/// ```
#[derive(Debug)]
pub struct Compressing {
    compression: Compression,
    compress: AtomicBool,
    timing: tokio::sync::Mutex<Option<JoinHandle<Duration>>>,
}

impl Compressing {
    /// `compression` with no round trip known: `Auto` does not compress.
    pub fn new(compression: Compression) -> Self {
        Compressing {
            compression,
            compress: AtomicBool::new(compression.applies(None)),
            timing: tokio::sync::Mutex::new(None),
        }
    }

    /// Decides by `round_trip`.
    pub fn measured(&self, round_trip: Duration) {
        self.compress
            .store(self.compression.applies(Some(round_trip)), Ordering::SeqCst);
    }

    /// Decides by the round trip `timing` will give, when a transfer
    /// first asks.
    pub fn measuring(&mut self, timing: JoinHandle<Duration>) {
        *self.timing.get_mut() = Some(timing);
    }

    /// Whether transfers go compressed; the first call waits for the
    /// round trip if it is still being timed.
    pub async fn compresses(&self) -> bool {
        let mut timing = self.timing.lock().await;
        if let Some(pending) = timing.take() {
            // A timing that failed is no round trip: `Auto` does not compress.
            self.measured(pending.await.unwrap_or_default());
        }
        self.compress.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests;
