#!/usr/bin/env bash
# Runs the whole test suite: prepares the container engine and the local
# test image the Docker and Kubernetes tests use, then cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/prepare-engine.sh)"
exec cargo test --workspace --all-targets "$@"
