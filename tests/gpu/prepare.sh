#!/bin/sh
# Puts what tests/gpu/run.sh needs on a GPU node without build dependencies into build-gpu/:
# xmprun and libxmprun from ${BUILD_DIR:-build}, and the four libraries xmprun links (Debian 12's
# run on Ubuntu 24.04, ../shared/GPU.md).
set -eu
cd "$(dirname "$0")/../.."
b=${BUILD_DIR:-build}
rm -rf build-gpu && mkdir -p build-gpu/bin build-gpu/lib
cp "$b/xmprun" build-gpu/bin/
cp "$b/libxmprun.so" build-gpu/lib/
for l in libcgroup.so.2 libseccomp.so.2 libyaml-0.so.2 libjansson.so.4; do
    cp -L "/lib/x86_64-linux-gnu/$l" build-gpu/lib/
done
du -sh build-gpu
