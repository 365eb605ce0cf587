//! The engine's errors as the runner's: an engine that did not answer
//! (tried again), a container that is gone, an image refused.

use executor_core::ExecutorError;

pub(super) fn status(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Whether the engine says the container is gone: Docker's 404, or the
/// 500 podman answers while a container is being removed.
pub(super) fn container_gone(err: &bollard::errors::Error) -> bool {
    match err {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        } => true,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message,
        } => message.contains("no such container"),
        _ => false,
    }
}

pub(super) fn fail(context: impl Into<String>) -> impl Fn(bollard::errors::Error) -> ExecutorError {
    let context = context.into();
    move |err| {
        let described = match &err {
            bollard::errors::Error::DockerResponseServerError {
                message,
                status_code,
            } => {
                let message = format!("{message} (HTTP {status_code})");
                // The engine answered: its error stands, except for the
                // answers a proxy or a busy engine gives that a later call may not.
                if matches!(status_code, 429 | 502 | 503 | 504) {
                    ExecutorError::unreachable(context.clone(), message)
                } else {
                    ExecutorError::backend(context.clone(), message)
                }
            }
            // No answer at all: the connection was refused, reset or timed out.
            other => ExecutorError::unreachable(context.clone(), other.to_string()),
        };
        described.with_source(err)
    }
}

/// Whether the engine refused to create a container for its image.
pub(super) fn is_image_refusal(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("invalid reference format") || message.contains("no such image")
}

/// One chunk of an exec's output as the step's stream and bytes. No exec
/// here has a terminal: bollard makes a console chunk of the bytes left
/// when a stream ends inside a frame's header, and those are a cut, not
/// the step's output (taken for it, they stood in for the bytes a follow
/// then skipped).
pub(super) fn exec_chunk(
    chunk: Result<bollard::container::LogOutput, bollard::errors::Error>,
    failed: &impl Fn(bollard::errors::Error) -> ExecutorError,
) -> Result<(crate::engine::StepStream, bytes::Bytes), ExecutorError> {
    use crate::engine::StepStream;
    use bollard::container::LogOutput;
    match chunk {
        Ok(LogOutput::StdErr { message }) => Ok((StepStream::Stderr, message)),
        Ok(LogOutput::StdOut { message } | LogOutput::StdIn { message }) => {
            Ok((StepStream::Stdout, message))
        }
        Ok(LogOutput::Console { .. }) => Err(ExecutorError::backend(
            "reading exec output",
            "the stream ended inside a frame's header",
        )),
        Err(err) => Err(failed(err)),
    }
}
