//! The conformance suite every [`Executor`] backend passes.
//!
//! Each behaviour of the executor contract is one plain async function
//! taking `&dyn Backend`, in the style of `object_store`'s integration
//! module. A backend's own tests implement [`Backend`] (the executor, its
//! image if it needs one, and a probe for leftovers) and call every case,
//! most easily with [`conformance_tests!`]:
//!
//! ```no_run
//! use executor_conformance::{conformance_tests, Backend};
//! use executor_core::Executor;
//!
//! struct MyBackend(executor_shell::ShellExecutor, std::path::PathBuf);
//!
//! #[async_trait::async_trait]
//! impl Backend for MyBackend {
//!     fn executor(&self) -> &dyn Executor { &self.0 }
//!     async fn leftovers(&self, runner: &str) -> Vec<String> {
//!         self.0.leftovers(runner).iter().map(|p| p.display().to_string()).collect()
//!     }
//! }
//!
//! async fn backend() -> MyBackend {
//!     let base = std::env::temp_dir().join("my-runner");
//!     MyBackend(executor_shell::ShellExecutor::new(&base), base)
//! }
//!
//! conformance_tests!(backend);
//! # fn main() {}
//! ```
//!
//! Every case makes its own folders and a runner DID of its own, so cases
//! run in parallel; each checks its result against the shipped JSON
//! Schema and ends by asserting that the backend's probe finds nothing left.
//!
//! [`fakes`] holds the `mockall` fake of the trait for testing code that
//! drives an executor.

mod cases;
pub mod fixture;
pub mod hooked;

use async_trait::async_trait;
use executor_core::{Executor, RunSpec};

pub use cases::caches::*;
pub use cases::durable::*;
pub use cases::expressions::*;
pub use cases::failures::*;
pub use cases::files::*;
pub use cases::flow::*;
pub use cases::isolation::*;
pub use cases::lifecycle::*;
pub use cases::load::*;
pub use cases::logs::*;
pub use cases::resume::*;
pub use cases::secrets::*;
pub use cases::services::*;
pub use cases::steps::*;
pub use cases::untrusted::*;
pub use cases::usage::*;

/// mockall fakes of the executor trait.
pub mod fakes {
    pub use executor_core::MockExecutor;
}

/// What the suite needs from a backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The executor under test.
    fn executor(&self) -> &dyn Executor;

    /// The image runs use, for backends that need one.
    fn image(&self) -> Option<String> {
        None
    }

    /// Whether the backend runs service containers
    /// ([`RunSpec::services`](executor_core::RunSpec::services)); one that
    /// does not must refuse a run with services as bad input.
    fn services(&self) -> bool {
        false
    }

    /// A last chance to set backend-specific parts of every spec.
    fn adjust(&self, _spec: &mut RunSpec) {}

    /// Everything of `runner` that still exists (containers, Jobs, Secrets,
    /// folders), described for a failure message; empty when clean.
    async fn leftovers(&self, runner: &str) -> Vec<String>;

    /// Removes `runner`'s live environment from outside, as an operator or
    /// the cluster would (the container removed, the pod deleted); `false`
    /// when the backend has nothing that can be lost that way, which fails
    /// the cases that need it unless [`conformance_tests!`] lists them as
    /// ignored (`lose_environment`).
    async fn lose_environment(&self, _runner: &str) -> bool {
        false
    }

    /// Cuts the connections that carry the next execs' output, as a
    /// network or a front that drops them would: the next exec whose
    /// output reaches `bytes[0]` bytes is cut there (no status comes), then
    /// the next to reach `bytes[1]`, and so on. `false` when the backend
    /// has no such connection (the shell), which fails the cases that
    /// need it unless [`conformance_tests!`] lists them as ignored
    /// (`cut_streams`).
    async fn cut_streams_after(&self, _bytes: &[u64]) -> bool {
        false
    }

    /// A second executor of the same backend with nothing of the first
    /// one's state, as a new runner process would make; `None` where runs
    /// do not outlive their runner (the shell), which fails the cases
    /// that need it unless [`conformance_tests!`] lists them as ignored
    /// (`another_runner`).
    async fn another_runner(&self) -> Option<Box<dyn Executor>> {
        None
    }
}

