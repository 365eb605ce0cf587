pub mod caches;
pub mod failures;
pub mod files;
pub mod lifecycle;
pub mod logs;
pub mod secrets;
pub mod steps;
pub mod untrusted;
