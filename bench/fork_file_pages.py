#!/usr/bin/python3
"""Does memory.min on the zygote's cgroup keep shared file-backed pages (an mmap'd weights file)
charged to the zygote under job memory pressure, instead of being reclaimed and re-charged to the
worker that faults them again? Pure cgroup v2 only (run it in the guest: vm-run). As root.

A job cgroup with memory.max = FILE + 128 MiB holds `zygote` and `worker`. The zygote maps a
FILE MiB file and prefaults it; a forked child moves into `worker` and reads it all (charged to
nobody new); then the worker allocates PRESSURE MiB of anonymous memory, which makes the kernel
reclaim inside the job, and reads the file again. Printed: the file bytes charged to the worker
and the zygote afterwards, without and with memory.min on the zygote (and the job).

usage: bench/fork_file_pages.py [DIR_ON_A_REAL_FS] [--mib 256] [--pressure 192]
"""
import argparse, mmap, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("dir", nargs="?", default=os.getcwd())
ap.add_argument("--mib", type=int, default=256)
ap.add_argument("--pressure", type=int, default=192)
args = ap.parse_args()
ROOT = "/sys/fs/cgroup"
if not os.path.exists(ROOT + "/cgroup.controllers"):
    sys.exit("needs pure cgroup v2")
own = open("/proc/self/cgroup").read().split("::", 1)[1].strip()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def stat(cg, key):
    for line in open(cg + "/memory.stat"):
        k, v = line.split()
        if k == key:
            return int(v)
    return -1


def experiment(protect):
    base = ROOT + own.rstrip("/")
    # xmprun's own rule: a cgroup with children holds no processes, so this one moves to a leaf.
    leaf = base + "/fpself"
    os.makedirs(leaf, exist_ok=True)
    write(leaf + "/cgroup.procs", "0")
    try:
        write(base + "/cgroup.subtree_control", "+memory")
    except OSError:
        pass
    job = base + "/fpjob"
    os.mkdir(job)
    write(job + "/cgroup.subtree_control", "+memory")
    z, w = job + "/zygote", job + "/worker"
    os.mkdir(z)
    os.mkdir(w)
    size = args.mib << 20
    write(job + "/memory.max", str(size + (128 << 20)))
    if protect:
        write(job + "/memory.min", str(size + (16 << 20)))
        write(z + "/memory.min", str(size + (16 << 20)))
    path = os.path.join(args.dir, "fp-weights.bin")
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(args.mib):
            f.write(chunk)
    os.posix_fadvise(os.open(path, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)
    r, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the zygote
        write(z + "/cgroup.procs", "0")
        fd = os.open(path, os.O_RDONLY)
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        s = sum(m[i] for i in range(0, size, 4096))  # prefault
        child = os.fork()
        if child == 0:  # the worker
            write(w + "/cgroup.procs", "0")
            s = sum(m[i] for i in range(0, size, 4096))
            first = stat(w, "file")
            hog = bytearray(args.pressure << 20)
            for i in range(0, len(hog), 4096):
                hog[i] = 1
            s = sum(m[i] for i in range(0, size, 4096))
            os.write(wr, ("%d %d %d\n" % (first, stat(w, "file"), stat(z, "file"))).encode())
            os._exit(0)
        _, status = os.waitpid(child, 0)
        if status != 0:
            os.write(wr, b"-1 -1 -1\n")
        os._exit(0)
    os.close(wr)
    out = os.read(r, 256).decode().split()
    os.waitpid(pid, 0)
    oom = [l for l in open(w + "/memory.events") if l.startswith("oom_kill")]
    os.unlink(path)
    for d in (w, z, job):
        os.rmdir(d)
    return [int(x) for x in out], oom


print("| zygote memory.min | worker file after 1st read | worker file after pressure + re-read "
      "| zygote file after | worker oom |")
print("|---|---|---|---|---|")
for protect in (False, True):
    (first, after, zfile), oom = experiment(protect)
    print("| %s | %.1f MiB | %.1f MiB | %.1f MiB | %s |"
          % ("FILE + 16 MiB" if protect else "0", first / 2**20, after / 2**20, zfile / 2**20,
             oom[0].split()[1] if oom else "?"))
