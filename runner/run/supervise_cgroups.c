/* The job's cgroups (isolation.cgroups: required, optional, off): what the job and its workers
 * need enabled, the workers' and the zygote's cgroups, the notes the cgroup layer leaves, and
 * the warning for a limit an enclosing cgroup makes unreachable. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/supervisor.h"

#include "isolate/file.h"
#include "isolate/privilege.h"
#include "runner/plan/enforce.h"
#include "runner/report/report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void
xmp_sv_destroy_worker_cgroups(struct xmp_supervisor *sv)
{
    struct xmp_error err = {0};

    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        /* An unkillable worker's cgroup stays for gc (see xmp_grp_give_up_unkillable). */
        if (w->unkillable)
            xmp_cgroup_abandon(w->cg);
        else if (w->cg != NULL && xmp_cgroup_destroy(w->cg, &err) < 0)
            fprintf(stderr, "xmprun: warning: worker %d: %s\n", w->pw->rank, err.msg);
        w->cg = NULL;
    }
}

/* What the cgroup layer left out, on stderr and in the report's cgroup.note, once for the job:
 * its workers share the enclosing cgroup and the shared nodes. */
static void
add_note(struct xmp_supervisor *sv, const char *note)
{
    size_t len = strlen(sv->report.cgroup_note);

    if (note[0] == '\0' || strstr(sv->report.cgroup_note, note) != NULL)
        return;
    if (!xmp_quiet(sv))
        fprintf(stderr, "xmprun: note: %s\n", note);
    snprintf(sv->report.cgroup_note + len, sizeof(sv->report.cgroup_note) - len, "%s%s",
             len > 0 ? "; " : "", note);
}

int
xmp_sv_create_worker_cgroups(struct xmp_supervisor *sv, struct xmp_error *err)
{
    add_note(sv, xmp_cgroup_note(sv->job_cg));
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        char name[32];

        struct xmp_limits limits = w->pw->limits;

        limits.has_devices = limits.has_devices && !sv->no_device_filter;
        /* Slurm's spank_xmprun plugin made one leaf per worker of this node: local ranks. */
        snprintf(name, sizeof(name), "worker-%d",
                 xmp_cgroup_from_slurm(sv->job_cg) ? w->pw->local_rank : w->pw->rank);
        if (xmp_cgroup_create_child(sv->job_cg, name, &limits, &w->cg, err) < 0) {
            xmp_file_explain_emfile(err);
            return xmp_error_wrap(err, "worker %d", w->pw->rank);
        }
        add_note(sv, xmp_cgroup_note(w->cg));
    }
    return 0;
}

/* start: fork: the zygote's cgroup holds the preloaded pages, charged once, with the limit
 * resources.shared.memory. */
static struct xmp_limits
zygote_limits(const struct xmp_supervisor *sv)
{
    struct xmp_limits limits;

    xmp_limits_init(&limits);
    limits.memory = sv->spec->shared_memory > 0 ? sv->spec->shared_memory : -1;
    limits.memory_min = limits.memory; /* see job_limits */
    return limits;
}

static int
create_zygote_cgroup(struct xmp_supervisor *sv, struct xmp_error *err)
{
    struct xmp_limits limits = zygote_limits(sv);

    if (!sv->fork_mode)
        return 0;
    if (xmp_cgroup_create_child(sv->job_cg, "zygote", &limits, &sv->zy.cg, err) < 0)
        return xmp_error_wrap(err, "zygote");
    return 0;
}

void
xmp_sv_destroy_cgroups(struct xmp_supervisor *sv)
{
    struct xmp_error err = {0};

    xmp_sv_destroy_worker_cgroups(sv);
    if (sv->zy.cg != NULL && xmp_cgroup_destroy(sv->zy.cg, &err) < 0)
        fprintf(stderr, "xmprun: warning: zygote: %s\n", err.msg);
    sv->zy.cg = NULL;
    if (sv->left_behind)
        xmp_cgroup_abandon(sv->job_cg);
    else if (sv->job_cg != NULL && xmp_cgroup_destroy(sv->job_cg, &err) < 0)
        fprintf(stderr, "xmprun: warning: %s\n", err.msg);
    sv->job_cg = NULL;
    xmp_cgroup_abandon(sv->own_cg); /* observed only: never xmprun's to remove */
    sv->own_cg = NULL;
}

