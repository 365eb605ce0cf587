//! Whether a backend's transfers go gzip-compressed, decided by the
//! engine's round trip ([`Compression::applies`]), which may still be
//! being timed when the backend is made: the first transfer waits for it,
//! not the calls before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use executor_core::tar::Compression;
use tokio::task::JoinHandle;

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
