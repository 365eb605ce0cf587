//! `knotless-link --to UPSTREAM [--delay-ms MS] [--rate-mbit MBIT] [--listen ADDR]`:
//! a long link in front of `UPSTREAM` (`unix:PATH` or `tcp:HOST:PORT`).
//! Prints the address it listens on, one line, then carries connections
//! until SIGINT or SIGTERM.

use std::time::Duration;

use knotless_link::{Link, Shape, Upstream};
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: knotless-link --to unix:PATH|tcp:HOST:PORT [--delay-ms MS (one way)] [--rate-mbit MBIT (each way)] [--listen HOST:PORT]";

fn parse() -> Result<(String, Upstream, Shape), String> {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut to, mut shape) = ("127.0.0.1:0".to_string(), None, Shape::default());
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--to" => to = Some(value()?.parse::<Upstream>().map_err(|e| e.to_string())?),
            "--listen" => listen = value()?,
            "--delay-ms" => {
                let ms: u64 = value()?.parse().map_err(|e| format!("--delay-ms: {e}"))?;
                shape.one_way_delay = Duration::from_millis(ms);
            }
            "--rate-mbit" => {
                let mbit: f64 = value()?.parse().map_err(|e| format!("--rate-mbit: {e}"))?;
                if mbit.is_nan() || mbit <= 0.0 {
                    return Err(format!("--rate-mbit must be above 0\n{USAGE}"));
                }
                shape.bytes_per_second = Some((mbit * 125_000.0) as u64);
            }
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    let to = to.ok_or(format!("--to is required\n{USAGE}"))?;
    Ok((listen, to, shape))
}

#[tokio::main]
async fn main() {
    let (listen, to, shape) = match parse() {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("knotless-link: {msg}");
            std::process::exit(2);
        }
    };
    let link = match Link::start_on(&listen, to, shape).await {
        Ok(link) => link,
        Err(err) => {
            eprintln!("knotless-link: {err}");
            std::process::exit(1);
        }
    };
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        eprintln!("knotless-link: cannot listen for SIGTERM");
        std::process::exit(1);
    };
    println!("{}", link.addr());
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
