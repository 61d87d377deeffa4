/* The floors xmprun is measured against (bench/run.py), and the workers the benchmarks run:
 *   baseline launch N            fork+exec N children running /bin/true, wait for all
 *   baseline launch N confined   the same, each child with no_new_privs and xmprun's default
 *                                seccomp filter (isolate/'s, precompiled) loaded before exec
 *   baseline isolated N HIERS    the same-isolation floor: a job cgroup and one cgroup per worker
 *                                in cgroup2 (clone3 CLONE_PIDFD|CLONE_INTO_CGROUP) and in each v1
 *                                hierarchy of the comma-separated HIERS ("memory" gets a 1 GiB
 *                                limit, "pids" 4096), joined by the child before exec (through
 *                                `tasks`, as xmprun's children join); one poll()
 *                                loop over the pidfds; rmdir of every directory at the end. On
 *                                pure cgroup v2 (HIERS ""), the limits go in the cgroup2
 *                                directories (memory.max 1 GiB, pids.max 4096, confined: a
 *                                one-CPU cpuset.cpus), and in a non-root cgroup it first does the
 *                                delegation any launcher alone there must: moves itself into a
 *                                leaf, enables the controllers in its cgroup and the job's (one
 *                                write each), and at the end disables them (one write), moves
 *                                back and removes the leaf (bench/v2.py)
 *   baseline isolated N HIERS confined
 *                                the same, and what xmprun's default isolation adds in the
 *                                kernel: the default seccomp filter as above, the default
 *                                device allowlist as one BPF program attached to every worker's
 *                                cgroup2 directory (isolate/'s code, as xmprun does it), and
 *                                each worker's cpuset on one CPU, round robin (`cpuset: auto`)
 *   baseline failfast N [HIERS [confined]]
 *                                N `baseline worker` children (plain, or isolated as above); at the
 *                                first exit SIGTERM the rest, wait for them, exit with its code
 *   baseline worker              RANK 0: sleep BENCH_FAIL_MS, write CLOCK_MONOTONIC ns to
 *                                BENCH_STAMP, exit 1; other ranks: sleep 60 s
 *   baseline lines MIB           write MIB MiB of 128-byte lines "RANK SEQ xxx...\n" to stdout
 *   baseline tagger N MIB        the console floor: N `baseline lines MIB` children, their lines
 *                                read through one poll() loop, prefixed "[rank] " and written to
 *                                stdout from one buffer per destination
 *   baseline verify N MIB        read stdin and check it is exactly the tagged lines of N workers:
 *                                each line whole, none lost, duplicated, reordered or spliced
 *   baseline idle N              supervise N children sleeping 3 s (the RSS floor)
 *   baseline_libs idle N SPEC    the same, having first used each library that xmprun must use
 *                                the way any launcher under the contract uses it, once: SPEC
 *                                parsed with libyaml, libcgroup's init, a JSON record encoded
 *                                with jansson (libseccomp is linked only: xmprun's built-in
 *                                profiles are compiled when it is built)
 *   baseline cgexec DIR CMD...   run CMD alone in the cgroup2 directory DIR (CLONE_INTO_CGROUP),
 *                                its stdout to /dev/null; print its run time (ms) and status
 *   baseline cgmove FILE         write our own pid to the cgroup.procs FILE of the cgroup we are
 *                                already in, twice, and print how long each write took (the first
 *                                move into a v1 cgroup after a quiet spell waits for an RCU grace
 *                                period)
 * bench_baseline_libs is this program linked with the four libraries xmprun must use
 * (libcgroup, libseccomp, libyaml, jansson), which its exec then loads; with BENCH_REPORT=PATH
 * its launch, isolated and failfast end with the work the contract asks of any launcher at a
 * job's end (SPEC.md section 5): a report of each worker written durably to PATH. Both
 * together are a floor of what the contract and the project's dependencies cost before any code
 * of xmprun's own runs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/cgroup.h"
#include "isolate/devices.h"
#include "isolate/seccomp.h"

#ifdef BENCH_LIBS
#include "isolate/file.h"

#include <jansson.h>
#include <libcgroup.h>
#include <yaml.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define LINE_LEN 128
#define MAX_HIER 8

/* "confined": every child loads xmprun's default seccomp filter before exec, as xmprun's do by
 * default (the program the build compiled, loaded with the one call isolate/seccomp.c makes;
 * the floor links neither libseccomp nor libcgroup, whose loading would slow its start). */
