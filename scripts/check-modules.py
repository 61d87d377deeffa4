#!/usr/bin/env python3
"""Fails on a circle between modules, and on a .c file of 800 lines or more.

A module is a .c file with its .h (runner/run/group.c and runner/run/group.h are one); a header
X_internal.h belongs to module X. Module A depends on module B when a file of A includes a
header of B ("runner/...", "isolate/..." includes), and, given a build directory, when A's object
file uses a function or variable that B's defines (nm): a .c that defines what another module's
header declares is its own module by the calls. A circle (A -> B -> ... -> A) means neither can
be read, tested or changed without the other: this check names every one it finds.
Usage: scripts/check-modules.py [ROOT [BUILD]]   (ROOT: the checkout, default this script's
parent; BUILD: a build directory of it, for the calls)"""
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
build = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:runner|isolate)/[^"]+)"', re.M)
MAX_LINES = 800


def module_of(path):
    """X.c, X.h and X_internal.h are module X; so is X_part.c where X.h exists and X_part.h
    does not (a module in several files, such as isolate/cgroup_v1.c)."""
    base, _ = os.path.splitext(path)
    if base.endswith("_internal"):
        return base[: -len("_internal")]
    if not os.path.exists(os.path.join(root, base + ".h")):
        head, name = os.path.split(base)
        parts = name.split("_")
        for i in range(len(parts) - 1, 0, -1):
            owner = os.path.join(head, "_".join(parts[:i]))
            if os.path.exists(os.path.join(root, owner + ".h")):
                return owner
    return base


files = []
for top in ("runner", "isolate"):
    for d, _, names in os.walk(os.path.join(root, top)):
        files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith((".c", ".h"))]

deps, problems = {}, []
for f in sorted(files):
    with open(os.path.join(root, f), encoding="utf-8") as fh:
        text = fh.read()
    if f.endswith(".c") and text.count("\n") >= MAX_LINES:
        problems.append("%s: %d lines (at most %d)" % (f, text.count("\n"), MAX_LINES - 1))
    m = module_of(f)
    deps.setdefault(m, set())
    for inc in INCLUDE.findall(text):
        if not os.path.exists(os.path.join(root, inc)):
            problems.append("%s: includes %s, which does not exist" % (f, inc))
        elif module_of(inc) != m:
            deps[m].add(module_of(inc))

# By the calls: which object file defines each symbol, and which it uses.
if build is not None:
    defined, used = {}, {}
    for lib in ("xmp_runner", "xmp_isolate"):
        objdir = os.path.join(build, "CMakeFiles", lib + ".dir")
        for d, _, names in os.walk(objdir):
            for n in names:
                if not n.endswith(".c.o"):
                    continue
                src = os.path.relpath(os.path.join(d, n[:-2]), objdir)
                m = module_of(src)
                out = subprocess.run(["nm", os.path.join(d, n)], capture_output=True, text=True,
                                     check=True).stdout
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[1] in "TDBR":
                        defined[parts[2]] = m
                    elif len(parts) == 2 and parts[0] == "U":
                        used.setdefault(m, set()).add(parts[1])
    for m, syms in used.items():
        deps.setdefault(m, set())
        deps[m] |= {defined[s] for s in syms if s in defined and defined[s] != m}

# Tarjan's strongly connected components: every component of more than one module is a circle.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(deps.get(v, ())):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in sorted(deps):
    if v not in index:
        visit(v)
for comp in sccs:
    inside = set(comp)
    edges = ["%s -> %s" % (a, b) for a in comp for b in sorted(deps[a] & inside)]
    problems.append("modules in a circle: %s (%s)" % (", ".join(comp), "; ".join(edges)))
if any(m.startswith("isolate/") and d.startswith("runner/") for m in deps for d in deps[m]):
    problems.append("isolate/ depends on runner/")
for p in problems:
    print("check-modules: " + p, file=sys.stderr)
print("check-modules: %d modules, %d circles, %d problems" % (len(deps), len(sccs), len(problems)))
sys.exit(1 if problems else 0)
