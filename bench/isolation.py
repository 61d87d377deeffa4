#!/usr/bin/python3
"""What the isolation filters cost at launch: N workers running /bin/true (one cgroup each),
with seccomp `default` and device filtering on (the defaults) against both off, interleaved in
one run so that drift affects both alike. Prints medians and the overhead; the target is at most
10 %.

usage: bench/isolation.py [BUILD_DIR] [--reps R] [--workers N]
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--reps", type=int, default=21)
ap.add_argument("--workers", type=int, default=32)
args = ap.parse_args()
xmprun = os.path.abspath(os.path.join(args.build, "xmprun"))
tmp = tempfile.mkdtemp(prefix="xmprun-bench-iso-")
report = os.path.join(tmp, "report.json")


def spec(name, isolation):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"version: 1\nname: {name}\nworkers: {args.workers}\ndevices: {{kind: cpu}}\n"
                f"command: [/bin/true]\nlogs: {{console: none}}\nreport: {report}\n"
                f"resources: {{worker: {{pids: 64}}}}\nisolation: {isolation}\n")
    return path


def run(path):
    t0 = time.perf_counter()
    r = subprocess.run([xmprun, "-q", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"xmprun failed ({r.returncode}): {r.stderr.decode()[-2000:]}")
    return dt


on = spec("bench-iso-on", "{seccomp: default, devices: true}")
off = spec("bench-iso-off", "{seccomp: off, devices: false}")
samples = {"on": [], "off": []}
run(on), run(off)  # warm the page cache and the cgroup hierarchies
for i in range(args.reps):
    # Alternate which goes first, so that neither always follows the other's cleanup.
    order = (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on))
    for name, path in order:
        samples[name].append(run(path))
m_on = statistics.median(samples["on"]) * 1000
m_off = statistics.median(samples["off"]) * 1000
print(f"# xmprun isolation bench: {os.uname().nodename}, {os.cpu_count()} CPUs, "
      f"{args.workers} workers, {args.reps} interleaved reps, medians")
print(f"{'filters off ms':>15} {'filters on ms':>14} {'overhead':>9}")
print(f"{m_off:>15.2f} {m_on:>14.2f} {100 * (m_on - m_off) / m_off:>8.1f}%")
subprocess.run(["rm", "-rf", tmp])
