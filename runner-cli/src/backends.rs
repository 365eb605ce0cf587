//! Building the chosen executor, for real or as a dry-run.

use std::path::PathBuf;

use anyhow::bail;
use executor_core::Executor;
use executor_shell::{Plan, ShellExecutor};

use crate::args::ExecutorKind;

/// Options every backend may look at.
pub struct BackendOptions {
    pub shell_root: Option<PathBuf>,
    pub dry_run: bool,
}

/// The executor for `kind`; an input error (exit 2) when it cannot be built.
pub fn build(kind: ExecutorKind, opts: &BackendOptions) -> anyhow::Result<Box<dyn Executor>> {
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
        ExecutorKind::Docker | ExecutorKind::K8s => bail!(
            "the {} executor is not built into this runner-cli yet; use --executor shell",
            kind.name()
        ),
    }
}
