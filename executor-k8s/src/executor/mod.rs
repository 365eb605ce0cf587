//! The six operations, mapped onto the [`Cluster`] seam.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use executor_container::container::{
    expired, is_runners, run_command, the_live_run, Place, StepStart,
};
use executor_container::detached::Signing;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, FailureKind, RunHandle,
    RunLog, RunSpec, StepCommand,
};
use tokio_util::sync::CancellationToken;

use crate::access;
use crate::cluster::Cluster;
use crate::job::{runner_selector, STATE_DIR};
use crate::{wait, K8sOptions};
use executor_core::resume::{read_plan, Reattached};
use executor_core::script::ScriptFiles;

mod again;
mod channel;
mod isolation;

use crate::job::STEP_USER_KEY;
mod pod_exec;
mod services;
mod start;
mod variables;

use variables::PodVariables;

/// One Kubernetes Job per run; every step an exec in its pod.
pub struct K8sExecutor {
    cluster: Arc<dyn Cluster>,
    options: K8sOptions,
    live: Mutex<HashMap<String, LiveRun>>,
    /// Whether the cluster speaks v5, once known.
    v5: Mutex<Option<bool>>,
    /// Permission sets already found granted (checked once per executor).
    granted: Mutex<std::collections::HashSet<&'static str>>,
    /// Each pod's step channel ([`channel`]).
    channels: executor_container::detached::StepChannels,
    /// Whether copies go gzip-compressed ([`K8sOptions::compression`]).
    compressing: executor_container::container::compressing::Compressing,
    /// Per pod, whether its image has `gzip`, once asked.
    gzip_in: Mutex<HashMap<String, bool>>,
    /// A dry-run: every call is printed once, when it is made.
    pub(crate) dry: bool,
}

/// What a step's shell runs before its script: its variables (the
/// command line names them only; their values are in the pod) and `cd`.
fn step_prelude(
    live: &LiveRun,
    step: &StepCommand,
    work_dir: &str,
) -> Result<String, ExecutorError> {
    let mut prelude = live.variables.prelude(step)?;
    prelude.push_str(&format!(
        "cd {} && ",
        executor_core::script::quote(work_dir)
    ));
    Ok(prelude)
}

#[derive(Clone)]
struct LiveRun {
    pod: String,
    pod_selector: String,
    has_secret: bool,
    /// The variables the pod holds for its steps.
    variables: PodVariables,
    /// The step scripts the pod holds as files.
    scripts: ScriptFiles,
    /// The names of its service containers.
    services: Vec<String>,
    /// Where the services' output goes when the run stops.
    log: Option<RunLog>,
    /// What resolving the steps' user found: the user the agent starts
    /// each step as, where the runner's side runs apart from the steps.
    step_user: executor_container::container::step_user::StepUser,
}

/// How long the pod's status may lag a container that stopped under a
/// step: the kubelet reports a kill on its next status sync.
const STATUS_LAG: Duration = Duration::from_secs(30);

impl K8sExecutor {
    /// An executor over any cluster seam (real, dry-run, mock).
    pub fn with_cluster(cluster: Arc<dyn Cluster>, options: K8sOptions) -> Self {
        K8sExecutor {
            cluster,
            compressing: executor_container::container::compressing::Compressing::new(
                options.compression,
            ),
            channels: Default::default(),
            options,
            live: Mutex::new(HashMap::new()),
            v5: Mutex::new(None),
            granted: Mutex::new(std::collections::HashSet::new()),
            gzip_in: Mutex::new(HashMap::new()),
            dry: false,
        }
    }

    /// This executor, told the API server's round trip:
    /// `Compression::Auto` compresses copies in past
    /// [`AUTO_ROUND_TRIP`](executor_core::tar::AUTO_ROUND_TRIP).
    #[must_use]
    pub fn measured(self, round_trip: std::time::Duration) -> Self {
        self.compressing.measured(round_trip);
        self
    }

    /// This executor, its round trip still being timed by `timing`: the
    /// first copy waits for it, not the calls before.
    pub(crate) fn measuring(
        mut self,
        timing: tokio::task::JoinHandle<std::time::Duration>,
    ) -> Self {
        self.compressing.measuring(timing);
        self
    }

