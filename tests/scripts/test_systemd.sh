#!/bin/bash
# systemd as the cgroup manager (isolation.cgroup_manager, isolate/cgroup_systemd.c), against a
# real systemd: in the pure cgroup v2 guest (tests/run-v2.sh) this starts systemd as the init of
# a new PID and mount namespace and runs xmprun from shells that share their cgroup with another
# process, where cgroupfs alone refuses: (a) as root, a job with memory, CPU and pids limits;
# (b) a failing job; (c) a SIGKILL of xmprun, then `xmprun gc`; (d) as a user with a user
# manager, a memory limit. Each job must run below a scope xmprun-<name>-<id>.scope that the
# report names, with every worker's limits in its cgroup, and leave no unit and no cgroup.
# Skipped (exit 77) where it cannot run: not pure cgroup v2, no systemd binary, not root, or a
# systemd that runs here already (a host's own, which this test must not start a second beside).
set -u
xmprun=${XMPRUN_BIN:?}
schema=${XMPRUN_SOURCE_DIR:?}/schemas/report.schema.json
skip() {
    echo "[SKIP] scripts::test_systemd: cannot run: $*"
    exit 77
}
if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]] || grep -q ' - cgroup ' /proc/self/mountinfo; then
    skip "not pure cgroup v2 (it runs in the v2 guest: tests/run-v2.sh)"
fi
systemd_bin=/lib/systemd/systemd
[[ -x $systemd_bin ]] || skip "no systemd binary at $systemd_bin"
((EUID == 0)) || skip "it starts systemd and adds a user: needs root"
[[ ! -e /run/systemd/system ]] || skip "systemd runs here already; the test starts its own"
for tool in unshare nsenter setpriv useradd userdel python3; do
    command -v "$tool" >/dev/null || skip "no $tool"
done

status=0
fail() {
    echo "FAIL: $*"
    status=1
}
dir=$(mktemp -d /tmp/xmprun-test-systemd.XXXXXX)
chmod 755 "$dir"
uid=4711
user=xmpsdtest
cg_before=$(find /sys/fs/cgroup -mindepth 1 -type d | sort)
unshare_pid='' sd='' left=''

# The cgroups systemd made (init.scope, the slices) stay after it is killed: removed, deepest
# first, once their processes (everything was in systemd's PID namespace) are gone.
cleanup() {
    if [[ -n $unshare_pid ]]; then
        [[ -n $sd ]] && kill -KILL "$sd" 2>/dev/null
        wait "$unshare_pid" 2>/dev/null
    fi
    for _ in $(seq 100); do
        left=$(comm -13 <(echo "$cg_before") <(find /sys/fs/cgroup -mindepth 1 -type d | sort))
        [[ -z $left ]] && break
        sort -r <<<"$left" | xargs -r rmdir 2>/dev/null
        sleep 0.1
    done
    [[ -z $left ]] || echo "FAIL: cgroups left after systemd was stopped: $left"
    id "$user" >/dev/null 2>&1 && userdel "$user" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

# systemd in its own PID and mount namespace, with a /run of its own (so that xmprun outside it
# sees no /run/systemd/system) and systemd-tmpfiles masked, which would empty /tmp.
unshare --pid --fork --mount --mount-proc bash -c '
    mount -t tmpfs tmpfs /run
    for u in systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \
             systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer; do
        [ -e /lib/systemd/system/$u ] && mount --bind /dev/null /lib/systemd/system/$u
    done
    exec '"$systemd_bin"' --system --unit=sysinit.target' </dev/null >"$dir/systemd.log" 2>&1 &
unshare_pid=$!
in_sd() { nsenter -t "$sd" -m -p "$@"; }
state=''
for _ in $(seq 600); do
    [[ -z $sd ]] && sd=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null)
    sd=${sd%% *}
    if [[ -n $sd ]]; then
        state=$(in_sd systemctl is-system-running 2>/dev/null)
        [[ $state == running || $state == degraded ]] && break
    fi
    sleep 0.2
done
if [[ $state != running && $state != degraded ]]; then
    echo "FAIL: systemd did not come up (is-system-running: '$state')"
    cat "$dir/systemd.log"
    exit 1
