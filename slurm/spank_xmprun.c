/* spank_xmprun: a SPANK plugin that slurmstepd loads (plugstack.conf) to prepare, as root, a
 * cgroup leaf per worker below each task's cgroup that the job's user may use, so that a regular
 * user's `srun xmprun job.yaml` gets per-worker cgroups. The options, the hooks and the per-task
 * records; the cgroup work is spank_xmprun_cg.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "slurm/spank_xmprun_cg.h"

#include <slurm/spank.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SPANK_PLUGIN(xmprun, 1);

#define MAX_TASKS           128
#define DEFAULT_MAX_WORKERS 64
#define LIMIT_MAX_WORKERS   1024

/* A SPANK plugin has no context of its own to keep state in: slurmstepd loads it once per step
 * and calls its hooks for each task, so the configuration and what was made for each local task
 * live here until slurm_spank_task_exit removes it. */
static struct {
    bool inert;         /* a bad plugstack.conf argument: never prepare anything */
    bool default_on;    /* default=on */
    int asked;          /* --xmprun-cgroups: -1 not given, 0 off, 1 on */
    size_t max_workers; /* max_workers=N */
} cfg = {.asked = -1, .max_workers = DEFAULT_MAX_WORKERS};
/* (apart from cfg, so that it is zero-initialised: .bss, not 1 MiB of the plugin's file) */
static struct xsp_task tasks[MAX_TASKS];

/* "on"/"off" and their usual synonyms; -1 for anything else. */
static int
parse_switch(const char *v)
{
    static const char *const on[] = {"on", "yes", "true", "1"};
    static const char *const off[] = {"off", "no", "false", "0"};

    for (size_t i = 0; i < 4; i++) {
        if (strcmp(v, on[i]) == 0)
            return 1;
        if (strcmp(v, off[i]) == 0)
            return 0;
    }
    return -1;
}

static int
option_cb(int val, const char *optarg, int remote)
{
    int v = optarg == NULL || optarg[0] == '\0' ? 1 : parse_switch(optarg);

    (void)val;
    (void)remote;
    if (v < 0) {
        slurm_error("spank_xmprun: --xmprun-cgroups=%s: the value is on or off "
                    "(--xmprun-cgroups alone means on)",
                    optarg);
        return -1;
    }
    cfg.asked = v;
    return 0;
}

struct spank_option spank_options[] = {
    {"xmprun-cgroups", "[on|off]",
     "Give xmprun a cgroup per worker below each task's cgroup (spank_xmprun: kernel-enforced "
     "per-worker limits for a regular user)",
     2, 0, option_cb},
    SPANK_OPTIONS_TABLE_END,
};

/* plugstack.conf arguments: default=on|off, max_workers=N (1..1024). A bad one leaves the
 * plugin inert, so that a typo never fails every job of the cluster. */
static int
parse_args(int ac, char **av, char *why, size_t size)
{
    for (int i = 0; i < ac; i++) {
        char *end = NULL;
        if (strncmp(av[i], "default=", 8) == 0) {
            int v = parse_switch(av[i] + 8);
            if (v < 0) {
                snprintf(why, size, "\"%s\": default is on or off", av[i]);
                return -1;
            }
            cfg.default_on = v == 1;
        } else if (strncmp(av[i], "max_workers=", 12) == 0) {
            errno = 0;
            unsigned long n = strtoul(av[i] + 12, &end, 10);
            if (errno != 0 || end == av[i] + 12 || *end != '\0' || av[i][12] == '-' || n < 1 ||
                n > LIMIT_MAX_WORKERS) {
                snprintf(why, size, "\"%s\": max_workers is a number from 1 to %d", av[i],
                         LIMIT_MAX_WORKERS);
                return -1;
            }
            cfg.max_workers = n;
        } else {
            snprintf(why, size, "unknown argument \"%s\" (known: default=on|off, max_workers=N)",
                     av[i]);
            return -1;
        }
    }
    return 0;
}

int
slurm_spank_init(spank_t sp, int ac, char **av)
{
    char why[256];

    if (parse_args(ac, av, why, sizeof(why)) < 0) {
        cfg.inert = true;
        /* Said where the admin looks (slurmd's log, once per step), not to every srun. */
        if (spank_remote(sp))
            slurm_error("spank_xmprun: plugstack.conf: %s; the plugin does nothing until it is "
                        "fixed (jobs run with xmprun's sampled limits)",
                        why);
    }
    return 0;
}

static struct xsp_task *
task_record(spank_t sp, int *id)
{
    if (spank_get_item(sp, S_TASK_ID, id) != ESPANK_SUCCESS || *id < 0 || *id >= MAX_TASKS)
        return NULL;
    return &tasks[*id];
}

/* After task/cgroup has placed the task (task_init_privileged is too early: its pid is written
 * into task_<k> after that hook, which would undo a move made there), before it execs. */
int
slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    uint32_t job = 0, step = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    pid_t pid = 0;
    int id = -1;
    char tag[64], msg[1024] = "";
    struct xsp_task *t = task_record(sp, &id);

    (void)ac;
    (void)av;
    if (cfg.inert || !(cfg.asked == 1 || (cfg.asked == -1 && cfg.default_on)) || t == NULL)
        return 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS || pid <= 0) {
        slurm_error("spank_xmprun: task %d: Slurm did not say the job, user or task pid; "
                    "skipped",
                    id);
        return 0;
    }
    if (uid == 0)
        return 0; /* root makes its own cgroups */
    size_t n = xsp_task_cpus(pid);
    if (n > cfg.max_workers)
        n = cfg.max_workers;
    snprintf(tag, sizeof(tag), "%u.%u.%d", job, step, id);
    if (xsp_prepare(t, pid, uid, gid, n, tag, msg, sizeof(msg)) < 0) {
        slurm_error("spank_xmprun: job %u step %u task %d: skipped: %s (xmprun runs with its "
                    "sampled limits)",
                    job, step, id, msg);
        return 0;
    }
    slurm_verbose("spank_xmprun: job %u step %u task %d: %zu worker cgroups for uid %u", job, step,
                  id, n, (unsigned)uid);
    return 0;
}

/* Slurm removes the step's own directories (task/cgroup's post-step) before it calls
 * slurm_spank_exit, and cannot while these are in them: they go when the task ends, with what
 * still runs in them (the workers of an xmprun killed at KillWait). */
int
slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    int id = -1;
    char msg[1024] = "";
    struct xsp_task *t = task_record(sp, &id);

    (void)ac;
    (void)av;
    if (t == NULL || !t->active)
        return 0;
    if (xsp_cleanup(t, msg, sizeof(msg)) < 0)
        slurm_error("spank_xmprun: task %d: left behind: %s", id, msg);
    return 0;
}

/* Whatever a task_exit could not reach (a step that ended abnormally): tried once more. */
int
slurm_spank_exit(spank_t sp, int ac, char **av)
{
    char msg[1024] = "";

    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return 0;
    for (size_t i = 0; i < MAX_TASKS; i++)
        if (tasks[i].active && xsp_cleanup(&tasks[i], msg, sizeof(msg)) < 0)
            slurm_error("spank_xmprun: task %zu: left behind: %s", i, msg);
    return 0;
}
