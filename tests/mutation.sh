#!/usr/bin/env bash
# Mutation check: plants each bug listed in tests/mutations.txt, one at a time, in a copy of the
# tree, rebuilds, and runs the tests the entry names. Every mutant must be killed (the build of
# the tests or a test fails). Prints the survivors and exits 1 if any survive, 2 if an entry no
# longer applies (its text is gone from the file: update the entry with the code).
#
# Usage: tests/mutation.sh [NAME...]   (no names: every entry)
# Knobs: MUTATION_DIR (scratch copy; default a new temp dir, removed at the end);
# MUTATION_BASELINE=0 skips the run of the named tests on the unmutated copy, for a caller that
# has just run them on the same tree and stops at their failure (CI).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
list=$src/tests/mutations.txt
py=/usr/bin/python3
work=${MUTATION_DIR:-$(mktemp -d /tmp/xmprun-mutation.XXXXXX)}
keep_work=${MUTATION_DIR:+1}
# A test that fails fast leaves its directory behind, and a mutant that breaks a job's end
# leaves the job's scratch directory (TMPDIR): both go here, removed at the end. Beside the
# work directory (0700), not in it, and as open as /tmp: a test that acts as another uid
# (test_state) must reach its directory, and an xmprun run as another uid makes its own.
tests_tmp=$(mktemp -d /tmp/xmprun-mutation-tests.XXXXXX)
chmod 1777 "$tests_tmp"
export XMPRUN_TEST_TMPDIR=$tests_tmp TMPDIR=$tests_tmp
cleanup() {
    # What a mutant made xmprun leave (cgroups, killed workers' state files) is collected while
    # its state files are still there; by the rebuilt, unmutated xmprun at a normal end.
    [[ ! -x $work/tree/build/xmprun ]] ||
        XMPRUN_BIN=$work/tree/build/xmprun "$src/tests/scripts/collect_leftovers.sh"
    rm -rf "$tests_tmp"
    [[ -n $keep_work ]] || rm -rf "$work"
}
trap cleanup EXIT

export CRITERION_FAIL_FAST=1 # a mutant is killed by its first failing test
# The Slurm tests find the shared cluster's setup beside the checkout, which the copy is not; a
# mutant of the Slurm plugin needs one of the cluster's two modes (task/cgroup), not both.
export XMP_SLURM_SETUP=${XMP_SLURM_SETUP:-$src/../shared/tools/slurm-setup.sh}
export XMP_SPANK_MODES=${XMP_SPANK_MODES:-1}
log() { printf '[mutation %s] %s\n' "$(date +%T)" "$*"; }

# The copy: tracked and untracked-but-not-ignored files, as they are in the working tree.
mkdir -p "$work/tree"
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/tree")
log "building the unmutated copy in $work/tree/build"
if ! cmake -S "$work/tree" -B "$work/tree/build" -DXMP_WERROR=ON >"$work/configure.log" 2>&1 ||
    ! cmake --build "$work/tree/build" -j"$(nproc)" >"$work/build.log" 2>&1; then
    cat "$work/configure.log" "$work/build.log" >&2
    log "the unmutated tree does not build"
    exit 2
fi

# Entries: blocks of "key: value" lines (name, file, from, to, tests), separated by blank lines;
# "from"/"to" may repeat for a patch of several places. The helper prints one entry per line as
# JSON so bash can iterate.
entries=$("$py" - "$list" "$@" <<'PY'
import json, sys
path, wanted = sys.argv[1], set(sys.argv[2:])
blocks, cur = [], {}
for raw in open(path, encoding="utf-8"):
    line = raw.rstrip("\n")
    if line.startswith("#"):
        continue
    if not line.strip():
        if cur:
            blocks.append(cur)
        cur = {}
        continue
    key, _, val = line.partition(": ")
    if key in ("from", "to"):
        cur.setdefault(key, []).append(val.replace("\\n", "\n"))
    else:
        cur[key] = val
if cur:
    blocks.append(cur)
names = [b["name"] for b in blocks]
assert len(names) == len(set(names)), "duplicate mutation names"
for b in blocks:
    assert all(k in b for k in ("name", "file", "from", "to", "tests")), b
    assert len(b["from"]) == len(b["to"]), b["name"]
    if not wanted or b["name"] in wanted:
        print(json.dumps(b))
PY
) || exit 2

