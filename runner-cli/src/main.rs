//! `runner-cli`: run a CI run on the shell, Docker or Kubernetes executor.

use clap::Parser;

use crate::args::{Cli, Command};

/// Exit code of a usage or input error.
const EXIT_INPUT: i32 = 2;
/// Exit code of an infrastructure error.
const EXIT_INFRA: i32 = 3;
/// Exit code of a cancelled run.
const EXIT_CANCELLED: i32 = 130;

/// `eprintln!` that never panics: a closed stderr (`... 2>&- `, a reader
/// that went away) is no reason to abandon a run and leak its environment.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = $crate::secrets::masked(&$crate::flags::as_flags(&format!($($arg)*)));
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}
/// `println!` that never panics, for the same reason.
macro_rules! print_out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;
mod backends;
mod flags;
mod foreign;
mod outputs;
mod prepare;
mod progress;
mod record;
mod result_file;
mod resume;
mod run;
mod secrets;
mod services;
mod signals;
mod workflow;

/// The default log filter: the runner's own warnings, none of its
/// libraries' lines.
const QUIET_LIBRARIES: &str =
    "warn,kube=off,kube_client=off,kube_runtime=off,bollard=off,hyper=off,hyper_util=off,tower=off,rustls=off,tungstenite=off,tokio_tungstenite=off";

fn main() {
    let cli = Cli::parse();
    // Colour codes only for a person at a terminal: piped into a file or
    // a CI log they are noise, and NO_COLOR turns them off anyway.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_ansi(colour)
        .with_writer(secrets::MaskedStderr)
        // Its own complaint about a failed write goes to stderr through
        // `eprintln!`, which panics when stderr is the thing that failed.
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUNNER_LOG")
                // The libraries' own lines (kube's ERROR for each connection
                // an outage refused) are for conditions the runner handles
                // and words itself; RUNNER_LOG shows them.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(QUIET_LIBRARIES)),
        )
        .init();
    // One run moves a few streams at a time; a single-threaded runtime
    // moves them with a third of the system time of a work-stealing one,
    // which on small machines is time taken from the engine (BENCHMARKS.md).
    // File I/O still goes to tokio's blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            say!("runner-cli: cannot start the async runtime: {err}");
            std::process::exit(EXIT_INFRA);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Cleanup(args) => run::cleanup(*args).await,
            Command::Resume(args) => resume::resume(*args).await,
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(shell, &mut command, "runner-cli", &mut std::io::stdout());
                0
            }
        }
    });
    std::process::exit(code);
}
