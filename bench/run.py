#!/usr/bin/python3
"""xmprun against floors doing the same work, in one interleaved run (medians, ratios):

  launch     N workers of /bin/true, each in its own cgroup, against bench/baseline.c doing the same
             isolation (clone3 CLONE_PIDFD|CLONE_INTO_CGROUP into a cgroup2 directory per worker, a
             v1 memory cgroup per worker with a 1 GiB limit joined before exec as xmprun's
             children join, "0" to `tasks`; one poll() loop over the pidfds, rmdir at the end);
             also against that floor in every v1 hierarchy xmprun uses (floor-all), and with
             the rest of xmprun's default isolation (floor-iso: the default seccomp filter in
             every child, the default device allowlist as a BPF program on every worker's
             cgroup2 directory, the code xmprun uses, and each worker's cpuset on one CPU, round
             robin, as `cpuset: auto` splits them); xmprun with cgroups off against plain
             fork+exec, and against fork+exec with the seccomp filter
  fork       start: fork, N workers forked from a C zygote that preloads nothing (bench/zygote.c),
             against the same launch in exec mode
  failure    rank 0 fails after 300 ms, N-1 others sleep: from its last instruction to the
             launcher's exit (SIGTERM to the rest, reap, cgroups removed, report written)
  console    8 workers x MIB of 128-byte lines, "[rank] " prefix, to /dev/null, a pipe and a
             regular file, against the C tagger; the pipe's reader and the file are checked line
             by line (none lost, cut, duplicated or spliced)
  rss        the launcher's RSS (and PSS) with 8 idle workers and its wakeups per second, against
             the floor, the floor with xmprun's libraries loaded, and the floor having used each
             of them once (bench_baseline_libs idle 8 SPEC); xmprun's RSS by mapping
  +contract  (launch, failure, rss) the floors again, as bench_baseline_libs: linked with the four
             libraries xmprun must use (libcgroup, libseccomp, libyaml, jansson), which their exec
             then loads, and ending with the durable report the contract asks for (SPEC.md
             section 5), written by xmprun's own atomic write (isolate/file.c) beside the
             cgroups' removal, as xmprun's is: the part of xmprun's time that any
             launcher under this contract, built on these libraries, spends as well
  peers      torchrun and torch.multiprocessing.spawn (Debian's python3-torch), when installed

--compare OTHER_XMPRUN[,...] runs other builds' xmprun beside this one in the launch and failure
cases (the same specs, in the same interleaving) and prints each one's medians and this build's
ratio to them: an A/B of builds, for a change smaller than the run-to-run spread of the floors.

usage: bench/run.py [BUILD_DIR] [--reps R] [--sizes 8,32,128] [--console-mib M] [--rss-reps R]
                    [--no-peers] [--only launch,failure,...] [--compare OTHER_XMPRUN[,...]]
"""
import argparse, atexit, os, shutil, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default="build")
ap.add_argument("--reps", type=int, default=15)
ap.add_argument("--sizes", default="8,32,128")
ap.add_argument("--fail-size", default="32", help="comma-separated worker counts")
ap.add_argument("--console-mib", type=int, default=100, help="MiB each of the 8 workers prints")
ap.add_argument("--console-reps", type=int, default=5)
ap.add_argument("--peer-reps", type=int, default=3)
ap.add_argument("--rss-reps", type=int, default=3)
ap.add_argument("--no-peers", action="store_true")
ap.add_argument("--only", default="launch,fork,failure,console,rss,peers")
ap.add_argument("--compare", default="", help="other builds' xmprun, comma-separated")
args = ap.parse_args()
compare = [os.path.abspath(p) for p in args.compare.split(",") if p]
only = set(args.only.split(","))
xmprun = os.path.abspath(os.path.join(args.build, "xmprun"))
baseline = os.path.abspath(os.path.join(args.build, "bench", "bench_baseline"))
zygote = os.path.abspath(os.path.join(args.build, "bench", "bench_zygote"))
baseline_libs = os.path.abspath(os.path.join(args.build, "bench", "bench_baseline_libs"))
tmp = tempfile.mkdtemp(prefix="xmprun-bench-")
report = os.path.join(tmp, "report.json")
py = "/usr/bin/python3"