fi
echo "[${SECONDS}s] systemd $(in_sd systemctl --version | head -1 | cut -d' ' -f2) is $state"

# job NAME WORKERS RESOURCES CMD: a spec whose workers write their cgroup and its limits to
# $dir/NAME.RANK, then run CMD.
job() {
    cat >"$dir/$1.yaml" <<YAML
version: 1
name: $1
workers: $2
devices: {kind: cpu}
resources: {worker: $3}
logs: {console: none}
command: [/bin/sh, -c, 'cg=/sys/fs/cgroup\$(sed -n "s/^0:://p" /proc/self/cgroup); for f in memory.max pids.max cpu.max; do printf "%s=%s\n" \$f "\$(cat \$cg/\$f 2>/dev/null)"; done >"$dir/$1.\$RANK.tmp"; echo "cgroup=\$cg" >>"$dir/$1.\$RANK.tmp"; mv "$dir/$1.\$RANK.tmp" "$dir/$1.\$RANK"; $4']
YAML
}

# check_report NAME: the report is valid, names manager systemd and a scope xmprun-NAME-*.scope
# that holds the job cgroup; prints the scope.
check_report() {
    python3 - "$dir/$1.json" "$schema" "$1" <<'EOF'
import json, sys, jsonschema
rep = json.load(open(sys.argv[1]))
jsonschema.validate(rep, json.load(open(sys.argv[2])))
cg = rep["cgroup"]
scope = cg["scope"] or ""
assert cg["manager"] == "systemd", cg
assert scope.startswith("xmprun-%s-" % sys.argv[3]) and scope.endswith(".scope"), cg
assert ("/%s/" % scope) in cg["path"], cg
print(scope)
EOF
}

# check_limits NAME RANKS KEY=VALUE...: each worker's cgroup had those values, and was below
# the scope.
check_limits() {
    local name=$1 ranks=$2 scope=$3
    shift 3
    for r in $(seq 0 $((ranks - 1))); do
        [[ -s $dir/$name.$r ]] || { fail "$name: worker $r wrote no limits"; continue; }
        grep -q "^cgroup=.*/$scope/xmprun-$name-.*/worker-$r\$" "$dir/$name.$r" ||
            fail "$name: worker $r not below $scope: $(grep cgroup= "$dir/$name.$r")"
        for kv in "$@"; do
            grep -qx "$kv" "$dir/$name.$r" || fail "$name: worker $r: want $kv, got: $(tr '\n' ' ' <"$dir/$name.$r")"
        done
    done
}

# nothing_left [--user]: no xmprun unit in the manager and no xmprun cgroup, once systemd has
# seen the scope empty (it removes it by itself, asynchronously: waited for, up to 30 s).
nothing_left() {
    local units cgs
    for _ in $(seq 150); do
        if [[ ${1:-} == --user ]]; then
            units=$(in_sd setpriv --reuid=$uid --regid=$uid --clear-groups env XDG_RUNTIME_DIR=/run/user/$uid \
                systemctl --user list-units --all --no-legend 'xmprun-*' 2>&1)
        else
            units=$(in_sd systemctl list-units --all --no-legend 'xmprun-*' 2>&1)
        fi
        cgs=$(find /sys/fs/cgroup -name 'xmprun-*' -type d)
        [[ -z $units && -z $cgs ]] && return 0
        sleep 0.2
    done
    fail "left behind: units [$units] cgroups [$cgs]"
}

# in_shell CMD: runs CMD as root from a transient scope of systemd's that it shares with a
# sleep (as a login shell shares its session scope), where cgroupfs cannot host a job.
in_shell() {
    in_sd systemd-run --quiet --scope --collect bash -c 'sleep 1000 & s=$!; '"$1"'; rc=$?; kill $s; exit $rc'
}
export XMPRUN_STATE_DIR=$dir/state

echo "== [${SECONDS}s] (a) root, from a shell that shares its cgroup: memory, CPU and pids limits"
job limited 2 '{memory: 64Mi, cpus: 0.5, pids: 40}' 'exit 0'
in_shell "'$xmprun' --report '$dir/limited.json' '$dir/limited.yaml' 2>'$dir/limited.err'"
rc=$?
[[ $rc == 0 ]] || fail "(a) exit $rc: $(cat "$dir/limited.err")"
if scope=$(check_report limited); then
    echo "(a) report: manager systemd, scope $scope, path $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cgroup"]["path"])' "$dir/limited.json")"
    check_limits limited 2 "$scope" memory.max=67108864 pids.max=40 'cpu.max=50000 100000'
    cat "$dir/limited.0"
