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

nodes() {
  # A tenant with only the namespace Role may not list nodes; that is fine.
  kubectl get nodes -o wide 2>/dev/null || echo "(nodes are not visible to this user: a namespace Role does not grant them)"
}

echo "== cluster"
kubectl version 2>/dev/null | sed -n '1,2p' || true
nodes

echo "== permissions of scripts/runner-role.yaml"
missing=0
while read -r group resource verbs; do
  [ "$group" = '""' ] && group=""
  for verb in $verbs; do
    target="$resource"
    [ -n "$group" ] && target="$resource.$group"
    sub=()
    case "$resource" in */*) sub=(--subresource "${resource#*/}"); target="${resource%%/*}${group:+.$group}" ;; esac
    answer="$(kubectl auth can-i "$verb" "$target" "${sub[@]}" "${ns_flag[@]}" 2>/dev/null || true)"
    echo "  $verb $resource${group:+ ($group)}: ${answer:-no}"
    [ "$answer" = yes ] || missing=1
  done
done < <(python3 - <<'PY'
import re
role = open("scripts/runner-role.yaml").read().split("\n---")[0]
items = lambda line: [x.strip().strip('"') for x in line.split("[", 1)[1].split("]", 1)[0].split(",")]
group = resources = None
for line in map(str.strip, role.splitlines()):
    if line.startswith("- apiGroups:"): group = items(line)[0] or '""'
    elif line.startswith("resources:"): resources = items(line)
    elif line.startswith("verbs:"):
        for r in resources: print(group, r, " ".join(items(line)))
PY
)
[ "$missing" = 0 ] || { echo "this user lacks permissions the runner needs; see scripts/runner-role.yaml"; exit 1; }

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
# A failing kubectl fails the proof: an error is not "nothing left".
left="$(kubectl get jobs,pods,secrets "${ns_flag[@]}" -l "$label" -o name)"
if [ -n "$left" ]; then
  echo "left behind:"; echo "$left"; exit 1
fi
echo "none"

echo "== nodes after the run"
nodes
