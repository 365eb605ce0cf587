//! Folders out of the container: through the engine's archive API, or,
//! over a link between machines, packed by the image's own `tar` and
//! gzip-compressed in the container (the archive API sends a tar as it
//! is; see `PACK_OUT`).

use executor_core::outage::ride_out;
use executor_core::tar::{
    unpack_untrusted, unpack_untrusted_gzipped_or_not, UnpackLimits, UnpackSummary,
};
use executor_core::ExecutorError;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_util::io::StreamReader;

use executor_container::container::compressing::{copied_out, pack_out_argv};

use super::DockerExecutor;
use crate::engine::{ExecSpec, StepStream};

impl DockerExecutor {
    /// Streams `path` in container `id` into `dest` through the untrusted
    /// unpacker: compressed when uploads are and the container can (with
    /// the compressor sent in, else the image's `gzip`).
    pub(super) async fn folder_out(
        &self,
        id: &str,
        path: &str,
        dest: &std::path::Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        // Each try unpacks the whole folder again, over what a cut one
        // left: the unpacker replaces the files it meets.
        let told = format!("copying {path} out");
        ride_out(&told, self.options.reconnect_timeout, || async {
            if self.compresses().await {
                self.folder_out_gzipped(id, path, dest, limits).await
            } else {
                self.folder_out_plain(id, path, dest, limits).await
            }
        })
        .await
    }

    async fn folder_out_plain(
        &self,
        id: &str,
        path: &str,
        dest: &std::path::Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        // The unpacker sees only that its input broke; the engine's own
        // error says whether another try can help.
        let broke = std::sync::Mutex::new(None::<ExecutorError>);
        let stream = self.engine.download(id, path).map(|chunk| {
            chunk.map_err(|err| {
                let io = std::io::Error::other(err.to_string());
                broke
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(err);
                io
            })
        });
        let limits = UnpackLimits {
            // The engine names every entry after the folder: `outputs/...`.
            strip_components: 1,
            ..limits
        };
        let unpacked = unpack_untrusted(StreamReader::new(stream), dest, limits).await;
        match broke.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(err) => Err(err),
            None => Ok(unpacked?),
        }
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
            cmd: pack_out_argv(path),
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
        let consume = unpack_untrusted_gzipped_or_not(reader, dest, limits);
        let (produced, consumed) = tokio::join!(produce, consume);
        let summary = copied_out(produced, consumed)?;
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use executor_core::tar::{pack_dir, Compression, UnpackLimits};
    use futures_util::StreamExt;
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::engine::{ExecState, MockEngine};
    use crate::DockerOptions;

    /// A compressed copy out is one exec, whose stream says whether the
    /// image compressed it: none asks for gzip first.
    #[tokio::test]
    async fn a_compressed_copy_out_is_one_exec_gzip_or_not() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("report.txt"), "a report\n".repeat(1000)).unwrap();
        for gzipped in [true, false] {
            let mut sent = Vec::new();
            if gzipped {
                pack_dir(folder.path()).gzip().read_to_end(&mut sent).await
            } else {
                pack_dir(folder.path()).read_to_end(&mut sent).await
            }
            .unwrap();
            let mut mock = MockEngine::new();
            mock.expect_exec_create().times(1).returning(|_, exec| {
                assert_eq!(exec.cmd, pack_out_argv("/outputs"));
                Ok("out".into())
            });
            mock.expect_exec_start().times(1).returning(move |_| {
                let chunk = Ok((StepStream::Stdout, bytes::Bytes::from(sent.clone())));
                Ok(futures_util::stream::iter([chunk]).boxed())
            });
            mock.expect_exec_inspect().returning(|_| {
                Ok(ExecState {
                    running: false,
                    exit_code: Some(0),
                })
            });
            let options = DockerOptions {
                compression: Compression::Always,
                ..DockerOptions::default()
            };
            let executor = DockerExecutor::with_engine(Arc::new(mock), options);
            let dest = tempfile::tempdir().unwrap();
            executor
                .folder_out("c", "/outputs", dest.path(), UnpackLimits::default())
                .await
                .unwrap_or_else(|e| panic!("gzipped {gzipped}: {e}"));
            assert_eq!(
                std::fs::read_to_string(dest.path().join("report.txt")).unwrap(),
                "a report\n".repeat(1000),
                "gzipped {gzipped}"
            );
        }
    }
}
