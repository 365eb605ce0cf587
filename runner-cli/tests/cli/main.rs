//! runner-cli end to end on the shell executor: exit codes, result JSON,
//! input errors, signals.

#[path = "../common/mod.rs"]
mod common;
use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod caches_and_secrets;
mod cleanup;
mod input;
mod outcomes;
mod signals;
mod targets;
mod terminal;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner-cli"));
    cmd.env_remove("RUNNER_DID");
    cmd
}

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("checkout")).unwrap();
        Case { dir }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn steps(&self, tsv: &str) -> PathBuf {
        let p = self.path("steps.tsv");
        std::fs::write(&p, tsv).unwrap();
        p
    }
    /// `run` with this case's folders; a flag in `extra` replaces the default.
    fn run(&self, steps: &str, extra: &[&str]) -> Command {
        let steps = self.steps(steps);
        let mut flags: Vec<(String, String)> = [
            ("--executor", "shell".to_string()),
            ("--name", "cli-test".to_string()),
            ("--runner", "did:plc:cli-test".to_string()),
            ("--workdir", self.path("checkout").display().to_string()),
            ("--steps-file", steps.display().to_string()),
            ("--outputs", self.path("outputs").display().to_string()),
            ("--result", self.path("result.json").display().to_string()),
            ("--log", self.path("run.log").display().to_string()),
            ("--shell-root", self.path("roots").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut rest = Vec::new();
        let mut extra = extra.iter();
        while let Some(flag) = extra.next() {
            if let Some(slot) = flags.iter_mut().find(|(k, _)| k == flag) {
                slot.1 = extra.next().map(|v| v.to_string()).unwrap_or_default();
            } else {
                rest.push(flag.to_string());
            }
        }
        let mut cmd = bin();
        cmd.arg("run");
        for (k, v) in flags {
            cmd.arg(k).arg(v);
        }
        cmd.args(rest);
        cmd
    }
    fn result(&self) -> RunResult {
        let text = std::fs::read_to_string(self.path("result.json")).expect("a result JSON");
        let result: RunResult = serde_json::from_str(&text).unwrap();
        assert_valid_result(&result);
        result
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.path("run.log")).unwrap_or_default()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
