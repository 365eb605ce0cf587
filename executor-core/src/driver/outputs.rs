//! Steps' outputs: the file a step with an id writes, and its reading back
//! through [`Executor::copy_out`] when the step ends.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::tar::UnpackLimits;
use crate::{Executor, RunHandle, RunLog, RunSpec, Step, STEP_OUTPUTS_FOLDER};

/// The most a step's outputs file may hold: Actions' limit of a job's
/// outputs, 1 MiB.
const MAX_BYTES: u64 = 1 << 20;

/// How long reading a step's outputs may take.
const READ_LIMIT: Duration = Duration::from_secs(60);

/// The file `step` writes its outputs to, in the environment: its own
/// folder's `output` for a step with an id, else `/dev/null` (a ported
/// script that writes to `$GITHUB_OUTPUT` still works).
pub(super) fn file_of(handle: &RunHandle, step: &Step) -> String {
    match &step.id {
        Some(id) => format!("{}/output", folder_of(handle, id)),
        None => "/dev/null".to_string(),
    }
}

fn folder_of(handle: &RunHandle, id: &str) -> String {
    format!(
        "{}/{STEP_OUTPUTS_FOLDER}/{id}",
        handle.outputs_dir.trim_end_matches('/')
    )
}

/// Reads what `step` (which has an id) wrote; nothing when it wrote
/// nothing. A file that cannot be read, or lines that are not outputs,
/// are said in the log: the step's own status stands.
pub(super) async fn read(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    step: &Step,
    log: &RunLog,
) -> BTreeMap<String, String> {
    let Some(id) = &step.id else {
        return BTreeMap::new();
    };
    let say = |what: String| log.line(&format!("step {}: outputs: {what}", step.name));
    let Ok(host) = tempfile::tempdir() else {
        say("no temporary folder on this host to read them into".into());
        return BTreeMap::new();
    };
    let limits = UnpackLimits {
        max_bytes: MAX_BYTES,
        max_entries: 16,
        strip_components: 0,
    };
    let copied = tokio::time::timeout(
        READ_LIMIT.min(spec.outputs_timeout),
        executor.copy_out(handle, &folder_of(handle, id), host.path(), limits),
    )
    .await;
    match copied {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => {
            say(format!("not read: {err}"));
            return BTreeMap::new();
        }
        Err(_) => {
            say(format!("not read within {READ_LIMIT:?}"));
            return BTreeMap::new();
        }
    }
    let text = match std::fs::read(host.path().join("output")) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        // The step removed its file: it wrote nothing.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(err) => {
            say(format!("not read: {err}"));
            return BTreeMap::new();
        }
    };
    let (outputs, refused) = crate::expr::read_outputs(&text);
    let masker = spec.masker();
    for line in refused {
        say(format!("{} not taken", masker.mask_str(&line)));
    }
    outputs
}

/// Takes the steps' outputs folder out of the outputs brought back to
/// `dest`: its contents are in the result already.
pub(super) fn remove_from(dest: &std::path::Path) {
    let folder = dest.join(STEP_OUTPUTS_FOLDER);
    if folder.symlink_metadata().is_ok() {
        if let Err(err) = std::fs::remove_dir_all(&folder) {
            tracing::warn!(folder = %folder.display(), %err, "steps' outputs folder not removed");
        }
    }
}
