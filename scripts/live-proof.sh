#!/usr/bin/env bash
# The live proof on whatever cluster KUBECONFIG points to: runs examples/
# with --executor k8s, checks the result JSON, checks that no Job, pod or
# Secret with the run's labels is left, and prints `kubectl get nodes`.
#
#   KUBECONFIG=~/tenant.kubeconfig IMAGE=busybox:1.36 scripts/live-proof.sh
#
# IMAGE must be pullable by the cluster; NAMESPACE defaults to the context's;
# RUNNER_CLI is the runner-cli to use (default: built from this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${KUBECONFIG:?point KUBECONFIG at the cluster to prove}"
IMAGE="${IMAGE:-busybox:1.36}"
RUNNER="${RUNNER:-did:plc:live-proof}"
NAME="live-proof-$(date +%s)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
ns_flag=()
[ -n "${NAMESPACE:-}" ] && ns_flag=(--namespace "$NAMESPACE")

echo "== cluster"
kubectl version 2>/dev/null | sed -n '1,2p' || true
kubectl get nodes -o wide

echo "== run $NAME on $IMAGE"
set +e
${RUNNER_CLI:-cargo run -q -p runner-cli --} run --executor k8s --image "$IMAGE" "${ns_flag[@]}" \
  --name "$NAME" --runner "$RUNNER" --workdir examples --steps-file examples/steps.tsv \
  --outputs "$OUT/outputs" --result "$OUT/result.json" --log - --timeout 30m --pod-timeout 15m
code=$?
set -e
echo "== runner-cli exited $code"
python3 - "$OUT/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success", r
assert [s["status"] for s in r["steps"]] == ["success"] * len(r["steps"]), r["steps"]
assert any(o["path"] == "badge.png" and o["mediaType"] == "image/png" for o in r["outputs"]), r["outputs"]
print("result: success,", len(r["steps"]), "steps,", len(r["outputs"]), "outputs")
PY

echo "== leftovers with the run's labels"
label="dev.knotless.run=$NAME"
left="$(kubectl get jobs,pods,secrets "${ns_flag[@]}" -l "$label" -o name 2>/dev/null || true)"
if [ -n "$left" ]; then
  echo "left behind:"; echo "$left"; exit 1
fi
echo "none"

echo "== nodes after the run"
kubectl get nodes -o wide
