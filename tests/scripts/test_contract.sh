#!/bin/sh
# Checks that every key of the contract (schemas/contract.txt) is in the schemas and the tests
# (the work is in contract.py). Debian's python3 runs it; the pyenv python3 on PATH may differ.
set -u
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
: "${XMPRUN_SOURCE_DIR:=$(cd "$here/../.." && pwd)}"
export XMPRUN_SOURCE_DIR
exec "$py" "$here/contract.py"
