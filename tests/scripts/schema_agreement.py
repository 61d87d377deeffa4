"""Schema agreement check: schemas/job.schema.json and `xmprun validate` must accept and reject
the same specs. Run by test_schema_agreement.sh with Debian's /usr/bin/python3.

Good fixtures (tests/fixtures/specs/good) and examples/*.yaml must pass both. Bad fixtures
(tests/fixtures/specs/bad) carry their expectation in the first line,
    # expect: LINE:COL: SUBSTRING
and xmprun must exit 2 with its first diagnostic on stderr starting "FILE:LINE:COL: " and
containing SUBSTRING after it. Unless the second line is `# parser-only` (an error JSON Schema
cannot see: YAML-level problems, cross-field rules, integers beyond int64), the schema must
reject the file too.

YAML is read the way the parser reads it, as the YAML 1.2 core schema rather than PyYAML's
YAML 1.1 default: only true/false are booleans (so `cgroups: off` is the string "off" and
`yes` is a string the schema rejects), integers are decimal, and a duplicate key is a load
error. A file that does not load as exactly one YAML document counts as schema-rejected.
"""

import json
import os
import re
import subprocess
import sys

import jsonschema
import yaml

EXPECT_RE = re.compile(r"^# expect: (\d+):(\d+):(?: (.*))?$")


class CoreLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core schema scalar resolution and duplicate-key errors."""


CoreLoader.yaml_implicit_resolvers = {}
for tag, regexp, first in [
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^[-+]?[0-9]+$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
]:
    CoreLoader.add_implicit_resolver(tag, re.compile(regexp), first)


def construct_decimal_int(loader, node):
    # PyYAML would read a leading 0 as octal; YAML 1.2 core integers are decimal.
    return int(loader.construct_scalar(node), 10)


def mapping_key(key_node):
    # The parser matches keys by their text (a key `~` is the name "~", not null), and a JSON
    # object has only string keys; a list or mapping as a key has no JSON form at all.
    if not isinstance(key_node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "a mapping key must be a scalar", key_node.start_mark
        )
    return key_node.value


def construct_checked_mapping(loader, node, deep=False):
    # Duplicates are looked for among the keys written in this mapping; keys brought in by a
    # merge key (<<) are overridden by written ones, as the parser does.
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = mapping_key(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate key %r" % (key,), key_node.start_mark
            )
        seen.add(key)
    loader.flatten_mapping(node)
    out = {}
    for key_node, value_node in node.value:
        out[mapping_key(key_node)] = loader.construct_object(value_node, deep=deep)
    return out


CoreLoader.add_constructor("tag:yaml.org,2002:int", construct_decimal_int)
CoreLoader.add_constructor("tag:yaml.org,2002:map", construct_checked_mapping)


def schema_verdict(validator, path):
    """Returns (accepted, reason)."""
    try:
        with open(path, "rb") as f:
            doc = yaml.load(f, Loader=CoreLoader)
        # JSON has no non-string keys, NaN or infinities; json.dumps(allow_nan=False) refuses
        # what a JSON document could not hold, as a YAML -> JSON converter would.
        doc = json.loads(json.dumps(doc, allow_nan=False, sort_keys=True))
    except (yaml.YAMLError, ValueError, TypeError) as e:
        return False, "does not load as one YAML document: %s" % str(e).replace("\n", " ")
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "<root>"
        return False, "%s: %s" % (where, e.message)
    return True, ""


def run_validate(xmprun, path):
    p = subprocess.run(
        [xmprun, "validate", path],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=60,
    )
    return p.returncode, p.stderr.decode("utf-8", "replace")


def check_good(validator, xmprun, path):
    problems = []
    ok, why = schema_verdict(validator, path)
    if not ok:
        problems.append("schema rejects it: " + why)
    rc, err = run_validate(xmprun, path)
    if rc != 0:
        problems.append("xmprun validate exits %d: %s" % (rc, err.strip().replace("\n", " | ")))
    return problems


def check_bad(validator, xmprun, path):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    first = lines[0].decode("utf-8", "replace")
    m = EXPECT_RE.match(first)
    if not m:
        return ["first line is not '# expect: LINE:COL: SUBSTRING'"]
    line, col, sub = m.group(1), m.group(2), m.group(3) or ""
    parser_only = len(lines) > 1 and lines[1].strip() == b"# parser-only"

    problems = []
    if not parser_only:
        ok, _ = schema_verdict(validator, path)
        if ok:
            problems.append("schema accepts it (mark it '# parser-only' if it cannot see this)")
    rc, err = run_validate(xmprun, path)
    if rc != 2:
        problems.append("xmprun validate exits %d, not 2" % rc)
    prefix = "%s:%s:%s: " % (path, line, col)
    diags = [l for l in err.splitlines() if l.startswith(path + ":")]
    if not diags:
        problems.append("no diagnostic for %s on stderr: %r" % (path, err.strip()))
    elif not (diags[0].startswith(prefix) and sub in diags[0][len(prefix):]):
        problems.append("first diagnostic is %r, expected %r followed by %r" % (diags[0], prefix, sub))
    return problems


def yaml_files(directory):
    if not os.path.isdir(directory):
        return []
    return sorted(
        os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((".yaml", ".yml"))
    )


def main():
    src = os.environ.get("XMPRUN_SOURCE_DIR") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", "..")
    )
    xmprun = os.environ.get("XMPRUN_BIN")
    if not xmprun or not os.access(xmprun, os.X_OK):
        print("XMPRUN_BIN is not set to an executable xmprun")
        return 1
    xmprun = os.path.abspath(xmprun)
    with open(os.path.join(src, "schemas", "job.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    # Format checking stays off: the schema's rules are all patterns, types and bounds.
    validator = jsonschema.Draft202012Validator(schema)

    fixtures = os.path.join(src, "tests", "fixtures", "specs")
    cases = [("good", p) for p in yaml_files(os.path.join(fixtures, "good"))]
    cases += [("good", p) for p in yaml_files(os.path.join(src, "examples"))]
    cases += [("bad", p) for p in yaml_files(os.path.join(fixtures, "bad"))]
    if not cases:
        print("no fixtures found below %s" % fixtures)
        return 1

    passed = failed = 0
    for kind, path in cases:
        # Relative paths keep the diagnostics' file names short and the same as the expectations.
        rel = os.path.relpath(path, src)
        cwd = os.getcwd()
        os.chdir(src)
        try:
            check = check_good if kind == "good" else check_bad
            problems = check(validator, xmprun, rel)
        finally:
            os.chdir(cwd)
        if problems:
            failed += 1
            print("FAIL %s: %s" % (rel, "; ".join(problems)))
        else:
            passed += 1
            print("ok   %s" % rel)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