# The v1 hierarchies xmprun makes a directory in for these specs (hybrid host: memory for the
# limit, cpuset for the worker's CPUs), for the second floor.
own = {l.split(":")[1]: l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup")}
v1 = [c for c in ("memory", "cpuset") if any(c in k.split(",") for k in own)]
floor_min = "memory" if "memory" in v1 else ""
floor_all = ",".join(v1)


# A cgroup.procs write after a quiet spell waits for an RCU grace period (the kernel's percpu
# rwsem goes back to its fast path one grace period after its last writer), and a case that
# followed another within that window would skip it. The floors and xmprun's children join
# through `tasks`, which takes no such lock; every case still starts cold, as a job launched on
# a quiet machine does.
COLD_S = 0.1


def run(cmd, env=None, stdout=subprocess.DEVNULL):
    time.sleep(COLD_S)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE)
    return time.perf_counter() - t0, r


def ms(samples):
    return statistics.median(samples) * 1000.0


def timed(name, cmd):
    """cmd: argv, or (argv, extra environment)."""
    cmd, env = with_env(cmd)
    t, r = run(cmd, env=env)
    check(name, r)
    return t


def interleaved(cases, reps, measure=timed):
    """measure(name, cmd) for every case, reps times, interleaved so that drift on the machine
    affects all alike: name -> samples."""
    res = {k: [] for k in cases}
    for _ in range(reps):
        for k, cmd in cases.items():
            res[k].append(measure(k, cmd))
    return res


def with_env(cmd, base=None):
    if isinstance(cmd, tuple):
        return cmd[0], dict(base if base is not None else os.environ, **cmd[1])
    return cmd, base


# The contract floors write their report where xmprun writes its own (a disk directory).
contract_env = {"BENCH_REPORT": os.path.join(tmp, "floor-report.json")}


def contract(*argv):
    return ([baseline_libs, *argv], contract_env)


shm = tempfile.mkdtemp(prefix="xmprun-bench-", dir="/dev/shm") if os.path.isdir("/dev/shm") else tmp
# Also when a case fails (sys.exit): nothing of the bench's stays behind.
atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in (tmp, shm)])


def spec(name, n, command, extra="", report=report):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"version: 1\nname: {name}\nworkers: {n}\ndevices: {{kind: cpu}}\n"
                f"command: {command}\nlogs: {{console: none}}\nreport: {report}\n"
                f"resources: {{worker: {{memory: 1Gi}}}}\n{extra}")
    return path


def with_compare(cases, spec_path):
    """cases plus, for each --compare build, its xmprun on the same spec."""
    return dict(cases, **{f"cmp{j}": [b, "-q", spec_path] for j, b in enumerate(compare)})


def print_compare(title, rows):
    """rows: (label, medians) of one section; each --compare build against this one."""
    if not compare:
        return
    print(f"\n## {title}: this build against the others (--compare), in the same run; "
          "ratio = this build's median over the other's")
    for j, b in enumerate(compare):
        print(f"# [{j}] {b}")
    print(f"{'N':>4} {'xmprun':>7}" + "".join(f" {f'[{j}]':>7} {'ratio':>6}" for j in range(len(compare)))
          + "   (ms)")
    for label, m in rows:
        print(f"{label:>4} {m['xmprun']:>7.2f}" +
              "".join(f" {m[f'cmp{j}']:>7.2f} {m['xmprun'] / m[f'cmp{j}']:>6.3f}"
                      for j in range(len(compare))))


def check(name, r, want=0):
    if r.returncode != want:
        sys.exit(f"{name} exited {r.returncode}, expected {want}: {r.stderr.decode()[-2000:]}")


def torch_ok():
    if args.no_peers or "peers" not in only:
        return False
    return subprocess.run([py, "-c", "import torch.distributed.run"], capture_output=True).returncode == 0


