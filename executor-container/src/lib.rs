//! What the container backends (Docker, Kubernetes) share, between
//! [`executor_core`] and them: steps that outlive the exec that started
//! them ([`detached`]), and one long-lived environment per run, named,
//! marked and gathered the same way ([`container`]).
//!
//! An embedder of the core trait never needs this crate; a new container
//! backend does.
//!
//! ```
//! use executor_container::detached::StepFiles;
//! let files = StepFiles::new("/.knotless", "1a2b");
//! assert!(files.pid_file().ends_with(".pid"));
//! ```
#![warn(missing_docs)]
// Every public function that can fail says how: embedders match on it.
#![warn(clippy::missing_errors_doc)]

pub mod container;
pub mod detached;
pub mod staging;
