#!/bin/bash
# One prepared run on a GPU node (the device tool; ../shared/GPU.md): real failure texts of
# PyTorch, CUDA and NCCL under this xmprun, with its report and root cause for each, and the
# kernel's NVRM lines; all packed into $OUT/all.tgz. tests/fixtures/gpu/ holds what it gave.
# Build here first: tests/gpu/prepare.sh (the binary and the four libraries into build-gpu/),
# then run `OUT=$OUT bash tests/gpu/run.sh` with carry ["build-gpu"].
cd "$(dirname "$0")/../.."
G=$PWD/build-gpu
export LD_LIBRARY_PATH=$G/lib XMPRUN_CLIENT_LIB=$G/lib/libxmprun.so PYTHONPATH=$PWD/client/python
X=$G/bin/xmprun
CASES=$PWD/tests/gpu/cases.py
W=/tmp/gpu-run-out; rm -rf $W; mkdir -p $W
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv; uname -r; python3 -V; } > $W/node.txt 2>&1
timeout 60 python3 $CASES versions >> $W/node.txt 2>&1
C=/sys/fs/cgroup/xmp; mkdir -p $C/shell; echo $$ > $C/shell/cgroup.procs
echo "+cpuset +cpu +io +memory +pids" > $C/cgroup.subtree_control
one() {  # one NAME EXTRA-SPEC-LINES...
  name=$1; shift
  { echo "version: 1"; echo "name: $name"; printf '%s\n' "$@"; } > $W/$name.yaml
  start=$(date +%s.%N)
  timeout 120 bash -c 'd=/sys/fs/cgroup/xmp/r$$; mkdir -p $d; echo $$ > $d/cgroup.procs; exec "$@"' _ \
    $X --report $W/$name.report.json $W/$name.yaml > $W/$name.out 2> $W/$name.err
  echo "$name rc=$? $(awk -v a=$start -v b=$(date +%s.%N) 'BEGIN{printf "%.1fs", b-a}')" | tee -a $W/summary.txt
}
P="python3, $CASES"
one gpu_oom "command: [$P, gpu_oom]" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}}"
one gpu_oom_after_use "command: [$P, gpu_oom_after_use]" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}}"
one device_assert "command: [$P, device_assert]" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}}"
one illegal_access "command: [$P, illegal_access]" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}}"
one nccl_duplicate "command: [$P, nccl_duplicate]" "workers: 2" "devices: {kind: cpu}" "isolation: {devices: false}" "env: {CUDA_VISIBLE_DEVICES: '0'}" "resources: {worker: {memory: 8Gi, cpuset: none}}"
one nccl_timeout "command: [$P, nccl_timeout]" "workers: 2" "devices: {kind: cpu}" "isolation: {devices: false}" "env: {CUDA_VISIBLE_DEVICES: '0', NCCL_DEBUG: WARN}" "resources: {worker: {memory: 8Gi, cpuset: none}}" "timeout: 50s"
one zygote_cuda_first "command: [$P, zygote_cuda_first]" "start: fork" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}, shared: {memory: 16Gi}}"
one zygote_raises "command: [$P, zygote_raises]" "start: fork" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}, shared: {memory: 16Gi}}"
one zygote_no_spawn "command: [$P, zygote_no_spawn]" "start: fork" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}, shared: {memory: 16Gi}}"
one hang_cuda "command: [$P, hang_cuda]" "devices: {kind: cuda}" "resources: {worker: {memory: 8Gi}}" "timeout: 12s"
dmesg 2>/dev/null | grep -i "xid\|NVRM" | tail -20 > $W/kmsg-nvrm.txt
for d in /sys/fs/cgroup/xmp/r*; do rmdir $d 2>/dev/null; done
tar -C $W -czf $OUT/all.tgz .; ls -la $W | wc -l
