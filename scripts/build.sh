#!/bin/sh
# Installs what xmprun needs (Debian 12, as root), then configures and builds it into
# ${BUILD_DIR:-build} with warnings as errors. Extra arguments go to cmake's configure step.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DXMP_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "build: $build/xmprun ready" >&2