    /// Whether copies go gzip-compressed
    /// ([`Compressing::compresses`](executor_container::container::compressing::Compressing::compresses)).
    ///
    /// The first call waits for the round trip if it is still being
    /// timed: on a local engine or cluster (a Unix socket, loopback) the
    /// answer is no.
    pub async fn compresses(&self) -> bool {
        self.compressing.compresses().await
    }

    /// Checks, once per executor, that the credentials hold every
    /// permission a run ([`access::RUN`]) uses, before anything is created;
    /// an error names each missing one. `start` calls it; calling it first
    /// lets a caller refuse a run before anything else.
    ///
    /// # Errors
    /// As [`access::check`]: each permission missing, named.
    pub async fn check_run_permissions(&self) -> Result<(), ExecutorError> {
        self.check_permissions(access::Purpose::Run).await
    }

    /// As [`K8sExecutor::check_run_permissions`], for `cleanup`
    /// ([`access::CLEANUP`]).
    ///
    /// # Errors
    /// As [`access::check`]: each permission missing, named.
    pub async fn check_cleanup_permissions(&self) -> Result<(), ExecutorError> {
        self.check_permissions(access::Purpose::Cleanup).await
    }

    async fn check_permissions(&self, purpose: access::Purpose) -> Result<(), ExecutorError> {
        let done = self
            .granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(purpose.name());
        if !done {
            access::check(self.cluster.as_ref(), purpose.permissions()).await?;
            self.granted_for(purpose);
        }
        Ok(())
    }

    /// Records that the credentials hold what `purpose` needs.
    pub(crate) fn granted_for(&self, purpose: access::Purpose) {
        self.granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(purpose.name());
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pod_of(&self, run: &RunHandle) -> Result<String, ExecutorError> {
        self.live()
            .get(&run.id)
            .map(|r| r.pod.clone())
            .ok_or_else(|| {
                ExecutorError::EnvironmentLost(format!(
                    "job {} is not a live run of this executor",
                    run.id
                ))
            })
    }

    /// Why a step's exec ended without a status: what happened to the pod.
    ///
    /// `None` when the pod still answers, so the environment is there and
    /// only the exec's status was lost.
    async fn lost_environment(&self, live: &LiveRun) -> Option<wait::Fate> {
        if let Ok(pod) = self.cluster.get_pod(&live.pod).await {
            if let Some(fate) = wait::pod_fate(&live.pod, pod.as_ref()) {
                return Some(fate);
            }
        }
        if self.answers(&live.pod).await {
            return None;
        }
        let fate = wait::fate(&*self.cluster, &live.pod_selector, &live.pod, STATUS_LAG).await;
        Some(fate.unwrap_or_else(|| {
            wait::Fate {
                kind: FailureKind::EnvironmentLost,
                retryable: true,
                message: format!(
                    "pod {}'s container stopped while the step ran, and the pod's status gave no reason within {}s",
                    live.pod,
                    STATUS_LAG.as_secs()
                ),
                exit_code: None,
                service: None,
            }
        }))
    }
}

/// A step's end when its pod's status explains it: an OOM kill is the
/// step's own failure; anything else lost the environment under it.
fn step_fate(fate: wait::Fate, code: Option<i32>) -> Result<CommandOutcome, ExecutorError> {
    match fate.kind {
        FailureKind::Oom => Ok(CommandOutcome::OutOfMemory {
            code: fate.exit_code.or(code),
            detail: fate.message,
        }),
        FailureKind::EnvironmentLost => Err(ExecutorError::EnvironmentLost(fate.message)),
        _ => Err(fate.into_error("environment lost")),
    }
}

#[async_trait]
impl Executor for K8sExecutor {
    fn kind(&self) -> &str {
        "k8s"
    }

    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        run.validate()?;
        if run.services.iter().any(|s| s.name == crate::job::CONTAINER) {
            return Err(ExecutorError::InvalidInput(format!(
                "service {0}: on Kubernetes {0} is the step container's name in the pod; name the service otherwise",
                crate::job::CONTAINER
            )));
        }
        run.image_for("k8s").map(|_| ())
    }

