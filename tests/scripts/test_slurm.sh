#!/bin/bash
# examples/slurm/README.md, run word for word with real Slurm: sbatch --wait runs train.sbatch,
# whose srun starts one xmprun, which starts one worker per GPU of the gres allocation with
# CUDA_VISIBLE_DEVICES pinned and the torchrun variables from Slurm's; the batch job exits with
# the job's status and `xmprun report` reads the report back. (scancel, failures, OOM and
# KillWait in both of Slurm's configurations: test_slurm_modes.sh.)
#
# Needs the one-node cluster of ../shared/tools/slurm-setup.sh (4 fake GPUs; it holds
# /tmp/xmp-slurm.lock while it runs). The fake GPUs are only device files, so xmprun discovers
# them from a host tree made here (XMPRUN_HOST_ROOT: 4 NVIDIA GPUs on NUMA node 0, with this
# machine's CPUs), which sbatch passes on to the job. Without Slurm it skips (77) and says so
# loudly (tests/check-skips.sh fails CI on it unless .ci/run expects it).
set -u
src=$(cd "$XMPRUN_SOURCE_DIR" && pwd)
build=$(cd "$(dirname "$XMPRUN_BIN")" && pwd)
setup=${XMP_SLURM_SETUP:-$src/../shared/tools/slurm-setup.sh}
cannot() {
    echo "********************************************************************************"
    echo "[SKIP] scripts::test_slurm: cannot run: $*"
    echo "********************************************************************************"
    exit 77
}
command -v sbatch >/dev/null || cannot "Slurm is not installed (run ../shared/tools/slurm-setup.sh)"
if [ -z "${XMP_SLURM_LOCKED:-}" ]; then
    # -o: the lock stays with flock, not with anything the test starts; -w: a holder that never
    # lets go fails the test instead of hanging it.
    XMP_SLURM_LOCKED=1 exec flock -o -w 300 -E 75 /tmp/xmp-slurm.lock "$0" "$@"
fi
if [ -z "${SLURM_CONF:-}" ] && [ -x "$setup" ]; then
    eval "$("$setup" env 2>/dev/null | grep '^export SLURM_CONF=')"
fi
export SLURM_CONF=${SLURM_CONF:-/tmp/xmp-real/slurm/etc/slurm.conf}
timeout 20 sinfo -h -o '%a %T' 2>/dev/null | grep -q '^up \(idle\|mixed\|allocated\)' ||
    cannot "no Slurm cluster answers (SLURM_CONF=$SLURM_CONF; run ../shared/tools/slurm-setup.sh)"

work=$(mktemp -d)
demo=/tmp/slurm-demo
cleanup() { rm -rf "$work" "$demo"; }
trap cleanup EXIT
rm -rf "$demo"
# The host tree: 4 fake GPUs, as Slurm's gres (tests/scripts/slurm_gpu_host.sh).
host=$work/host
. "$(dirname "$0")/slurm_gpu_host.sh"
slurm_gpu_host "$host"

readme=$src/examples/slurm/README.md
script=$(awk '/^```sh$/ {f = 1; next} /^```$/ {f = 0} f' "$readme")
[ -n "$script" ] || { echo "FAIL: no sh blocks in $readme"; exit 1; }
log=$work/log
status=0
fail() { echo "FAIL: $*"; status=1; }
# (a bound for a busy node, not a timing: the job takes seconds)
(cd "$src" && XMPRUN_HOST_ROOT=$host PATH="$build:$PATH" timeout 240 bash -c "$script") >"$log" 2>&1 ||
    [ $? != 124 ] || { fail "the README's commands did not end in 240 s"; squeue; scancel --name=slurm-demo; }
cat "$log"
grep -qx 'exit status 0' "$log" || fail "sbatch --wait did not exit 0"
grep -q '^\[0\] rank 0 of 2 (node 0): CUDA_VISIBLE_DEVICES=0 MASTER_ADDR=.*:29500$' "$log" ||
    fail "worker 0 did not get GPU 0 of the allocation"
grep -q '^\[1\] rank 1 of 2 (node 0): CUDA_VISIBLE_DEVICES=1 MASTER_ADDR=.*:29500$' "$log" ||
    fail "worker 1 did not get GPU 1 of the allocation"
grep -q '^xmprun: job slurm-demo (.*) succeeded after .*, exit status 0$' "$log" ||
    fail "xmprun report did not print the job's summary"
rep=$demo/slurm-demo.report.json
if [ -s "$rep" ]; then
    /usr/bin/python3 - "$rep" "$src/schemas/report.schema.json" <<'PY' || status=1
import json, sys, jsonschema
rep = json.load(open(sys.argv[1]))
jsonschema.validate(rep, json.load(open(sys.argv[2])))
devs = [w["devices"] for w in rep["workers"]]
print("report: outcome %s, devices %s, world_size %s" % (rep["outcome"], devs, rep["job"]["world_size"]))
sys.exit(0 if rep["outcome"] == "succeeded" and devs == [["cuda:0"], ["cuda:1"]] else 1)
PY
else
    fail "no report at $rep"
fi
[ $status = 0 ] || { echo "--- squeue:"; squeue; }
left=$(find /sys/fs/cgroup -maxdepth 9 -type d -name 'xmprun-slurm-demo-*' 2>/dev/null)
[ -z "$left" ] || fail "cgroups left behind: $left"
exit $status