static bool confined;

static void
confine_child(void)
{
    const struct xmp_scmp_prog *p = &xmp_seccomp_builtins[XMP_SCMP_DEFAULT];
    struct sock_fprog prog = {.len = p->len, .filter = (struct sock_filter *)p->insns};

    if (confined && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                     syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0))
        _exit(125);
}

static pid_t
spawn(char *const argv[], int rank, int out_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        char env[32];
        snprintf(env, sizeof(env), "%d", rank);
        setenv("RANK", env, 1);
        if (out_fd >= 0)
            dup2(out_fd, 1);
        confine_child();
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int
worker(void)
{
    const char *rank = getenv("RANK"), *stamp = getenv("BENCH_STAMP");
    if (rank == NULL || strcmp(rank, "0") != 0) {
        sleep(60);
        return 0;
    }
    long ms = getenv("BENCH_FAIL_MS") ? atol(getenv("BENCH_FAIL_MS")) : 300;
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L}, now;
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (stamp != NULL) {
        FILE *f = fopen(stamp, "w");
        if (f != NULL) {
            fprintf(f, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
            fclose(f);
        }
    }
    return 1;
}

static double
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Runs argv alone in the cgroup2 directory dir (clone3 CLONE_INTO_CGROUP: no cgroup.procs
 * write, so nothing of the move is timed), its stdout to /dev/null, and prints how long it ran
 * (ms) and its exit status: how bench/v2.py starts each launcher alone in a fresh cgroup. */
static int
cgexec(const char *dir, char *const argv[])
{
    int cgfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), status = 0;
    double t0 = now_ms();
    struct clone_args ca = {
        .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)cgfd};
    pid_t pid = cgfd < 0 ? -1 : (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));

    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 1) < 0)
            _exit(125);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        perror("cgexec");
        return 2;
    }
    printf("%.3f %d\n", now_ms() - t0,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}

static int
cgmove(const char *procs)
{
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%d", (int)getpid());

    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(procs, "w");
        if (f == NULL)
            return 1;
        double t0 = now_ms();
        int ok = fwrite(pid, 1, (size_t)len, f) == (size_t)len && fflush(f) == 0;
        double t1 = now_ms();
        fclose(f);
        if (!ok)
            return 1;
        printf("%.3f\n", t1 - t0);
    }
    return 0;
}

#ifdef BENCH_LIBS
/* The libraries' code that a launcher touches by using each of them once (see idle). */
static int
use_libs(const char *spec)
{
    FILE *f = fopen(spec, "re");
    yaml_parser_t parser;
    yaml_event_t ev;
    int events = 0;
    bool end = false;

    if (f == NULL || !yaml_parser_initialize(&parser))
        return -1;
    yaml_parser_set_input_file(&parser, f);
    while (!end && yaml_parser_parse(&parser, &ev)) {
        end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        events++;
    }
    yaml_parser_delete(&parser);
    fclose(f);
    if (!end || cgroup_init() != 0)
        return -1;
    json_t *doc = json_pack("{s:s, s:i, s:[{s:i, s:s}]}", "spec", spec, "events", events, "workers",
                            "rank", 0, "state", "running");
    char *text = doc != NULL ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    free(text);
    return text != NULL ? 0 : -1;
}

/* The report that the contract asks of any launcher at a job's end (SPEC.md section 5), to
 * BENCH_REPORT: a record of each worker encoded with jansson and written with xmprun's own
 * atomic write (isolate/file.c: temp file, fsync, rename, fsync of the directory, the fsyncs on
 * a thread), started before the floor removes its cgroups and finished after, as xmprun's is. */
struct report {
    struct xmp_file_commit commit;
    bool started;
};

