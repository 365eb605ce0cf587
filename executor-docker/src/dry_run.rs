//! The dry-run engine: prints each call it is asked to make, makes none.

use std::io::Write;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use executor_core::tar::PackStream;
use executor_core::ExecutorError;
use futures_util::StreamExt;

use crate::engine::{
    ContainerSpec, ContainerState, Engine, ExecOutput, ExecSpec, ExecState, Listed, OutputStream,
    StepStream,
};

/// The start of a step exec's id in a dry-run; the rest is its marks' key.
const STEP_EXEC: &str = "dry-run-step-exec-";

/// Prints every Docker Engine call, in order, as `METHOD /path` lines, with
/// the container config as JSON. Variable values are never printed.
pub struct DryRunEngine {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl DryRunEngine {
    /// A dry-run printing to `out`.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        DryRunEngine {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }

    fn say(&self, line: impl AsRef<str>) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{}", line.as_ref());
    }
}

/// The id every dry-run container gets.
const DRY_ID: &str = "dry-run-container";

#[async_trait]
impl Engine for DryRunEngine {
    async fn image_present(&self, image: &str) -> Result<bool, ExecutorError> {
        self.say(format!("GET /images/{image}/json"));
        Ok(true)
    }
    async fn pull(&self, image: &str) -> Result<(), ExecutorError> {
        self.say(format!("POST /images/create?fromImage={image}"));
        Ok(())
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<String, ExecutorError> {
        self.say(format!("POST /containers/create?name={}", spec.name));
        let mut shown = spec.clone();
        for (_, value) in &mut shown.secret_env {
            *value = executor_core::Secret::new(executor_core::mask::MASK);
        }
        // A service's variables are named, never shown, as a step's are.
        for (_, value) in &mut shown.env {
            *value = "…".into();
        }
        let json = serde_json::to_string_pretty(&crate::bollard_engine::create_body(&shown))
            .unwrap_or_default();
        self.say(json);
        Ok(DRY_ID.to_string())
    }
    async fn start(&self, id: &str) -> Result<(), ExecutorError> {
        self.say(format!("POST /containers/{id}/start"));
        Ok(())
    }
    async fn exec_create(&self, id: &str, exec: &ExecSpec) -> Result<String, ExecutorError> {
        let keys: Vec<&str> = exec.env.iter().map(|(k, _)| k.as_str()).collect();
        let user = exec
            .user
            .as_deref()
            .map(|u| format!(" user {u}"))
            .unwrap_or_default();
        self.say(format!(
            "POST /containers/{id}/exec {} (cwd {}{user}, env {})",
            executor_container::detached::shown_argv(&exec.cmd),
            exec.working_dir,
            keys.join(",")
        ));
        // A step's exec ends both streams with the end mark, as it would:
        // its id carries the marks' key.
        Ok(match executor_container::detached::end_key(&exec.cmd) {
            Some(key) => format!("{STEP_EXEC}{key}"),
            None if exec.cmd == executor_container::detached::channel_argv() => {
                CHANNEL_EXEC.to_string()
            }
            None => "dry-run-exec".to_string(),
        })
    }
    async fn exec_start(&self, exec_id: &str) -> Result<ExecOutput, ExecutorError> {
        self.say(format!(
            "POST /exec/{exec_id}/start (attached: stdout, stderr)"
        ));
        let begin = bytes::Bytes::from_static(executor_container::detached::BEGIN_MARK);
        let frames = match exec_id.strip_prefix(STEP_EXEC) {
            Some(key) => {
                let end = bytes::Bytes::from(executor_container::detached::end_mark(key, 0));
                vec![
                    Ok((
                        StepStream::Stdout,
                        [begin.clone(), end.clone()].concat().into(),
                    )),
                    Ok((StepStream::Stderr, [begin, end].concat().into())),
                ]
            }
            None => Vec::new(),
        };
        Ok(futures_util::stream::iter(frames).boxed())
    }
    async fn exec_start_with_input(
        &self,
        exec_id: &str,
    ) -> Result<(ExecOutput, crate::engine::ExecInput), ExecutorError> {
        if exec_id == CHANNEL_EXEC {
            self.say(format!(
                "POST /exec/{exec_id}/start (attached: stdin, stdout, stderr; each step's start is one message on stdin)"
            ));
            return Ok(dry_channel());
        }
        let output = self.exec_start(exec_id).await?;
        self.say(format!("  (and stdin: the line {:?})", "go"));
        Ok((output, Box::pin(tokio::io::sink())))
    }
    async fn exec_inspect(&self, exec_id: &str) -> Result<ExecState, ExecutorError> {
        self.say(format!("GET /exec/{exec_id}/json"));
        Ok(ExecState {
            running: false,
            exit_code: Some(0),
        })
    }
    async fn inspect(&self, id: &str) -> Result<ContainerState, ExecutorError> {
        self.say(format!("GET /containers/{id}/json"));
        Ok(ContainerState {
            exists: true,
            running: true,
            ..ContainerState::default()
        })
    }
    async fn upload(
        &self,
        id: &str,
        path: &str,
        what: &str,
        tar: PackStream,
    ) -> Result<(), ExecutorError> {
        drop(tar);
        self.say(format!(
            "PUT /containers/{id}/archive?path={path} (tar stream of {what})"
        ));
        Ok(())
    }
    fn download(&self, id: &str, path: &str) -> OutputStream {
        self.say(format!(
            "GET /containers/{id}/archive?path={path} (tar stream)"
        ));
        // An empty archive: two zero blocks.
        futures_util::stream::once(async { Ok(Bytes::from_static(&[0u8; 1024])) }).boxed()
    }
    async fn remove(&self, id: &str) -> Result<(), ExecutorError> {
        self.say(format!("DELETE /containers/{id}?force=true&v=true"));
        Ok(())
    }
    async fn list(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        self.say(format!(
            "GET /containers/json?all=true&filters={{\"label\":[\"{label}={value}\"]}}"
        ));
        Ok(Vec::new())
    }
    async fn list_volumes(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        self.say(format!(
            "GET /volumes?filters={{\"label\":[\"{label}={value}\"]}}"
        ));
        Ok(Vec::new())
    }
    async fn remove_volume(&self, name: &str) -> Result<bool, ExecutorError> {
        self.say(format!("DELETE /volumes/{name}"));
        Ok(true)
    }
    async fn logs(&self, id: &str, lines: usize) -> Result<String, ExecutorError> {
        self.say(format!("GET /containers/{id}/logs?tail={lines}"));
        Ok(String::new())
    }
    async fn create_network(
        &self,
        name: &str,
        _labels: &std::collections::HashMap<String, String>,
        internal: bool,
    ) -> Result<(), ExecutorError> {
        self.say(format!(
            "POST /networks/create {{\"Name\":\"{name}\",\"Driver\":\"bridge\",\"Internal\":{internal}}}"
        ));
        Ok(())
    }
    async fn list_networks(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError> {
        self.say(format!(
            "GET /networks?filters={{\"label\":[\"{label}={value}\"]}}"
        ));
        Ok(Vec::new())
    }
    async fn remove_network(&self, name: &str) -> Result<bool, ExecutorError> {
        self.say(format!("DELETE /networks/{name}"));
        Ok(true)
    }
}

/// The id a dry-run gives the step channel's exec.
const CHANNEL_EXEC: &str = "dry-run-channel";

/// A step channel in which every start ends at once with status 0
/// ([`answer_as_dry_channel`](executor_container::detached::answer_as_dry_channel)).
fn dry_channel() -> (ExecOutput, crate::engine::ExecInput) {
    let (input, mut stdin) = tokio::io::duplex(64 * 1024);
    let (mut stdout_end, stdout) = tokio::io::duplex(64 * 1024);
    let (mut stderr_end, stderr) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let answered = executor_container::detached::answer_as_dry_channel(
            &mut stdin,
            &mut stdout_end,
            &mut stderr_end,
        )
        .await;
        if let Err(err) = answered {
            tracing::debug!(%err, "the dry-run's step channel ended");
        }
    });
    let chunks = |stream: StepStream, reader: tokio::io::DuplexStream| {
        tokio_util::io::ReaderStream::new(reader).map(move |chunk| {
            chunk
                .map(|bytes| (stream, bytes))
                .map_err(|e| ExecutorError::backend("dry-run output", e.to_string()))
        })
    };
    let output = futures_util::stream::select(
        chunks(StepStream::Stdout, stdout),
        chunks(StepStream::Stderr, stderr),
    )
    .boxed();
    (output, Box::pin(input))
}