/// Generates one `#[tokio::test]` per conformance case, each calling
/// `$make().await` for a fresh [`Backend`].
///
/// `conformance_tests!(engine: make)` is for a backend that needs a
/// container engine: its cases run where the calling crate was built
/// with the `knotless_engine` cfg (its build script sets it when
/// `KNOTLESS_TEST_ENGINE` is set, as `scripts/test.sh` does) and are
/// listed as ignored, saying how to run them, elsewhere.
///
/// A backend without one of the abilities some cases need says so after
/// a `;`, with the reason, in this order: `cut_streams`
/// ([`Backend::cut_streams_after`]), `another_runner`
/// ([`Backend::another_runner`]), `lose_environment`
/// ([`Backend::lose_environment`]), `services` ([`Backend::services`]).
/// Those cases are listed as ignored
/// with that reason, never reported as passed; a case run on a backend
/// without its ability fails, naming the key to set here.
///
/// ```no_run
/// # use executor_conformance::{conformance_tests, Backend};
/// # struct Shell(executor_shell::ShellExecutor);
/// # #[async_trait::async_trait]
/// # impl Backend for Shell {
/// #     fn executor(&self) -> &dyn executor_core::Executor { &self.0 }
/// #     async fn leftovers(&self, _: &str) -> Vec<String> { Vec::new() }
/// # }
/// # async fn shell() -> Shell { Shell(executor_shell::ShellExecutor::new("/tmp/r")) }
/// conformance_tests!(shell;
///     cut_streams: "a step's output reaches the runner through no connection",
///     another_runner: "runs end with the runner process that started them",
///     lose_environment: "nothing outside the runner removes a run's folder",
///     services: "steps run on this host, with no service containers",
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (engine: $make:path $(; $($without:tt)*)?) => {
        $crate::conformance_tests!(@all $make; [#[cfg_attr(
            not(knotless_engine),
            ignore = "needs a container engine: run scripts/test.sh"
        )]]; $($($without)*)?);
    };
    // Cases ignored unless `cfg($cfg)` holds, saying `$why`: a backend
    // that needs more than the engine (an arm64 image and qemu).
    (engine $cfg:ident $why:literal: $make:path $(; $($without:tt)*)?) => {
        $crate::conformance_tests!(@all $make; [#[cfg_attr(not($cfg), ignore = $why)]]; $($($without)*)?);
    };
    ($make:path $(; $($without:tt)*)?) => {
        $crate::conformance_tests!(@all $make; []; $($($without)*)?);
    };
    (@all $make:path; $attrs:tt;
        $(cut_streams: $cut:literal,)?
        $(another_runner: $another:literal,)?
        $(lose_environment: $lose:literal,)?
        $(services: $services:literal $(,)?)?
    ) => {
        $crate::conformance_tests!(@cases $make; $attrs;
            checkout_arrives_intact, steps_dir_arrives, outputs_come_back,
            outputs_come_back_after_failure, state_persists_across_steps,
            exit_codes_propagate, scripts_stop_at_first_error, a_one_mib_script_runs, failing_step_skips_rest,
            variables_reach_steps, variables_named_like_the_runners_own_reach_steps,
            logs_stream_while_step_runs, large_log_is_streamed,
            a_loud_step_is_cut_at_the_log_limit, a_step_cannot_settle_a_later_steps_result,
            a_left_process_cannot_settle_a_later_steps_status,
            step_markers_carry_exit_codes, events_follow_the_run, step_timeout_kills_step, run_timeout_ends_run,
            cancellation_mid_step, failed_start_leaves_nothing, concurrent_runs_are_isolated,
            cleanup_spares_live_runs, cache_cold_then_warm, cache_not_saved_after_failure,
            hostile_cache_is_refused, oversized_cache_is_not_saved, concurrent_saves_never_mix,
            crashed_save_leaves_the_old_copy, hostile_outputs_are_skipped_one_by_one,
            unpackable_checkout_fails_by_name, untrusted_saves_never_reach_trusted_runs,
            secrets_are_masked_in_every_form, failures_name_their_kind_and_step,
            retry_never_follows_a_step_failure, a_step_that_ends_its_supervisor_is_not_retried,
            each_step_reports_what_it_cost,
            always_steps_run_after_a_failure_in_the_same_environment,
            outputs_and_conditions_work_as_in_actions,
            a_service_is_reached_by_name_from_the_first_step,
            a_step_that_leaves_a_process_holding_its_output_ends_with_all_it_wrote);
        $crate::conformance_tests!(@needing $make; $attrs; [$($cut)?];
            a_step_cut_twice_keeps_every_byte_and_its_code);
        $crate::conformance_tests!(@needing $make; $attrs; [$($another)?];
            a_killed_runner_is_resumed_with_the_right_result,
            a_left_process_cannot_settle_a_step_a_new_runner_follows);
        $crate::conformance_tests!(@needing $make; $attrs; [$($lose)?];
            retry_recovers_from_a_lost_environment);
        $crate::conformance_tests!(@needing $make; $attrs; [$($services)?];
            a_service_that_fails_is_named_with_its_last_lines);
    };
    (@needing $make:path; $attrs:tt; []; $($case:ident),*) => {
        $crate::conformance_tests!(@cases $make; $attrs; $($case),*);
    };
    (@needing $make:path; $attrs:tt; [$why:literal]; $($case:ident),*) => {
        $crate::conformance_tests!(@cases $make; [#[ignore = $why]]; $($case),*);
    };
    (@cases $make:path; $attrs:tt; $($case:ident),* $(,)?) => {
        $( $crate::conformance_tests!(@case $make; $attrs; $case); )*
    };
    (@case $make:path; [$(#[$attr:meta])*]; $case:ident) => {
        $(#[$attr])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let backend = $make().await;
            $crate::$case(&backend).await;
        }
    };
}
