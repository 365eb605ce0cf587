#!/usr/bin/env bash
# The live proof on whatever cluster KUBECONFIG points to: runs examples/
# with --executor k8s, checks the result JSON, checks that no Job, pod or
# Secret with the run's labels is left, and prints `kubectl get nodes`.
#
#   KUBECONFIG=~/tenant.kubeconfig IMAGE=busybox:1.36 scripts/live-proof.sh
#
# IMAGE must be pullable by the cluster; NAMESPACE defaults to the context's;
# RUNNER_CLI is the runner-cli to use (default: built from this checkout).
#
# OUTAGE_CMD, if set, adds the outage check: a second run whose step ticks
# for a minute; once it has ticked ten times, OUTAGE_CMD takes the API
# server down and back (it must return once the server is back), e.g.
#
#   OUTAGE_CMD='ssh cp sudo systemctl restart kube-apiserver'
#   OUTAGE_CMD='docker restart kind-control-plane'
#
# The step must still end with its own exit code (5), every tick must be
# in the log once, in order, and nothing may be left.
#
# RESUME_CHECK=1 adds the resume check: a run whose step ticks for 30
# seconds is killed (SIGKILL) once it has ticked five times, and
# `runner-cli resume` carries it on: the step's own exit code (5), every
# tick once, in order, and nothing left.
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
if [ -z "${RUNNER_CLI:-}" ]; then
  # A binary, not `cargo run`: the resume check kills the runner itself.
  cargo build -q -p runner-cli
  RUNNER_CLI="${CARGO_TARGET_DIR:-target}/debug/runner-cli"
fi

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
"$RUNNER_CLI" run --executor k8s --image "$IMAGE" "${ns_flag[@]}" \
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

# Fails the proof if run $1 left a Job, pod or Secret; $2 says when.
# A failing kubectl fails it too: an error is not "nothing left".
nothing_left() {
  local left
  left="$(kubectl get jobs,pods,secrets "${ns_flag[@]}" -l "dev.knotless.run=$1" -o name)"
  if [ -n "$left" ]; then
    echo "left behind $2:"; echo "$left"; exit 1
  fi
  echo "nothing left $2"
}

echo "== leftovers with the run's labels"
nothing_left "$NAME" "after the run"

if [ -n "${OUTAGE_CMD:-}" ]; then
  echo "== outage check: $OUTAGE_CMD mid-step"
  ONAME="$NAME-outage"
  mkdir -p "$OUT/ocheckout"
  printf 'tick\ti=0; while [ $i -lt 60 ]; do echo "tick $i"; sleep 1; i=$((i+1)); done; exit 5\n' > "$OUT/osteps.tsv"
  set +e
  "$RUNNER_CLI" run --executor k8s --image "$IMAGE" "${ns_flag[@]}" \
    --name "$ONAME" --runner "$RUNNER" --workdir "$OUT/ocheckout" --steps-file "$OUT/osteps.tsv" \
    --outputs "$OUT/ooutputs" --result "$OUT/oresult.json" --log "$OUT/olog.txt" \
    --timeout 30m --pod-timeout 15m &
  runner=$!
  # The log file is the only sign of progress the script has.
  for _ in $(seq 600); do grep -q '^tick 10$' "$OUT/olog.txt" 2>/dev/null && break; sleep 1; done
  grep -q '^tick 10$' "$OUT/olog.txt" || { echo "the step never ticked ten times"; cat "$OUT/olog.txt"; kill "$runner"; exit 1; }
  sh -c "$OUTAGE_CMD"
  wait "$runner"
  ocode=$?
  set -e
  echo "== runner-cli exited $ocode"
  cat "$OUT/olog.txt"
  python3 - "$OUT/oresult.json" "$OUT/olog.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
step = r["steps"][0]
assert step["exitCode"] == 5 and step["status"] == "failed", step
ticks = [l for l in open(sys.argv[2]).read().splitlines() if l.startswith("tick ")]
assert ticks == ["tick %d" % i for i in range(60)], ticks
print("outage ridden out: exit 5 kept,", len(ticks), "ticks once each, in order")
PY
  nothing_left "$ONAME" "after the outage"
fi

if [ -n "${RESUME_CHECK:-}" ]; then
  echo "== resume check: the runner killed mid-step, then resumed"
  RNAME="$NAME-resume"
  mkdir -p "$OUT/rcheckout"
  printf 'tick\ti=0; while [ $i -lt 30 ]; do echo "tick $i"; sleep 1; i=$((i+1)); done; exit 5\n' > "$OUT/rsteps.tsv"
  "$RUNNER_CLI" run --executor k8s --image "$IMAGE" "${ns_flag[@]}" \
    --name "$RNAME" --runner "$RUNNER" --workdir "$OUT/rcheckout" --steps-file "$OUT/rsteps.tsv" \
    --outputs "$OUT/routputs" --result "$OUT/rresult.json" --log "$OUT/rlog.txt" \
    --timeout 30m --pod-timeout 15m &
  runner=$!
  for _ in $(seq 600); do grep -q '^tick 5$' "$OUT/rlog.txt" 2>/dev/null && break; sleep 1; done
  grep -q '^tick 5$' "$OUT/rlog.txt" || { echo "the step never ticked five times"; cat "$OUT/rlog.txt"; kill "$runner"; exit 1; }
  kill -KILL "$runner"
  wait "$runner" 2>/dev/null || true
  set +e
  "$RUNNER_CLI" resume --executor k8s "${ns_flag[@]}" --name "$RNAME" --runner "$RUNNER" \
    --outputs "$OUT/routputs" --result "$OUT/rresult.json" --log "$OUT/rlog.txt"
  rcode=$?
  set -e
  echo "== runner-cli resume exited $rcode"
  cat "$OUT/rlog.txt"
  python3 - "$OUT/rresult.json" "$OUT/rlog.txt" "$rcode" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
step = r["steps"][0]
assert step["exitCode"] == 5 and step["status"] == "failed", step
assert sys.argv[3] == "1", "resume exited " + sys.argv[3]
ticks = [l for l in open(sys.argv[2]).read().splitlines() if l.startswith("tick ")]
assert ticks == ["tick %d" % i for i in range(30)], ticks
print("resumed: exit 5 kept,", len(ticks), "ticks once each, in order")
PY
  nothing_left "$RNAME" "after the resume"
fi

echo "== nodes after the run"
nodes