static void
report_start(struct report *r, int n)
{
    const char *path = getenv("BENCH_REPORT");
    json_t *workers = json_array();
    struct xmp_error err = {0};

    r->started = false;
    if (path == NULL)
        return;
    for (int i = 0; i < n; i++)
        json_array_append_new(workers,
                              json_pack("{s:i, s:s, s:i, s:{s:i, s:i}, s:{s:f, s:f}, s:[]}", "rank",
                                        i, "state", "exited", "exit_code", 0, "memory",
                                        "limit_bytes", 1 << 30, "peak_bytes", 0, "cpu", "user_s",
                                        0.0, "system_s", 0.0, "stderr_tail"));
    json_t *doc = json_pack("{s:s, s:o}", "schema", "bench-floor", "workers", workers);
    char *text = doc != NULL ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    if (text == NULL || xmp_file_write_atomic_start(path, text, true, &r->commit, &err) < 0) {
        fprintf(stderr, "baseline: %s: %s\n", path, text == NULL ? "encode" : err.msg);
        exit(2);
    }
    free(text);
    r->started = true;
}

static void
report_finish(struct report *r)
{
    struct xmp_error err = {0};

    if (r->started && xmp_file_write_atomic_finish(&r->commit, &err) < 0) {
        fprintf(stderr, "baseline: %s\n", err.msg);
        exit(2);
    }
}
#else
/* The plain floors write no report. */
struct report {
    bool started;
};

static void
report_start(struct report *r, int n)
{
    (void)n;
    r->started = false;
}

static void
report_finish(struct report *r)
{
    (void)r;
}
#endif

/* ---- the same-isolation floor ---- */

struct hier {
    char name[32];  /* "memory", or "" for cgroup2 */
    char job[4096]; /* the job's directory */
    bool v2_limits; /* pure cgroup v2: the limits go in the cgroup2 directories */
};

struct floor {
    struct hier h[MAX_HIER];
    int n;
    int n_workers;
    /* Pure cgroup v2, started in a non-root cgroup: the delegation any launcher does there (see
     * delegate), and undoes at the end. own: the cgroup it started in; ctl: what it enabled. */
    char own[4096];
    char ctl[64];
    struct xmp_dev_prog devices; /* confined: the program every worker's cgroup2 dir gets */
};

/* Our own cgroup in the hierarchy of controller name ("" for cgroup2), from /proc/self/cgroup. */
static int
own_path(const char *name, char *out, size_t size)
{
    char line[4096];
    FILE *f = fopen("/proc/self/cgroup", "re");
    int found = -1;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *c1 = strchr(line, ':'), *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        bool match = false;
        if (name[0] == '\0')
            match = c1[1] == '\0';
        else
            for (char *tok = strtok(c1 + 1, ","); tok != NULL; tok = strtok(NULL, ","))
                match = match || strcmp(tok, name) == 0;
        if (match) {
            snprintf(out, size, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
            found = 0;
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    return found;
}

static int
write_file(const char *dir, const char *file, const char *value)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, value, strlen(value));
    close(fd);
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

static int
read_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int
copy_file(const char *from, const char *to, const char *file)
{
    char buf[4096];
    return read_file(from, file, buf, sizeof(buf)) < 0 ? -1 : write_file(to, file, buf);
}

/* The nth CPU (round robin) of a cpuset list such as "0-3,8", -1 if none: a confined worker's,
 * as xmprun's default (`cpuset: auto`) splits the CPUs it may use evenly among the workers. */
static int
nth_cpu(const char *list, int nth)
{
    cpu_set_t set;
    int n;

    if (xmp_cpulist_parse(list, &set, NULL) < 0 || (n = CPU_COUNT(&set)) == 0)
        return -1;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && seen++ == nth % n)
            return c;
    return -1;
}

/* A v1 directory gets what it needs to be joinable (cpuset) and the limits xmprun sets; a
 * confined worker's cpuset (rank >= 0) holds one CPU of its parent's. */
