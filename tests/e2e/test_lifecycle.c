/* End to end: stopping and cleaning up, whatever kills xmprun. An outside SIGTERM that reaches
 * the workers and xmprun together is an interruption, not a worker's failure; a SIGKILL at any
 * instant of a legacy v1 stop leaves no frozen cgroup; gc finds a SIGKILLed job's directories in
 * every hierarchy wherever it ran, kills what is in them and says only what it did. */
#include "e2e/e2e.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#define CGROUP2_MAGIC 0x63677270

/* Slurm's scancel (proctrack/linuxproc), a container stop, ^C to a process group: one SIGTERM to
 * xmprun and to its workers, in either order. The worker that dies first must not become the
 * root cause, however the deaths and the signal interleave. */
Test(lifecycle, outside_sigterm_to_workers_and_xmprun_is_interrupted, .timeout = 300)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: scancel\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'exec %1$s pidfile %2$s/w-$RANK -- sleep 60'\n"
                 "on_failure: {grace: 5s}\n");
    /* 20 tries; 4 in the emulated v2 guest, where one takes 20 s (nothing in it is v2). */
    struct statfs sf;
    int tries = statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_MAGIC ? 4 : 20;
    for (int i = 0; i < tries; i++) {
        /* The workers first (the race that made it `failed`), with xmprun's own SIGTERM a
         * moment later (a process-tree kill walks /proc between kills, and a loaded node
         * delays it more), or xmprun first. */
        static const char *const orders[] = {
            "$w0 $w1 $pid",
            "$w0 $w1; kill -TERM $pid",
            "$w0 $w1; sleep 0.1; kill -TERM $pid",
            "$pid $w0 $w1",
        };
        const char *order = orders[i % 4];
        char script[1024];
        snprintf(script, sizeof(script),
                 "rm -f \"$DIR\"/w-*; \"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                 "i=0; while { [ ! -s \"$DIR/w-0\" ] || [ ! -s \"$DIR/w-1\" ]; } && "
                 "[ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                 "w0=$(cat \"$DIR/w-0\"); w1=$(cat \"$DIR/w-1\"); kill -TERM %s; wait $pid",
                 order);
        int status = e2e_sh(&e, 90, script);
        cr_assert_eq(status, 143, "try %d (%s): exit %d, stderr:\n%s", i, order, status, e.r.err);
        e2e_load_report(&e);
        cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted", "try %d (%s)", i, order);
        cr_assert_str_eq(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                         "xmprun received SIGTERM and stopped the job", "try %d", i);
        e2e_assert_clean(&e);
    }
    e2e_fini(&e);
}

#define SLURM_CONF "/tmp/xmp-real/slurm/etc/slurm.conf"

/* The same with real Slurm: scancel of a job whose step runs xmprun (proctrack/linuxproc sends
 * SIGTERM to every process of the step). Skipped where the shared Slurm is not set up
 * (../shared/tools/slurm-setup.sh); the lock keeps helpers sharing it apart. */
Test(lifecycle, slurm_scancel_is_interrupted, .timeout = 300)
{
    struct e2e e;

    if (geteuid() != 0 || access(SLURM_CONF, R_OK) != 0 || access("/usr/bin/sbatch", X_OK) != 0)
        cr_skip_test("needs the shared Slurm (../shared/tools/slurm-setup.sh)");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: scancelled\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'exec %1$s pidfile %2$s/w-$RANK -- sleep 60'\n");
    for (int i = 0; i < 3; i++) {
        int status = e2e_sh(
            &e, 240,
            "export SLURM_CONF=" SLURM_CONF "; rm -f \"$REPORT\" \"$DIR\"/w-*; "
            "exec flock -o -w 200 /tmp/xmp-slurm.lock sh -c '"
            "j=$(sbatch --parsable -o /dev/null --wrap \"srun $XMPRUN -q --report $REPORT $SPEC\") "
            "|| exit 3; k=0; while { [ ! -s \"$DIR/w-0\" ] || [ ! -s \"$DIR/w-1\" ]; } && "
            "[ $k -lt 1200 ]; do sleep 0.1; k=$((k+1)); done; scancel $j; "
            "k=0; while [ ! -s \"$REPORT\" ] && [ $k -lt 600 ]; do sleep 0.1; k=$((k+1)); done; "
            "k=0; while squeue -h -j $j 2>/dev/null | grep -q .; do [ $k -lt 600 ] || exit 4; "
            "sleep 0.1; k=$((k+1)); done'");
        cr_assert_eq(status, 0, "try %d: %d, stderr:\n%s", i, status, e.r.err);
        e2e_load_report(&e);
        cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted", "try %d: %s", i,
                         e2e_str(json_object_get(e.rep, "root_cause"), "message"));
        cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 143);
        e2e_assert_clean(&e);
    }
    e2e_fini(&e);
}

