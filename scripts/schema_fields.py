#!/usr/bin/env python3
"""The fields of a JSON Schema as dotted paths ("resources.worker.memory", "workers[].state"):
what the bash completion offers after --set (generated at build time) and what the manual-page
check compares the pages with. Usage: schema_fields.py [--leaves] SCHEMA.json
       schema_fields.py --completion SCHEMA.json TEMPLATE OUT  (@XMP_SPEC_KEYS@ -> the leaves)
"""

import json
import sys


def _resolve(schema, node):
    ref = node["$ref"]
    assert ref.startswith("#/$defs/"), ref
    return schema["$defs"][ref[len("#/$defs/") :]]


def _walk(schema, node, path, out, seen_defs):
    if isinstance(node, dict) and "$ref" in node:
        if node["$ref"] in seen_defs:
            # A shape met before on this path or elsewhere (attempts[].root_cause is a
            # root_cause): one field, documented once.
            if not path.endswith("[]"):
                out.setdefault(path, True)
            return
        seen_defs.add(node["$ref"])
        node = _resolve(schema, node)
    if not isinstance(node, dict):
        return
    if path and not path.endswith("[]"):
        out.setdefault(path, True)
    for key in ("oneOf", "anyOf", "allOf"):
        for branch in node.get(key, []):
            _walk(schema, branch, path, out, seen_defs)
    if isinstance(node.get("items"), dict):
        _walk(schema, node["items"], path + "[]", out, seen_defs)
    for key, sub in node.get("properties", {}).items():
        _walk(schema, sub, key if not path else path + "." + key, out, seen_defs)


def schema_fields(path):
    """{dotted path: True when the field has no sub-fields}, in schema order."""
    with open(path) as f:
        schema = json.load(f)
    out = {}
    _walk(schema, schema, "", out, set())
    # A leaf has no sub-fields: nothing below it as "path." or, for a list, "path[].".
    return {
        p: not any(q.startswith(p + ".") or q.startswith(p + "[].") for q in out) for p in out
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--completion":
        keys = " ".join(k for k, leaf in schema_fields(args[1]).items() if leaf)
        with open(args[2]) as f:
            text = f.read().replace("@XMP_SPEC_KEYS@", keys)
        with open(args[3], "w") as f:
            f.write(text)
        sys.exit(0)
    leaves = bool(args) and args[0] == "--leaves"
    fields = schema_fields(args[-1])
    print("\n".join(k for k, leaf in fields.items() if leaf or not leaves))
