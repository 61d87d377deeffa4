#!/bin/bash
# The suite's set-up fixture (collect_leftovers.sh) collects what a test run killed from outside
# left: here an xmprun SIGKILLed mid-job, as the end of a session killed one during a mutation
# run (its memory cgroup, below a cgroup no later run was in, stayed for good). Planted where a
# mutation run keeps its tests (a /tmp/xmprun-mutation-tests.* root), with a state directory of
# its own as every end-to-end test's xmprun has: the workers must be dead afterwards (they die
# with xmprun, and the collection kills any that did not), and the job's cgroup directories,
# state file and scratch directory gone.
set -u
xmprun=$XMPRUN_BIN
root=$(mktemp -d /tmp/xmprun-mutation-tests.XXXXXX)
t=$(mktemp -d "$root/xmprun-test-XXXXXX")
state=$t/state
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    XMPRUN_STATE_DIR=$state "$xmprun" gc >/dev/null 2>&1
    rm -rf "$root"
}
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
# wait_for CMD...: retries a condition for up to 30 s (a bound for a slow machine, not a timing).
wait_for() {
    for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done
    return 1
}
# Gone: no such process, or a zombie that only its new parent can reap.
gone() { [[ ! -e /proc/$1 ]] || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(*eval(sys.argv[2], {"d": d}), sep="\n")' "$@"; }

cat >"$t/job.yaml" <<YAML
version: 1
name: leftover
workers: 2
devices: {kind: cpu}
resources: {worker: {memory: 256Mi}}
command: [sleep, '300']
YAML
XMPRUN_STATE_DIR=$state TMPDIR=$t "$xmprun" -q --report "$t/r.json" "$t/job.yaml" &
owner=$!
pids+=("$owner")
statefile() { compgen -G "$state/*.json" >/dev/null; }
wait_for statefile || { echo "FAIL: no state file in $state"; exit 1; }
file=$(compgen -G "$state/*.json")
wait_for test "$(field "$file" '[len(d["workers"])]')" = 2
mapfile -t workers < <(field "$file" '[w["pid"] for w in d["workers"]]')
mapfile -t dirs < <(field "$file" 'd["cgroup_dirs"]')
run_dir=$(field "$file" '[d["run_dir"]]')
pids+=("${workers[@]}")
kill -9 "$owner"
wait "$owner" 2>/dev/null
# What the kill left, as the session's end left it: the job's cgroups (the state file names a
# directory in every hierarchy; the job has one where it needs it) and its files.
left=0
for d in "${dirs[@]}"; do [[ -d $d ]] && left=$((left + 1)); done
((left > 0)) || { echo "FAIL: no cgroup directory of the job was left after the kill"; exit 1; }
[[ -d $run_dir ]] || { echo "FAIL: no scratch directory was left after the kill"; exit 1; }

out=$(XMPRUN_BIN=$xmprun XMPRUN_TEST_TMPDIR=/tmp "$(dirname "$0")/collect_leftovers.sh") ||
    fail "collect_leftovers.sh failed: $out"
for w in "${workers[@]}"; do wait_for gone "$w" || fail "worker $w is still alive"; done
for d in "${dirs[@]}"; do [[ ! -e $d ]] || fail "cgroup $d was left behind"; done
[[ ! -e $file ]] || fail "state file $file was left behind"
[[ ! -e $run_dir ]] || fail "scratch directory $run_dir was left behind"
[[ $out == *"cleaned up 1 orphaned job"* ]] || fail "collect_leftovers.sh said: $out"
exit $status
