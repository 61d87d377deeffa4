#!/usr/bin/env bash
# Runs the end-to-end suite (and the live cgroup tests) inside a throw-away pure cgroup v2 Linux
# guest with ../shared/tools/vm-run, against the binaries already built in BUILD_DIR on the host.
# A guest that cannot start, or that is not pure cgroup v2 (cgroup2 at the root with its
# controllers, and no v1 hierarchy mounted), fails this script: the v2 half of the contract would
# otherwise go untested under a green run.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
vmrun=${VM_RUN:-../shared/tools/vm-run}
if [[ ! -x $vmrun ]]; then
    printf '\n!!! cgroup v2 run FAILED: %s not found\n\n' "$vmrun" >&2
    exit 1
fi
# scripts/test_systemd starts a real systemd in the guest (isolation.cgroup_manager: systemd).
tests=${V2_TESTS:-'^(e2e/|unit/test_cgroup_live|scripts/test_systemd$)'}
# Real Python work under the isolation (the PyTorch DDP jobs, CPython's multiprocessing suite)
# runs on the host only: nothing in it depends on the cgroup mode, and in the emulated guest
# `import torch` alone took over 2 minutes. The guest runs test_isolation (filters, rlimits,
# user) and test_device_filter (the device program) instead.
exclude=${V2_EXCLUDE:-'^e2e/test_(isolation_python|python_multiprocessing)$'}
# The guest boots in about 3 s; code runs 10-40x slower than here, so the limit is generous.
# Criterion prints its skips (for tests/check-skips.sh) at verbosity 1.
"$vmrun" --mem 2G --timeout "${V2_TIMEOUT:-1500}" -- \
    sh -c "if [ ! -f /sys/fs/cgroup/cgroup.controllers ] || grep -q ' - cgroup ' /proc/self/mountinfo; then
               echo 'guest: NOT pure cgroup v2'; cat /proc/self/mountinfo; exit 3; fi
           echo \"guest: pure cgroup v2 (controllers: \$(cat /sys/fs/cgroup/cgroup.controllers))\"
           CRITERION_VERBOSITY_LEVEL=1 ctest --test-dir '$build' -R '$tests' -E '$exclude' --output-on-failure --timeout 1200"
status=$?
case $status in
0) ;;
3) printf '\n!!! cgroup v2 run FAILED: the guest is not pure cgroup v2\n\n' >&2 ;;
125) printf '\n!!! cgroup v2 run FAILED: the guest could not start (vm-run exit 125)\n\n' >&2 ;;
*) printf '\n!!! cgroup v2 run FAILED (exit %d)\n\n' "$status" >&2 ;;
esac
exit $status
