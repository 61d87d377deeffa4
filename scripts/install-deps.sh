#!/bin/sh
# Installs the Debian 12 packages xmprun needs: to build and run it, and with --tests also what
# the test suite, the fuzzer and the sanitizer build need. Idempotent and quiet when everything
# is already present; run as root.
set -eu
pkgs="build-essential cmake pkg-config libyaml-dev libcgroup-dev libseccomp-dev libjansson-dev libdw-dev
libsystemd-dev python3 scdoc libslurm-dev"
if [ "${1:-}" = --tests ]; then
    pkgs="$pkgs libcriterion-dev python3-yaml python3-jsonschema python3-torch clang clang-format
libclang-rt-14-dev man-db tmux mmdebstrap libpython3.11-testsuite"
elif [ -n "${1:-}" ]; then
    echo "usage: $0 [--tests]" >&2
    exit 2
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages:$missing; run this script as root" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing$missing" >&2
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $missing >/dev/null
