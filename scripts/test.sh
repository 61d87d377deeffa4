#!/bin/sh
# The README's test command: installs the test toolchain too (scripts/install-deps.sh --tests),
# builds xmprun and its tests into ${BUILD_DIR:-build} with warnings as errors, and runs the
# whole suite. Extra arguments go to ctest.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --tests
./scripts/build.sh -DXMP_TESTS=ON
exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --no-tests=error "$@"