/* A worker killed by a SIGTERM that xmprun never got is still that worker's failure. */
Test(lifecycle, sigterm_to_a_worker_alone_is_its_failure, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: lonekill\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'exec %1$s pidfile %2$s/w-$RANK -- sleep 60'\n"
                 "on_failure: {grace: 5s}\n");
    int status = e2e_sh(&e, 90,
                        "\"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                        "i=0; while [ ! -s \"$DIR/w-1\" ] && [ $i -lt 400 ]; do sleep 0.05; "
                        "i=$((i+1)); done; kill -TERM $(cat \"$DIR/w-1\"); wait $pid");
    cr_assert_eq(status, 143, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_eq(strncmp(msg, "worker 1 (cpu) was killed by signal SIGTERM", 43), 0, "%s", msg);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker's cgroup goes when the worker does, while the others still run: rank 1 waits until
 * rank 0's directory is gone from every hierarchy where rank 1 has one of its own (its
 * /proc/self/cgroup lines that end in /worker-1; cgroup2 at /sys/fs/cgroup/unified on a
 * hybrid host), and fails if it is still there after 20 s. */
Test(lifecycle, a_reaped_workers_cgroup_goes_while_the_job_runs, .timeout = 120)
{
    struct e2e e;

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e,
             "version: 1\n"
             "name: release\n"
             "workers: 2\n"
             "devices: {kind: cpu}\n"
             "resources: {worker: {memory: 64Mi}}\n"
             "command: |\n"
             "  [ \"$RANK\" = 0 ] && exit 0\n"
             "  u=/sys/fs/cgroup/unified; [ -d $u ] || u=/sys/fs/cgroup\n"
             "  for i in $(seq 200); do\n"
             "    left=; seen=0\n"
             "    while IFS=: read -r id ctrl path; do\n"
             "      case $path in */worker-1) ;; *) continue ;; esac\n"
             "      if [ -z \"$ctrl\" ]; then root=$u; else root=/sys/fs/cgroup/${ctrl#name=}; fi\n"
             "      seen=$((seen+1)); d=$root${path%%/worker-1}/worker-0\n"
             "      [ -d \"$d\" ] && left=\"$left $d\"\n"
             "    done < /proc/self/cgroup\n"
             "    [ $seen -gt 0 ] && [ -z \"$left\" ] && { echo \"released in $seen\"; exit 0; }\n"
             "    sleep 0.1\n"
             "  done\n"
             "  echo \"still there:$left\"; exit 3\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "out:\n%s\nstderr:\n%s", e.r.out, e.r.err);
    cr_assert_not_null(strstr(e.r.out, "released in "), "out:\n%s", e.r.out);
    e2e_load_report(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* While the job runs, xmprun opens each worker's stats files and keeps them open for its end
 * (xmp_cgroup_hold): what the report says must still be read at the end, not at that open. Each
 * worker waits until its files are among xmprun's descriptors, then allocates 96 MiB; a peak
 * read when the files were opened would be a few MiB. */
Test(lifecycle, stats_of_files_held_open_are_read_at_the_end, .timeout = 120)
{
    struct e2e e;

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: held\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "isolation: {cgroups: required}\n"
                 "resources: {worker: {memory: 256Mi}}\n"
                 "command: |\n"
                 "  for i in $(seq 200); do\n"
                 "    if ls -l /proc/$PPID/fd | grep -Eq "
                 "\"worker-$RANK/memory.(peak|max_usage_in_bytes)$\"; then\n"
                 "      echo \"rank $RANK held\"; exec %1$s alloc 96 0.1\n"
                 "    fi\n"
                 "    sleep 0.05\n"
                 "  done\n"
                 "  echo \"rank $RANK: not held\"; exit 3\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "out:\n%s\nstderr:\n%s", e.r.out, e.r.err);
    e2e_load_report(&e);
    for (size_t i = 0; i < 2; i++) {
        json_t *mem = json_object_get(e2e_worker(&e, i), "memory");
        long long peak = (long long)json_integer_value(json_object_get(mem, "peak_bytes"));
        cr_assert_geq(peak, 96LL << 20, "worker %zu: peak %lld; out:\n%s", i, peak, e.r.out);
    }
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* True when legacy mode can be forced: root, and a hybrid host whose cgroup2 mount can be
 * dropped in a private mount namespace (as in a container where runc mounts no cgroup2). */
static bool
can_force_legacy(void)
{
    struct statfs sf;
    struct xt_result r;
    char *argv[] = {"/bin/sh", "-c",
                    "unshare -m sh -c 'mount --make-rprivate / && umount /sys/fs/cgroup/unified'",
                    NULL};
    bool ok;

    if (geteuid() != 0 || statfs("/sys/fs/cgroup/unified", &sf) < 0 || sf.f_type != CGROUP2_MAGIC)
        return false;
    ok = xt_run(&r, argv, NULL, NULL, 30) == 0 && r.status == 0;
    xt_result_free(&r);
    return ok;
}

/* Asserts that dir and every directory below it is THAWED (where it has a freezer.state). */
static void
assert_thawed_tree(const char *dir, int try)
{
    char path[8192], *state;
    DIR *d;
    struct dirent *de;

    snprintf(path, sizeof(path), "%s/freezer.state", dir);
    state = xt_read_file(path);
    cr_assert(state == NULL || strncmp(state, "THAWED", 6) == 0,
              "try %d: %s is %s after xmprun was SIGKILLed", try, path, state);
    free(state);
    d = opendir(dir);
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < (int)sizeof(path))
            assert_thawed_tree(path, try);
    }
    if (d != NULL)
        closedir(d);
}

/* Every cgroup of the job with this owner pid (below `dir`, the freezer hierarchy's own
 * cgroup) is THAWED. */
static void
assert_not_frozen(const char *dir, pid_t owner, int try)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char mid[32], path[8192];

    snprintf(mid, sizeof(mid), "-%d-", (int)owner);
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || strncmp(de->d_name, "xmprun-", 7) != 0 ||
            strstr(de->d_name, mid) == NULL)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < (int)sizeof(path))
            assert_thawed_tree(path, try);
    }
    if (d != NULL)
        closedir(d);
}

