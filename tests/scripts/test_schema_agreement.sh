#!/bin/sh
# Checks that schemas/job.schema.json and `xmprun validate` agree on every spec fixture and
# example (the work is in schema_agreement.py). Skips (77) when Debian's python lacks PyYAML or
# jsonschema; the pyenv python3 on PATH has neither, hence the absolute path.
set -u
py=/usr/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import yaml, jsonschema' 2>/dev/null; then
    echo "[SKIP] scripts::test_schema_agreement: $py with python3-yaml and python3-jsonschema is needed"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
: "${XMPRUN_SOURCE_DIR:=$(cd "$here/../.." && pwd)}"
export XMPRUN_SOURCE_DIR
exec "$py" "$here/schema_agreement.py"
