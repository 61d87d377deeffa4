#!/usr/bin/python3
"""Host memory of the fork model against exec, side by side in one run: N workers that each read
all of a SIZE preload. start: fork builds it once in the zygote and forks the workers from it;
start: exec has every worker build its own copy. For each: the job cgroup's peak memory (the
whole job: zygote and workers), the growth of the host's used memory (MemTotal - MemAvailable)
while all workers hold it, the zygote's and the largest worker's peak from the report, and the
time from launch to all workers running (each has read all of it).

usage: bench/fork_memory.py [BUILD_DIR] [--workers 8] [--mib 1024] [--reps 1]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--workers", type=int, default=8)
ap.add_argument("--mib", type=int, default=1024)
ap.add_argument("--reps", type=int, default=1)
args = ap.parse_args()
xmprun = os.path.abspath(os.path.join(args.build, "xmprun"))
tmp = tempfile.mkdtemp(prefix="xmprun-forkbench-")

WORKER = r'''
import os, sys, time
MIB = int(sys.argv[2]); DIR = sys.argv[3]
def build():
    buf = bytearray(MIB << 20)
    ones = b"\x01" * (4 << 20)
    for off in range(0, len(buf), len(ones)):
        buf[off:off + len(ones)] = ones[: len(buf) - off]
    return buf
def hold(index, buf):
    assert buf.count(1) == len(buf)          # reads every page
    open(os.path.join(DIR, "running-%d" % index), "w").close()
    while not os.path.exists(os.path.join(DIR, "go")):
        time.sleep(0.05)
    return 0
if sys.argv[1] == "fork":
    import xmprun as xmp
    BUF = build()
    xmp.spawn(lambda index: hold(index, BUF))
else:
    hold(int(os.environ["RANK"]), build())
'''


def own_memory_cgroup():
    for line in open("/proc/self/cgroup"):
        hid, ctrls, path = line.rstrip("\n").split(":", 2)
        if "memory" in ctrls.split(","):
            return "/sys/fs/cgroup/memory" + path.rstrip("/"), "v1"
        if hid == "0" and ctrls == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            return "/sys/fs/cgroup" + path.rstrip("/"), "v2"
    sys.exit("no memory cgroup found")


def job_peak(name):
    base, kind = own_memory_cgroup()
    for d in os.listdir(base):
        if d.startswith("xmprun-%s-" % name):
            f = "memory.max_usage_in_bytes" if kind == "v1" else "memory.peak"
            return int(open(os.path.join(base, d, f)).read())
    return -1


def host_used():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0]) * 1024
    return m["MemTotal"] - m["MemAvailable"]


def run(mode, rep):
    name = "forkbench-%s" % mode
    run_dir = os.path.join(tmp, "%s-%d" % (mode, rep))
    os.mkdir(run_dir)
    script = os.path.join(tmp, "worker.py")
    report = os.path.join(run_dir, "report.json")
    limits = ("worker: {memory: 256Mi}, shared: {memory: %dMi}" % (args.mib + 512)
              if mode == "fork" else "worker: {memory: %dMi}" % (args.mib + 256))
    spec = os.path.join(run_dir, "job.yaml")
    with open(spec, "w") as f:
        f.write("version: 1\nname: %s\nstart: %s\nworkers: %d\ndevices: {kind: cpu}\n"
                "command: [/usr/bin/python3, %s, %s, '%d', %s]\nresources: {%s}\n"
                "logs: {console: none}\nreport: %s\ntimeout: 10m\n"
                % (name, mode, args.workers, script, mode, args.mib, run_dir, limits, report))
    before = host_used()
    t0 = time.monotonic()
    proc = subprocess.Popen([xmprun, "-q", spec], stderr=subprocess.PIPE)
    while sum(1 for f in os.listdir(run_dir) if f.startswith("running-")) < args.workers:
        if proc.poll() is not None:
            sys.exit("%s: xmprun exited %d: %s" % (mode, proc.returncode, proc.stderr.read().decode()))
        time.sleep(0.02)
    all_running = time.monotonic() - t0
    used = host_used() - before
    peak = job_peak(name)
    open(os.path.join(run_dir, "go"), "w").close()
    _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("%s: xmprun exited %d: %s" % (mode, proc.returncode, err.decode()))
    rep_json = json.load(open(report))
    worker_peak = max(w["memory"]["peak_bytes"] or 0 for w in rep_json["workers"])
    zygote = rep_json.get("zygote")
    zpeak = zygote["memory"]["peak_bytes"] if zygote else None
    return peak, used, zpeak, worker_peak, all_running


with open(os.path.join(tmp, "worker.py"), "w") as f:
    f.write(WORKER)
GIB = float(1 << 30)
print("# fork vs exec: %d workers, each reads all of a %d MiB preload; %s, %d CPUs"
      % (args.workers, args.mib, os.uname().nodename, os.cpu_count()))
print("| start | job cgroup peak | host used (growth) | zygote peak | largest worker peak "
      "| launch to all running |")
print("|---|---|---|---|---|---|")
try:
    for rep in range(args.reps):
        for mode in ("fork", "exec"):  # one run, side by side
            peak, used, zpeak, wpeak, t = run(mode, rep)
            print("| %s | %.2f GiB | %.2f GiB | %s | %.1f MiB | %.2f s |"
                  % (mode, peak / GIB, used / GIB,
                     "%.2f GiB" % (zpeak / GIB) if zpeak is not None else "-",
                     wpeak / float(1 << 20), t), flush=True)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
