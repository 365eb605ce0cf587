//! Whether a backend's transfers go gzip-compressed, decided by the
//! engine's round trip ([`Compression::applies`]), which may still be
//! being timed when the backend is made: the first transfer waits for it,
//! not the calls before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use executor_core::tar::Compression;
use tokio::task::JoinHandle;

/// What a compressed copy out runs in the environment (`sh -c
/// PACK_OUT DIR`): packs `DIR` and compresses it with the image's
/// `gzip -1` where it has one, exiting with tar's own status (not the
/// pipe's last, gzip's: POSIX `sh` has no `pipefail`); where it has none
/// the tar goes as it is. The runner tells which from the stream's first
/// bytes ([`executor_core::tar::gunzip_if_gzipped`]), so no exec of its
/// own asks first (one round trip or more over a link). A gzip that
/// fails leaves a short stream, which the decoder refuses.
///
/// ```
/// use executor_container::container::compressing::PACK_OUT;
/// let out = std::process::Command::new("sh")
///     .args(["-c", PACK_OUT, env!("CARGO_MANIFEST_DIR")])
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
pub const PACK_OUT: &str = r#"command -v gzip > /dev/null 2>&1 || exec tar c -C "$0" .
{ s=$( { { tar c -C "$0" .; echo $? >&3; } | gzip -1 >&4; } 3>&1 ); } 4>&1; [ "$s" = 0 ]"#;

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
