#!/usr/bin/env bash
# Fails when a test was skipped that the caller did not expect. A skip looks like a pass to
# ctest ("Passed", or a script's exit 77, which LastTest.log even records as "Test Passed"), so
# CI reads every test's output instead, from BUILD/Testing/Temporary/LastTest.log of the last
# ctest run: Criterion's "[SKIP] suite::test: reason" lines (printed with
# CRITERION_VERBOSITY_LEVEL=1), and the same line from the scripts in tests/scripts before they
# exit 77.
#
# Usage: tests/check-skips.sh BUILD_DIR [EXPECTED...]
#   EXPECTED: "suite::test" (scripts: "scripts::test_name") or "suite::*" (every test of a suite),
#   each a skip that is expected where this runs; the
#   caller says why next to it. An expected skip that did not happen is fine (it only ran).
set -euo pipefail
build=$1
shift
log=$build/Testing/Temporary/LastTest.log
if [[ ! -s $log ]]; then
    echo "check-skips: no test log at $log: did ctest run?" >&2
    exit 1
fi
if ! grep -q 'CRITERION\|Criterion' "$log"; then
    echo "check-skips: $log holds no Criterion output" >&2
    exit 1
fi
declare -A expected=()
for e in "$@"; do
    expected[$e]=1
done
unexpected=0 seen=0
# Criterion tests: "[SKIP] suite::name: reason" (maybe with colour codes).
while IFS= read -r line; do
    seen=$((seen + 1))
    rest=$(sed 's/\x1b\[[0-9;]*m//g' <<<"${line#*\[SKIP\] }")
    id=${rest%%: *}
    suite_all="${id%%::*}::*"
    if [[ -n ${expected[$id]:-} || -n ${expected[$suite_all]:-} ]]; then
        echo "check-skips: expected skip: $rest"
    else
        echo "check-skips: UNEXPECTED SKIP: $rest" >&2
        unexpected=$((unexpected + 1))
    fi
done < <(grep -a '\[SKIP\]' "$log" || true)
if ((unexpected > 0)); then
    echo "check-skips: $unexpected unexpected skip(s): a skip in CI is a failure unless .ci/run" \
        "names it with the reason it is expected here" >&2
    exit 1
fi
echo "check-skips: $seen skip(s), all expected"