def load():
    return open("/proc/loadavg").read().split()[0]


peers = torch_ok()
print(f"# xmprun bench: {os.uname().nodename}, {os.cpu_count()} CPUs, load {load()} at start, "
      f"{args.reps} reps interleaved, medians")
print("# tmpfs = xmprun with its report on /dev/shm: what the report's two fsyncs (file and directory)\n"
      "# cost on this disk; every other xmprun column writes it to a disk directory, durably")
print(f"# floor = cgroup2 + v1 {floor_min or 'none'} (the limit); "
      f"floor-all = cgroup2 + v1 {floor_all or 'none'} (every hierarchy xmprun uses);\n"
      "# floor-iso = floor-all + the rest of xmprun's default isolation (its seccomp filter and\n"
      "# device program, each worker's cpuset on one CPU)")

if "launch" in only:
    print("\n## launch -> exit, N workers of /bin/true")
    print(f"{'N':>4} {'floor':>7} {'floor-all':>9} {'floor-iso':>9} {'xmprun':>7} {'/floor':>6} "
          f"{'/all':>5} {'/iso':>5} {'tmpfs':>7} {'/iso':>5} {'iso+contract':>12} {'/iso+c':>6}   (ms)")
    off_rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        path = spec(f"bench-true-{n}", n, "[/bin/true]")
        shm_path = spec(f"bench-true-shm-{n}", n, "[/bin/true]", report=os.path.join(shm, "r.json"))
        off_shm = spec(f"bench-true-off-shm-{n}", n, "[/bin/true]", "isolation: {cgroups: off}\n",
                       report=os.path.join(shm, "r.json"))
        off = spec(f"bench-true-off-{n}", n, "[/bin/true]", "isolation: {cgroups: off}\n")
        cases = with_compare({
            "fork": [baseline, "launch", str(n)],
            "forksc": [baseline, "launch", str(n), "confined"],
            "floor": [baseline, "isolated", str(n), floor_min],
            "all": [baseline, "isolated", str(n), floor_all],
            "iso": [baseline, "isolated", str(n), floor_all, "confined"],
            "isoc": contract("isolated", str(n), floor_all, "confined"),
            "forkc": contract("launch", str(n), "confined"),
            "xmprun": [xmprun, "-q", path],
            "shm": [xmprun, "-q", shm_path],
            "off": [xmprun, "-q", off],
            "offshm": [xmprun, "-q", off_shm],
        }, path)
        m = {k: ms(v) for k, v in interleaved(cases, args.reps).items()}
        print(f"{n:>4} {m['floor']:>7.2f} {m['all']:>9.2f} {m['iso']:>9.2f} {m['xmprun']:>7.2f} "
              f"{m['xmprun'] / m['floor']:>6.2f} {m['xmprun'] / m['all']:>5.2f} "
              f"{m['xmprun'] / m['iso']:>5.2f} {m['shm']:>7.2f} {m['shm'] / m['iso']:>5.2f} "
              f"{m['isoc']:>12.2f} {m['xmprun'] / m['isoc']:>6.2f}")
        off_rows.append((n, m))
    print("\n## launch -> exit with cgroups off, against fork+exec (+seccomp: each child loads the filter)")
    print("# +contract: +seccomp, linked with xmprun's libraries, and the durable report")
    print(f"{'N':>4} {'fork+exec':>9} {'+seccomp':>8} {'no-cg':>7} {'/fork':>6} {'/+sc':>5} "
          f"{'no-cg,tmpfs':>11} {'/+sc':>5} {'+contract':>9} {'/+c':>5}   (ms)")
    for n, m in off_rows:
        print(f"{n:>4} {m['fork']:>9.2f} {m['forksc']:>8.2f} {m['off']:>7.2f} "
              f"{m['off'] / m['fork']:>6.2f} {m['off'] / m['forksc']:>5.2f} {m['offshm']:>11.2f} "
              f"{m['offshm'] / m['forksc']:>5.2f} {m['forkc']:>9.2f} {m['off'] / m['forkc']:>5.2f}")
    print_compare("launch -> exit", off_rows)

