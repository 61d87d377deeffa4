#!/bin/bash
# Real Slurm (../shared/tools/slurm-setup.sh): xmprun runs once per node. `srun -n2` on one node
# starts two, and both refuse (exit 125) saying --ntasks-per-node=1; one task per node runs its
# workers with TORCHELASTIC_RUN_ID = the Slurm job id. Skips (77) where no Slurm cluster
# answers. Every srun holds /tmp/xmp-slurm.lock, as everyone sharing this cluster does.
set -u
name=test_slurm_one_per_node
skip() {
    echo "[SKIP] scripts::$name: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
: "${XMPRUN_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
setup=$XMPRUN_SOURCE_DIR/../shared/tools/slurm-setup.sh
if [ -z "${SLURM_CONF:-}" ] && [ -x "$setup" ]; then
    eval "$("$setup" env 2>/dev/null)"
fi
command -v srun >/dev/null || skip "no srun (../shared/tools/slurm-setup.sh sets Slurm up)"
timeout 20 sinfo >/dev/null 2>&1 || skip "no Slurm cluster answers (../shared/tools/slurm-setup.sh)"

dir=$(mktemp -d /tmp/xmprun-slurm.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || fail "cd $dir"
lock() { flock -w 600 /tmp/xmp-slurm.lock timeout 120 "$@"; }

lock srun -N1 -n2 "$XMPRUN_BIN" --report "$dir/two.json" -n 1 -- true >"$dir/two.out" 2>"$dir/two.err"
status=$?
cat "$dir/two.err"
[ "$status" = 125 ] || fail "srun -n2 on one node: exit $status, want 125"
want="xmprun: Slurm started 2 tasks of this step on one node (SLURM_STEP_TASKS_PER_NODE=2); xmprun runs once per node and starts its workers itself: use \`srun --ntasks-per-node=1\` (workers per node: the spec's workers, or -n)"
[ "$(grep -cxF "$want" "$dir/two.err")" = 2 ] || fail "both tasks must refuse with: $want"
grep -q '"outcome": "setup_failed"' "$dir/two.json" || fail "no setup_failed report"

lock srun -N1 -n1 --ntasks-per-node=1 "$XMPRUN_BIN" --report "$dir/one.json" -n 2 -- \
    sh -c 'echo "run=$TORCHELASTIC_RUN_ID job=$SLURM_JOB_ID"' >"$dir/one.out" 2>"$dir/one.err"
status=$?
cat "$dir/one.out" "$dir/one.err"
[ "$status" = 0 ] || fail "one task per node: exit $status, want 0"
job=$(sed -n 's/.*run=\([0-9][0-9]*\) job=\1$/\1/p' "$dir/one.out" | sort -u)
[ -n "$job" ] && [ "$(grep -c "run=$job job=$job" "$dir/one.out")" = 2 ] ||
    fail "both workers must have TORCHELASTIC_RUN_ID = SLURM_JOB_ID"
grep -q "\"run_id\": \"$job\"" "$dir/one.json" || fail "the report's job.run_id is not $job"
echo "ok"
