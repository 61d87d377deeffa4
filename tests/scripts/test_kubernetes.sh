#!/bin/sh
# examples/kubernetes/xmprun-job.yaml, planned with `xmprun plan` as each pod would run it
# (kubernetes_plan.py). Skips (77) when Debian's python lacks PyYAML.
set -u
py=/usr/bin/python3
"$py" -c 'import yaml' 2>/dev/null || { echo "[SKIP] scripts::test_kubernetes: $py with python3-yaml is needed"; exit 77; }
exec "$py" "$(dirname "$0")/kubernetes_plan.py"
