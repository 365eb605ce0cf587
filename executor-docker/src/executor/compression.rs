//! Whether transfers go gzip-compressed: decided by the engine's round
//! trip, which may still be being timed when the executor is made.

use executor_core::outage::ride_out;
use executor_core::tar::PackStream;
use executor_core::ExecutorError;

use super::DockerExecutor;

impl DockerExecutor {
    /// This executor, told the engine's round trip: `Compression::Auto`
    /// compresses uploads past [`AUTO_ROUND_TRIP`](executor_core::tar::AUTO_ROUND_TRIP).
    #[must_use]
    pub fn measured(self, round_trip: std::time::Duration) -> Self {
        self.compressing.measured(round_trip);
        self
    }

    /// This executor, its round trip still being timed by `timing`: the
    /// first transfer waits for it, not the calls before.
    pub(crate) fn measuring(
        mut self,
        timing: tokio::task::JoinHandle<std::time::Duration>,
    ) -> Self {
        self.compressing.measuring(timing);
        self
    }

    /// Whether transfers go gzip-compressed
    /// ([`Compressing::compresses`](executor_container::container::compressing::Compressing::compresses)).
    ///
    /// The first call waits for the round trip if it is still being
    /// timed: on a local engine or cluster (a Unix socket, loopback) the
    /// answer is no.
    pub async fn compresses(&self) -> bool {
        self.compressing.compresses().await
    }

    /// An upload's archive as it goes: compressed, or as it is.
    async fn body(&self, tar: PackStream) -> PackStream {
        if self.compresses().await {
            tar.gzip()
        } else {
            tar
        }
    }

    /// Uploads the archive `pack` makes into `path` of container `id`,
    /// riding out an engine that does not answer: each try packs afresh
    /// (a body cut short cannot be sent again), and unpacking the whole
    /// archive again over what a cut try left is what the engine does
    /// with any upload.
    pub(super) async fn upload(
        &self,
        id: &str,
        path: &str,
        what: &str,
        pack: impl Fn() -> PackStream,
    ) -> Result<(), ExecutorError> {
        let pack = &pack;
        let told = format!("copying {what} in");
        ride_out(&told, self.options.reconnect_timeout, move || async move {
            let body = self.body(pack()).await;
            self.engine.upload(id, path, what, body).await
        })
        .await
    }
}
