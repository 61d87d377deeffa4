#!/bin/sh
# Checks the manual pages against the schemas and `xmprun --help` (manpage_fields.py), and that
# the roff pages CMake generated from them are there and render.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${XMPRUN_SOURCE_DIR:=$(cd "$here/../.." && pwd)}"
export XMPRUN_SOURCE_DIR
status=0
/usr/bin/python3 "$here/manpage_fields.py" || status=1
man_dir=$(dirname "$XMPRUN_BIN")/doc
for page in xmprun.1 xmprun.yaml.5; do
    if ! [ -s "$man_dir/$page" ]; then
        echo "FAIL: $man_dir/$page was not generated"
        status=1
    elif ! out=$(MANWIDTH=100 man -l "$man_dir/$page" 2>&1 >/dev/null) || [ -n "$out" ]; then
        echo "FAIL: man -l $page: $out"
        status=1
    fi
done
exit $status
