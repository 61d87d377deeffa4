#!/bin/sh
# Builds fuzz_spec with clang in build-fuzz/, seeds a corpus from the spec fixtures and the
# examples, and fuzzes the spec parser for FUZZ_SECONDS (default 60). Exits non-zero on any
# crash, leak or sanitizer report; the reproducer is left in build-fuzz/artifacts/.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}

CC=clang cmake -S "$root" -B "$build" -DXMP_FUZZ=ON -DXMP_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target fuzz_spec

# The corpus keeps what earlier runs found; the seeds are copied in under their content's hash
# so that re-running does not duplicate them.
corpus=$build/corpus
artifacts=$build/artifacts
mkdir -p "$corpus" "$artifacts"
for f in "$root"/tests/fixtures/specs/*/*.yaml "$root"/examples/*.yaml; do
    [ -f "$f" ] || continue
    cp "$f" "$corpus/seed-$(sha1sum <"$f" | cut -c1-16)"
done
# Seeds for the --set path (see fuzz_spec.c): a spec, the separator, KEY=VALUE lines.
printf 'version: 1\nname: s\ncommand: [a]\n\n#--set\nresources.worker.memory=4Gi\ncommand=[b, c]\nenv.FOO=1\n' \
    >"$corpus/seed-set-1"
printf 'version: 1\nname: s\ncommand: [a]\n\n#--set\nworkers=auto\ndevices.ids=[0, 1]\nlogs.dir=\n' \
    >"$corpus/seed-set-2"

log=$build/fuzz.log
set +e
# UBSan must abort, not just print, for libFuzzer to count it as a crash; halt_on_error does
# that for the checks not already built with -fno-sanitize-recover.
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    "$build/tests/fuzz/fuzz_spec" -max_total_time="$seconds" -dict="$root/tests/fuzz/spec.dict" \
    -rss_limit_mb=2048 -detect_leaks=1 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1
rc=$?
set -e
tail -n 25 "$log"
if [ "$rc" -ne 0 ] || grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    echo "fuzz_spec FAILED (exit $rc); reproducers:" >&2
    ls -l "$artifacts" >&2
    exit 1
fi
echo "fuzz_spec: no crash, leak or sanitizer report in ${seconds}s"