if "fork" in only:
    print("\n## start: fork, N workers forked from a zygote that preloads nothing, against exec mode")
    print(f"{'N':>4} {'exec':>7} {'fork':>7} {'/exec':>6}   (ms)")
    for n in [int(s) for s in args.sizes.split(",")]:
        cases = {"exec": [xmprun, "-q", spec(f"bench-true-{n}", n, "[/bin/true]")],
                 "fork": [xmprun, "-q", spec(f"bench-fork-{n}", n, f"[{zygote}]", "start: fork\n")]}
        m = {k: ms(v) for k, v in interleaved(cases, args.reps).items()}
        print(f"{n:>4} {m['exec']:>7.2f} {m['fork']:>7.2f} {m['fork'] / m['exec']:>6.2f}")

stamp = os.path.join(tmp, "stamp")
fenv = dict(os.environ, BENCH_STAMP=stamp, BENCH_FAIL_MS="300")


def fail_latency(cmd, want=1, env=fenv):
    cmd, env = with_env(cmd, env)
    if os.path.exists(stamp):
        os.unlink(stamp)
    time.sleep(COLD_S)
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic_ns()
    if r.returncode not in (want if isinstance(want, tuple) else (want,)):
        sys.exit(f"{cmd[0]} exited {r.returncode}, expected {want}: {r.stderr.decode()[-2000:]}")
    with open(stamp) as f:
        return (end - int(f.read())) / 1e9


if "failure" in only:
    for n in [int(x) for x in args.fail_size.split(",")]:
        print(f"\n## failure -> exit, N={n}: rank 0 exits 1 after 300 ms, {n - 1} sleepers get SIGTERM")
        path = spec(f"bench-fail-{n}", n, f"[{baseline}, worker]", "on_failure: {grace: 5s}\n")
        # A report path of its own: its stacks files beside it would otherwise be removed by
        # every run of the other spec (a cost that is not the default's).
        always = spec(f"bench-fail-always-{n}", n, f"[{baseline}, worker]",
                      "on_failure: {grace: 5s, stacks: always}\n",
                      report=os.path.join(tmp, "always.json"))
        off = spec(f"bench-fail-off-{n}", n, f"[{baseline}, worker]",
                   "on_failure: {grace: 5s}\nisolation: {cgroups: off}\n")
        shm_path = spec(f"bench-fail-shm-{n}", n, f"[{baseline}, worker]", "on_failure: {grace: 5s}\n",
                        report=os.path.join(shm, "r.json"))
        cases = with_compare({
            "fork": [baseline, "failfast", str(n)],
            "floor": [baseline, "failfast", str(n), floor_min],
            "all": [baseline, "failfast", str(n), floor_all],
            "iso": [baseline, "failfast", str(n), floor_all, "confined"],
            "isoc": contract("failfast", str(n), floor_all, "confined"),
            "xmprun": [xmprun, "-q", path],
            "always": [xmprun, "-q", always],
            "shm": [xmprun, "-q", shm_path],
            "off": [xmprun, "-q", off],
        }, path)
        res = interleaved(cases, args.reps, lambda k, cmd: fail_latency(cmd))
        m = {k: ms(v) for k, v in res.items()}
        print(f"{'N':>4} {'fork+exec':>9} {'floor':>7} {'floor-all':>9} {'floor-iso':>9} {'xmprun':>7} "
              f"{'/floor':>6} {'/all':>5} {'/iso':>5} {'tmpfs':>7} {'/iso':>5} {'no-cg':>7} {'/fork':>6}"
              f" {'iso+contract':>12} {'/iso+c':>6} {'stacks:always':>13} {'/iso+c':>6}   (ms)")
        print(f"{n:>4} {m['fork']:>9.2f} {m['floor']:>7.2f} {m['all']:>9.2f} {m['iso']:>9.2f} "
              f"{m['xmprun']:>7.2f} {m['xmprun'] / m['floor']:>6.2f} {m['xmprun'] / m['all']:>5.2f} "
              f"{m['xmprun'] / m['iso']:>5.2f} {m['shm']:>7.2f} {m['shm'] / m['iso']:>5.2f} "
              f"{m['off']:>7.2f} {m['off'] / m['fork']:>6.2f} {m['isoc']:>12.2f} "
              f"{m['xmprun'] / m['isoc']:>6.2f} {m['always']:>13.2f} {m['always'] / m['isoc']:>6.2f}")
        print_compare("failure -> exit", [(n, m)])