/* A limit of xmprun's above an enclosing one (a container's --memory, a Slurm step's --mem, a
 * systemd MemoryMax) can never be reached: the enclosing one fires first, and the user should
 * know before the job runs. Said on stderr and in the report's cgroup.note. */
static void
warn_enclosing_limit(struct xmp_supervisor *sv)
{
    char path[512], encl[32], job[32], worker[32], what[160] = "", note[768];
    int64_t limit = -1, largest = -1;

    if (!xmp_cgroup_enclosing_limit(sv->job_cg != NULL ? sv->job_cg : sv->own_cg, &limit, path,
                                    sizeof(path)))
        return;
    for (size_t i = 0; i < sv->n_workers; i++)
        if (sv->workers[i].pw->limits.memory > largest)
            largest = sv->workers[i].pw->limits.memory;
    xmp_format_bytes(limit, encl, sizeof(encl));
    xmp_format_bytes(sv->plan.job_limits.memory, job, sizeof(job));
    xmp_format_bytes(largest, worker, sizeof(worker));
    if (sv->plan.job_limits.memory > limit && largest > limit)
        snprintf(what, sizeof(what), "the job memory limit %s and the worker memory limit %s are",
                 job, worker);
    else if (sv->plan.job_limits.memory > limit)
        snprintf(what, sizeof(what), "the job memory limit %s is", job);
    else if (largest > limit)
        snprintf(what, sizeof(what), "the worker memory limit %s is", worker);
    else
        return;
    snprintf(note, sizeof(note),
             "%s larger than the enclosing cgroup's %s limit (%s %s), which the kernel enforces "
             "first",
             what, encl, xmp_cgroup_owner_kind(path), path);
    if (!xmp_quiet(sv))
        fprintf(stderr, "xmprun: warning: %s\n", note);
    size_t len = strlen(sv->report.cgroup_note);
    snprintf(sv->report.cgroup_note + len, sizeof(sv->report.cgroup_note) - len, "%s%s",
             len > 0 ? "; " : "", note);
}

/* The job's limits; in start: fork with memory.min = resources.shared.memory, as the zygote's
 * (cgroup v2): measured in the v2 guest (bench/fork_file_pages.py), without it the job's own
 * pressure reclaimed 56% of a prefaulted, mmap'd 256 MiB file from the zygote and the worker that
 * read it again was charged 133 MiB for it; with it the pages stayed with the zygote. */
static struct xmp_limits
job_limits(const struct xmp_supervisor *sv)
{
    struct xmp_limits l = sv->plan.job_limits;

    if (sv->fork_mode && sv->spec->shared_memory > 0)
        l.memory_min = sv->spec->shared_memory;
    /* What the workers (and the zygote: memory) need enabled below the job, said at once. */
    for (size_t i = 0; i < sv->n_workers; i++)
        l.children |= xmp_limits_uses(&sv->workers[i].pw->limits);
    if (sv->fork_mode) {
        struct xmp_limits zl = zygote_limits(sv);
        l.children |= xmp_limits_uses(&zl);
    }
    return l;
}

/* isolation.devices on cgroup v2 is a BPF device program, which only a privileged process may
 * load and attach: an unprivileged xmprun in a delegated cgroup (systemd Delegate=yes) cannot
 * have one, as crun and systemd --user cannot. Where this host has an accelerator, whose nodes
 * the filter is for, a filter the spec asked for is an error that says what to do; the default
 * runs with the GPUs pinned by CUDA_VISIBLE_DEVICES only, as rootless Podman does, and says so.
 * "Root" is what the kernel grants, not uid 0. */
