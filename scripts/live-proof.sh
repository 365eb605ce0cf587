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

# Starts run $1 in the background: one step that ticks $2 times, a
# second apart, then exits 5, its files in $OUT/$1.*. $! is its runner.
ticking_run() {
  mkdir -p "$OUT/$1.checkout"
  printf 'tick\ti=0; while [ $i -lt %s ]; do echo "tick $i"; sleep 1; i=$((i+1)); done; exit 5\n' "$2" > "$OUT/$1.steps"
  "$RUNNER_CLI" run --executor k8s --image "$IMAGE" "${ns_flag[@]}" \
    --name "$1" --runner "$RUNNER" --workdir "$OUT/$1.checkout" --steps-file "$OUT/$1.steps" \
    --outputs "$OUT/$1.outputs" --result "$OUT/$1.json" --log "$OUT/$1.log" \
    --timeout 30m --pod-timeout 15m &
}

# Waits until run $1's log has "tick $2" (the log file is the only sign
# of progress the script has); fails the proof, stopping runner $3, if
# it never comes.
wait_for_tick() {
  for _ in $(seq 600); do grep -q "^tick $2\$" "$OUT/$1.log" 2>/dev/null && break; sleep 1; done
  grep -q "^tick $2\$" "$OUT/$1.log" || { echo "the step never ticked $2 times"; cat "$OUT/$1.log"; kill "$3"; exit 1; }
}

# Fails the proof unless run $1's step kept its exit 5 and its log has
# every one of its $2 ticks once, in order; prints "$3: ..." if so.
ticks_kept() {
  cat "$OUT/$1.log"
  python3 - "$OUT/$1.json" "$OUT/$1.log" "$2" "$3" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
step = r["steps"][0]
assert step["exitCode"] == 5 and step["status"] == "failed", step
ticks = [l for l in open(sys.argv[2]).read().splitlines() if l.startswith("tick ")]
assert ticks == ["tick %d" % i for i in range(int(sys.argv[3]))], ticks
print(sys.argv[4] + ": exit 5 kept,", len(ticks), "ticks once each, in order")
PY
}

if [ -n "${OUTAGE_CMD:-}" ]; then
  echo "== outage check: $OUTAGE_CMD mid-step"
  ONAME="$NAME-outage"
  set +e
  ticking_run "$ONAME" 60
  runner=$!
  wait_for_tick "$ONAME" 10 "$runner"
  sh -c "$OUTAGE_CMD"
  wait "$runner"
  ocode=$?
  set -e
  echo "== runner-cli exited $ocode"
  ticks_kept "$ONAME" 60 "outage ridden out"
  nothing_left "$ONAME" "after the outage"
fi

if [ -n "${RESUME_CHECK:-}" ]; then
  echo "== resume check: the runner killed mid-step, then resumed"
  RNAME="$NAME-resume"
  ticking_run "$RNAME" 30
  runner=$!
  wait_for_tick "$RNAME" 5 "$runner"
  kill -KILL "$runner"
  wait "$runner" 2>/dev/null || true
  set +e
  # The four flags only: the namespace, outputs and result are the run's
  # own, from its record beside the log.
  "$RUNNER_CLI" resume --executor k8s --name "$RNAME" --runner "$RUNNER" --log "$OUT/$RNAME.log"
  rcode=$?
  set -e
  echo "== runner-cli resume exited $rcode"
  [ "$rcode" = 1 ] || { echo "resume exited $rcode, not the step's failure (1)"; cat "$OUT/$RNAME.log"; exit 1; }
  ticks_kept "$RNAME" 30 "resumed"
  nothing_left "$RNAME" "after the resume"
fi

echo "== nodes after the run"
nodes