/* `podman stop` SIGKILLs xmprun at whatever instant its grace is over, perhaps in the middle of
 * stopping the workers. In legacy v1 (no cgroup2 at all) no such instant may leave a frozen
 * cgroup, whose tasks would sit in D state for good; gc then leaves no process and no cgroup.
 * The SIGKILL lands at 50 points spread over the stop, which starts when rank 0 fails. */
Test(lifecycle, legacy_sigkill_while_stopping_leaves_nothing_frozen, .timeout = 600)
{
    static char dirs[16][4096];
    const char *freezer = NULL;
    struct e2e e;
    size_t n;

    if (!can_force_legacy())
        cr_skip_test("needs root, a hybrid host and unshare -m to force legacy v1");
    n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n; i++)
        if (strstr(dirs[i], "/freezer") != NULL)
            freezer = dirs[i];
    e2e_init(&e);
    /* Rank 0 fails at once; the others fork children that ignore SIGTERM (held at 64 by the
     * pids limit) and a setsid grandchild, so that the stop has many tasks to kill. */
    e2e_spec(&e, "version: 1\n"
                 "name: podstop\n"
                 "workers: 3\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {pids: 64}}\n"
                 "command: 'if [ \"$RANK\" = 0 ]; then while [ ! -e %2$s/go ]; do sleep 0.01; "
                 "done; : > %2$s/stopping; exit 1; fi; %1$s setsid-orphan %2$s/orphan-$RANK.pid; "
                 "trap \"\" TERM; exec %1$s forkbomb'\n"
                 "on_failure: {grace: 0s}\n");
    /* 50 tries; CI's sanitizer run, whose xmprun is several times slower, takes fewer (the
     * plain run takes all 50). */
    int tries = getenv("XMP_SIGKILL_TRIES") != NULL ? atoi(getenv("XMP_SIGKILL_TRIES")) : 50;
    for (int i = 0; i < tries; i++) {
        char script[2048];
        /* 0 to 98 ms after rank 0 failed, in 2 ms steps. */
        snprintf(script, sizeof(script),
                 "rm -f \"$DIR\"/go \"$DIR\"/stopping \"$DIR\"/orphan-*; "
                 "unshare -m sh -c 'mount --make-rprivate / && umount /sys/fs/cgroup/unified && "
                 "exec \"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" >/dev/null' & pid=$!; "
                 "i=0; while { [ ! -s \"$DIR/orphan-1.pid\" ] || [ ! -s \"$DIR/orphan-2.pid\" ]; "
                 "} && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.2; "
                 ": > \"$DIR/go\"; i=0; while [ ! -e \"$DIR/stopping\" ] && [ $i -lt 2000 ]; do "
                 "sleep 0.001; i=$((i+1)); done; sleep %d.%03d; kill -KILL $pid; wait $pid;"
                 "echo $pid",
                 (2 * i) / 1000, (2 * i) % 1000);
        int status = e2e_sh(&e, 120, script);
        cr_assert_eq(status, 0, "try %d: stderr:\n%s", i, e.r.err);
        pid_t owner = (pid_t)atoi(e.r.out);
        cr_assert_gt(owner, 0, "try %d: no pid; stderr:\n%s", i, e.r.err);
        if (freezer != NULL)
            assert_not_frozen(freezer, owner, i);
        /* gc, as the next start or an admin would run it: nothing of the job survives. */
        cr_assert_eq(e2e_gc(&e), 0, "try %d: gc failed:\n%s", i, e.r.err);
        e2e_assert_no_cgroups(owner);
        for (int r = 1; r <= 2; r++) {
            char name[32];
            snprintf(name, sizeof(name), "orphan-%d.pid", r);
            char *text = xt_read_file(e2e_path(&e, name));
            pid_t orphan = text != NULL ? (pid_t)atoi(text) : 0;
            free(text);
            cr_assert_gt(orphan, 0, "try %d: worker %d's grandchild never started", i, r);
            for (int k = 0; k < 100 && !e2e_pid_dead(orphan); k++)
                usleep(20000);
            cr_assert(e2e_pid_dead(orphan), "try %d: grandchild %d survived gc", i, (int)orphan);
        }
    }
    e2e_fini(&e);
}