    async fn environment(&self, run: &RunHandle) -> Option<executor_core::EnvironmentFacts> {
        let live = self.live().get(&run.id).cloned()?;
        Some(executor_core::EnvironmentFacts {
            architecture: live.step_user.architecture.clone(),
            agent: self.channels.agent_ran(&live.pod),
            step_isolation: if live.step_user.apart.is_some() {
                executor_core::StepIsolation::Uid
            } else {
                executor_core::StepIsolation::None
            },
        })
    }

    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.start_run(run, log, interrupt).await
    }

    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        let live = self.live().get(&run.id).cloned().ok_or_else(|| {
            ExecutorError::EnvironmentLost(format!(
                "job {} is not a live run of this executor",
                run.id
            ))
        })?;
        let prelude = step_prelude(&live, step, &run.work_dir)?;
        let channel = pod_exec::StepChannel {
            executor: self,
            live: &live,
        };
        let start = StepStart {
            scripts: &live.scripts,
            prelude: &prelude,
            reconnect: self.options.reconnect_timeout,
        };
        // Every start goes through the pod's channel: one message, not an
        // exec's set-up. A step an earlier runner started is followed; one
        // it may not have started (the log has nothing of it) has its
        // start ready, released only if it never started.
        let prepared = match step.follow_from {
            None
            | Some(executor_core::Offsets {
                stdout: 0,
                stderr: 0,
            }) => {
                let argv = executor_container::container::gated_start_argv(step, start)?;
                // The variables and the folder are the prelude's.
                let prepared = self
                    .step_channel(&live.pod, live.step_user.apart.as_deref())
                    .start(argv.clone(), None, Signing::of(log, &step.id))
                    .map(|gate| executor_container::container::Prepared { gate, argv });
                // Only the channel's agent starts a step as its user: an
                // exec of its own would run its shell as the pod's root.
                if prepared.is_none() && live.step_user.apart.is_some() {
                    return Err(ExecutorError::InvalidInput(format!(
                        "step {}: it cannot be started through the step channel, the only start \
                         that runs it as K8sOptions::run_as_user",
                        step.name
                    )));
                }
                prepared
            }
            Some(_) => None,
        };
        let outcome = run_command(&channel, step, start, prepared, log, &interrupt).await;
        if live.services.is_empty() {
            return outcome;
        }
        if live.log.is_none() {
            // A resumed run's services keep their output in its new log.
            if let Some(l) = self.live().get_mut(&run.id) {
                l.log = Some(log.clone());
            }
        }
        executor_core::service::naming_stopped(outcome, self.stopped_services(&live.pod)).await
    }

    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        let pod = self.pod_of(run)?;
        let mkdir = ["mkdir", "-p", path].map(String::from);
        self.exec_again(&pod, &mkdir, "creating a cache folder")
            .await?;
        self.stream_in(&pod, src, path).await
    }

    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        let pod = self.pod_of(run)?;
        // Each try unpacks the whole folder again, over what a cut one
        // left: the unpacker replaces the files it meets.
        let what = format!("copying {path} out");
        executor_core::outage::ride_out(&what, self.options.reconnect_timeout, || {
            self.folder_out(&pod, path, dest, limits, &what)
        })
        .await
    }
    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        let live = self.live().remove(&run.id);
        if let Some(live) = &live {
            self.channels.close(&live.pod);
            if let Some(log) = &live.log {
                self.keep_service_output(&live.pod, &live.services, log)
                    .await;
            }
        }
        let (selector, has_secret) = match &live {
            Some(l) => (l.pod_selector.clone(), l.has_secret),
            None => (format!("job-name={}", run.id), true),
        };
        self.teardown(&run.id, &selector, has_secret).await
    }

    async fn reattach(&self, runner: &str, name: &str) -> Result<Reattached, ExecutorError> {
        self.reattach_run(runner, name).await
    }

    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        self.cleanup_runs(runner, scope).await
    }
}

#[cfg(test)]
mod tests;