static int
check_device_filter(struct xmp_supervisor *sv, struct xmp_error *err)
{
    bool wanted = false;

    for (size_t i = 0; i < sv->n_workers; i++)
        wanted |= sv->workers[i].pw->limits.has_devices;
    /* (the v1 devices controller, too, takes rules from CAP_SYS_ADMIN only) */
    if (!wanted || xmp_priv_admin())
        return 0;
    if (sv->host.n_gpus + sv->host.n_tpus > 0 && sv->spec->devices_explicit)
        return xmp_error_set(err, EPERM,
                             "isolation.devices: the workers' device filter (a BPF device program "
                             "on cgroup v2) needs root, and xmprun runs as uid %u: run it as root, "
                             "or set isolation.devices: false to run without the filter",
                             (unsigned)geteuid());
    sv->no_device_filter = true;
    snprintf(sv->report.cgroup_note, sizeof(sv->report.cgroup_note), "%s",
             sv->host.n_gpus + sv->host.n_tpus > 0
                 ? "no device filter: GPUs are pinned by CUDA_VISIBLE_DEVICES only; the device "
                   "filter needs root"
                 : "no device filter: a BPF device program needs root, and this host has no "
                   "accelerator whose device nodes it would guard");
    return 0;
}

/* isolation.cgroups: auto where no cgroup can be written (why): the job runs, its memory limits
 * kept by xmprun's watchdog, its cpuset by affinity; xmprun's own cgroup is observed so that an
 * enclosing limit that fires is named. */
static void
run_without_cgroups(struct xmp_supervisor *sv, const char *why)
{
    struct xmp_error err = {0};

    snprintf(sv->no_cgroup_why, sizeof(sv->no_cgroup_why), "%s", why);
    sv->memwatch = true;
    if (xmp_cgroup_detect(&sv->mode, &err) == 0 && sv->mode != XMP_CGROUP_MODE_NONE &&
        xmp_cgroup_observe(sv->mode, &sv->own_cg, &err) < 0)
        sv->own_cg = NULL; /* no enclosing limit can then be named: the OOM is still one */
    sv->mode = XMP_CGROUP_MODE_NONE;
    snprintf(sv->report.cgroup_note, sizeof(sv->report.cgroup_note),
             "no cgroup per worker: %s; memory limits are kept by xmprun's watchdog (every %d "
             "ms)",
             why, XMP_MEMWATCH_PERIOD_MS);
    if (sv->own_cg != NULL)
        warn_enclosing_limit(sv);
}

void
xmp_sv_record_enforcement(struct xmp_supervisor *sv)
{
    enum xmp_enforce_means means = sv->mode != XMP_CGROUP_MODE_NONE ? XMP_ENFORCE_CGROUPS
                                   : sv->memwatch                   ? XMP_ENFORCE_WATCHDOG
                                                                    : XMP_ENFORCE_NONE;
    const char *why = sv->memwatch                           ? sv->no_cgroup_why
                      : sv->spec->cgroups == XMP_CGROUPS_OFF ? "isolation.cgroups is off"
                                                             : "no cgroups could be made here";
    char say[768];

    json_decref(sv->report.enforcement);
    sv->report.enforcement =
        xmp_enforce_json(&sv->plan, means, !sv->no_device_filter, why, say, sizeof(say));
    /* Said once, at the start, where the watchdog keeps what cgroups would. */
    if (sv->memwatch && !xmp_quiet(sv))
        fprintf(stderr, "xmprun: note: %s\n", say);
}

/* isolation.devices: worker hides each worker's GPU from the others, which is what NCCL needs
 * to see for CUDA IPC between the ranks (NVIDIA/nccl#1066): it then falls back to PCIe or
 * shared memory without a word. Said once, where it costs something: more than one cuda worker
 * on this node, behind a filter that is really there. */
static void
note_worker_filter(struct xmp_supervisor *sv)
{
    if (sv->spec->devices != XMP_DEVICES_WORKER || sv->plan.kind != XMP_DEVICE_CUDA ||
        sv->n_workers < 2 || sv->no_device_filter || xmp_quiet(sv))
        return;
    fprintf(stderr, "xmprun: note: isolation.devices: worker hides each worker's GPU from the "
                    "others, so NCCL cannot use CUDA IPC (P2P over NVLink) between them and falls "
                    "back to PCIe or shared memory; isolation.devices: job (the default) filters "
                    "per job and keeps it\n");
}

