//! The real engine: the Docker Engine API through `bollard`.

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, InspectContainerOptions,
    ListContainersOptions, ListVolumesOptions, RemoveContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use executor_core::outage::ride_out;
use executor_core::tar::PackStream;
use executor_core::ExecutorError;
use futures_util::{StreamExt, TryStreamExt};
use tokio_util::io::ReaderStream;

mod connect;
pub(crate) use connect::docker_host;
mod create;
mod errors;
mod networks;
mod once;
mod pull;

pub use create::create_body;
use errors::{container_gone, exec_chunk, fail, is_image_refusal, status};

use crate::engine::{
    ContainerSpec, ContainerState, Engine, ExecInput, ExecOutput, ExecSpec, ExecState, Listed,
    OutputStream,
};

/// A Docker-compatible engine (Docker or podman's Docker API).
pub struct BollardEngine {
    docker: Docker,
    /// How long a call the engine does not answer is tried again.
    reconnect_timeout: std::time::Duration,
    /// One `/_ping` on the warm connection, timed at connect.
    round_trip: std::time::Duration,
    /// Whether the client keeps connections ([`crate::pooled`]): then each
    /// exec's start has one warmed for the next.
    pooled: bool,
    /// The credentials pulls send.
    registry_auth: crate::RegistryAuth,
}

impl BollardEngine {
    /// Starts an exec attached: its output, and its stdin (closed by the
    /// engine at once unless the exec was created with it attached).
    async fn exec_start_attached(
        &self,
        exec_id: &str,
    ) -> Result<(ExecOutput, ExecInput), ExecutorError> {
        let options = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(64 * 1024),
        };
        let started = self
            .docker
            .start_exec(exec_id, Some(options))
            .await
            .map_err(fail(format!("starting exec {exec_id}")))?;
        if self.pooled {
            // The upgrade took its connection out of the pool: open the
            // next call's while this exec runs.
            let docker = self.docker.clone();
            tokio::spawn(async move {
                if let Err(err) = docker.ping().await {
                    tracing::debug!(%err, "warming a connection for the next call failed");
                }
            });
        }
        match started {
            StartExecResults::Attached { output, input } => {
                let failed = fail("reading exec output");
                Ok((
                    output.map(move |chunk| exec_chunk(chunk, &failed)).boxed(),
                    input,
                ))
            }
            StartExecResults::Detached => Err(ExecutorError::backend(
                format!("starting exec {exec_id}"),
                "the engine detached an exec that asked to attach",
            )),
        }
    }
}

#[async_trait]
impl Engine for BollardEngine {
    async fn image_present(&self, image: &str) -> Result<bool, ExecutorError> {
        ride_out("inspecting an image", self.reconnect_timeout, || {
            self.image_present_once(image)
        })
        .await
    }

    async fn pull(&self, image: &str) -> Result<(), ExecutorError> {
        pull::pull(&self.docker, &self.registry_auth, image).await
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, ExecutorError> {
        let mut tries = 0u32;
        ride_out("creating a container", self.reconnect_timeout, || {
            tries = tries.saturating_add(1);
            self.create_once(spec, tries > 1)
        })
        .await
    }

    async fn start(&self, id: &str) -> Result<(), ExecutorError> {
        ride_out("starting the container", self.reconnect_timeout, || {
            self.start_once(id)
        })
        .await
    }

    async fn exec_create(&self, id: &str, exec: &ExecSpec) -> Result<String, ExecutorError> {
        ride_out("creating an exec", self.reconnect_timeout, || {
            self.exec_create_once(id, exec)
        })
        .await
    }

    async fn exec_start(&self, exec_id: &str) -> Result<ExecOutput, ExecutorError> {
        Ok(self.exec_start_attached(exec_id).await?.0)
    }

    async fn exec_start_with_input(
        &self,
        exec_id: &str,
    ) -> Result<(ExecOutput, ExecInput), ExecutorError> {
        self.exec_start_attached(exec_id).await
    }

    async fn exec_inspect(&self, exec_id: &str) -> Result<ExecState, ExecutorError> {
        ride_out("inspecting an exec", self.reconnect_timeout, || {
            self.exec_inspect_once(exec_id)
        })
        .await
    }

    async fn inspect(&self, id: &str) -> Result<ContainerState, ExecutorError> {
        ride_out("inspecting the container", self.reconnect_timeout, || {
            self.inspect_once(id)
        })
        .await
    }

    async fn upload(
        &self,
        id: &str,
        path: &str,
        _what: &str,
        tar: PackStream,
    ) -> Result<(), ExecutorError> {
        let options = UploadToContainerOptions {
            path: path.to_string(),
            ..Default::default()
        };
        // The packer's own error (a file that cannot be packed) ends the
        // body; the HTTP client reports only that the request broke, so the
        // cause is kept here and told instead.
        let packing_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let slot = packing_error.clone();
        let stream = ReaderStream::with_capacity(tar, 64 * 1024).inspect_err(move |e| {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        });
        let sent = self
            .docker
            .upload_to_container(id, Some(options), bollard::body_try_stream(stream))
            .await;
        let what = format!("copying into {path} of container {id}");
        if let Some(err) = packing_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(ExecutorError::backend(what, err));
        }
        sent.map_err(fail(what))
    }

    fn download(&self, id: &str, path: &str) -> OutputStream {
        let options = DownloadFromContainerOptions {
            path: path.to_string(),
        };
        self.docker
            .download_from_container(id, Some(options))
            .map_err(fail(format!("copying {path} out of container {id}")))
            .boxed()
    }

    async fn remove(&self, id: &str) -> Result<(), ExecutorError> {
        ride_out("removing the container", self.reconnect_timeout, || {
            self.remove_once(id)
        })
        .await
    }

    async fn list(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        ride_out("listing containers", self.reconnect_timeout, || {
            self.list_once(label, value)
        })
        .await
    }

    async fn list_volumes(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        ride_out("listing volumes", self.reconnect_timeout, || {
            self.list_volumes_once(label, value)
        })
        .await
    }

    async fn remove_volume(&self, name: &str) -> Result<bool, ExecutorError> {
        ride_out("removing a volume", self.reconnect_timeout, || {
            self.remove_volume_once(name)
        })
        .await
    }

    async fn create_network(
        &self,
        name: &str,
        labels: &HashMap<String, String>,
        internal: bool,
    ) -> Result<(), ExecutorError> {
        let mut tries = 0u32;
        ride_out("creating a network", self.reconnect_timeout, || {
            tries = tries.saturating_add(1);
            self.create_network_once(name, labels, internal, tries > 1)
        })
        .await
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, ExecutorError> {
        let options = bollard::query_parameters::LogsOptions {
            stdout: true,
            stderr: true,
            tail: lines.to_string(),
            ..Default::default()
        };
        let mut stream = self.docker.logs(id, Some(options));
        let mut text = Vec::new();
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(fail(format!("reading the output of container {id}")))?;
            // A service's output is never the runner's to hold whole: the
            // tail was asked for, and a line past 64 KiB is cut.
            let bytes = piece.into_bytes();
            let room = (1usize << 16).saturating_sub(text.len());
            text.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    async fn list_networks(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        ride_out("listing networks", self.reconnect_timeout, || {
            self.list_networks_once(label, value)
        })
        .await
    }

    async fn remove_network(&self, name: &str) -> Result<bool, ExecutorError> {
        ride_out("removing a network", self.reconnect_timeout, || {
            self.remove_network_once(name)
        })
        .await
    }
}
