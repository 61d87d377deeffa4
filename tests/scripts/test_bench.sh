#!/bin/sh
# Keeps bench/run.py working: runs it once, as small as it goes (1 rep, 2 workers, 4 for the
# failure case, 1 MiB of console, one RSS sample, this build compared with itself), and checks
# that every section printed its rows. It asserts no time: the bench's numbers are read side by
# side in one run, never tested against a limit.
set -u
py=/usr/bin/python3
if [ "$(id -u)" != 0 ]; then
    echo "[SKIP] scripts::test_bench: the floors make cgroups below xmprun's own: root is needed"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
: "${XMPRUN_SOURCE_DIR:=$(cd "$here/../.." && pwd)}"
build=$(dirname "$XMPRUN_BIN")
out=$("$py" "$XMPRUN_SOURCE_DIR/bench/run.py" "$build" --reps 1 --sizes 2 --fail-size 4 \
    --console-mib 1 --console-reps 1 --rss-reps 1 --only launch,fork,failure,console,rss \
    --compare "$XMPRUN_BIN" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
    echo "bench/run.py exited $rc"
    exit 1
fi
# A section's header, then the first field of a row it must have printed (N, or the console's
# destination).
for want in "## launch -> exit, N|2" "## launch -> exit with|2" "## start: fork|2" \
    "## failure -> exit, N|4" "## launch -> exit: this build|2" "## failure -> exit: this build|4" \
    "## console|/dev/null" \
    "## console|pipe" "## console|file" "## launcher RSS|floor," "## launcher RSS|xmprun:"; do
    section=${want%%|*}
    row=${want#*|}
    if ! printf '%s\n' "$out" | sed -n "\\|^$section|,\\|^\$|p" | grep -q "^ *$row "; then
        echo "bench/run.py printed no row \"$row\" under \"$section\""
        exit 1
    fi
done
