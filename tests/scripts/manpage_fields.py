"""Manual page check: doc/xmprun.yaml.5.scd documents every field of schemas/job.schema.json
(section SPEC FIELDS) and of schemas/report.schema.json (section REPORT), and nothing that is in
neither schema, unless it is listed in PENDING below; doc/xmprun.1.scd documents every command
and long option that `xmprun --help` lists. Run by test_manpages.sh with Debian's python3.

A field is written in the page as a term line, its dotted path in bold at the start of a line
("*resources.worker.memory*", "*workers[].memory.peak_bytes*"). Every schema leaf (a field with
no sub-fields) must have one; an object may have one too.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from schema_fields import schema_fields  # noqa: E402

# Fields SPEC.md names that the schemas of this branch do not have yet: they are being added on
# other branches (isolation.devices/user, rlimits, run_id, the OOM attribution, pids, cgroup
# paths, the fork-mode zygote). When one lands in a schema, this check fails until it is removed
# from here, so the list only ever shrinks. Keep it short.
PENDING = {
    "spec": {
        "isolation.devices",
        "isolation.user",
        "resources.worker.rlimits",
        "resources.worker.rlimits.nofile",
        "resources.worker.rlimits.memlock",
        "resources.worker.rlimits.core",
        "resources.worker.rlimits.stack",
        "resources.worker.rlimits.nproc",
        "distributed.run_id",
    },
    "report": {
        "job.master_addr",
        "job.master_port",
        "job.run_id",
        "cgroup.paths",
        "workers[].memory.oom_at",
        "workers[].pids.limit",
        "workers[].pids.hits",
        "zygote",
        "zygote.pid",
        "zygote.state",
        "zygote.exit_code",
        "zygote.signal",
        "zygote.memory.limit_bytes",
        "zygote.memory.peak_bytes",
        "zygote.memory.oom_kills",
    },
}

TERM_RE = re.compile(r"^\*([a-z_][a-z0-9_.\[\]]*)\*\s*$")


def page_sections(path):
    sections, current = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("# "):
                current = line[2:].strip()
                sections[current] = []
            elif current is not None:
                sections[current].append(line.rstrip("\n"))
    return sections


def terms(lines):
    found = []
    for line in lines:
        m = TERM_RE.match(line)
        if m:
            found.append(m.group(1))
    return found


def compare(what, schema_path, documented, pending):
    fields = schema_fields(schema_path)
    errors = []
    for dup in sorted({d for d in documented if documented.count(d) > 1}):
        errors.append("%s: %s is documented twice" % (what, dup))
    doc = set(documented)
    for name, leaf in sorted(fields.items()):
        if leaf and name not in doc:
            errors.append("%s: %s is in %s but not in the manual page" % (what, name, schema_path))
    for name in sorted(doc - set(fields)):
        if name not in pending:
            errors.append(
                "%s: %s is in the manual page but not in %s (a typo, or add it to PENDING if "
                "another branch is adding it)" % (what, name, schema_path)
            )
    for name in sorted(pending & set(fields)):
        errors.append("%s: %s is in %s now: remove it from PENDING" % (what, name, schema_path))
    for name in sorted(pending - doc):
        errors.append("%s: pending %s is not documented in the manual page" % (what, name))
    return errors, len(fields)


def check_cli(page, xmprun):
    errors = []
    help_text = subprocess.run([xmprun, "--help"], capture_output=True, text=True).stdout
    sections = page_sections(page)
    options = "\n".join(sections.get("OPTIONS", []))
    commands = "\n".join(sections.get("COMMANDS", []))
    for opt in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", help_text))):
        if not re.search(r"^\*(-\w, )?%s\*" % re.escape(opt), options, re.M):
            errors.append("xmprun.1: option %s (in --help) is not in OPTIONS" % opt)
    for short in sorted(set(re.findall(r"^\s+(-[a-z]),", help_text, re.M))):
        if not re.search(r"^\*%s, --" % re.escape(short), options, re.M):
            errors.append("xmprun.1: option %s (in --help) is not in OPTIONS" % short)
    for cmd in sorted(set(re.findall(r"^\s*(?:usage:)?\s*xmprun (?:\[OPTIONS\] )?([a-z]+)\b", help_text, re.M))):
        if not re.search(r"^\*%s\*" % cmd, commands, re.M):
            errors.append("xmprun.1: command %s (in --help) is not in COMMANDS" % cmd)
    if "man xmprun" not in help_text:
        errors.append("xmprun --help does not point to the manual pages")
    return errors


def main():
    src = os.environ["XMPRUN_SOURCE_DIR"]
    page5 = os.path.join(src, "doc", "xmprun.yaml.5.scd")
    sections = page_sections(page5)
    errors = []
    for what, section, schema in (
        ("spec", "SPEC FIELDS", "job.schema.json"),
        ("report", "REPORT", "report.schema.json"),
    ):
        if section not in sections:
            errors.append("xmprun.yaml.5: no %s section" % section)
            continue
        errs, n = compare(what, os.path.join(src, "schemas", schema), terms(sections[section]),
                          PENDING[what])
        errors += errs
        print("%s: %d schema fields checked against xmprun.yaml(5) %s" % (what, n, section))
    errors += check_cli(os.path.join(src, "doc", "xmprun.1.scd"), os.environ["XMPRUN_BIN"])
    for e in errors:
        print("FAIL: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