else
    fail "(a) report: $(cat "$dir/limited.json")"
fi
nothing_left && echo "(a) nothing left"

echo "== [${SECONDS}s] (b) root: a failing job"
job failing 2 '{memory: 64Mi, pids: 40}' 'exit $((RANK == 1 ? 3 : 0))'
in_shell "'$xmprun' --report '$dir/failing.json' '$dir/failing.yaml' 2>'$dir/failing.err'"
rc=$?
[[ $rc == 3 ]] || fail "(b) exit $rc, want 3: $(cat "$dir/failing.err")"
scope=$(check_report failing) && echo "(b) exit $rc, scope $scope" || fail "(b) report"
nothing_left && echo "(b) nothing left"

echo "== [${SECONDS}s] (c) root: SIGKILL of xmprun, then xmprun gc"
job killed 2 '{memory: 64Mi, pids: 40}' 'exec sleep 1000'
in_shell "'$xmprun' --report '$dir/killed.json' '$dir/killed.yaml' 2>'$dir/killed.err' & p=\$!; echo \$p >'$dir/killed.pid'; wait \$p" &
shell=$!
for _ in $(seq 300); do [[ -s $dir/killed.0 && -s $dir/killed.1 ]] && break; sleep 0.1; done
if [[ -s $dir/killed.0 && -s $dir/killed.1 ]]; then
    scope=$(grep -o 'xmprun-killed-[^/]*\.scope' "$dir/killed.0")
    echo "(c) workers run in $scope; SIGKILL to xmprun"
    in_sd kill -KILL "$(cat "$dir/killed.pid")" # a pid of systemd's namespace
else
    fail "(c) the workers did not start: $(cat "$dir/killed.err")"
fi
wait "$shell"
echo "(c) gc: $(in_sd "$xmprun" gc 2>&1)"
nothing_left && echo "(c) nothing left"

echo "== [${SECONDS}s] (d) a user with a user manager, from a root-owned cgroup it shares: a memory limit"
useradd -M -u $uid -U -s /bin/sh "$user" || fail "useradd"
# The user manager moves a process out of a cgroup the user may not write through the system
# manager's AttachProcessesToUnit, on the system bus.
in_sd systemctl start dbus.socket user@$uid.service || fail "start user@$uid.service"
# A user manager delegates no cpuset: cpuset: auto (the default) pins the workers by affinity.
job user 2 '{memory: 64Mi}' 'exit 0'
chmod 777 "$dir"
mkdir -m 777 "$dir/state-user"
in_shell "setpriv --reuid=$uid --regid=$uid --clear-groups env XDG_RUNTIME_DIR=/run/user/$uid \
XMPRUN_STATE_DIR='$dir/state-user' '$xmprun' --report '$dir/user.json' '$dir/user.yaml' 2>'$dir/user.err'"
rc=$?
[[ $rc == 0 ]] || fail "(d) exit $rc: $(cat "$dir/user.err")"
if scope=$(check_report user); then
    echo "(d) report: manager systemd, scope $scope, path $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cgroup"]["path"])' "$dir/user.json")"
    check_limits user 2 "$scope" memory.max=67108864
    grep -q 'by sched_setaffinity alone' "$dir/user.json" || fail "(d) no cpuset note: $(cat "$dir/user.json")"
else
    fail "(d) report: $(cat "$dir/user.json")"
fi
nothing_left --user && echo "(d) nothing left"
in_sd systemctl stop user@$uid.service

echo "== [${SECONDS}s] forced systemd where it does not run (outside its namespace): a clear error"
out=$("$xmprun" --set isolation.cgroup_manager=systemd --report "$dir/forced.json" "$dir/failing.yaml" 2>&1)
rc=$?
[[ $rc != 0 && $out == *"systemd does not run here"* ]] || fail "forced systemd: exit $rc: $out"
echo "forced: exit $rc: $out"

echo "[${SECONDS}s] done"
((status == 0)) && echo "PASS"
exit $status
