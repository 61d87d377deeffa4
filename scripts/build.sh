#!/bin/sh
# Installs what building and running xmprun need (Debian 12, as root: scripts/install-deps.sh),
# then configures and builds it into ${BUILD_DIR:-build} with warnings as errors; the tests too
# where Criterion is installed (scripts/test.sh installs it). Extra arguments go to cmake's
# configure step.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DXMP_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "build: $build/xmprun ready" >&2
