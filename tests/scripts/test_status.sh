#!/bin/bash
# The live status line, on a real terminal (tmux: send-keys, capture-pane, and pipe-pane for the
# raw bytes): kept at the bottom while workers run, updated when a worker ends, erased before
# worker output (which keeps lines of its own) and before the summary, drawn at most once per
# timer tick and never twice with the same text. Off the terminal: no status bytes at all, and
# no wakeup of xmprun while its workers are quiet.
set -u
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/install-deps.sh)"; exit 1; }
xmprun=$XMPRUN_BIN
dir=$(mktemp -d)
sock=xmp-status-$$
cleanup() { tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# Rank 0 prints "hello" when $dir/hello appears, rank 1 ends when $dir/end1 appears; both end
# when $dir/end appears. Memory limits, so that the line has something to say.
cat >"$dir/job.yaml" <<YAML
version: 1
name: statusline
workers: 2
devices: {kind: cpu}
resources:
  worker: {memory: 128Mi}
  job: {memory: 512Mi}
isolation: {cgroups: optional}
command: [/bin/sh, -c, 'w() { while [ ! -e "$dir/\$1" ]; do sleep 0.1; done; }; echo "rank \$RANK up"; touch "$dir/up\$RANK"; if [ \$RANK = 1 ]; then w end1; exit 0; fi; w hello; echo hello; w end']
YAML
# wait_for CMD...: retries a condition for up to 30 s (a bound for a slow machine, not a timing).
wait_for() {
    for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done
    return 1
}
screen() { tmux -L "$sock" capture-pane -p -t xmp | sed -e 's/[[:space:]]*$//' | grep -v '^$'; }
bottom() { screen | tail -n 1; }
bottom_matches() { bottom | grep -qE "$1"; }

tmux -L "$sock" new-session -d -s xmp -x 150 -y 30 "cd '$dir' && '$xmprun' --report '$dir/r.json' job.yaml; echo EXIT=\$?; sleep 600"
tmux -L "$sock" pipe-pane -t xmp -o "cat >>'$dir/raw'"
line='^xmprun: [0-9hms]+ \| ([0-9]) running, ([0-9]) ended'
wait_for bottom_matches "$line \| job .* of 512\.0 MiB \| worker [01] at [0-9]+% of 128\.0 MiB" ||
    fail "no status line at the bottom while the workers run: $(bottom)"
echo "running: $(bottom)"
touch "$dir/end1"
wait_for bottom_matches "^xmprun: [0-9hms]+ \| 1 running, 1 ended" ||
    fail "the status line did not follow worker 1's end: $(bottom)"
echo "one ended: $(bottom)"
touch "$dir/hello"
wait_for sh -c "tmux -L '$sock' capture-pane -p -t xmp | grep -qx '\[0\] hello'" ||
    fail "worker output did not get a line of its own: $(screen)"
wait_for bottom_matches "^xmprun: [0-9hms]+ \| 1 running, 1 ended" ||
    fail "the status line did not come back below the output: $(bottom)"
touch "$dir/end"
wait_for sh -c "tmux -L '$sock' capture-pane -p -t xmp | grep -q '^EXIT='" || fail "xmprun did not end"
screen | grep -qx 'EXIT=0' || fail "xmprun did not exit 0: $(screen)"
screen | grep -qE ' running, [0-9]+ ended' && fail "a status line is left on the screen:
$(screen)"
screen | grep -q '^xmprun: job statusline (.*) succeeded' || fail "no summary: $(screen)"
echo "--- the terminal at the end:"
screen

# The raw bytes: each draw is "\r\e[K" + text. No two draws in a row with the same text (an
# erase for output in between does not count as a draw), and at most one per second of the job.
/usr/bin/python3 - "$dir/raw" "$dir/r.json" <<'PY' || status=1
import json, re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
draws = re.findall(r"\r\x1b\[K(xmprun: [^\r\n\x1b]*)", raw)
dur = json.load(open(sys.argv[2]))["duration_s"]
same = [a for a, b in zip(draws, draws[1:]) if a == b]
print("%d draws in a %.1f s job" % (len(draws), dur))
ok = draws and len(draws) <= int(dur) + 2
if not ok:
    print("FAIL: %d draws for %.1f s" % (len(draws), dur))
# Drawing the same text again is allowed only after output erased it.
for m in re.finditer(r"\r\x1b\[K(xmprun: [^\r\n\x1b]*)(?=\r\x1b\[K(xmprun: [^\r\n\x1b]*))", raw):
    if m.group(1) == m.group(2):
        print("FAIL: drawn twice unchanged: %r" % m.group(1))
        ok = False
sys.exit(0 if ok else 1)
PY

# Not a terminal: no status bytes, and no wakeup while the workers sleep quietly.
rm -f "$dir"/up* "$dir/end" "$dir/end1" "$dir/hello"
"$xmprun" --report "$dir/r2.json" "$dir/job.yaml" >"$dir/out" 2>"$dir/err" </dev/null &
pid=$!
wait_for sh -c "[ -e '$dir/up0' ] && [ -e '$dir/up1' ]" || fail "the workers did not start"
sleep 0.5
switches() { awk '/ctxt_switches/ {n += $2} END {print n}' "/proc/$pid/status"; }
before=$(switches)
sleep 2
after=$(switches)
touch "$dir/end1" "$dir/hello" "$dir/end"
wait "$pid" || fail "the job off the terminal did not exit 0"
[ "$before" = "$after" ] || fail "xmprun woke up $((after - before)) times while idle off a terminal"
echo "off the terminal: $((after - before)) wakeups while idle"
if grep -q "$(printf '\033')\[K" "$dir/err" "$dir/out" || grep -qE ' running, [0-9]+ ended' "$dir/err"; then
    fail "status output off the terminal"
fi

# GPU workers, on a fixture GPU host with the stand-in NVML: the line names the worker using most
# GPU memory and its GPU's total (worker 1 registers 2 GiB, worker 0 1 GiB; each GPU has 80 GiB).
if [ -n "${XMPRUN_NVML_STANDIN:-}" ]; then
    mkdir -p "$dir/nvml/procs" && cp -r "$XMPRUN_FIXTURES/hosts/gpu4" "$dir/host"
    cat >"$dir/gpu.yaml" <<YAML
version: 1
name: statusgpu
workers: 2
devices: {kind: cuda}
resources: {worker: {cpuset: none}}
command: [/bin/sh, -c, 'sleep 60 & echo "\$CUDA_VISIBLE_DEVICES \$(( (RANK + 1) << 30 ))" >"$dir/nvml/procs/\$!"; while [ ! -e "$dir/gpu-end" ]; do sleep 0.1; done; kill \$!']
YAML
    tmux -L "$sock" new-session -d -s gpu -x 150 -y 30 "cd '$dir' && XMPRUN_HOST_ROOT='$dir/host' XMPRUN_NVML_LIB='$XMPRUN_NVML_STANDIN' NVML_STANDIN_DIR='$dir/nvml' '$xmprun' --report '$dir/r3.json' gpu.yaml; echo EXIT=\$?; sleep 600"
    gpu_bottom() { tmux -L "$sock" capture-pane -p -t gpu | sed -e 's/[[:space:]]*$//' | grep -v '^$' | tail -n 1; }
    wait_for sh -c "tmux -L '$sock' capture-pane -p -t gpu | grep -q 'GPU: worker 1 2\.0 GiB of 80\.0 GiB'" ||
        fail "no GPU memory in the status line: $(gpu_bottom)"
    echo "GPU workers: $(gpu_bottom)"
    touch "$dir/gpu-end"
    wait_for sh -c "tmux -L '$sock' capture-pane -p -t gpu | grep -q '^EXIT=0'" || fail "the GPU job did not exit 0: $(gpu_bottom)"
fi
exit $status
