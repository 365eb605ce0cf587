//! Whether transfers go gzip-compressed: decided by the engine's round
//! trip, which may still be being timed when the executor is made.

use executor_core::tar::PackStream;

use super::DockerExecutor;

impl DockerExecutor {
    /// This executor, told the engine's round trip: `Compression::Auto`
    /// compresses uploads past [`AUTO_ROUND_TRIP`](executor_core::tar::AUTO_ROUND_TRIP).
    #[must_use]
    pub fn measured(self, round_trip: std::time::Duration) -> Self {
        self.compress.store(
            self.options.compression.applies(Some(round_trip)),
            std::sync::atomic::Ordering::SeqCst,
        );
        self
    }

    /// This executor, its round trip still being timed by `timing`: the
    /// first transfer waits for it, not the calls before.
    pub(crate) fn measuring(
        mut self,
        timing: tokio::task::JoinHandle<std::time::Duration>,
    ) -> Self {
        *self.timing.get_mut() = Some(timing);
        self
    }

    /// Whether transfers go gzip-compressed; the first call waits for the
    /// round trip if it is still being timed.
    pub(super) async fn compresses(&self) -> bool {
        let mut timing = self.timing.lock().await;
        if let Some(pending) = timing.take() {
            // A timing that failed is no round trip: `Auto` does not compress.
            let round_trip = pending.await.unwrap_or_default();
            self.compress.store(
                self.options.compression.applies(Some(round_trip)),
                std::sync::atomic::Ordering::SeqCst,
            );
        }
        self.compress.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// An upload's archive as it goes: compressed, or as it is.
    pub(super) async fn body(&self, tar: PackStream) -> PackStream {
        if self.compresses().await {
            tar.gzip()
        } else {
            tar
        }
    }
}