static int
setup_dir(const struct hier *h, const char *parent, const char *dir, int rank)
{
    if (mkdir(dir, 0755) < 0)
        return -1;
    if (strcmp(h->name, "cpuset") == 0 && confined && rank >= 0) {
        char list[4096], cpu[16];
        if (read_file(parent, "cpuset.cpus", list, sizeof(list)) < 0)
            return -1;
        snprintf(cpu, sizeof(cpu), "%d", nth_cpu(list, rank));
        if (write_file(dir, "cpuset.cpus", cpu) < 0 || copy_file(parent, dir, "cpuset.mems") < 0)
            return -1;
    } else if (strcmp(h->name, "cpuset") == 0 && (copy_file(parent, dir, "cpuset.cpus") < 0 ||
                                                  copy_file(parent, dir, "cpuset.mems") < 0)) {
        return -1;
    }
    if (strcmp(h->name, "memory") == 0 && write_file(dir, "memory.limit_in_bytes", "1073741824"))
        return -1;
    /* Pure v2: a worker's limits in its cgroup2 directory, and its cpuset when confined. */
    if (h->name[0] == '\0' && h->v2_limits && rank >= 0) {
        char list[4096], cpu[16];
        if (write_file(dir, "memory.max", "1073741824") < 0 || write_file(dir, "pids.max", "4096"))
            return -1;
        if (confined) {
            if (read_file(parent, "cpuset.cpus.effective", list, sizeof(list)) < 0)
                return -1;
            snprintf(cpu, sizeof(cpu), "%d", nth_cpu(list, rank));
            if (write_file(dir, "cpuset.cpus", cpu) < 0)
                return -1;
        }
    }
    if (strcmp(h->name, "pids") == 0 && write_file(dir, "pids.max", "4096") < 0)
        return -1;
    return 0;
}