/* Slurm SIGKILLs xmprun (its grace outlasted KillWait) inside the step's cgroup; an admin runs
 * gc from a login shell, in another cgroup. gc must find the job's directories in every
 * hierarchy from the state file, kill what is in them (the setsid grandchild too) and say it
 * cleaned the job only once it has. */
Test(lifecycle, gc_from_another_cgroup_cleans_every_hierarchy, .timeout = 180)
{
    static char dirs[16][4096];
    struct e2e e;
    char script[8192], sub[64], path[4200];
    size_t n, o = 0;

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    n = e2e_own_cgroup_dirs(dirs, 16);
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: slurmstep\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {pids: 64, cpus: 1}}\n"
                 "command: ['%1$s', setsid-orphan, '%2$s/orphan.pid', wait]\n");
    /* The "step": a child of the test's cgroup in every hierarchy (a v1 cpuset needs its cpus
     * and mems before a task may join), which xmprun alone is started in. */
    snprintf(sub, sizeof(sub), "xmptest-step-%d", (int)getpid());
    o += (size_t)snprintf(script + o, sizeof(script) - o, "set -e; dirs=; ");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(script + o, sizeof(script) - o,
                              "d='%s/%s'; mkdir -p \"$d\"; dirs=\"$dirs $d\"; "
                              "if [ ! -e \"$d/cgroup.controllers\" ] && [ -e \"$d/cpuset.cpus\" ]; "
                              "then cat \"$d/../cpuset.cpus\" > \"$d/cpuset.cpus\"; "
                              "cat \"$d/../cpuset.mems\" > \"$d/cpuset.mems\"; fi; ",
                              dirs[i], sub);
    snprintf(script + o, sizeof(script) - o,
             "set +e; export dirs; sh -c 'for d in $dirs; do echo $$ > \"$d/cgroup.procs\"; "
             "done; exec \"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" >/dev/null' & pid=$!; "
             "i=0; while [ ! -s \"$DIR/orphan.pid\" ] && [ $i -lt 2400 ]; do sleep 0.05; "
             "i=$((i+1)); done; sleep 0.2; kill -KILL $pid; wait $pid; echo $pid");
    int status = e2e_sh(&e, 90, script);
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    pid_t owner = (pid_t)atoi(e.r.out);
    char *text = xt_read_file(e2e_path(&e, "orphan.pid"));
    pid_t orphan = text != NULL ? (pid_t)atoi(text) : 0;
    free(text);
    cr_assert_gt(orphan, 0, "the grandchild did not start");
    cr_assert(!e2e_pid_dead(orphan));

    status = e2e_gc(&e);
    cr_assert_eq(status, 0, "gc failed:\n%s", e.r.err);
    for (int k = 0; k < 100 && !e2e_pid_dead(orphan); k++)
        usleep(20000);
    bool orphan_dead = e2e_pid_dead(orphan);
    char left[4600] = "";
    for (size_t i = 0; i < n; i++) {
        DIR *d;
        struct dirent *de;
        snprintf(path, sizeof(path), "%s/%s", dirs[i], sub);
        d = opendir(path);
        while (d != NULL && (de = readdir(d)) != NULL)
            if (strncmp(de->d_name, "xmprun-", 7) == 0 && left[0] == '\0')
                snprintf(left, sizeof(left), "%s/%s", path, de->d_name);
        if (d != NULL)
            closedir(d);
    }
    if (!orphan_dead)
        kill(orphan, SIGKILL);
    /* Whatever gc left (a job cgroup with workers in it, under a planted bug) goes too. */
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dirs[i], sub);
        e2e_purge_cgroup_tree(path);
    }
    cr_assert(orphan_dead, "gc left the grandchild %d alive", (int)orphan);
    cr_assert_eq(left[0], '\0', "gc left %s", left);
    cr_assert_str_eq(e.r.out, "xmprun: gc: cleaned up 1 orphaned job\n");
    e2e_assert_no_cgroups(owner);
    e2e_fini(&e);
}

