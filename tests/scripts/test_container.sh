#!/bin/bash
# examples/container/README.md, run word for word with real Podman: the image builds from a
# local Debian root, `podman run` runs the 2-worker job with limits and exits with the job's
# status (0, then 3), `podman stop` gives 143 and a complete report in the mounted directory.
#
# Needs the Podman set up by ../shared/tools/podman-setup.sh (its wrapper xpodman stands in for
# `podman`: it adds the settings this host needs) and network access to Debian's archive. It
# holds /tmp/xmp-podman.lock while it runs. Without Podman it skips (77) and says so loudly
# (tests/check-skips.sh fails CI on it unless .ci/run expects it).
set -u
xpodman=${XMP_PODMAN:-/tmp/xmp-real/bin/xpodman}
src=$XMPRUN_SOURCE_DIR
build=$(cd "$(dirname "$XMPRUN_BIN")" && pwd)
cannot() {
    echo "********************************************************************************"
    echo "[SKIP] scripts::test_container: cannot run: $*"
    echo "********************************************************************************"
    exit 77
}
[ -x "$xpodman" ] || cannot "no Podman wrapper at $xpodman (run ../shared/tools/podman-setup.sh)"
command -v flock >/dev/null || cannot "flock is missing"
if [ -z "${XMP_PODMAN_LOCKED:-}" ]; then
    XMP_PODMAN_LOCKED=1 exec flock /tmp/xmp-podman.lock "$0" "$@"
fi
[ "$build" = "$(cd "$src" && pwd)/build" ] ||
    { echo "FAIL: the README's commands use build/, but this build is $build"; exit 1; }
"$xpodman" info >/dev/null 2>&1 || cannot "podman info fails"

readme=$src/examples/container/README.md
script=$(awk '/^```sh$/ {f = 1; next} /^```$/ {f = 0} f' "$readme")
[ -n "$script" ] || { echo "FAIL: no sh blocks in $readme"; exit 1; }
log=$(mktemp)
cleanup() {
    "$xpodman" rm -f xmprun-demo >/dev/null 2>&1
    "$xpodman" rmi -f localhost/xmprun-example >/dev/null 2>&1
    rm -rf "$src/build/reports" "$log"
}
trap cleanup EXIT
rm -rf "$src/build/reports"
# `podman` is the wrapper, and `xmprun` the one just built (as if installed).
(
    cd "$src" || exit 1
    podman() { "$xpodman" "$@"; }
    export -f podman 2>/dev/null
    export xpodman PATH="$build:$PATH"
    bash -c "podman() { \"\$xpodman\" \"\$@\"; }; $script"
) >"$log" 2>&1
cat "$log"
status=0
fail() { echo "FAIL: $*"; status=1; }
grep -q 'Error: creating build container\|Temporary failure resolving\|Failed to fetch' "$log" &&
    ! grep -q '^exit status' "$log" && cannot "the image build cannot reach Debian's archive"
[ "$(grep '^exit status' "$log" | tr '\n' ' ')" = "exit status 0 exit status 3 exit status 143 " ] ||
    fail "want the runs to exit 0, 3 and 143 (podman stop)"
grep -q '^xmprun: job container-demo (.*) succeeded after .*, exit status 0$' "$log" ||
    fail "the first run's summary is missing"
[ "$(grep -c '^\[[01]\] rank [01] of 2 in .*/worker-[01]$' "$log")" = 2 ] ||
    fail "the two workers did not each run in their own cgroup"
rep=$src/build/reports/container-demo.report.json
[ -s "$rep" ] || { fail "no report in the mounted directory"; exit 1; }
/usr/bin/python3 - "$rep" "$src/schemas/report.schema.json" <<'PY' || status=1
import json, sys, jsonschema
rep = json.load(open(sys.argv[1]))
jsonschema.validate(rep, json.load(open(sys.argv[2])))
w = rep["workers"]
ok = (rep["outcome"] == "interrupted" and rep["exit_code"] == 143 and len(w) == 2
      and all(x["state"] == "stopped_by_xmprun" and x["signal"] == "SIGTERM" and x["ended_at"]
              and x["memory"]["limit_bytes"] == 256 * 1024 * 1024 for x in w)
      and rep["cgroup"]["mode"] != "none")
print("stopped report: outcome %s, exit_code %s, states %s" % (rep["outcome"], rep["exit_code"], [x["state"] for x in w]))
sys.exit(0 if ok else 1)
PY
grep -q '^xmprun: job container-demo (.*) interrupted after .*, exit status 143$' "$log" ||
    fail "xmprun report did not print the stopped job's summary"
left=$(find /sys/fs/cgroup -maxdepth 9 -type d -name 'xmprun-container-demo-*' 2>/dev/null)
[ -z "$left" ] || fail "cgroups left behind: $left"
"$xpodman" container exists xmprun-demo && fail "the container xmprun-demo is left"
exit $status
