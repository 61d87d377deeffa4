#!/bin/sh
# The .deb CPack builds: its Depends come from the shared libraries (dpkg-shlibdeps), and it
# installs with apt into a clean Debian 12 root, where the quick start runs, with real cgroups
# (chroot with /proc, /sys and /dev bind-mounted in a private mount namespace, so nothing is
# left mounted whatever happens).
#
# Needs root, network access to Debian's archive, and a minimal Debian root to copy:
# $XMP_DEBIAN_ROOTFS, by default the one ../shared/tools/podman-setup.sh builds with mmdebstrap
# (/tmp/xmp-real/rootfs; it is copied, never changed). Without them it skips (77) and says why,
# loudly (tests/check-skips.sh fails CI on it unless .ci/run expects it).
set -u
base=${XMP_DEBIAN_ROOTFS:-/tmp/xmp-real/rootfs}
build=$(dirname "$XMPRUN_BIN")
cannot() {
    echo "********************************************************************************"
    echo "[SKIP] scripts::test_deb: cannot run: $*"
    echo "********************************************************************************"
    exit 77
}
[ "$(id -u)" = 0 ] || cannot "it needs root (chroot, mounts)"
[ -x "$base/bin/sh" ] && [ -x "$base/usr/bin/apt-get" ] ||
    cannot "no Debian root at $base (run ../shared/tools/podman-setup.sh, or set XMP_DEBIAN_ROOTFS)"
command -v cpack >/dev/null || cannot "cpack is not installed"

work=$(mktemp -d /tmp/xmp-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cpack --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1 || {
    cat "$work/cpack.log"; echo "FAIL: cpack"; exit 1; }
deb=$(ls "$work"/pkg/xmprun_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "deb: $(basename "$deb"), Depends: $depends"
for lib in libc6 libyaml-0-2 libcgroup2 libjansson4; do
    case "$depends" in *"$lib"*) ;; *) fail "Depends lacks $lib" ;; esac
done
# What xmprun loads with dlopen when a feature needs it, which dpkg-shlibdeps cannot see.
recommends=$(dpkg-deb -f "$deb" Recommends)
for lib in libdw1 libsystemd0; do
    case "$recommends" in *"$lib"*) ;; *) fail "Recommends lacks $lib" ;; esac
done

# The Slurm plugin, where the build made it (it needs libslurm-dev's header).
if [ -f "$build/spank_xmprun.so" ]; then
    dpkg-deb -c "$deb" | grep ' \./usr/lib/xmprun/spank_xmprun\.so$' >/dev/null ||
        fail "the .deb lacks usr/lib/xmprun/spank_xmprun.so"
fi

cp -a "$base" "$work/root" || cannot "cannot copy $base"
cp "$deb" "$work/root/tmp/xmprun.deb"
cp /etc/resolv.conf "$work/root/etc/resolv.conf" 2>/dev/null
# The quick start, as a user of the package runs it; then the report read back.
cat >"$work/root/tmp/inside.sh" <<'INSIDE'
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get -qq update
apt-get -qq install -y --no-install-recommends /tmp/xmprun.deb >/dev/null
cd /tmp
set +e
xmprun /usr/share/doc/xmprun/examples/quickstart.yaml
echo "quickstart-status=$?"
xmprun report quickstart.report.json >/dev/null
echo "report-status=$?"
INSIDE
unshare --mount --propagation private sh -c '
    r=$1
    mount --rbind /proc "$r/proc" && mount --rbind /sys "$r/sys" && mount --rbind /dev "$r/dev" &&
    chroot "$r" /bin/sh /tmp/inside.sh' sh "$work/root" >"$work/out.log" 2>&1
cat "$work/out.log"
if grep -q 'Could not resolve\|Failed to fetch\|Temporary failure resolving' "$work/out.log" &&
    ! grep -q '^quickstart-status=' "$work/out.log"; then
    cannot "apt in the Debian root cannot reach Debian's archive"
fi
grep -qx 'quickstart-status=0' "$work/out.log" || fail "the quick start did not exit 0"
grep -qx 'report-status=0' "$work/out.log" || fail "xmprun report did not exit 0"
rep=$work/root/tmp/quickstart.report.json
[ -s "$rep" ] || { fail "no report"; exit 1; }
/usr/bin/python3 - "$rep" "$XMPRUN_SOURCE_DIR/schemas/report.schema.json" <<'PY' || status=1
import json, sys, jsonschema
rep = json.load(open(sys.argv[1]))
jsonschema.validate(rep, json.load(open(sys.argv[2])))
ok = rep["outcome"] == "succeeded" and len(rep["workers"]) == 2 and rep["cgroup"]["mode"] != "none"
print("report: outcome %s, %d workers, cgroup mode %s" % (rep["outcome"], len(rep["workers"]), rep["cgroup"]["mode"]))
if not ok:
    print("FAIL: the quick start did not run 2 workers in cgroups")
sys.exit(0 if ok else 1)
PY
# Nothing of the job is left in any hierarchy.
id=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$rep")
left=$(find /sys/fs/cgroup -maxdepth 8 -type d -name "xmprun-quickstart-$id" 2>/dev/null)
[ -z "$left" ] || fail "cgroups left behind: $left"
grep -q ' /tmp/xmp-deb\.' /proc/self/mountinfo && fail "a mount of the test root is left"
exit $status
