//! The floor for the Docker per-step benchmark: N bare bollard execs of
//! `true` in a running container, as little as a program can do.
//!
//! `cargo run --release -p executor-docker --example bare_docker_exec -- CONTAINER N [COMMAND...]`
//!
//! COMMAND (default `true`) is what each exec runs: given a step's start
//! wrapper, it shows what the wrapper costs on the engine's own path.
//! `{n}` in an argument becomes the exec's number (0, 1, ...), so that
//! each start gets files of its own.
//!
//! Prints the total seconds on stdout and, on stderr, the median time of
//! each engine call (create, start until the stream ends, inspect): where
//! a step's time goes when nothing but the engine is in the way.

use std::time::{Duration, Instant};

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
    let command: Vec<String> = args.collect();
    let command = if command.is_empty() {
        vec!["true".to_string()]
    } else {
        command
    };
    let docker = bollard::Docker::connect_with_defaults()?
        .negotiate_version()
        .await?;
    let mut phases: [Vec<Duration>; 3] = Default::default();
    let start = Instant::now();
    for i in 0..n {
        let cmd: Vec<String> = command
            .iter()
            .map(|a| a.replace("{n}", &i.to_string()))
            .collect();
        let t = Instant::now();
        let exec = docker
            .create_exec(
                &container,
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        phases[0].push(t.elapsed());
        let t = Instant::now();
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        phases[1].push(t.elapsed());
        let t = Instant::now();
        let code = docker.inspect_exec(&exec.id).await?.exit_code;
        phases[2].push(t.elapsed());
        if code != Some(0) {
            return Err(format!("exec exited {code:?}").into());
        }
    }
    println!("{:.6}", start.elapsed().as_secs_f64());
    let [create, run, inspect] = phases.map(|mut p| {
        p.sort();
        p.get(p.len() / 2).copied().unwrap_or_default()
    });
    eprintln!(
        "median per exec: create {:.1} ms, start until the stream ends {:.1} ms, inspect {:.1} ms",
        create.as_secs_f64() * 1e3,
        run.as_secs_f64() * 1e3,
        inspect.as_secs_f64() * 1e3
    );
    Ok(())
}
