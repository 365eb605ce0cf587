//! The floor for the Docker per-step benchmark: N bare bollard execs of
//! `true` in a running container, as little as a program can do.
//!
//! `cargo run --release -p executor-docker --example bare_docker_exec -- CONTAINER N`

use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let container = args.next().ok_or("usage: bare_docker_exec CONTAINER N")?;
    let n: usize = args
        .next()
        .ok_or("usage: bare_docker_exec CONTAINER N")?
        .parse()?;
    let docker = bollard::Docker::connect_with_defaults()?
        .negotiate_version()
        .await?;
    let start = std::time::Instant::now();
    for _ in 0..n {
        let exec = docker
            .create_exec(
                &container,
                CreateExecOptions {
                    cmd: Some(vec!["true"]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        let code = docker.inspect_exec(&exec.id).await?.exit_code;
        if code != Some(0) {
            return Err(format!("exec exited {code:?}").into());
        }
    }
    println!("{:.6}", start.elapsed().as_secs_f64());
    Ok(())
}
