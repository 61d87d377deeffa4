#!/bin/bash
# Test fixture, run before the tests that start xmprun: collects what an earlier run of the
# suite left when it was killed from outside (a CI timeout, the end of a session: SIGKILL, no
# trap runs). Every end-to-end test gives xmprun a state directory of its own inside its temp
# directory (tests/e2e/e2e.h), so no later xmprun's start-up gc ever reads those state files,
# and a job cgroup below a cgroup no later run is in is found by no cgroup scan either. The
# collection is xmprun's own: `xmprun gc` on each such state directory, which kills a dead
# owner's workers (by pid and start time), removes the cgroup directories its state file names
# and its scratch directory, and leaves a live owner's job (a suite running beside this one)
# alone. Temp roots: XMPRUN_TEST_TMPDIR or /tmp (tests/helpers/testlib.c), and the roots of
# earlier mutation runs (tests/mutation.sh). Says what it collected and what it could not, and
# never fails: an earlier run's leftover is not this run's failure, and under tests/mutation.sh
# (whose `ctest -R` runs this fixture with the mutant's xmprun) a failing fixture would count as
# the mutant's kill. scripts/test_collect_leftovers checks that it collects.
set -u
xmprun=${XMPRUN_BIN:?}
roots=("${XMPRUN_TEST_TMPDIR:-/tmp}")
[[ ${XMPRUN_TEST_TMPDIR:-/tmp} == /tmp ]] || roots+=(/tmp)
shopt -s nullglob
for root in "${roots[@]}"; do
    for state in "$root"/xmprun-test-*/state "$root"/xmprun-mutation-tests.*/xmprun-test-*/state; do
        files=("$state"/*.json)
        ((${#files[@]} > 0)) || continue
        if out=$(XMPRUN_STATE_DIR=$state "$xmprun" gc 2>&1); then
            [[ $out == *"cleaned up 0 "* ]] || echo "$state: $out"
        else
            echo "warning: $state: not collected: $out"
        fi
    done
done
exit 0
