//! The steps' user kept apart from the runner's side on Kubernetes
//! ([`executor_container::container::step_user`]): with
//! `K8sOptions::run_as_user`, the step container runs as root with only
//! the capabilities the drop to the steps' uid and the supervision need,
//! and the channel's agent starts each step as that user. The pod's user
//! is fixed when it is made (an exec cannot pick one), so where the agent
//! cannot run (a node of an architecture it is not built for) the run
//! fails at start rather than run its steps as root.

use executor_container::container::step_user::{StepUser, RESOLVE};
use executor_core::{ExecutorError, RunLog};
use k8s_openapi::api::core::v1::Pod;

use super::K8sExecutor;
use crate::access;
use crate::job::{RunObjects, STATE_DIR};
use crate::{K8sOptions, StepIsolation};

/// The steps' user (`UID[:GID]`) where the run is to keep it apart from
/// the runner's side; `None` where every process runs as one user.
///
/// # Errors
/// `K8sOptions::step_isolation` `Required` where the options rule it out
/// (no step user, root, or `run_as_non_root`, which forbids the root side).
pub(crate) fn planned_step_user(options: &K8sOptions) -> Result<Option<String>, ExecutorError> {
    let refuse = |why: &str| {
        Err(ExecutorError::InvalidInput(format!(
            "K8sOptions::step_isolation is required, but {why}"
        )))
    };
    let uid = match (options.step_isolation, options.run_as_user) {
        (StepIsolation::Off, _) => return Ok(None),
        (StepIsolation::Required, None | Some(0)) => {
            return refuse("no K8sOptions::run_as_user other than root names the steps' user")
        }
        (_, None | Some(0)) => return Ok(None),
        (StepIsolation::Required, Some(_)) if options.run_as_non_root => {
            return refuse("K8sOptions::run_as_non_root forbids the root side it needs")
        }
        (_, Some(_)) if options.run_as_non_root => return Ok(None),
        (_, Some(uid)) => uid,
    };
    Ok(Some(match options.run_as_group {
        Some(gid) => format!("{uid}:{gid}"),
        None => uid.to_string(),
    }))
}

impl K8sExecutor {
    /// Whether the namespace's admission takes `objects`' pod with its
    /// root side, asked by a dry-run create before anything is made: the
    /// steps' user stays apart (`Some`) where it does; where it does not,
    /// `StepIsolation::Required` refuses the run and `Auto` runs every
    /// process as the steps' user (`None`), saying so. `Auto` without the
    /// permission to ask goes on with the root side and says it could not
    /// ask (a refusal then ends the start in admission's words).
    ///
    /// # Errors
    /// `Required` refused by admission or without the permission to ask;
    /// a call that fails.
    pub(super) async fn admitted_step_user(
        &self,
        objects: &RunObjects,
        step_user: Option<String>,
        log: &RunLog,
    ) -> Result<Option<String>, ExecutorError> {
        let Some(user) = step_user else {
            return Ok(None);
        };
        let required = self.options.step_isolation == StepIsolation::Required;
        match self.check_permissions(access::Purpose::Isolation).await {
            Ok(()) => {}
            Err(ExecutorError::InvalidInput(why)) if !required => {
                log.line(&format!(
                    "cannot ask admission ahead whether the pod's root side is allowed ({why}); \
                     the pod is made with it"
                ));
                return Ok(Some(user));
            }
            Err(err) => return Err(err),
        }
        let template = objects
            .job
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let mut metadata = template.metadata.unwrap_or_default();
        metadata.name = Some(format!("{}-admission", objects.name));
        let pod = Pod {
            metadata,
            spec: template.spec,
            status: None,
        };
        let Err(refused) = self.cluster.admits_pod(&pod).await? else {
            return Ok(Some(user));
        };
        let namespace = self.cluster.namespace();
        if required {
            return Err(ExecutorError::InvalidInput(format!(
                "K8sOptions::step_isolation is required, but namespace {namespace} refuses the \
                 root side that keeps the steps' user apart ({refused}); exempt the runner's \
                 pods from that policy, or set K8sOptions::step_isolation to auto"
            )));
        }
        log.line(&format!(
            "warning: namespace {namespace} refuses the pod's root side ({refused}); every \
             process of the pod runs as the steps' user {user}: one trust domain, where a \
             process a step leaves behind can reach later steps"
        ));
        Ok(None)
    }

    /// Resolves `user` in `pod` as root, giving it the run's folders
    /// (`give`), and returns it as the agent takes it (`UID:GID:GROUPS`).
    ///
    /// # Errors
    /// A user or group the image lacks; an architecture the agent is not
    /// built for (the pod is root's: no step may run without the drop);
    /// the exec's failure.
    pub(super) async fn resolve_step_user(
        &self,
        pod: &str,
        user: &str,
        give: bool,
    ) -> Result<StepUser, ExecutorError> {
        let argv = [
            "sh",
            "-c",
            RESOLVE,
            "resolve",
            user,
            STATE_DIR,
            executor_container::detached::AGENT_FILE,
            if give { "give" } else { "" },
        ]
        .map(String::from)
        .to_vec();
        let said = self
            .exec_again(pod, &argv, "giving /work to K8sOptions::run_as_user")
            .await?;
        if self.dry {
            // Nothing answers a dry run: the user stands as given.
            return Ok(StepUser {
                apart: Some(user.to_string()),
                architecture: None,
            });
        }
        let resolved = StepUser::parse(&String::from_utf8_lossy(&said));
        if resolved.apart.is_none() {
            return Err(ExecutorError::InvalidInput(format!(
                "the steps' user {user} cannot be kept apart from the runner's side on this node \
                 ({}: the step agent is not built for it); set K8sOptions::step_isolation to off \
                 to run every process as that user",
                resolved
                    .architecture
                    .as_deref()
                    .unwrap_or("an unknown architecture")
            )));
        }
        Ok(resolved)
    }
}
