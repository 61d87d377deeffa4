#!/usr/bin/python3
"""The memory watchdog in start: fork (isolation.cgroups: auto where no cgroup can be written).

A zygote preloads --preload-mib of touched memory and forks --workers workers that share it; each
worker runs --seconds of steps, each step an mmap/munmap of 1 MiB (which needs the mmap lock in
write mode, the lock that the watchdog's smaps_rollup read of the worker holds while it walks
the worker's page tables) and a little arithmetic, and times every step. The same job runs as
root (a cgroup per worker: no watchdog) and as a regular user (the watchdog), interleaved.

It prints, per run: xmprun's own CPU time per second of the job (from /proc/PID/stat, read
every 0.2 s while it runs), the workers' step times (median, p99, max over all workers, and how
many steps of all workers took over 20 ms: a stall behind a page-table walk is one of those) and
the watchdog's sampling period as the report gives it.

Usage (as root): bench/fork_memwatch.py [BUILD_DIR] [--workers 8] [--preload-mib 4096]
                 [--seconds 10] [--reps 2]
"""
import argparse
import json
import os
import pwd
import subprocess
import sys
import tempfile
import time

USER = "xmprun-e2e"

ZYGOTE = r'''
import mmap, os, sys, time
import xmprun
mib = int(sys.argv[1]); seconds = float(sys.argv[2])
DATA = bytearray(b"\x01" * (mib << 20))  # touched: every page is the zygote's, shared on fork

def work(index):
    steps = []
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        m = mmap.mmap(-1, 1 << 20)
        m[0] = 1
        m.close()
        for i in range(2000):
            x += i
        steps.append(time.perf_counter() - t0)
        time.sleep(0.001)
    steps.sort()
    n = len(steps)
    over = sum(1 for s in steps if s > 0.020)
    print("STEPS %d %.6f %.6f %.6f %d" % (n, steps[n // 2], steps[int(n * 0.99)], steps[-1], over),
          flush=True)

xmprun.spawn(work)
'''


def cpu_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run(xmprun, spec, report, user):
    pre = []
    if user is not None:
        pre = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    p = subprocess.Popen(pre + [xmprun, "-q", "--report", report, spec], stdout=subprocess.PIPE,
                         text=True)
    last = 0.0
    while p.poll() is None:
        c = cpu_of(p.pid)
        last = c if c is not None else last
        time.sleep(0.2)
    out = p.stdout.read()
    rep = json.load(open(report))
    # "[rank] STEPS n median p99 max"
    steps = [line.split(" STEPS ")[1].split() for line in out.splitlines() if " STEPS " in line]
    med = sorted(float(s[1]) for s in steps)
    p99 = max(float(s[2]) for s in steps)
    mx = max(float(s[3]) for s in steps)
    over = sum(int(s[4]) for s in steps)
    period = max((w["memory"].get("sample_period_ms") or 0) for w in rep["workers"])
    by = rep["enforcement"].get("resources.worker.memory", {}).get("by")
    return {"by": by, "cpu_per_s": last / rep["duration_s"], "median_ms": 1e3 * med[len(med) // 2],
            "p99_ms": 1e3 * p99, "max_ms": 1e3 * mx, "over": over, "period_ms": period,
            "exit": rep["exit_code"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--preload-mib", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    xmprun = os.path.abspath(os.path.join(a.build, "xmprun"))
    subprocess.run(f"id -u {USER} >/dev/null 2>&1 || useradd -M -U {USER}", shell=True, check=True)
    user = pwd.getpwnam(USER)
    d = tempfile.mkdtemp(prefix="xmprun-bench-forkwatch-")
    os.chmod(d, 0o777)
    with open(os.path.join(d, "zygote.py"), "w") as f:
        f.write(ZYGOTE)
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write(f"version: 1\nname: forkwatch\nstart: fork\nworkers: {a.workers}\n"
                f"devices: {{kind: cpu}}\nresources: {{worker: {{memory: 1Gi, cpuset: none}}}}\n"
                f"command: [/usr/bin/python3, {d}/zygote.py, '{a.preload_mib}', "
                f"'{a.seconds}']\n")
    print(f"{a.workers} forked workers sharing a {a.preload_mib} MiB preload, {a.seconds} s "
          f"each, {a.reps} reps")
    for _ in range(a.reps):
        for who in (None, user):
            r = run(xmprun, spec, os.path.join(d, "r.json"), who)
            print(f"  {r['by']:8s} xmprun {100 * r['cpu_per_s']:6.2f} % of one CPU; worker "
                  f"steps median {r['median_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, max "
                  f"{r['max_ms']:.3f} ms, {r['over']} over 20 ms; period {r['period_ms']} ms; "
                  f"exit {r['exit']}",
                  flush=True)
    subprocess.run(["rm", "-rf", d], check=False)


if __name__ == "__main__":
    sys.exit(main())
