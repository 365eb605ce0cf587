//! Building the chosen executor, for real or as a dry-run.

use std::path::PathBuf;

use anyhow::bail;
use executor_core::Executor;
use executor_docker::{DockerExecutor, DockerOptions, PullPolicy};
use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
use executor_shell::{Plan, ShellExecutor};

use crate::args::{DockerArgs, ExecutorKind, K8sArgs, Pull};

/// Options every backend may look at.
pub struct BackendOptions<'a> {
    pub shell_root: Option<PathBuf>,
    pub docker: &'a DockerArgs,
    pub k8s: &'a K8sArgs,
    /// `--cap-add`, for docker and k8s.
    pub cap_add: &'a [String],
    /// Whether the run is untrusted (pull or queue trigger).
    pub untrusted: bool,
    /// Built for `cleanup` rather than `run`: the permissions checked
    /// before anything happens are cleanup's.
    pub for_cleanup: bool,
    pub dry_run: bool,
}

/// Why an executor could not be built.
pub enum BuildError {
    /// Bad flags: exit 2.
    Input(anyhow::Error),
    /// The engine or cluster cannot be reached, or refused: exit 3; the
    /// error's kind goes into the result's failure.
    Infrastructure(executor_core::ExecutorError),
}

/// The executor for `kind`.
pub async fn build(
    kind: ExecutorKind,
    opts: &BackendOptions<'_>,
) -> Result<Box<dyn Executor>, BuildError> {
    match kind {
        ExecutorKind::Shell => {
            let base = opts
                .shell_root
                .clone()
                .unwrap_or_else(ShellExecutor::default_base);
            Ok(if opts.dry_run {
                Box::new(ShellExecutor::dry_run(
                    base,
                    Plan::new(executor_core::mask::MaskedWrite::new(
                        std::io::stdout(),
                        crate::secrets::masker(),
                    )),
                ))
            } else {
                let executor = ShellExecutor::new(base);
                executor
                    .prepare_base()
                    .map_err(|e| BuildError::Input(e.into()))?;
                Box::new(executor)
            })
        }
        ExecutorKind::Docker => {
            let options =
                docker_options(opts.docker, opts.cap_add, opts.k8s).map_err(BuildError::Input)?;
            if opts.dry_run {
                return Ok(Box::new(DockerExecutor::dry_run(
                    options,
                    executor_core::mask::MaskedWrite::new(
                        std::io::stdout(),
                        crate::secrets::masker(),
                    ),
                )));
            }
            let engine = std::env::var("DOCKER_HOST")
                .unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
            let connecting = DockerExecutor::connect(options);
            match crate::progress::while_waiting(
                &format!("the Docker engine at {engine}"),
                connecting,
            )
            .await
            {
                Ok(e) => Ok(Box::new(e)),
                Err(e @ executor_core::ExecutorError::InvalidInput(_)) => {
                    Err(BuildError::Input(e.into()))
                }
                Err(e) => Err(BuildError::Infrastructure(e)),
            }
        }
        ExecutorKind::K8s => {
            let options =
                k8s_options(opts.k8s, opts.cap_add, opts.untrusted).map_err(BuildError::Input)?;
            if opts.dry_run {
                let ns = opts
                    .k8s
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                return Ok(Box::new(K8sExecutor::dry_run(
                    &ns,
                    options,
                    executor_core::mask::MaskedWrite::new(
                        std::io::stdout(),
                        crate::secrets::masker(),
                    ),
                )));
            }
            let source = KubeconfigSource {
                kubeconfig: opts.k8s.kubeconfig.clone(),
                context: opts.k8s.context.clone(),
                namespace: opts.k8s.namespace.clone(),
                insecure_skip_tls_verify: opts.k8s.insecure_skip_tls_verify,
                insecure_plain_http: opts.k8s.insecure_plain_http,
            };
            let purpose = if opts.for_cleanup {
                executor_k8s::access::Purpose::Cleanup
            } else {
                executor_k8s::access::Purpose::Run
            };
            let connecting = K8sExecutor::connect_checked(&source, options, purpose);
            let connected =
                crate::progress::while_waiting("the Kubernetes API server", connecting).await;
            match connected {
                Ok(e) => Ok(Box::new(e)),
                Err(executor_core::ExecutorError::InvalidInput(msg)) => Err(BuildError::Input(
                    anyhow::anyhow!(crate::flags::as_flags(&msg).into_owned()),
                )),
                Err(e) => Err(BuildError::Infrastructure(e)),
            }
        }
    }
}

fn k8s_options(args: &K8sArgs, cap_add: &[String], untrusted: bool) -> anyhow::Result<K8sOptions> {
    let pod_template = match &args.pod_template {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("--pod-template {}: cannot read it: {e}", path.display())
            })?;
            let template = executor_k8s::PodTemplate::parse(&text).map_err(|e| {
                anyhow::anyhow!(
                    "--pod-template {}: {}",
                    path.display(),
                    crate::flags::as_flags(&e.to_string())
                )
            })?;
            Some(template)
        }
        None => None,
    };
    Ok(K8sOptions {
        pod_template,
        cpu_request: args.cpu_request.clone(),
        cpu_limit: args.cpu_limit.clone(),
        memory_request: args.memory_request.clone(),
        memory_limit: args.memory_limit.clone(),
        node_selector: args.node_selector.clone(),
        tolerations: args.tolerations.clone(),
        service_account: args.service_account.clone(),
        image_pull_secret: args.image_pull_secret.clone(),
        cap_add: cap_add.to_vec(),
        run_as_user: args.run_as_user,
        step_isolation: args.step_isolation,
        run_as_group: args.run_as_group,
        run_as_non_root: args.run_as_non_root,
        // Untrusted code gets a node to itself unless told otherwise.
        isolate: args.isolate.unwrap_or(untrusted),
        pod_timeout: args.pod_timeout,
        reconnect_timeout: args.reconnect_timeout,
        compression: args.compression,
        ..K8sOptions::default()
    })
}

fn docker_options(
    args: &DockerArgs,
    cap_add: &[String],
    link: &K8sArgs,
) -> anyhow::Result<DockerOptions> {
    if let Some(cpus) = args.cpus {
        if !(cpus > 0.0 && cpus.is_finite()) {
            bail!("--cpus {cpus} must be a positive number such as 0.5 or 2");
        }
    }
    Ok(DockerOptions {
        memory: args.memory,
        cpus: args.cpus,
        network: args.network.clone(),
        user: args.user.clone(),
        pull: match args.pull {
            Pull::Never => PullPolicy::Never,
            Pull::Missing => PullPolicy::Missing,
            Pull::Always => PullPolicy::Always,
        },
        pids_limit: match args.pids_limit {
            0 => None,
            n if n > 0 => Some(n),
            n => bail!("--pids-limit {n} must be a positive number, or 0 for the engine's default"),
        },
        cap_drop: args.cap_drop.clone(),
        cap_add: cap_add.to_vec(),
        read_only: args.read_only,
        host: executor_docker::HostSettings {
            volumes: args.volumes.clone(),
            privileged: args.privileged,
            runtime: args.runtime.clone(),
            shm_size: args.shm_size,
            extra_hosts: args.add_hosts.clone(),
            dns: args.dns.clone(),
            devices: args.devices.clone(),
        },
        reconnect_timeout: link.reconnect_timeout,
        compression: link.compression,
        ..DockerOptions::default()
    })
}
