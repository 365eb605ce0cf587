//! One try of each call that the engine's `Engine` methods ride out
//! (`ride_out`), each mapping the engine's answers to the runner's.

use super::*;

/// The calls that are safe to repeat, each tried once; the engine's
/// methods ride an outage out around them.
impl BollardEngine {
    pub(super) async fn image_present_once(&self, image: &str) -> Result<bool, ExecutorError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(err) if status(&err) == Some(404) => Ok(false),
            Err(err) => Err(fail(format!("inspecting image {image}"))(err)),
        }
    }

    pub(super) async fn exec_create_once(
        &self,
        id: &str,
        exec: &ExecSpec,
    ) -> Result<String, ExecutorError> {
        let env: Vec<String> = exec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let options = CreateExecOptions {
            cmd: Some(exec.cmd.clone()),
            env: Some(env),
            working_dir: Some(exec.working_dir.clone()),
            user: exec.user.clone(),
            // podman refuses an exec with no attached stream, and its
            // detached execs never report an exit code: always attach.
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(exec.stdin),
            tty: Some(false),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(id, options)
            .await
            .map_err(fail(format!("creating an exec in container {id}")))?;
        Ok(created.id)
    }

    pub(super) async fn exec_inspect_once(
        &self,
        exec_id: &str,
    ) -> Result<ExecState, ExecutorError> {
        let state = self
            .docker
            .inspect_exec(exec_id)
            .await
            .map_err(fail(format!("inspecting exec {exec_id}")))?;
        Ok(ExecState {
            running: state.running.unwrap_or(false),
            exit_code: state.exit_code,
        })
    }

    /// One create; `again` when an earlier try's answer was lost, so a
    /// container of the run's name (unique to the run) is that try's.
    pub(super) async fn create_once(
        &self,
        spec: &ContainerSpec,
        again: bool,
    ) -> Result<String, ExecutorError> {
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..Default::default()
        };
        let context = || format!("creating a container from {}", spec.image);
        match self
            .docker
            .create_container(Some(options), create_body(spec))
            .await
        {
            Ok(created) => Ok(created.id),
            Err(err) if again && status(&err) == Some(409) => {
                let made = self
                    .docker
                    .inspect_container(&spec.name, None::<InspectContainerOptions>)
                    .await
                    .map_err(fail(context()))?;
                made.id.ok_or_else(|| {
                    ExecutorError::backend(
                        context(),
                        "the engine named no id for the container it made",
                    )
                })
            }
            Err(err) => match &err {
                bollard::errors::Error::DockerResponseServerError { message, .. }
                    if is_image_refusal(message) =>
                {
                    Err(ExecutorError::image(context(), message, false))
                }
                _ => Err(fail(context())(err)),
            },
        }
    }

    /// One start. A container an earlier try started (its answer lost)
    /// answers 304, which the client takes as success.
    pub(super) async fn start_once(&self, id: &str) -> Result<(), ExecutorError> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(fail(format!("starting container {id}")))
    }

    pub(super) async fn inspect_once(&self, id: &str) -> Result<ContainerState, ExecutorError> {
        match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                Ok(ContainerState {
                    exists: true,
                    running: state.running.unwrap_or(false),
                    oom_killed: state.oom_killed.unwrap_or(false),
                    exit_code: state.exit_code.filter(|_| state.running != Some(true)),
                    labels: info.config.and_then(|c| c.labels).unwrap_or_default(),
                })
            }
            Err(err) if container_gone(&err) => Ok(ContainerState::default()),
            // podman names states Docker does not (`stopped`), which the
            // typed client cannot read: such a container exists and is not running.
            Err(
                bollard::errors::Error::JsonDataError { .. }
                | bollard::errors::Error::JsonSerdeError { .. },
            ) => Ok(ContainerState {
                exists: true,
                running: false,
                ..ContainerState::default()
            }),
            Err(err) => Err(fail(format!("inspecting container {id}"))(err)),
        }
    }

    pub(super) async fn remove_once(&self, id: &str) -> Result<(), ExecutorError> {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(err) if container_gone(&err) => Ok(()),
            // Another remove of the same container is already under way.
            Err(err) if status(&err) == Some(409) => Ok(()),
            Err(err) => Err(fail(format!("removing container {id}"))(err)),
        }
    }

    pub(super) async fn list_once(
        &self,
        label: &str,
        value: &str,
    ) -> Result<Vec<Listed>, ExecutorError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{label}={value}")])]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(fail("listing containers"))?;
        Ok(found
            .into_iter()
            .filter_map(|c| {
                Some(Listed {
                    id: c.id?,
                    labels: c.labels.unwrap_or_default(),
                })
            })
            .collect())
    }

    pub(super) async fn list_volumes_once(
        &self,
        label: &str,
        value: &str,
    ) -> Result<Vec<Listed>, ExecutorError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{label}={value}")])]);
        let options = ListVolumesOptions {
            filters: Some(filters),
        };
        let found = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(fail("listing volumes"))?;
        Ok(found
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| Listed {
                id: v.name,
                labels: v.labels,
            })
            .collect())
    }

    pub(super) async fn remove_volume_once(&self, name: &str) -> Result<bool, ExecutorError> {
        match self
            .docker
            .remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
        {
            Ok(()) => Ok(true),
            Err(err) if status(&err) == Some(404) => Ok(true),
            // Still mounted by a container.
            Err(err) if status(&err) == Some(409) => Ok(false),
            Err(err) => Err(fail(format!("removing volume {name}"))(err)),
        }
    }
}