/* The default device allowlist on a worker's cgroup2 directory, the program loaded once. */
static int
attach_devices(struct floor *fl, const char *dir)
{
    cleanup_dev_rules struct xmp_dev_rules rules = {0};
    struct xmp_error err = {0};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    xmp_devices_add_defaults(&rules);
    if (fd < 0 || xmp_devices_attach_bpf(fd, &rules, &fl->devices, &err) < 0) {
        fprintf(stderr, "baseline: %s: %s\n", dir, fd < 0 ? strerror(errno) : err.msg);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Pure cgroup v2 in a non-root cgroup: the controllers the workers' limits need are enabled in
 * our own cgroup and the job's, each with one write, which the "no internal processes" rule
 * allows only once we have moved into a leaf of our own (as xmprun does, and any launcher
 * alone in its cgroup must). */
static int
delegate(struct floor *fl, const char *own)
{
    char leaf[4200];

    snprintf(fl->own, sizeof(fl->own), "%s", own);
    snprintf(leaf, sizeof(leaf), "%s/bench-self-%d", own, (int)getpid());
    if (mkdir(leaf, 0755) < 0 || write_file(leaf, "cgroup.procs", "0") < 0 ||
        write_file(own, "cgroup.subtree_control", fl->ctl) < 0)
        return -1;
    return 0;
}

/* Undoes delegate: the controllers off again (one write), back into our own cgroup, the leaf
 * removed, so that the cgroup is left as found. */
static void
undelegate(struct floor *fl)
{
    char leaf[4200], minus[64];

    if (fl->own[0] == '\0')
        return;
    snprintf(minus, sizeof(minus), "%s", fl->ctl);
    for (char *p = minus; (p = strchr(p, '+')) != NULL;)
        *p = '-';
    snprintf(leaf, sizeof(leaf), "%s/bench-self-%d", fl->own, (int)getpid());
    write_file(fl->own, "cgroup.subtree_control", minus);
    write_file(fl->own, "cgroup.procs", "0");
    rmdir(leaf);
}

static int
floor_init(struct floor *fl, const char *hiers, int n_workers)
{
    char list[256], own[2048], base[3072];
    const char *names[MAX_HIER] = {""}; /* cgroup2 first, then the v1 hierarchies */
    int n_names = 1;
    bool unified_mnt = access("/sys/fs/cgroup/unified", F_OK) == 0;

    fl->n = 0;
    fl->n_workers = n_workers;
    fl->devices.fd = -1;
    snprintf(list, sizeof(list), "%s", hiers);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok != NULL && n_names < MAX_HIER;
         tok = strtok_r(NULL, ",", &save))
        names[n_names++] = tok;
    for (int i = 0; i < n_names; i++) {
        struct hier *h = &fl->h[fl->n];
        const char *mnt = names[i][0] != '\0' ? names[i] : unified_mnt ? "unified" : "";
        snprintf(h->name, sizeof(h->name), "%s", names[i]);
        if (own_path(names[i], own, sizeof(own)) < 0) {
            fprintf(stderr, "baseline: no %s hierarchy\n", i > 0 ? names[i] : "cgroup2");
            return -1;
        }
        snprintf(base, sizeof(base), "/sys/fs/cgroup%s%s%s", mnt[0] ? "/" : "", mnt, own);
        snprintf(h->job, sizeof(h->job), "%s/bench-floor-%d", base, (int)getpid());
        h->v2_limits = i == 0 && n_names == 1 && !unified_mnt;
        if (h->v2_limits)
            snprintf(fl->ctl, sizeof(fl->ctl), "%s",
                     confined ? "+memory +pids +cpuset" : "+memory +pids");
        if (h->v2_limits && own[0] != '\0' && delegate(fl, base) < 0) {
            fprintf(stderr, "baseline: delegation in %s: %s\n", base, strerror(errno));
            return -1;
        }
        if (setup_dir(h, base, h->job, -1) < 0 ||
            (h->v2_limits && write_file(h->job, "cgroup.subtree_control", fl->ctl) < 0)) {
            fprintf(stderr, "baseline: %s: %s\n", h->job, strerror(errno));
            return -1;
        }
        fl->n++;
    }
    for (int w = 0; w < n_workers; w++)
        for (int i = 0; i < fl->n; i++) {
            char dir[4200];
            snprintf(dir, sizeof(dir), "%s/worker-%d", fl->h[i].job, w);
            if (setup_dir(&fl->h[i], fl->h[i].job, dir, w) < 0) {
                fprintf(stderr, "baseline: %s: %s\n", dir, strerror(errno));
                return -1;
            }
            if (confined && i == 0 && attach_devices(fl, dir) < 0)
                return -1;
        }
    return 0;
}

static void
floor_remove(struct floor *fl)
{
    for (int i = 0; i < fl->n; i++) {
        for (int w = 0; w < fl->n_workers; w++) {
            char dir[4200];
            snprintf(dir, sizeof(dir), "%s/worker-%d", fl->h[i].job, w);
            rmdir(dir);
        }
        rmdir(fl->h[i].job);
    }
    undelegate(fl);
    xmp_devices_prog_release(&fl->devices);
}

/* clone3 into the worker's cgroup2 directory; the child joins the v1 hierarchies, then execs.
 * It joins as xmprun's children do, the cheapest way: "0" to `tasks` moves the calling thread,
 * all of a single-threaded child, without the cgroup threadgroup lock that a cgroup.procs write
 * takes (and waits an RCU grace period for, see cgmove). */
static pid_t
floor_spawn(struct floor *fl, int rank, char *const argv[], int *pidfd)
{
    char dir[4200];
    int procs[MAX_HIER], n = 0;

    snprintf(dir, sizeof(dir), "%s/worker-%d", fl->h[0].job, rank);
    int cgfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 1; i < fl->n; i++) {
        snprintf(dir, sizeof(dir), "%s/worker-%d/tasks", fl->h[i].job, rank);
        procs[n++] = open(dir, O_WRONLY | O_CLOEXEC);
    }
    struct clone_args ca = {
        .flags = CLONE_PIDFD | CLONE_INTO_CGROUP,
        .pidfd = (uint64_t)(uintptr_t)pidfd,
        .exit_signal = SIGCHLD,
        .cgroup = (uint64_t)cgfd,
    };
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0) {
        char env[32];
        snprintf(env, sizeof(env), "%d", rank);
        setenv("RANK", env, 1);
        for (int i = 0; i < n; i++)
            if (write(procs[i], "0", 1) != 1)
                _exit(125);
        confine_child();
        execv(argv[0], argv);
        _exit(127);
    }
    close(cgfd);
    for (int i = 0; i < n; i++)
        close(procs[i]);
    return pid;
}

/* Spawns n workers in the floor's cgroups and waits for all; with failfast, the first exit
 * SIGTERMs the rest. Returns the first exit's status. */
