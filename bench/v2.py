#!/usr/bin/python3
"""Pure cgroup v2 launch, each launcher started alone in a fresh cgroup (as a systemd scope, a
container or a Slurm step starts it), in one interleaved run (medians, ratios):

  fork     bench_baseline launch N: fork+exec of N /bin/true, no cgroups
  floor    bench_baseline isolated N "" confined: the same delegation and isolation work as
           xmprun: moves itself into a leaf of its cgroup, enables memory, pids and cpuset there
           and in the job's cgroup (one write each), one cgroup per worker with memory.max,
           pids.max and a one-CPU cpuset, clone3 CLONE_INTO_CGROUP, the default seccomp filter
           and device program; at the end removes the cgroups, disables the controllers (one
           write), moves back and removes its leaf
  floor+c  the floor as bench_baseline_libs, linked with xmprun's four libraries and ending with
           the durable report the contract asks for
  xmprun   `xmprun -q` of N /bin/true with memory: 1Gi, pids: 4096 (cpuset: auto, seccomp and
           device filter by default)

and, for one job of each, the writes to cgroup files that took more than 10 ms (strace -f -T;
the median count over --strace-reps jobs, and the writes of the last one): the waits (a move,
a controller change) apart from the writes that emulation makes slow.

Run it as root on a pure cgroup v2 host, or in the guest:
  ../shared/tools/vm-run /usr/bin/python3 bench/v2.py build

usage: bench/v2.py [BUILD_DIR] [--reps R] [--sizes 8,32] [--strace-reps R]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--reps", type=int, default=11)
ap.add_argument("--sizes", default="8,32")
ap.add_argument("--strace-reps", type=int, default=3)
args = ap.parse_args()
build = os.path.abspath(args.build)
xmprun = os.path.join(build, "xmprun")
baseline = os.path.join(build, "bench", "bench_baseline")
baseline_libs = os.path.join(build, "bench", "bench_baseline_libs")

if not os.path.exists("/sys/fs/cgroup/cgroup.controllers") or os.path.exists("/sys/fs/cgroup/unified"):
    sys.exit("bench/v2.py: not a pure cgroup v2 host (run it in ../shared/tools/vm-run)")
own = "/sys/fs/cgroup" + open("/proc/self/cgroup").read().split("::", 1)[1].strip().rstrip("/")
tmp = tempfile.mkdtemp(prefix="xmprun-v2-bench-")
fresh = os.path.join(own, f"bench-v2-{os.getpid()}")


def spec(n):
    path = os.path.join(tmp, f"v2-{n}.yaml")
    with open(path, "w") as f:
        f.write(f"version: 1\nname: v2bench\nworkers: {n}\ndevices: {{kind: cpu}}\n"
                f"command: [/bin/true]\nlogs: {{console: none}}\n"
                f"report: {os.path.join(tmp, 'report.json')}\n"
                "resources: {worker: {memory: 1Gi, pids: 4096}}\n")
    return path


def alone(cmd, env=None, prefix=()):
    """cmd alone in a fresh cgroup, which must be empty and removable afterwards: (ms, status)."""
    os.mkdir(fresh)
    try:
        r = subprocess.run([*prefix, baseline, "cgexec", fresh, *cmd], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        left = [d for d in os.listdir(fresh) if os.path.isdir(os.path.join(fresh, d))]
        os.rmdir(fresh)  # fails (and the bench with it) if anything was left in it
    if r.returncode != 0 or left:
        sys.exit(f"{cmd[0]}: cgexec {r.returncode}, left {left}: {r.stderr[-2000:]}")
    t, status = r.stdout.split()[-2:]
    if status != "0":
        sys.exit(f"{' '.join(cmd)} exited {status}: {r.stderr[-2000:]}")
    return float(t)


def cases(n):
    env = dict(os.environ, BENCH_REPORT=os.path.join(tmp, "floor-report.json"))
    return {
        "fork": ([baseline, "launch", str(n)], None),
        "floor": ([baseline, "isolated", str(n), "", "confined"], None),
        "floor+c": ([baseline_libs, "isolated", str(n), "", "confined"], env),
        "xmprun": ([xmprun, "-q", spec(n)], None),
    }


# The writes that wait in the kernel rather than compute: a move (cgroup.procs: the threadgroup
# rwsem's RCU grace period) and a controller change (cgroup.subtree_control: the same rwsem to
# move the tasks' css sets, and the drain of dying csses before it). Under emulation a write
# that only computes (memory.max) can take over 10 ms too; those are counted apart.
WAITS = ("/cgroup.procs>", "/cgroup.subtree_control>")


def slow_writes(cmd, env):
    """The writes to cgroup files of one run that took over 10 ms: (waits, others, lines)."""
    trace = os.path.join(tmp, "strace.txt")
    alone(cmd, env, prefix=("strace", "-f", "-T", "-y", "-qq", "-e", "trace=write", "-o", trace))
    slow = []
    for line in open(trace):
        if "</sys/fs/cgroup" not in line or not line.rstrip().endswith(">"):
            continue
        secs = float(line.rstrip().rsplit("<", 1)[1][:-1])
        if secs > 0.010:
            slow.append(line.split(None, 1)[1].strip())
    waits = sum(1 for l in slow if any(w in l for w in WAITS))
    return waits, len(slow) - waits, slow


try:
    print(f"# pure cgroup v2: {os.uname().release}, {os.cpu_count()} CPUs, {args.reps} reps "
          f"interleaved, medians (ms); each launcher alone in a fresh cgroup below {own or '/'}")
    print(f"{'N':>4} {'fork+exec':>9} {'floor':>7} {'floor+c':>7} {'xmprun':>7} {'/floor':>6} "
          f"{'/floor+c':>8}")
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        cs = cases(n)
        res = {k: [] for k in cs}
        for _ in range(args.reps):
            for k, (cmd, env) in cs.items():
                res[k].append(alone(cmd, env))
        m = {k: statistics.median(v) for k, v in res.items()}
        print(f"{n:>4} {m['fork']:>9.2f} {m['floor']:>7.2f} {m['floor+c']:>7.2f} "
              f"{m['xmprun']:>7.2f} {m['xmprun'] / m['floor']:>6.2f} "
              f"{m['xmprun'] / m['floor+c']:>8.2f}")
    if shutil.which("strace"):
        print(f"\n# cgroup writes over 10 ms per job, median of {args.strace_reps} traced jobs: "
              "waits (cgroup.procs,\n# cgroup.subtree_control) and others; the last job's listed")
        for n in sizes:
            for k in ("floor", "xmprun"):
                cmd, env = cases(n)[k]
                runs = [slow_writes(cmd, env) for _ in range(args.strace_reps)]
                print(f"{k} N={n}: waits {statistics.median(w for w, _, _ in runs):g}, "
                      f"others {statistics.median(o for _, o, _ in runs):g}")
                for line in runs[-1][2]:
                    print(f"    {line}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
