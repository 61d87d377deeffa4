"""A multi-call start: fork zygote for the e2e tests (tests/e2e/test_fork.c), as probe.c is for
exec mode. Run by /usr/bin/python3 as a job's command: zygote.py MODE [--key value ...].

share:   preload --preload MiB (a torch tensor with --torch, else a bytearray), counting each
         preload in --count FILE; every worker reads all of it, rank --alloc-rank allocates
         --alloc MiB of private memory (and holds it --hold seconds), rank --fail-rank exits 3
         in restart --fail-restart
         (each result: rank, sum, fds open beyond stdio);
         spawn(gather=True) and print the results as JSON.
serial:  every worker runs MpSerialExecutor.run(f) and writes when f started and ended to
         --out DIR/serial-<rank>.
raise:   worker 1 raises ValueError.
nospawn: exits --code without calling spawn.  sleep: sleeps --seconds before spawn.
hold:    every worker writes --out DIR/running-<rank>, then sleeps.
twice:   calls spawn twice.  nprocs: spawn(nprocs=--n).  nojoin: spawn(join=False).
cuda:    a stand-in torch whose CUDA is initialised, then spawn.
import-fails: raises ModuleNotFoundError before it imports xmprun (no error file).
confined: every worker prints its uid, RLIMIT_NOFILE and its NoNewPrivs and Seccomp status;
         rank --ptrace-rank then calls ptrace(PTRACE_TRACEME).
"""

import json
import os
import sys
import time
import types

if sys.argv[1] == "import-fails":
    # Before `import xmprun`: no client writes an error file; only its stderr says why.
    raise ModuleNotFoundError("No module named 'trainer_config'")

import xmprun as xmp  # noqa: E402 (after the mode that fails before it)

MODE = sys.argv[1]
OPTS = dict(zip(sys.argv[2::2], sys.argv[3::2]))


def opt(name, default=None):
    return OPTS.get("--" + name, default)


def noop(index):
    return index


if MODE == "share":
    if opt("count"):
        with open(opt("count"), "a") as f:
            f.write("preload\n")
    mib = int(opt("preload", "0"))
    if opt("torch"):
        import torch

        DATA = torch.ones(mib << 18, dtype=torch.float32)  # touched: every page is charged here
    else:
        DATA = bytearray(b"\x01" * (mib << 20))
    print("preloaded %d MiB" % mib, flush=True)
    # On pure cgroup v2, the protection xmprun gives the zygote's pages (memory.min), where it
    # made the zygote a cgroup (not where none could be written: the root has no memory.min).
    own = open("/proc/self/cgroup").read()
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers") and own.startswith("0::"):
        path = "/sys/fs/cgroup" + own[3:].strip()
        for name in ("memory.min", "../memory.min"):
            if not os.path.exists(os.path.join(path, name)):
                continue
            with open(os.path.join(path, name)) as f:
                print("zygote %s=%s" % (name, f.read().strip()), flush=True)

    def work(index):
        if opt("torch"):
            total = int(DATA.sum().item())  # reads every page
        else:
            total = DATA.count(1)
        rank = os.environ["RANK"]
        if rank == opt("alloc-rank"):
            private = b"\x02" * (int(opt("alloc")) << 20)  # written, so charged to this worker
            total += len(private) - len(private)
            time.sleep(float(opt("hold", 0)))
        if rank == opt("fail-rank") and os.environ["XMPRUN_RESTART_COUNT"] == opt("fail-restart"):
            sys.exit(3)
        # What the worker kept open beyond its stdio (listdir's own fd is the one expected):
        # a sibling's pipe end kept here would hang the run.
        return [index, total, len(os.listdir("/proc/self/fd")) - 3]

    print("gathered " + json.dumps(xmp.spawn(work, gather=True)), flush=True)
elif MODE == "serial":
    EXEC = xmp.MpSerialExecutor()

    def critical():
        start = time.monotonic()
        time.sleep(0.2)
        return start, time.monotonic()

    def run(index):
        start, end = EXEC.run(critical)
        with open(os.path.join(opt("out"), "serial-%d" % index), "w") as f:
            f.write("%.6f %.6f\n" % (start, end))

    xmp.spawn(run)
elif MODE == "raise":

    def boom(index):
        if index == 1:
            raise ValueError("boom from rank 1")
        return index

    xmp.spawn(boom)
elif MODE == "load-fails":
    raise FileNotFoundError("checkpoint /ckpt/model.pt not found")
elif MODE == "hold":

    def hold(index):
        open(os.path.join(opt("out"), "running-%d" % index), "w").close()
        time.sleep(60)

    xmp.spawn(hold)
elif MODE == "sleep":
    time.sleep(float(opt("seconds", "60")))
    xmp.spawn(noop)
elif MODE == "nospawn":
    sys.exit(int(opt("code", "1")))
elif MODE == "twice":
    xmp.spawn(noop)
    xmp.spawn(noop)
elif MODE == "nprocs":
    xmp.spawn(noop, nprocs=int(opt("n")))
elif MODE == "nojoin":
    xmp.spawn(noop, join=False)
elif MODE == "cuda":
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)
    sys.modules["torch"] = torch
    xmp.spawn(noop)
elif MODE == "confined":

    def confined(index):
        import ctypes
        import resource

        status = dict(line.split(":\t", 1) for line in open("/proc/self/status"))
        print("uid=%d nofile=%d nnp=%s seccomp=%s" % (
            os.getuid(), resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            status["NoNewPrivs"].strip(), status["Seccomp"].strip()), flush=True)
        if index == int(opt("ptrace-rank", "-1")):
            ctypes.CDLL(None, use_errno=True).ptrace(0, 0, None, None)
            print("ptrace returned", flush=True)

    xmp.spawn(confined)
elif MODE == "cgroups":

    def cgroups(index):
        for line in open("/proc/self/cgroup"):
            print("cgroup " + line.strip(), flush=True)

    xmp.spawn(cgroups)
else:
    sys.exit("zygote.py: unknown mode " + MODE)
