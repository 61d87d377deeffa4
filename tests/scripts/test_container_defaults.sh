#!/bin/bash
# xmprun as a container ENTRYPOINT with the engines' defaults (a read-only cgroupfs, as in every
# non-privileged Docker, Podman and Kubernetes container), in Docker and in rootful Podman, as
# root in the container and as --user 1000:
# the default spec runs; a worker over its 128Mi is stopped by xmprun's memory watchdog with that
# limit named (137); a worker within its own 1Gi that takes the container over --memory 512m is
# named at the container's limit (137); isolation.cgroups: required refuses (125) with advice
# for a container; a cuda job (on the 4-GPU fixture host) is warned of the default 64 MiB
# /dev/shm before it starts. xmprun's binary and libraries are mounted into the image read-only (the
# image is Debian minbase, the same release as this host).
#
# Needs the Docker of ../shared/tools/docker-setup.sh and the Podman of podman-setup.sh (.ci/run
# sets both up). Without either, it skips (77) and says so loudly (tests/check-skips.sh fails CI
# on it unless .ci/run expects it).
set -u
build=$(cd "$(dirname "$XMPRUN_BIN")" && pwd)
setup=${XMP_DOCKER_SETUP:-$XMPRUN_SOURCE_DIR/../shared/tools/docker-setup.sh}
xpodman=${XMP_PODMAN:-/tmp/xmp-real/bin/xpodman}
cannot() {
    echo "********************************************************************************"
    echo "[SKIP] scripts::test_container_defaults: cannot run: $*"
    echo "********************************************************************************"
    exit 77
}
command -v docker >/dev/null || cannot "no docker client (run $setup start)"
[ -x "$setup" ] && eval "$("$setup" env 2>/dev/null | grep '^export DOCKER_HOST=')"
timeout 20 docker info >/dev/null 2>&1 || cannot "no Docker daemon answers (run $setup start)"
docker image inspect xmp-base >/dev/null 2>&1 || cannot "no xmp-base image (run $setup start)"
[ -x "$xpodman" ] || cannot "no Podman wrapper at $xpodman (run podman-setup.sh)"
"$xpodman" image exists localhost/xmp-base || cannot "no localhost/xmp-base image in Podman"

work=$(mktemp -d /tmp/xmprun-docker.XXXXXX)
chmod 0777 "$work"
trap 'rm -rf "$work"' EXIT
status=0
fail() {
    echo "FAIL ($engine, user $who): $*"
    status=1
}
libdir=$(dirname "$(ldd "$XMPRUN_BIN" | awk '/libcgroup/ {print $3}')")
cat >"$work/over.yaml" <<'EOF'
version: 1
name: dkover
workers: 2
devices: {kind: cpu}
command: 'if [ "$RANK" = 1 ]; then exec /x/tests/probe alloc 300 30; fi; exec /x/tests/probe sleep 30'
resources: {worker: {memory: 128Mi}}
EOF
cat >"$work/encl.yaml" <<'EOF'
version: 1
name: dkencl
workers: 1
devices: {kind: cpu}
command: ['/x/tests/probe', alloc, '700', '30']
resources: {worker: {memory: 1Gi}}
EOF
cat >"$work/gpu.yaml" <<'EOF'
version: 1
name: dkgpu
devices: {kind: cuda}
command: [/bin/true]
resources: {worker: {cpuset: none}}
EOF
# run USER JOB [ARGS...]: the job in a container with the engine's defaults and --memory 512m
# ($xenv: one more variable for xmprun).
run() {
    local user=$1 job=$2
    shift 2
    timeout 120 $engine run --rm --memory 512m --memory-swap 512m --user "$user" \
        -v "$build:/x:ro" -v "$libdir:/hostlib:ro" -e LD_LIBRARY_PATH=/hostlib ${xenv:+-e "$xenv"} \
        -v "$XMPRUN_SOURCE_DIR/tests/fixtures/hosts/gpu4:/gpu4:ro" \
        -v "$work:/d" -w /d "$image" /x/xmprun --report "/d/$job.json" "$@" "/d/$job.yaml" \
        >"$work/out" 2>&1
}
# check JOB PYTHON-EXPR: an expression over the schema-checked report `r`.
check() {
    /usr/bin/python3 - "$work/$1.json" "$2" "$XMPRUN_SOURCE_DIR/schemas/report.schema.json" <<'PY'
import json, sys, jsonschema
r = json.load(open(sys.argv[1]))
jsonschema.validate(r, json.load(open(sys.argv[3])))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

for engine in docker "$xpodman"; do
image=xmp-base
[ "$engine" = docker ] || image=localhost/xmp-base
for who in 0 1000; do
    run "$who" over
    rc=$?
    grep 'root cause' "$work/out"
    [ $rc = 137 ] || fail "over its limit: exit $rc: $(cat "$work/out")"
    check over 'r["root_cause"]["reason"] == "memory_limit" and "at its 128.0 MiB memory limit" in r["root_cause"]["message"] and r["enforcement"]["resources.worker.memory"]["by"] == "watchdog" and all(w["memory"]["peak_bytes"] is not None for w in r["workers"])' ||
        fail "the watchdog's stop is not in the report"
    grep -q 'no cgroup per worker here (the cgroup filesystem is mounted read-only' "$work/out" ||
        fail "the read-only cgroupfs is not named: $(cat "$work/out")"

    run "$who" encl
    rc=$?
    grep 'root cause' "$work/out"
    [ $rc = 137 ] || fail "over the container's limit: exit $rc: $(cat "$work/out")"
    check encl 'r["root_cause"]["reason"] == "oom_killed" and "at the enclosing cgroup'"'"'s 512.0 MiB limit (container " in r["root_cause"]["message"]' ||
        fail "the container's limit is not named"

    run "$who" over --set isolation.cgroups=required
    rc=$?
    [ $rc = 125 ] || fail "required: exit $rc: $(cat "$work/out")"
    grep -q -- '--privileged' "$work/out" || fail "required: no container advice: $(cat "$work/out")"

    xenv=XMPRUN_HOST_ROOT=/gpu4 run "$who" gpu || fail "the cuda job: $(cat "$work/out")"
    grep -Eq 'warning: /dev/shm holds 6[0-9] MiB, less than the 1024 MiB that 4 cuda workers need' \
        "$work/out" || fail "the 64 MiB /dev/shm is not named: $(cat "$work/out")"
done
done
exit $status
