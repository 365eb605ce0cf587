//! The tests that need a container engine run where one was prepared
//! (`scripts/test.sh`, or `eval "$(scripts/prepare-engine.sh)"`, sets
//! `KNOTLESS_TEST_ENGINE`); elsewhere `cargo test` lists them as ignored,
//! saying how to run them, and runs everything else.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(knotless_engine)");
    // The helpers executor-container could build for this machine: a test
    // that needs one is ignored, with the reason, where it is missing.
    println!("cargo::rustc-check-cfg=cfg(knotless_gz)");
    let built = std::env::var("DEP_KNOTLESS_HELPERS_BUILT").unwrap_or_default();
    if built.split(',').any(|name| name == "gz") {
        println!("cargo::rustc-cfg=knotless_gz");
    }
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_ENGINE");
    if std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=knotless_engine");
    }
}