static int
floor_run(const char *hiers, int n, char *const argv[], bool failfast)
{
    struct floor fl = {.n = 0, .devices = {.fd = -1}, .own = ""};
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    struct report rep;
    int first = -1, left = n;

    if (pfd == NULL || floor_init(&fl, hiers, n) < 0) {
        floor_remove(&fl);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        pfd[i].fd = -1;
        pfd[i].events = POLLIN;
        if (floor_spawn(&fl, i, argv, &pfd[i].fd) < 0) {
            perror("clone3");
            left--;
        }
    }
    while (left > 0) {
        if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            siginfo_t si = {0};
            if (pfd[i].fd < 0 || !(pfd[i].revents & POLLIN))
                continue;
            waitid((idtype_t)P_PIDFD, (id_t)pfd[i].fd, &si, WEXITED);
            close(pfd[i].fd);
            pfd[i].fd = -1;
            left--;
            if (first < 0) {
                first = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
                for (int k = 0; failfast && k < n; k++)
                    if (pfd[k].fd >= 0)
                        syscall(SYS_pidfd_send_signal, pfd[k].fd, SIGTERM, NULL, 0);
            }
        }
    }
    report_start(&rep, n);
    floor_remove(&fl);
    report_finish(&rep);
    free(pfd);
    return first < 0 ? 0 : first;
}

/* ---- the console floor ---- */

static void
make_line(char *buf, int rank, long seq)
{
    int n = snprintf(buf, LINE_LEN, "%d %ld ", rank, seq);
    memset(buf + n, 'x', LINE_LEN - 1 - (size_t)n);
    buf[LINE_LEN - 1] = '\n';
}

static int
lines(long mib)
{
    const char *r = getenv("RANK");
    int rank = r != NULL ? atoi(r) : 0;
    long total = mib * 1024 * 1024 / LINE_LEN, seq = 0;
    static char buf[512 * LINE_LEN];

    while (seq < total) {
        size_t len = 0;
        for (; len < sizeof(buf) && seq < total; len += LINE_LEN)
            make_line(buf + len, rank, seq++);
        for (size_t off = 0; off < len;) {
            ssize_t n = write(1, buf + off, len - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return 1;
            off += (size_t)n;
        }
    }
    return 0;
}

static int
write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int
tagger(int n, const char *mib)
{
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    char **part = calloc((size_t)n, sizeof(char *));
    size_t *plen = calloc((size_t)n, sizeof(size_t)), olen = 0, ocap = 64 * 1024; /* as xmprun */
    char *out = malloc(ocap + 70000), rbuf[65536];
    int open_n = n;

    if (sl < 0 || pfd == NULL || part == NULL || plen == NULL || out == NULL)
        return 2;
    self[sl] = '\0';
    char *const cmd[] = {self, "lines", (char *)mib, NULL};
    for (int i = 0; i < n; i++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            return 2;
        spawn(cmd, i, p[1]);
        close(p[1]);
        pfd[i] = (struct pollfd){p[0], POLLIN, 0};
        part[i] = malloc(65536);
    }
    while (open_n > 0) {
        /* Write what is gathered when nothing is ready: the same batching as xmprun. */
        int ready = poll(pfd, (nfds_t)n, olen > 0 ? 0 : -1);
        if (ready == 0) {
            write_all(1, out, olen);
            olen = 0;
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP)))
                continue;
            ssize_t got = read(pfd[i].fd, rbuf, sizeof(rbuf));
            if (got <= 0) {
                close(pfd[i].fd);
                pfd[i].fd = -1;
                open_n--;
                continue;
            }
            char prefix[16];
            size_t pl = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", i);
            char *p = rbuf, *end = rbuf + got, *nl;
            while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
                memcpy(out + olen, prefix, pl);
                olen += pl;
                if (plen[i] > 0) {
                    memcpy(out + olen, part[i], plen[i]);
                    olen += plen[i];
                    plen[i] = 0;
                }
                memcpy(out + olen, p, (size_t)(nl - p + 1));
                olen += (size_t)(nl - p + 1);
                p = nl + 1;
                if (olen >= ocap) {
                    write_all(1, out, olen);
                    olen = 0;
                }
            }
            memcpy(part[i] + plen[i], p, (size_t)(end - p));
            plen[i] += (size_t)(end - p);
        }
    }
    write_all(1, out, olen);
    while (wait(NULL) > 0)
        ;
    return 0;
}

