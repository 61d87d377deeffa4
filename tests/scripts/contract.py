"""Contract check: every key in schemas/contract.txt (the spec fields, report fields, values and
exit statuses SPEC.md names) must be in the schemas and appear in the tests. Run by
test_contract.sh with Debian's /usr/bin/python3."""

import glob
import json
import os
import re
import sys

SRC = os.environ.get("XMPRUN_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..")
)


def load(name):
    with open(os.path.join(SRC, "schemas", name), encoding="utf-8") as f:
        return json.load(f)


def resolve(root, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def branches(root, node):
    """The node and every subschema that can describe the same value."""
    node = resolve(root, node)
    out = [node]
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in node.get(key, []):
            out.extend(branches(root, sub))
    for key in ("then", "else"):
        if key in node:
            out.extend(branches(root, node[key]))
    return out


def find(root, path):
    """The subschemas at a dotted path ("a.b[].c"), or [] if the schema has no such key."""
    nodes = branches(root, root)
    for step in path.split("."):
        items = step.endswith("[]")
        name = step[:-2] if items else step
        nxt = []
        for n in nodes:
            prop = n.get("properties", {}).get(name)
            if prop is not None:
                nxt.extend(branches(root, prop))
        if items:
            nxt = [i for n in nxt if "items" in n for i in branches(root, n["items"])]
        nodes = nxt
        if not nodes:
            return []
    return nodes


def enum_values(root, nodes):
    vals = set()
    for n in nodes:
        vals.update(n.get("enum", []))
        if "const" in n:
            vals.add(n["const"])
        for sub in ("oneOf", "anyOf"):
            for s in n.get(sub, []):
                vals.update(resolve(root, s).get("enum", []))
    return vals


def test_texts():
    texts = {}
    for pattern in ("tests/**/*.c", "tests/**/*.h", "tests/**/*.yaml", "tests/**/*.py",
                    "tests/**/*.sh", "tests/**/*.json"):
        for p in glob.glob(os.path.join(SRC, pattern), recursive=True):
            if os.path.basename(p) in ("contract.py", "test_contract.sh"):
                continue
            with open(p, encoding="utf-8", errors="replace") as f:
                texts[p] = f.read()
    return texts


def main():
    schemas = {"spec": load("job.schema.json"), "report": load("report.schema.json")}
    texts = test_texts()
    e2e = "\n".join(t for p, t in texts.items() if "/tests/e2e/" in p)
    problems = []
    n = 0
    with open(os.path.join(SRC, "schemas", "contract.txt"), encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kind, _, rest = line.partition(" ")
            n += 1
            where = f"contract.txt:{lineno}"
            if kind in ("spec", "report"):
                key = rest.strip()
                if not find(schemas[kind], key):
                    problems.append(f"{where}: {kind} key {key} is not in the schema")
                word = key.split(".")[-1].replace("[]", "")
                if not any(re.search(r"\b%s\b" % re.escape(word), t) for t in texts.values()):
                    problems.append(f"{where}: {kind} key {key}: no test mentions \"{word}\"")
            elif kind == "value":
                key, *values = rest.split()
                nodes = find(schemas["report"], key)
                have = enum_values(schemas["report"], nodes)
                for v in values:
                    if v not in have:
                        problems.append(f"{where}: {key} has no value \"{v}\" in the schema")
                    if not re.search(r"\b%s\b" % re.escape(v), e2e + "\n".join(
                            t for p, t in texts.items() if "/tests/unit/" in p)):
                        problems.append(f"{where}: no test mentions {key} value \"{v}\"")
            elif kind == "exit":
                code = rest.split()[0]
                # An assertion that names the code: cr_assert_eq(..., 124, ...) and the like.
                if not re.search(r"assert\w*\([^;]*\b%s\b" % code, e2e, re.S):
                    problems.append(f"{where}: no end-to-end test asserts exit status {code}")
            else:
                problems.append(f"{where}: unknown kind \"{kind}\"")
    for p in problems:
        print(p)
    print(f"contract: {n} entries, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
