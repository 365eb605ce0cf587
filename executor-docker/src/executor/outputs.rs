//! Folders out of the container: through the engine's archive API, or,
//! over a link between machines, gzip-compressed by the image's own
//! `tar` and `gzip` (the archive API sends a tar as it is).

use std::collections::HashMap;

use executor_core::tar::{gunzip, unpack_untrusted, UnpackLimits, UnpackSummary};
use executor_core::ExecutorError;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_util::io::StreamReader;

use super::DockerExecutor;
use crate::engine::{ExecSpec, StepStream};

/// Packs `$0` and compresses it, exiting with tar's own status (not the
/// pipe's last, gzip's: POSIX `sh` has no `pipefail`). A gzip that fails
/// leaves a short stream, which the decoder refuses.
const TAR_GZIP: &str =
    r#"{ s=$( { { tar c -C "$0" .; echo $? >&3; } | gzip -1 >&4; } 3>&1 ); } 4>&1; [ "$s" = 0 ]"#;

impl DockerExecutor {
    /// Streams `path` in container `id` into `dest` through the untrusted
    /// unpacker: compressed when uploads are and the image has `gzip`.
    pub(super) async fn folder_out(
        &self,
        id: &str,
        path: &str,
        dest: &std::path::Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        if self.compresses().await && self.has_gzip(id).await {
            return self.folder_out_gzipped(id, path, dest, limits).await;
        }
        let stream = self
            .engine
            .download(id, path)
            .map(|chunk| chunk.map_err(std::io::Error::other));
        let limits = UnpackLimits {
            // The engine names every entry after the folder: `outputs/...`.
            strip_components: 1,
            ..limits
        };
        Ok(unpack_untrusted(StreamReader::new(stream), dest, limits).await?)
    }

    async fn folder_out_gzipped(
        &self,
        id: &str,
        path: &str,
        dest: &std::path::Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        let what = format!("copying {path} out");
        let exec = ExecSpec {
            cmd: vec!["sh".into(), "-c".into(), TAR_GZIP.into(), path.into()],
            env: Vec::new(),
            working_dir: "/".into(),
            user: Some("0".into()),
            stdin: false,
        };
        let exec_id = self.engine.exec_create(id, &exec).await?;
        let mut output = self.engine.exec_start(&exec_id).await?;
        let (mut writer, reader) = tokio::io::duplex(256 << 10);
        // Only the start of a tool's complaint is kept: the image's tools
        // are the step's to replace, and may print without end.
        let mut said = executor_core::text::HeadBuffer::new(4096);
        let produce = async {
            while let Some(chunk) = output.next().await {
                match chunk? {
                    (StepStream::Stdout, bytes) => writer
                        .write_all(&bytes)
                        .await
                        .map_err(|e| ExecutorError::backend(&what, e.to_string()))?,
                    (StepStream::Stderr, bytes) => {
                        let _ = said.write_all(&bytes).await;
                    }
                }
            }
            drop(writer);
            Ok::<(), ExecutorError>(())
        };
        // The unpacker's limits count what comes out of the decoder: a
        // small stream that inflates past them is refused as it grows.
        let consume = unpack_untrusted(gunzip(reader), dest, limits);
        let (produced, consumed) = tokio::join!(produce, consume);
        let summary = consumed?;
        produced?;
        match self.settled(&exec_id).await?.exit_code {
            Some(0) => Ok(summary),
            Some(code) => Err(ExecutorError::backend(
                what,
                format!("exit {code}: {}", said.text().trim()),
            )),
            None => Err(ExecutorError::LostExitStatus {
                what,
                detail: "the engine reported no exit code".into(),
            }),
        }
    }

    /// Whether container `id`'s image has `gzip`, asked once per container.
    pub(super) async fn has_gzip(&self, id: &str) -> bool {
        if let Some(known) = self.gzip().get(id) {
            return *known;
        }
        let has = self
            .exec_as_root(id, "command -v gzip >/dev/null 2>&1", "looking for gzip")
            .await
            .is_ok();
        if !has {
            tracing::info!(container = %id, "the image has no gzip: folders come out uncompressed");
        }
        self.gzip().insert(id.to_string(), has);
        has
    }

    pub(super) fn gzip(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.gzip_in.lock().unwrap_or_else(|p| p.into_inner())
    }
}
