#!/usr/bin/python3
"""A/B of xmprun builds: the same launch and failure cases as bench/run.py, each build in turn
within every repetition (interleaved, so drift affects all alike), medians in ms and each build's
ratio to the first. For a change whose effect is smaller than the run-to-run spread of the
floors, where bench/run.py's ratios cannot show it.

  fail32   rank 0 of 32 exits 1 after 300 ms, 31 sleepers get SIGTERM: from its last
           instruction to the launcher's exit
  aN       N workers of /bin/true (a8, a32, a128): launch to exit

usage: bench/ab.py XMPRUN_A,XMPRUN_B[,...] [--reps R] [--cases fail32,a8,a32]
                   [--baseline BUILD/bench/bench_baseline]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("bins")
ap.add_argument("--reps", type=int, default=15)
ap.add_argument("--cases", default="fail32,a8,a32")
ap.add_argument("--baseline", default="build/bench/bench_baseline")
args = ap.parse_args()
bins = [os.path.abspath(b) for b in args.bins.split(",")]
cases = args.cases.split(",")
baseline = os.path.abspath(args.baseline)
tmp = tempfile.mkdtemp(prefix="xmprun-ab-")
stamp = os.path.join(tmp, "stamp")
env = dict(os.environ, BENCH_STAMP=stamp, BENCH_FAIL_MS="300")


def spec(name, n, command, extra=""):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"version: 1\nname: {name}\nworkers: {n}\ndevices: {{kind: cpu}}\n"
                f"command: {command}\nlogs: {{console: none}}\n"
                f"report: {os.path.join(tmp, name + '.report.json')}\n"
                f"resources: {{worker: {{memory: 1Gi}}}}\n{extra}")
    return path


def case_spec(c):
    if c == "fail32":
        return spec(c, 32, f"[{baseline}, worker]", "on_failure: {grace: 5s}\n")
    if c.startswith("a") and c[1:].isdigit():
        return spec(c, int(c[1:]), "[/bin/true]")
    sys.exit(f"unknown case {c}")


try:
    specs = {c: case_spec(c) for c in cases}
    res = {(b, c): [] for b in bins for c in cases}
    for _ in range(args.reps):
        for c in cases:
            for b in bins:
                time.sleep(0.1)  # every case starts cold, as bench/run.py's do
                t0 = time.perf_counter()
                r = subprocess.run([b, "-q", specs[c]], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
                end, t1 = time.monotonic_ns(), time.perf_counter()
                want = 1 if c.startswith("fail") else 0
                if r.returncode != want:
                    sys.exit(f"{b} {c}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
                if c.startswith("fail"):
                    with open(stamp) as f:
                        res[(b, c)].append((end - int(f.read())) / 1e6)
                else:
                    res[(b, c)].append((t1 - t0) * 1e3)
    print(f"# {args.reps} reps interleaved, medians in ms (ratio to the first build)")
    for i, b in enumerate(bins):
        print(f"# [{i}] {b}")
    for c in cases:
        first = statistics.median(res[(bins[0], c)])
        cols = "  ".join(f"[{i}] {statistics.median(res[(b, c)]):8.2f} "
                         f"({statistics.median(res[(b, c)]) / first:.3f})" for i, b in enumerate(bins))
        print(f"{c:>7}  {cols}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
