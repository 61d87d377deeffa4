#!/usr/bin/python3
"""Launch overhead and failure-to-exit latency of xmprun, side by side with a plain C fork+exec
baseline (bench/baseline.c), in one run. Prints medians and ratios.

usage: bench/run.py [BUILD_DIR] [--reps R] [--sizes 8,32,128]
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--reps", type=int, default=15)
ap.add_argument("--sizes", default="8,32,128")
ap.add_argument("--fail-size", type=int, default=32)
args = ap.parse_args()
xmprun = os.path.abspath(os.path.join(args.build, "xmprun"))
baseline = os.path.abspath(os.path.join(args.build, "bench", "bench_baseline"))
tmp = tempfile.mkdtemp(prefix="xmprun-bench-")
report = os.path.join(tmp, "report.json")


def timed(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0, r


def median_ms(samples):
    return statistics.median(samples) * 1000.0


def spec(name, n, command, extra=""):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"version: 1\nname: {name}\nworkers: {n}\ndevices: {{kind: cpu}}\n"
                f"command: {command}\nlogs: {{console: none}}\nreport: {report}\n"
                f"resources: {{worker: {{pids: 64}}}}\n{extra}")
    return path


print(f"# xmprun bench: {os.uname().nodename}, {os.cpu_count()} CPUs, {args.reps} reps, median of each")
print("\n## launch: N workers running /bin/true (one cgroup each) vs plain fork+exec of N")
print("## (the last two columns: the same xmprun with isolation.cgroups: off, for what cgroups cost)")
print(f"{'N':>5} {'fork+exec ms':>13} {'xmprun ms':>10} {'ratio':>6} {'no-cgroup ms':>13} {'ratio':>6}")
for n in [int(s) for s in args.sizes.split(",")]:
    path = spec(f"bench-true-{n}", n, "[/bin/true]")
    off = spec(f"bench-true-off-{n}", n, "[/bin/true]", "isolation: {cgroups: off}\n")
    base, xmp, xoff = [], [], []
    for _ in range(args.reps):  # interleaved, so drift affects all alike
        t, r = timed([baseline, "launch", str(n)])
        base.append(t)
        for samples, p in ((xmp, path), (xoff, off)):
            t, r = timed([xmprun, "-q", p])
            if r.returncode != 0:
                sys.exit(f"xmprun failed ({r.returncode}): {r.stderr.decode()}")
            samples.append(t)
    b, x, o = median_ms(base), median_ms(xmp), median_ms(xoff)
    print(f"{n:>5} {b:>13.2f} {x:>10.2f} {x / b:>6.2f} {o:>13.2f} {o / b:>6.2f}")

pids = [l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.split(":")[1] == "pids"]
procs = f"/sys/fs/cgroup/pids{pids[0].rstrip('/')}/cgroup.procs" if pids else None
if procs and os.path.exists(procs):
    time.sleep(1)  # a quiet spell, as before a job starts
    r = subprocess.run([baseline, "cgmove", procs], capture_output=True, text=True)
    if r.returncode == 0:
        first, second = r.stdout.split()
        print(f"\n## v1 cgroup move (a write to {procs} of a process already in that cgroup):")
        print(f"## first after a quiet second {float(first):.3f} ms, next {float(second):.3f} ms")

n = args.fail_size
print(f"\n## failure to exit: rank 0 fails after 300 ms, {n - 1} others sleep; time from the failing")
print("## worker's last instruction to the launcher's exit (kill-all, SIGTERM to the rest)")
stamp = os.path.join(tmp, "stamp")
env = dict(os.environ, BENCH_STAMP=stamp, BENCH_FAIL_MS="300")
path = spec(f"bench-fail-{n}", n, f"[{baseline}, worker]", "on_failure: {grace: 5s}\n")
res = {"fork+exec": [], "xmprun": []}
for _ in range(args.reps):
    for name, cmd in (("fork+exec", [baseline, "failfast", str(n)]), ("xmprun", [xmprun, "-q", path])):
        if os.path.exists(stamp):
            os.unlink(stamp)
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic_ns()
        if r.returncode != 1:
            sys.exit(f"{name} exited {r.returncode}, expected 1: {r.stderr.decode()[-2000:]}")
        with open(stamp) as f:
            res[name].append((end - int(f.read())) / 1e9)
b, x = median_ms(res["fork+exec"]), median_ms(res["xmprun"])
print(f"{'N':>5} {'fork+exec ms':>13} {'xmprun ms':>10} {'ratio':>6}")
print(f"{n:>5} {b:>13.2f} {x:>10.2f} {x / b:>6.2f}")
subprocess.run(["rm", "-rf", tmp])
