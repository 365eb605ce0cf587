//! The tests that need a container engine run where one was prepared
//! (`scripts/test.sh`, or `eval "$(scripts/prepare-engine.sh)"`, sets
//! `KNOTLESS_TEST_ENGINE`); elsewhere `cargo test` lists them as ignored,
//! saying how to run them, and runs everything else.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(knotless_engine)");
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_ENGINE");
    if std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=knotless_engine");
    }
}