if "console" in only:
    mib = args.console_mib
    total = 8 * mib
    print(f"\n## console: 8 workers x {mib} MiB of 128-byte lines, '[rank] ' prefix (MiB/s of input)")
    path = spec("bench-console", 8, f"[{baseline}, lines, '{mib}']", "isolation: {cgroups: off}\n")
    with open(path) as f:
        text = f.read().replace("logs: {console: none}", "logs: {console: prefix}")
    with open(path, "w") as f:
        f.write(text)
    out_file = os.path.join(tmp, "console.out")
    verify = [baseline, "verify", "8", str(mib)]
    launchers = {"tagger": [baseline, "tagger", "8", str(mib)], "xmprun": [xmprun, "-q", path]}

    def to_null(cmd):
        with open("/dev/null", "w") as null:
            t, r = run(cmd, stdout=null)
        check(cmd[0], r)
        return t

    def to_pipe(cmd):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        v = subprocess.run(verify, stdin=p.stdout, capture_output=True)
        p.stdout.close()
        rc = p.wait()
        t = time.perf_counter() - t0
        if rc != 0 or v.returncode != 0:
            sys.exit(f"{cmd[0]} to a pipe: exit {rc}, verify: {v.stderr.decode()}")
        return t

    def to_file(cmd):
        with open(out_file, "w") as f:
            t, r = run(cmd, stdout=f)
        check(cmd[0], r)
        with open(out_file) as f:
            v = subprocess.run(verify, stdin=f, capture_output=True)
        if v.returncode != 0:
            sys.exit(f"{cmd[0]} to a file: verify: {v.stderr.decode()}")
        return t

    print(f"{'to':>10} {'tagger':>8} {'xmprun':>8} {'ratio':>6}   (every line checked: pipe, file)")
    for dest, fn in (("/dev/null", to_null), ("pipe", to_pipe), ("file", to_file)):
        res = interleaved(launchers, args.console_reps, lambda k, cmd: fn(cmd))
        rate = {k: total / statistics.median(v) for k, v in res.items()}
        print(f"{dest:>10} {rate['tagger']:>8.0f} {rate['xmprun']:>8.0f} "
              f"{rate['xmprun'] / rate['tagger']:>6.2f}")
    os.unlink(out_file)


def smaps_parts(pid):
    """RSS in KiB by what is mapped: each library, xmprun's binary, heap, stack, other anon."""
    parts, name = {}, None
    for line in open(f"/proc/{pid}/smaps"):
        f = line.split()
        if not f[0].endswith(":"):  # a mapping's header: range, perms, offset, dev, inode, path
            name = os.path.basename(f[5]).split(".so")[0] if len(f) > 5 else "anon"
        elif f[0] == "Rss:":
            parts[name] = parts.get(name, 0) + int(f[1])
    return {k: v for k, v in parts.items() if v > 0}