# The tests the entries name must pass on the unmutated tree, or every mutant would look killed.
# (The patterns are alternations themselves, so they join without parentheses: CMake's regex
# engine allows only 10 groups, and a pattern it cannot compile would match no test at all.)
union=$("$py" -c 'import json,sys; print("|".join(sorted({json.loads(l)["tests"] for l in sys.argv[1].splitlines() if l})))' "$entries")
if [[ ${MUTATION_BASELINE:-1} == 0 ]]; then
    log "the named tests on the unmutated tree: not run again (MUTATION_BASELINE=0)"
else
    log "running the named tests on the unmutated copy"
    if ! ctest --test-dir "$work/tree/build" -R "$union" --no-tests=error --timeout 300 \
        --output-on-failure >"$work/baseline.log" 2>&1; then
        tail -80 "$work/baseline.log" >&2
        log "the named tests fail WITHOUT any mutation: fix them first"
        exit 2
    fi
fi

apply_py='
import json, sys
e = json.loads(sys.argv[1]); path = sys.argv[2]
text = open(path, encoding="utf-8").read()
for old, new in zip(e["from"], e["to"]):
    if old not in text:
        sys.exit("text not found: " + old)
    text = text.replace(old, new)
open(path, "w", encoding="utf-8").write(text)
'

survivors=() stale=() total=0
while IFS= read -r entry; do
    [[ -n $entry ]] || continue
    name=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$entry")
    file=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["file"])' "$entry")
    tests=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["tests"])' "$entry")
    only=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1]).get("only", ""))' "$entry")
    total=$((total + 1))
    target=$work/tree/$file
    cp "$target" "$work/original"
    if ! msg=$("$py" -c "$apply_py" "$entry" "$target" 2>&1); then
        log "$name: DOES NOT APPLY to $file ($msg)"
        stale+=("$name")
        continue
    fi
    verdict=survived
    if ! cmake --build "$work/tree/build" -j"$(nproc)" >"$work/mutant-build.log" 2>&1; then
        verdict="killed (does not build)"
    else
        # ctest exits non-zero when a test fails or when the pattern matched no test: the
        # latter is checked below, so that a typo in "tests" cannot count as a kill.
        n=$(ctest --test-dir "$work/tree/build" -N -R "$tests" | sed -n 's/^Total Tests: //p')
        if [[ ${n:-0} -eq 0 ]]; then
            log "$name: the pattern '$tests' names no test"
            stale+=("$name")
            cp "$work/original" "$target"
            continue
        fi
        # A mutant is killed by its first failing test: the rest (of that binary, and of the
        # others named) need not run. A pass runs them all, as without these.
        # "only" narrows a Criterion binary to the cases that kill the mutant (its pattern,
        # "suite/case"): a slow binary's other cases need not run for it.
        pattern=()
        [[ -z $only ]] || pattern=("CRITERION_TEST_PATTERN=$only")
        if ! env CRITERION_FAIL_FAST=1 "${pattern[@]}" ctest --test-dir "$work/tree/build" \
            -R "$tests" --no-tests=error --stop-on-failure --timeout 300 --output-on-failure \
            >"$work/mutant-test.log" 2>&1; then
            verdict="killed by $(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) .*/\1/p' "$work/mutant-test.log" |
                tr '\n' ' ')$(sed -n 's/.*\[FAIL\] \([^:]*\)::\([^:]*\):.*/\1\/\2/p' \
                "$work/mutant-test.log" | sort -u | head -3 | tr '\n' ' ')"
        fi
    fi
    log "$name ($file): $verdict"
    [[ $verdict == survived ]] && survivors+=("$name")
    cp "$work/original" "$target"
    touch "$target"
done <<<"$entries"

# Rebuild once more so a kept MUTATION_DIR holds the unmutated binaries.
cmake --build "$work/tree/build" -j"$(nproc)" >/dev/null 2>&1
printf '\n%d mutants, %d killed, %d survived, %d stale\n' "$total" \
    $((total - ${#survivors[@]} - ${#stale[@]})) "${#survivors[@]}" "${#stale[@]}"
((${#stale[@]} == 0)) || printf 'stale (update tests/mutations.txt): %s\n' "${stale[*]}"
((${#survivors[@]} == 0)) || printf 'SURVIVORS: %s\n' "${survivors[*]}"
((${#stale[@]} == 0)) || exit 2
((${#survivors[@]} == 0)) || exit 1
exit 0