static int
write_to(const char *dir, const char *file, const char *text)
{
    char path[4400];
    FILE *f;
    int ret;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    ret = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) < 0 ? -1 : ret;
}

/* A cgroup left FROZEN (by an older xmprun, or anyone) holds its tasks with SIGKILL pending:
 * gc thaws it first, then kills and removes it. */
Test(lifecycle, gc_thaws_a_frozen_orphan, .timeout = 120)
{
    static char dirs[16][4096];
    const char *freezer = NULL, *memory = NULL;
    char name[64], fz[4200], mem[4200];
    int fzn, memn;
    pid_t dead = 4194000, sleeper;
    struct e2e e;
    int status = 0;
    size_t n;

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n; i++) {
        if (strstr(dirs[i], "/freezer") != NULL)
            freezer = dirs[i];
        if (strstr(dirs[i], "/memory") != NULL)
            memory = dirs[i];
    }
    if (freezer == NULL || memory == NULL)
        cr_skip_test("needs the v1 freezer and memory hierarchies");
    while (dead > 1000 && !(kill(dead, 0) < 0 && errno == ESRCH))
        dead--;
    snprintf(name, sizeof(name), "xmprun-frozen-%d-abcdef", (int)dead);
    fzn = snprintf(fz, sizeof(fz), "%s/%s", freezer, name);
    memn = snprintf(mem, sizeof(mem), "%s/%s", memory, name);
    cr_assert(fzn < (int)sizeof(fz) && memn < (int)sizeof(mem));
    cr_assert_eq(mkdir(fz, 0755), 0, "%s", strerror(errno));
    cr_assert_eq(mkdir(mem, 0755), 0, "%s", strerror(errno));
    sleeper = fork();
    if (sleeper == 0) {
        execl("/bin/sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    char num[32], comm[64], *c = NULL;
    /* Frozen once it is sleep, as a worker left by a dead xmprun would be. */
    snprintf(comm, sizeof(comm), "/proc/%d/comm", (int)sleeper);
    for (int k = 0; k < 200 && (c == NULL || strcmp(c, "sleep\n") != 0); k++) {
        free(c);
        usleep(10000);
        c = xt_read_file(comm);
    }
    free(c);
    snprintf(num, sizeof(num), "%d", (int)sleeper);
    cr_assert_eq(write_to(fz, "cgroup.procs", num), 0, "%s", strerror(errno));
    cr_assert_eq(write_to(mem, "cgroup.procs", num), 0, "%s", strerror(errno));
    cr_assert_eq(write_to(fz, "freezer.state", "FROZEN"), 0);
    /* Freezing takes a moment; a task not yet frozen would die of the SIGKILL anyway. */
    char state_path[4300], *state = NULL;
    snprintf(state_path, sizeof(state_path), "%s/freezer.state", fz);
    for (int k = 0; k < 200; k++) {
        free(state);
        state = xt_read_file(state_path);
        if (state != NULL && strncmp(state, "FROZEN", 6) == 0)
            break;
        usleep(10000);
    }
    cr_assert(state != NULL && strncmp(state, "FROZEN", 6) == 0, "not frozen: %s", state);
    free(state);

    e2e_init(&e);
    int gc = e2e_gc(&e);
    bool killed = false;
    for (int k = 0; k < 100 && !(killed = waitpid(sleeper, &status, WNOHANG) == sleeper); k++)
        usleep(10000);
    if (!killed) {
        write_to(fz, "freezer.state", "THAWED");
        kill(sleeper, SIGKILL);
        waitpid(sleeper, &status, 0);
        e2e_purge_cgroup_tree(fz);
        e2e_purge_cgroup_tree(mem);
    }
    cr_assert_eq(gc, 0, "gc failed:\n%s", e.r.err);
    cr_assert(killed, "gc did not kill the frozen task");
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cr_assert_neq(access(fz, F_OK), 0, "gc left %s", fz);
    cr_assert_neq(access(mem, F_OK), 0, "gc left %s", mem);
    e2e_fini(&e);
}

/* ---- pure cgroup v2 (run in the guest by tests/run-v2.sh) ---- */

/* Started alone in a non-root cgroup, xmprun moves itself into an xmprun-self-<pid> leaf to
 * enable controllers there; at exit it moves back and removes the leaf, so that nothing piles
 * up and the next process can join that cgroup. Sharing it with its parent shell, it refuses
 * with advice that fits root (no `systemd-run --user`), and leaves nothing either. */
Test(lifecycle, v2_self_leaf_is_removed_and_the_cgroup_stays_joinable, .timeout = 900)
{
    char cg[4200], left[4096];
    struct e2e e;
    int status;

    make_v2_cgroup("leaf", cg, sizeof(cg));
    if (cg[0] == '\0')
        cr_skip_test("needs root on a pure cgroup v2 host (tests/run-v2.sh runs it)");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: leafy\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', exit, '0']\n");
    for (int i = 0; i < 2; i++) {
        status = sh_in(&e, cg,
                       "sh -c 'echo $$ > \"$CG/cgroup.procs\" && exec \"$XMPRUN\" -q --report "
                       "\"$REPORT\" \"$SPEC\"'");
        cr_assert_eq(status, 0, "run %d: stderr:\n%s", i, e.r.err);
        subdirs(cg, left, sizeof(left));
        char path[4300], *ctl;
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", cg);
        ctl = xt_read_file(path);
        cr_assert_str_eq(left, "", "run %d left %s in %s", i, left, cg);
        cr_assert(ctl != NULL && (ctl[0] == '\0' || ctl[0] == '\n'),
                  "run %d left subtree_control \"%s\"", i, ctl);
        free(ctl);
    }
    /* Shared with the shell that started it: refused, with root's advice. */
    status = sh_in(&e, cg,
                   "sh -c 'echo $$ > \"$CG/cgroup.procs\" && \"$XMPRUN\" -q --report \"$REPORT\" "
                   "\"$SPEC\"'");
    subdirs(cg, left, sizeof(left));
    rmdir(cg);
    cr_assert_eq(status, 125, "stderr:\n%s", e.r.err);
    cr_assert(strstr(e.r.err, "systemd-run --scope -p Delegate=yes") != NULL, "%s", e.r.err);
    cr_assert(strstr(e.r.err, "--user") == NULL, "advice for a user given to root: %s", e.r.err);
    cr_assert_str_eq(left, "", "the refused start left %s", left);
    e2e_fini(&e);
}

/* Started from inside a dead xmprun's leaf (a process that was there started it), xmprun's
 * start-up gc must not kill its own cgroup: the job runs, and the leaf is gone afterwards. */
Test(lifecycle, v2_start_inside_a_dead_xmpruns_leaf, .timeout = 900)
{
    char cg[4200], leaf[4400], left[4096];
    pid_t dead = 4194000;
    struct e2e e;
    int status;

    make_v2_cgroup("dead", cg, sizeof(cg));
    if (cg[0] == '\0')
        cr_skip_test("needs root on a pure cgroup v2 host (tests/run-v2.sh runs it)");
    while (dead > 1000 && !(kill(dead, 0) < 0 && errno == ESRCH))
        dead--;
    snprintf(leaf, sizeof(leaf), "%s/xmprun-self-%d", cg, (int)dead);
    cr_assert_eq(mkdir(leaf, 0755), 0, "%s", strerror(errno));
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: inleaf\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', exit, '0']\n");
    status = sh_in(&e, cg,
                   "sh -c 'echo $$ > \"$CG/xmprun-self-%d/cgroup.procs\" && exec \"$XMPRUN\" -q "
                   "--report \"$REPORT\" \"$SPEC\"'",
                   (int)dead);
    subdirs(cg, left, sizeof(left));
    rmdir(leaf);
    rmdir(cg);
    cr_assert_eq(status, 0, "exit %d, stderr:\n%s", status, e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    cr_assert_str_eq(left, "", "left %s", left);
    e2e_fini(&e);
}

/* An unprivileged user in a delegated cgroup (what systemd's Delegate=yes hands out): xmprun
 * keeps its state in a directory the user owns, and after a SIGKILL the user's own `xmprun gc`
 * kills the setsid grandchild and removes the job's cgroups and the leaf. */
Test(lifecycle, v2_unprivileged_gc_in_a_delegated_cgroup, .timeout = 900)
{
    const unsigned uid = 65534;
    char cg[4200], left[4096], state[64], path[4400];
    struct e2e e;
    int status;

    make_v2_cgroup("user", cg, sizeof(cg));
    if (cg[0] == '\0')
        cr_skip_test("needs root on a pure cgroup v2 host (tests/run-v2.sh runs it)");
    e2e_init(&e);
    snprintf(state, sizeof(state), "/tmp/xmprun-%u", uid);
    cr_assert(access(state, F_OK) != 0, "%s exists already", state);
    cr_assert_eq(chown(e.dir, uid, uid), 0);
    static const char *const files[] = {"", "/cgroup.procs", "/cgroup.subtree_control",
                                        "/cgroup.threads"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s%s", cg, files[i]);
        cr_assert_eq(chown(path, uid, uid), 0, "chown %s: %s", path, strerror(errno));
    }
    e2e_spec(&e, "version: 1\n"
                 "name: unpriv\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', setsid-orphan, '%2$s/orphan.pid', wait]\n");
    cr_assert_eq(chown(e.spec, uid, uid), 0);
    status = sh_in(&e, cg,
                   "U='setpriv --reuid %u --regid %u --clear-groups env -u XMPRUN_STATE_DIR -u "
                   "XDG_RUNTIME_DIR'; "
                   "sh -c 'echo $$ > \"$CG/cgroup.procs\" && exec '\"$U\"' \"$XMPRUN\" -q "
                   "--report \"$REPORT\" \"$SPEC\" >/dev/null' & pid=$!; "
                   "i=0; while [ ! -s \"$DIR/orphan.pid\" ] && [ $i -lt 2400 ]; do sleep 0.05; "
                   "i=$((i+1)); done; sleep 0.5; ls %s; kill -KILL $pid; wait $pid; $U "
                   "\"$XMPRUN\" gc",
                   uid, uid, state);
    char *text = xt_read_file(e2e_path(&e, "orphan.pid"));
    pid_t orphan = text != NULL ? (pid_t)atoi(text) : 0;
    free(text);
    for (int k = 0; k < 100 && orphan > 0 && !e2e_pid_dead(orphan); k++)
        usleep(20000);
    bool orphan_dead = e2e_pid_dead(orphan);
    if (!orphan_dead)
        kill(orphan, SIGKILL);
    subdirs(cg, left, sizeof(left));
    bool state_file = strstr(e.r.out, "xmprun-unpriv-") != NULL;
    rmdir(state);
    rmdir(cg);
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    cr_assert(state_file, "no state file in %s: %s", state, e.r.out);
    cr_assert(strstr(e.r.out, "xmprun: gc: cleaned up 1 orphaned job") != NULL, "%s", e.r.out);
    cr_assert_gt(orphan, 0, "the grandchild did not start");
    cr_assert(orphan_dead, "gc left the grandchild %d", (int)orphan);
    cr_assert_str_eq(left, "", "gc left %s in %s", left, cg);
    e2e_fini(&e);
}

/* A worker's CPU time is its own and its children's: from the reap itself without cgroups
 * (rank 0's awk burns ~0.3 s of user time in a child of the worker's shell; rank 1 sleeps, and
 * is charged with a small part of that at most, however the reaps interleave), and from the
 * cgroup's counters with them. */
#define CPUTIME_SPEC(cgroups)                                                                      \
    "version: 1\n"                                                                                 \
    "name: cputime\n"                                                                              \
    "workers: 2\n"                                                                                 \
    "devices: {kind: cpu}\n"                                                                       \
    "isolation: {cgroups: " cgroups "}\n"                                                          \
    "command: |\n"                                                                                 \
    "  if [ \"$RANK\" = 0 ]; then awk 'BEGIN { for (i = 0; i < 1.2e7; i++) s += i }'\n"            \
    "  else sleep 0.5; fi\n"

Test(lifecycle, cpu_time_is_each_workers_own, .timeout = 120)
{
    for (int cgroups = 0; cgroups < 2; cgroups++) {
        struct e2e e;

        if (cgroups && !e2e_can_cgroup()) {
            cr_log_info("cgroups: needs root or a delegated cgroup; the run without them passed");
            break;
        }
        e2e_init(&e);
        if (cgroups)
            e2e_spec(&e, CPUTIME_SPEC("required"));
        else
            e2e_spec(&e, CPUTIME_SPEC("off"));
        cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
        e2e_load_report(&e);
        json_t *busy = json_object_get(e2e_worker(&e, 0), "cpu");
        json_t *idle = json_object_get(e2e_worker(&e, 1), "cpu");
        double user0 = json_number_value(json_object_get(busy, "user_s"));
        double user1 = json_number_value(json_object_get(idle, "user_s"));
        cr_expect_geq(user0, 0.1, "cgroups %d: rank 0's user time %.3f s", cgroups, user0);
        /* The shell and sleep cost something too: 0.05-0.06 s in the emulated v2 guest. */
        cr_expect_lt(user1, user0 / 4, "cgroups %d: rank 1's user time %.3f s (rank 0's %.3f)",
                     cgroups, user1, user0);
        e2e_assert_clean(&e);
        e2e_fini(&e);
    }
}