def rss_and_wakeups(cmd):
    """RSS and PSS (MiB) after 1 s, the context switches in the next second, the parts."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    if p.poll() is not None:
        sys.exit(f"{cmd[0]} exited {p.returncode} before its RSS was read: "
                 f"{p.stderr.read().decode()[-2000:]}")

    def status():
        d = {}
        for l in open(f"/proc/{p.pid}/status"):
            k, _, v = l.partition(":")
            d[k] = (v.split() or [""])[0]
        return d
    a = status()
    pss = next(int(l.split()[1]) for l in open(f"/proc/{p.pid}/smaps_rollup") if l.startswith("Pss:"))
    parts = smaps_parts(p.pid)
    time.sleep(1.0)
    b = status()
    if p.wait() != 0:
        sys.exit(f"{cmd[0]} exited {p.returncode} in the RSS case")
    wake = sum(int(b[k]) - int(a[k]) for k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    return int(b["VmRSS"]) / 1024.0, pss / 1024.0, wake, parts


if "rss" in only:
    print("\n## launcher RSS with 8 idle workers (sleep 3), and its context switches in 1 s of idleness")
    print("# PSS: each shared page counted once among the processes that map it")
    path = spec("bench-idle", 8, "[/bin/sleep, '3']")
    rows = {"floor (baseline idle 8)": [baseline, "idle", "8"],
            "floor, libraries loaded": [baseline_libs, "idle", "8"],
            "floor, libraries used": [baseline_libs, "idle", "8", path],
            "xmprun": [xmprun, "-q", path]}
    for name, cmd in rows.items():
        samples = [rss_and_wakeups(cmd) for _ in range(args.rss_reps)]
        rss = statistics.median(s[0] for s in samples)
        pss = statistics.median(s[1] for s in samples)
        wake = max(s[2] for s in samples)
        print(f"{name:>24}: RSS {rss:.2f} MiB, PSS {pss:.2f} MiB, {wake} wakeups/s")
    parts = samples[-1][3]  # the last row's: xmprun's
    print("# xmprun's RSS by mapping (KiB): " +
          ", ".join(f"{k} {v}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])))

if peers:
    n = 8
    print(f"\n## peers (Debian python3-torch), N={n}, {args.peer_reps} reps")
    mp = os.path.join(tmp, "mp_spawn.py")
    with open(mp, "w") as f:
        f.write(f"""import os, sys, time, torch.multiprocessing as mp
def fn(rank, fail):
    if not fail:
        return
    if rank != 0:
        time.sleep(60)
        return
    time.sleep(0.3)
    with open({stamp!r}, "w") as f:
        f.write(str(time.monotonic_ns()))
    sys.exit(1)
if __name__ == "__main__":
    try:
        mp.spawn(fn, args=(sys.argv[1] == "fail",), nprocs={n})
    except mp.ProcessExitedException:
        sys.exit(1)
""")
    # --redirects/--tee 1 (stdout): Debian's torch 1.13 on Python 3.11 cannot parse the default "0"
    # (Python 3.11 iterates no zero or multi-bit Std flag), so stdout also goes to log files.
    # The monitor interval is torchrun's default (5 s in 1.13): what users get.
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(tmp, "torchrun"),
                "--no_python"]
    launch = {
        "xmprun": [xmprun, "-q", spec(f"bench-true-{n}", n, "[/bin/true]")],
        "torchrun": torchrun + ["/bin/true"],
        "mp.spawn": [py, mp, "ok"],
    }
    fail = {
        "xmprun": ([xmprun, "-q", spec(f"bench-fail-{n}", n, f"[{baseline}, worker]",
                                       "on_failure: {grace: 5s}\n")], 1),
        "torchrun": (torchrun + [baseline, "worker"], 1),
        "mp.spawn": ([py, mp, "fail"], 1),
    }
    lt = {k: [] for k in launch}
    ft = {k: [] for k in fail}
    for _ in range(args.peer_reps):
        for k, cmd in launch.items():
            t, r = run(cmd)
            check(k, r)
            lt[k].append(t)
        for k, (cmd, want) in fail.items():
            ft[k].append(fail_latency(cmd, want))
    print(f"{'':>10} {'launch ms':>10} {'failure ms':>11}")
    for k in launch:
        print(f"{k:>10} {ms(lt[k]):>10.1f} {ms(ft[k]):>11.1f}")

print(f"\n# load {load()} at the end")