/* isolation.cgroups: auto makes cgroups where it can and runs without them where the place is
 * known to give none (run_without_cgroups); required refuses to run without cgroups, with
 * advice that fits the place; optional warns once and runs without limits (saying so in the
 * report); off does not try. */
int
xmp_sv_setup_cgroups(struct xmp_supervisor *sv, struct xmp_error *err)
{
    enum xmp_cgroup_manager manager = sv->spec->cgroup_manager;
    const char *why = NULL;

    sv->mode = XMP_CGROUP_MODE_NONE;
    if (sv->spec->cgroups == XMP_CGROUPS_OFF) {
        snprintf(sv->report.cgroup_note, sizeof(sv->report.cgroup_note),
                 "isolation.cgroups is off: workers ran without cgroups or resource limits");
        return 0;
    }
    struct xmp_limits jl = job_limits(sv);

    /* A job in a Slurm step stays in the step's cgroups: a scope from systemd would take it out
     * of the step's limits, accounting and end-of-job kill. */
    if (manager == XMP_CGROUP_MANAGER_AUTO && sv->plan.slurm_step)
        manager = XMP_CGROUP_MANAGER_CGROUPFS;
    if (xmp_cgroup_detect(&sv->mode, err) < 0 || check_device_filter(sv, err) < 0 ||
        xmp_cgroup_create_job(sv->mode, manager, sv->plan.cgroup_name, &jl, &sv->job_cg, err) < 0 ||
        xmp_sv_create_worker_cgroups(sv, err) < 0 || create_zygote_cgroup(sv, err) < 0) {
        xmp_sv_destroy_cgroups(sv);
        sv->mode = XMP_CGROUP_MODE_NONE;
        why = xmp_enforce_no_cgroup(&sv->plan, err);
        if (sv->spec->cgroups == XMP_CGROUPS_AUTO && why != NULL) {
            run_without_cgroups(sv, why);
            xmp_error_clear(err);
            return 0;
        }
        if (sv->spec->cgroups == XMP_CGROUPS_REQUIRED || sv->spec->cgroups == XMP_CGROUPS_AUTO) {
            /* The cgroup layer's message says why; the advice fits the place. */
            if (why != NULL)
                xmp_enforce_advise(&sv->plan, err);
            return -1;
        }
        if (!xmp_quiet(sv))
            fprintf(stderr,
                    "xmprun: warning: %s; running without resource limits "
                    "(isolation.cgroups: optional)\n",
                    err->msg);
        snprintf(sv->report.cgroup_note, sizeof(sv->report.cgroup_note),
                 "cgroups unavailable, workers ran without resource limits: %s", err->msg);
        xmp_error_clear(err);
        return 0;
    }
    snprintf(sv->report.cgroup_path, sizeof(sv->report.cgroup_path), "%s",
             xmp_cgroup_path(sv->job_cg));
    if (xmp_cgroup_scope(sv->job_cg) != NULL) {
        sv->report.cgroup_manager = "systemd";
        snprintf(sv->report.cgroup_scope, sizeof(sv->report.cgroup_scope), "%s",
                 xmp_cgroup_scope(sv->job_cg));
    } else {
        sv->report.cgroup_manager = "cgroupfs";
    }
    {
        struct xmp_cgroup_hier_path paths[8];
        size_t n = xmp_cgroup_paths(sv->job_cg, paths, 8);
        _Static_assert(sizeof(paths[0]) == sizeof(sv->report.cgroup_paths[0]),
                       "the report keeps the paths as isolate/ gives them");
        memcpy(sv->report.cgroup_paths, paths, n * sizeof(paths[0]));
        sv->report.n_cgroup_paths = n;
    }
    warn_enclosing_limit(sv);
    note_worker_filter(sv);
    return 0;
}
