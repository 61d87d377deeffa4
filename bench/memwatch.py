#!/usr/bin/python3
"""The memory watchdog's cost (isolation.cgroups: auto where no cgroup can be written).

Runs the same job, N exec workers that sleep, interleaved: as root with a cgroup per worker
(no watchdog) and as a regular user (the watchdog samples every 100 ms), and compares xmprun's
own CPU time per second of the job. xmprun's CPU is what its children's rusage says minus the
workers' own (each worker is one `sleep`, whose CPU is read from the report): the watchdog's
cost is the difference of the two, as a share of one CPU.

Usage (as root): bench/memwatch.py [BUILD_DIR] [--workers 8] [--seconds 10] [--reps 3]
"""
import argparse
import json
import os
import pwd
import resource
import subprocess
import sys
import tempfile

USER = "xmprun-e2e"


def run(xmprun, spec, report, user):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pre = []
    if user is not None:
        pre = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    subprocess.run(pre + [xmprun, "-q", "--report", report, spec], check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rep = json.load(open(report))
    workers = sum(w["cpu"]["user_s"] + w["cpu"]["system_s"] for w in rep["workers"])
    return total, workers, rep["duration_s"], rep["enforcement"]["resources.worker.memory"]["by"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    xmprun = os.path.abspath(os.path.join(a.build, "xmprun"))
    subprocess.run(f"id -u {USER} >/dev/null 2>&1 || useradd -M -U {USER}", shell=True, check=True)
    user = pwd.getpwnam(USER)
    d = tempfile.mkdtemp(prefix="xmprun-bench-memwatch-")
    os.chmod(d, 0o777)
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write(f"version: 1\nname: memwatch\nworkers: {a.workers}\ndevices: {{kind: cpu}}\n"
                f"command: [sleep, '{a.seconds}']\nresources: {{worker: {{memory: 1Gi}}}}\n")
    rows = {"cgroup": [], "watchdog": []}
    for _ in range(a.reps):
        for who in (None, user):
            total, workers, dur, by = run(xmprun, spec, os.path.join(d, "r.json"), who)
            rows[by].append((total - workers) / dur)
    subprocess.run(["rm", "-rf", d], check=False)
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items() if v}
    print(f"{a.workers} exec workers, {a.seconds} s, {a.reps} reps (medians): xmprun's CPU per "
          f"second of the job")
    for k, v in med.items():
        print(f"  {k:9s} {100 * v:6.3f} % of one CPU")
    if len(med) == 2:
        print(f"  the watchdog costs {100 * (med['watchdog'] - med['cgroup']):.3f} % of one CPU")


if __name__ == "__main__":
    sys.exit(main())
