//! The shared conformance suite on the Docker executor, against the real
//! engine `scripts/prepare-engine.sh` prepared.

mod common;

use executor_conformance::conformance_tests;

async fn docker() -> common::Docker {
    common::Docker(common::executor(common::options()).await)
}

conformance_tests!(engine: docker;
    cut_streams: "the engine's own socket cuts nothing: tests/outage.rs runs this case through a cutting proxy",
);