static int
verify(int n, long mib)
{
    long total = mib * 1024 * 1024 / LINE_LEN, *next = calloc((size_t)n, sizeof(long));
    char want[LINE_LEN], *line = NULL;
    size_t cap = 0, count = 0;
    ssize_t len;
    FILE *in = stdin;

    while ((len = getline(&line, &cap, in)) > 0) {
        int rank = -1, used = 0;
        if (sscanf(line, "[%d] %n", &rank, &used) != 1 || rank < 0 || rank >= n) {
            fprintf(stderr, "verify: line %zu: not a tagged line: %.80s\n", count, line);
            return 1;
        }
        make_line(want, rank, next[rank]);
        if (next[rank] >= total || (size_t)len != (size_t)used + LINE_LEN ||
            memcmp(line + used, want, LINE_LEN) != 0) {
            fprintf(stderr, "verify: line %zu: got \"%.*s\", expected \"[%d] %.*s\"\n", count,
                    (int)len - 1, line, rank, LINE_LEN - 1, want);
            return 1;
        }
        next[rank]++;
        count++;
    }
    for (int r = 0; r < n; r++)
        if (next[r] != total) {
            fprintf(stderr, "verify: rank %d: %ld of %ld lines\n", r, next[r], total);
            return 1;
        }
    printf("%zu lines ok\n", count);
    return 0;
}

int
main(int argc, char **argv)
{
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl < 0)
        return 2;
    self[sl] = '\0';

    if (argc == 2 && strcmp(argv[1], "worker") == 0)
        return worker();
    if (argc == 3 && strcmp(argv[1], "cgmove") == 0)
        return cgmove(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "cgexec") == 0)
        return cgexec(argv[2], argv + 3);
    if (argc == 3 && strcmp(argv[1], "lines") == 0)
        return lines(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "tagger") == 0)
        return tagger(atoi(argv[2]), argv[3]);
    if (argc == 4 && strcmp(argv[1], "verify") == 0)
        return verify(atoi(argv[2]), atol(argv[3]));
    if (argc < 3)
        return 2;
    if (strcmp(argv[argc - 1], "confined") == 0) {
        confined = true;
        argc--;
    }
    int n = atoi(argv[2]);
    pid_t *pids = calloc((size_t)n, sizeof(pid_t));
    struct report rep;
    if (pids == NULL || n < 1)
        return 2;
    if (strcmp(argv[1], "launch") == 0) {
        char *const cmd[] = {"/bin/true", NULL};
        for (int i = 0; i < n; i++)
            pids[i] = spawn(cmd, i, -1);
        for (int i = 0; i < n; i++)
            waitpid(pids[i], NULL, 0);
        report_start(&rep, n);
        report_finish(&rep);
        return 0;
    }
    if (strcmp(argv[1], "isolated") == 0 && argc == 4) {
        char *const cmd[] = {"/bin/true", NULL};
        return floor_run(argv[3], n, cmd, false);
    }
    if (strcmp(argv[1], "idle") == 0) {
        char *const cmd[] = {"/bin/sleep", "3", NULL};
#ifdef BENCH_LIBS
        if (argc == 4 && use_libs(argv[3]) < 0) {
            fprintf(stderr, "baseline: %s: could not use the libraries\n", argv[3]);
            return 2;
        }
#endif
        for (int i = 0; i < n; i++)
            pids[i] = spawn(cmd, i, -1);
        while (wait(NULL) > 0)
            ;
        return 0;
    }
    if (strcmp(argv[1], "failfast") == 0) {
        char *const cmd[] = {self, "worker", NULL};
        int status = 0;
        if (argc == 4)
            return floor_run(argv[3], n, cmd, true);
        for (int i = 0; i < n; i++)
            pids[i] = spawn(cmd, i, -1);
        pid_t first = wait(&status);
        for (int i = 0; i < n; i++)
            if (pids[i] != first)
                kill(pids[i], SIGTERM);
        while (wait(NULL) > 0)
            ;
        report_start(&rep, n);
        report_finish(&rep);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return 2;
}
