//! Building the chosen executor, for real or as a dry-run.

use std::path::PathBuf;

use anyhow::bail;
use executor_core::Executor;
use executor_docker::{DockerExecutor, DockerOptions, PullPolicy};
use executor_shell::{Plan, ShellExecutor};

use crate::args::{DockerArgs, ExecutorKind, Pull};

/// Options every backend may look at.
pub struct BackendOptions<'a> {
    pub shell_root: Option<PathBuf>,
    pub docker: &'a DockerArgs,
    pub dry_run: bool,
}

/// Why an executor could not be built.
pub enum BuildError {
    /// Bad flags: exit 2.
    Input(anyhow::Error),
    /// The engine or cluster cannot be reached: exit 3.
    Infrastructure(anyhow::Error),
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
                Box::new(ShellExecutor::dry_run(base, Plan::new(std::io::stdout())))
            } else {
                Box::new(ShellExecutor::new(base))
            })
        }
        ExecutorKind::Docker => {
            let options = docker_options(opts.docker).map_err(BuildError::Input)?;
            if opts.dry_run {
                return Ok(Box::new(DockerExecutor::dry_run(
                    options,
                    std::io::stdout(),
                )));
            }
            DockerExecutor::connect(options)
                .await
                .map(|e| Box::new(e) as Box<dyn Executor>)
                .map_err(|e| BuildError::Infrastructure(e.into()))
        }
        ExecutorKind::K8s => Err(BuildError::Input(anyhow::anyhow!(
            "the k8s executor is not built into this runner-cli yet; use --executor docker or shell"
        ))),
    }
}

fn docker_options(args: &DockerArgs) -> anyhow::Result<DockerOptions> {
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
        ..DockerOptions::default()
    })
}
