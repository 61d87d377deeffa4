/* The plan: resolves a validated spec against the discovered host and the environment (device
 * selection, worker count, cpusets, limits, paths) into one fully specified worker per local
 * rank. Nodes, master address and run id are resolved in plan_nodes.c, the worker environments
 * in plan_env.c. */
#define _GNU_SOURCE
#include "runner/plan/plan.h"
#include "runner/spec/spec_validate.h"

#include "isolate/cleanup.h"
#include "runner/plan/plan_internal.h"
#include "runner/util/strv.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

const char *
xmp_plan_getenv(char *const *envp, const char *name)
{
    size_t len = strlen(name);

    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
            return *e + len + 1;
    return NULL;
}

bool
xmp_plan_all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* ---- device selection --------------------------------------------------------------------- */

static void
describe_visible(const struct xmp_plan_sel *vis, size_t n, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    if (n == 0) {
        snprintf(buf, size, "none");
        return;
    }
    for (size_t i = 0; i < n && len + 1 < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%zu (%s%s%s)", i ? ", " : "", i, vis[i].id,
                         vis[i].dev->uuid[0] ? " " : "", vis[i].dev->uuid);
        if (w < 0 || (size_t)w >= size - len)
            break;
        len += (size_t)w;
    }
}

/* Finds a GPU by index or by (unique prefix of a) UUID among devs, as CUDA resolves an entry
 * of CUDA_VISIBLE_DEVICES. Returns its position or -1. */
static long
find_gpu(const struct xmp_plan_sel *devs, size_t n, const char *token, bool by_position)
{
    long found = -1;

    if (xmp_plan_all_digits(token)) {
        long i = strtol(token, NULL, 10);
        if (by_position)
            return i < (long)n ? i : -1;
        for (size_t j = 0; j < n; j++)
            if (devs[j].dev->index == i)
                return (long)j;
        return -1;
    }
    if (strncmp(token, "GPU-", 4) != 0)
        return -1;
    for (size_t j = 0; j < n; j++) {
        if (strncmp(devs[j].dev->uuid, token, strlen(token)) != 0)
            continue;
        if (found >= 0)
            return -1; /* ambiguous prefix */
        found = (long)j;
    }
    return found;
}

static bool
sel_contains(const struct xmp_plan_sel *devs, size_t n, const struct xmp_device *dev)
{
    for (size_t i = 0; i < n; i++)
        if (devs[i].dev == dev)
            return true;
    return false;
}

/* Narrows devs to an inherited list. CUDA stops at the first entry it cannot resolve (a bad
 * index, "-1", Slurm's "NoDevFiles", a duplicate) and hides everything after it, so the same list
 * gives the same devices here as in a CUDA program. Indices are the GPUs' own (by_position false)
 * or positions in devs (true). Each device keeps the entry that named it. */
static size_t
narrow_gpus(const struct xmp_plan_sel *devs, size_t n_devs, const char *list, bool by_position,
            struct xmp_plan_sel *out)
{
    cleanup_free char *copy = strdup(list);
    char *save = NULL;
    size_t n = 0;

    if (copy == NULL)
        return 0;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        long pos;

        while (isspace((unsigned char)*tok))
            tok++;
        tok[strcspn(tok, " \t\n")] = '\0';
        pos = find_gpu(devs, n_devs, tok, by_position);
        if (pos < 0 || sel_contains(out, n, devs[pos].dev))
            break;
        out[n] = devs[pos];
        snprintf(out[n].id, sizeof(out[n].id), "%s", tok);
        n++;
    }
    return n;
}

/* A MIG instance cannot be tied to its GPU without NVML's MIG calls; failing beats silently
 * finding "no GPU" and running on CPUs. */
static int
refuse_mig(const char *name, const char *value, struct xmp_error *err)
{
    if (value == NULL || strstr(value, "MIG-") == NULL)
        return 0;
    return xmp_error_set(err, 0,
                         "%s=%s: MIG devices are not supported; set devices.kind: cpu or give "
                         "whole GPUs",
                         name, value);
}

/* The GPUs this process may use. Outside Slurm, an inherited CUDA_VISIBLE_DEVICES names them by
 * index or UUID. Under Slurm, SLURM_STEP_GPUS (else SLURM_JOB_GPUS) names the allocated GPUs by
 * their index on the node: that is who they are (their NUMA node, "cuda:N"). CUDA_VISIBLE_DEVICES
 * then numbers them as a CUDA program in the step sees them: with ConstrainDevices the step's
 * device cgroup hides every other GPU, CUDA counts the allocated ones from 0, and Slurm sets
 * CUDA_VISIBLE_DEVICES=0,1 for SLURM_STEP_GPUS=2,3. Without ConstrainDevices the two lists are
 * equal. The workers get the entries in CUDA's numbering, as the step gave them. */
static int
visible_gpus(const struct xmp_host *host, char *const *envp, struct xmp_plan_sel **out,
             size_t *n_out, char *why, size_t why_size, struct xmp_error *err)
{
    cleanup_free struct xmp_plan_sel *all = calloc(host->n_gpus + 1, sizeof(*all));
    cleanup_free struct xmp_plan_sel *slurm = calloc(host->n_gpus + 1, sizeof(*slurm));
    cleanup_free struct xmp_plan_sel *vis = calloc(host->n_gpus + 1, sizeof(*vis));
    const char *cuda = xmp_plan_getenv(envp, "CUDA_VISIBLE_DEVICES");
    const char *slurm_name = "SLURM_STEP_GPUS";
    const char *slurm_list = xmp_plan_getenv(envp, slurm_name);
    size_t n_slurm;

    if (all == NULL || slurm == NULL || vis == NULL)
        return xmp_error_set(err, ENOMEM, "calloc");
    if (slurm_list == NULL) {
        slurm_name = "SLURM_JOB_GPUS";
        slurm_list = xmp_plan_getenv(envp, slurm_name);
    }
    if (refuse_mig("CUDA_VISIBLE_DEVICES", cuda, err) < 0 ||
        refuse_mig(slurm_name, slurm_list, err) < 0)
        return -1;
    for (size_t i = 0; i < host->n_gpus; i++) {
        all[i].dev = &host->gpus[i];
        snprintf(all[i].id, sizeof(all[i].id), "%d", host->gpus[i].index);
    }
    why[0] = '\0';
    if (slurm_list == NULL && cuda == NULL) {
        *out = steal_pointer(&all);
        *n_out = host->n_gpus;
        return 0;
    }
    if (slurm_list == NULL) {
        *n_out = narrow_gpus(all, host->n_gpus, cuda, false, vis);
        snprintf(why, why_size, " (narrowed by CUDA_VISIBLE_DEVICES=%s)", cuda);
    } else if (cuda == NULL || strcmp(cuda, slurm_list) == 0) {
        *n_out = narrow_gpus(all, host->n_gpus, slurm_list, false, vis);
        snprintf(why, why_size, " (narrowed by %s=%s)", slurm_name, slurm_list);
    } else {
        n_slurm = narrow_gpus(all, host->n_gpus, slurm_list, false, slurm);
        *n_out = narrow_gpus(slurm, n_slurm, cuda, true, vis);
        snprintf(why, why_size, " (narrowed by %s=%s, numbered by CUDA_VISIBLE_DEVICES=%s)",
                 slurm_name, slurm_list, cuda);
    }
    *out = steal_pointer(&vis);
    return 0;
}

static int
visible_tpus(const struct xmp_host *host, struct xmp_plan_sel **out, size_t *n_out,
             struct xmp_error *err)
{
    struct xmp_plan_sel *all = calloc(host->n_tpus + 1, sizeof(*all));

    if (all == NULL)
        return xmp_error_set(err, ENOMEM, "calloc");
    for (size_t i = 0; i < host->n_tpus; i++) {
        all[i].dev = &host->tpus[i];
        snprintf(all[i].id, sizeof(all[i].id), "%d", host->tpus[i].index);
    }
    *out = all;
    *n_out = host->n_tpus;
    return 0;
}

/* Explicit devices.ids: indices count within what is visible (as a CUDA program started here
 * would number them), UUIDs match by unique prefix. The worker gets a UUID as written, an index
 * in the form the visible list used (the inherited CUDA_VISIBLE_DEVICES entry). */
static int
pick_ids(const struct xmp_spec *spec, enum xmp_device_kind kind, struct xmp_plan_sel *vis,
         size_t n_vis, const char *why, struct xmp_plan_sel **out, size_t *n_out,
         struct xmp_error *err)
{
    struct xmp_plan_sel *picked = calloc(spec->device_ids_len + 1, sizeof(*picked));
    char have[512];

    if (picked == NULL)
        return xmp_error_set(err, ENOMEM, "calloc");
    for (size_t i = 0; i < spec->device_ids_len; i++) {
        const char *id = spec->device_ids[i];
        long pos = find_gpu(vis, n_vis, id, true);

        if (kind == XMP_DEVICE_TPU && !xmp_plan_all_digits(id))
            pos = -1;
        if (pos < 0 || sel_contains(picked, i, vis[pos].dev)) {
            describe_visible(vis, n_vis, have, sizeof(have));
            free(picked);
            if (pos >= 0)
                return xmp_error_set(err, 0, "devices.ids: %s is listed twice", id);
            return xmp_error_set(err, 0, "devices.ids: no %s device %s; visible%s: %s",
                                 xmp_device_kind_name(kind), id, why, have);
        }
        picked[i] = vis[pos];
        if (!xmp_plan_all_digits(id))
            snprintf(picked[i].id, sizeof(picked[i].id), "%s", id);
    }
    *out = picked;
    *n_out = spec->device_ids_len;
    return 0;
}

/* ---- cpusets ------------------------------------------------------------------------------ */

/* Worker j's share of the n CPUs in cpus[] (ascending) among k workers: contiguous runs of
 * whole cores when there are at least k cores, so that no core is cut between two workers. */
static void
split_by_core(const int *cpus, size_t n, const int *core_of, size_t k, size_t j, cpu_set_t *out)
{
    int cores[CPU_SETSIZE];
    size_t n_cores = 0, q, rem, start, len;

    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t c = 0; c < n_cores && !seen; c++)
            seen = cores[c] == core_of[cpus[i]];
        if (!seen)
            cores[n_cores++] = core_of[cpus[i]];
    }
    if (n_cores < k) {
        /* Fewer cores than workers: share out threads one by one instead. */
        q = n / k, rem = n % k;
        start = j * q + (j < rem ? j : rem);
        len = q + (j < rem ? 1 : 0);
        for (size_t i = 0; i < len; i++)
            CPU_SET(cpus[start + i], out);
        return;
    }
    q = n_cores / k, rem = n_cores % k;
    start = j * q + (j < rem ? j : rem);
    len = q + (j < rem ? 1 : 0);
    for (size_t i = 0; i < n; i++)
        for (size_t c = start; c < start + len; c++)
            if (core_of[cpus[i]] == cores[c])
                CPU_SET(cpus[i], out);
}

/* Worker j's share of set among k workers. With the host's core topology, whole cores are
 * handed out. Without it, a set made of equal ranges is split range by range: most hosts
 * number the second thread of each core after all the cores (node0 = "0-59,120-179"), so each
 * worker then still gets both threads of its cores instead of one worker getting all first
 * threads and the next their siblings. With fewer CPUs than workers, workers share CPUs
 * round-robin so that each has at least one. */
void
xmp_plan_split_cpus(const struct xmp_host *host, const cpu_set_t *set, size_t k, size_t j,
                    cpu_set_t *out)
{
    int cpus[CPU_SETSIZE];
    size_t n = 0, n_ranges = 0, range_len;

    CPU_ZERO(out);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        if (n == 0 || cpus[n - 1] != c - 1)
            n_ranges++;
        cpus[n++] = c;
    }
    if (n == 0 || k == 0)
        return;
    if (n < k) {
        CPU_SET(cpus[j % n], out);
        return;
    }
    if (host->core_of != NULL) {
        split_by_core(cpus, n, host->core_of, k, j, out);
        return;
    }
    range_len = n;
    if (n_ranges > 1 && n % n_ranges == 0 && n / n_ranges >= k) {
        /* n_ranges blocks of equal length, each contiguous, are exactly the ranges. */
        size_t len = n / n_ranges;
        bool equal = true;
        for (size_t r = 0; equal && r < n; r += len)
            equal = cpus[r + len - 1] == cpus[r] + (int)len - 1;
        if (equal)
            range_len = len;
    }
    for (size_t base = 0; base < n; base += range_len) {
        size_t q = range_len / k, rem = range_len % k;
        size_t start = j * q + (j < rem ? j : rem);
        size_t len = q + (j < rem ? 1 : 0);
        for (size_t i = 0; i < len; i++)
            CPU_SET(cpus[base + start + i], out);
    }
}

static int
assign_cpusets(const struct xmp_spec *spec, const struct xmp_host *host,
               const struct xmp_plan_sel *sel, size_t per_worker, size_t n_workers,
               enum xmp_device_kind kind, cpu_set_t *sets, bool *has, struct xmp_error *err)
{
    bool local = kind == XMP_DEVICE_CUDA || kind == XMP_DEVICE_TPU;

    switch (spec->worker.cpuset_mode) {
    case XMP_CPUSET_NONE:
        for (size_t i = 0; i < n_workers; i++)
            has[i] = false;
        return 0;
    case XMP_CPUSET_LIST: {
        cpu_set_t want;
        char allowed[1024];

        if (xmp_cpulist_parse(spec->worker.cpuset ? spec->worker.cpuset : "", &want, err) < 0)
            return xmp_error_wrap(err, "resources.worker.cpuset");
        CPU_AND(&want, &want, &host->allowed);
        if (CPU_COUNT(&want) == 0) {
            xmp_cpulist_format(&host->allowed, allowed, sizeof(allowed));
            return xmp_error_set(err, 0,
                                 "resources.worker.cpuset \"%s\" has no CPU xmprun may run on "
                                 "(allowed: %s)",
                                 spec->worker.cpuset, allowed);
        }
        for (size_t i = 0; i < n_workers; i++) {
            sets[i] = want;
            has[i] = true;
        }
        return 0;
    }
    case XMP_CPUSET_AUTO:
        break;
    }

    /* Locality: the union of the worker's devices' local CPUs. */
    for (size_t i = 0; i < n_workers && local; i++) {
        CPU_ZERO(&sets[i]);
        for (size_t d = 0; d < per_worker; d++)
            CPU_OR(&sets[i], &sets[i], &sel[i * per_worker + d].dev->local_cpus);
        if (CPU_COUNT(&sets[i]) == 0)
            local = false; /* one worker without locality: split everything evenly instead */
    }
    if (!local) {
        for (size_t i = 0; i < n_workers; i++) {
            xmp_plan_split_cpus(host, &host->allowed, n_workers, i, &sets[i]);
            has[i] = CPU_COUNT(&sets[i]) > 0;
        }
        return 0;
    }
    /* Workers whose devices share a NUMA node (the same local set) split it between them, so
     * that no two workers compete for the same CPUs. */
    {
        cpu_set_t *local_sets = calloc(n_workers, sizeof(*local_sets));
        if (local_sets == NULL)
            return xmp_error_set(err, ENOMEM, "calloc");
        memcpy(local_sets, sets, n_workers * sizeof(*sets));
        for (size_t i = 0; i < n_workers; i++) {
            size_t k = 0, j = 0;
            for (size_t o = 0; o < n_workers; o++) {
                if (!CPU_EQUAL(&local_sets[o], &local_sets[i]))
                    continue;
                if (o < i)
                    j++;
                k++;
            }
            xmp_plan_split_cpus(host, &local_sets[i], k, j, &sets[i]);
            has[i] = true;
        }
        free(local_sets);
    }
    return 0;
}

/* ---- the plan ----------------------------------------------------------------------------- */

static int
make_job_id(pid_t pid, char **out, struct xmp_error *err)
{
    unsigned char r[3];

    /* Random bits keep two jobs of one pid apart (a restarted xmprun reusing a pid after a
     * crash, whose cgroups gc has not removed yet). */
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        unsigned long t =
            (unsigned long)time(NULL) ^ ((unsigned long)pid << 7) ^ (unsigned long)clock();
        r[0] = (unsigned char)t;
        r[1] = (unsigned char)(t >> 8);
        r[2] = (unsigned char)(t >> 16);
    }
    if (asprintf(out, "%ld-%02x%02x%02x", (long)pid, r[0], r[1], r[2]) < 0) {
        *out = NULL;
        return xmp_error_set(err, ENOMEM, "asprintf");
    }
    return 0;
}

static void
limits_unlimited(struct xmp_limits *l)
{
    xmp_limits_init(l);
}

static char **
strv_dup(char *const *v)
{
    size_t n = 0;
    char **out;

    while (v != NULL && v[n] != NULL)
        n++;
    out = calloc(n + 1, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if ((out[i] = strdup(v[i])) == NULL) {
            xmp_strv_free(out);
            return NULL;
        }
    }
    return out;
}

static int
resolve_kind(const struct xmp_spec *spec, const struct xmp_host *host, char *const *envp,
             struct xmp_plan_sel **vis, size_t *n_vis, char *why, size_t why_size,
             enum xmp_device_kind *kind, struct xmp_error *err)
{
    *kind = spec->device_kind;
    if (*kind == XMP_DEVICE_AUTO || *kind == XMP_DEVICE_CUDA) {
        if (visible_gpus(host, envp, vis, n_vis, why, why_size, err) < 0)
            return -1;
        if (*kind == XMP_DEVICE_CUDA || *n_vis > 0) {
            *kind = XMP_DEVICE_CUDA;
            return 0;
        }
        free(*vis);
        *vis = NULL;
        *kind = host->n_tpus > 0 ? XMP_DEVICE_TPU : XMP_DEVICE_CPU;
    }
    why[0] = '\0';
    if (*kind == XMP_DEVICE_TPU)
        return visible_tpus(host, vis, n_vis, err);
    *n_vis = 0;
    return 0;
}

/* More workers than devices: what is missing, and the two ways to run anyway. */
static int
too_few_devices(long workers, long per, const char *name, size_t n_dev, const char *why,
                struct xmp_error *err)
{
    size_t most = n_dev / (size_t)per;
    char fewer[96];

    if (most > 0)
        snprintf(fewer, sizeof(fewer), "run at most %zu worker%s (-n %zu)", most,
                 most == 1 ? "" : "s", most);
    else
        snprintf(fewer, sizeof(fewer), "give each worker at most %zu (devices.per_worker)", n_dev);
    return xmp_error_set(err, 0,
                         "workers %ld x devices.per_worker %ld need %ld %s devices, but only %zu "
                         "%s visible%s: %s, or run the workers on CPUs with --set "
                         "devices.kind=cpu (they then get no %s device)",
                         workers, per, workers * per, name, n_dev, n_dev == 1 ? "is" : "are", why,
                         fewer, name);
}

/* How many workers, and which devices each gets (consecutive groups of per_worker). */
static int
resolve_workers(const struct xmp_spec *spec, const struct xmp_host *host, enum xmp_device_kind kind,
                size_t n_dev, const char *why, size_t *n_workers, struct xmp_error *err)
{
    long per = spec->per_worker;
    const char *name = xmp_device_kind_name(kind);

    if (kind == XMP_DEVICE_CPU) {
        *n_workers = spec->workers > 0 ? (size_t)spec->workers : (size_t)host->ncpus;
        return *n_workers > 0 ? 0 : xmp_error_set(err, 0, "workers auto: no CPU to run on");
    }
    if (per < 1)
        return xmp_error_set(err, 0, "devices.per_worker %ld must be >= 1", per);
    if (n_dev == 0)
        return xmp_error_set(err, 0, "devices.kind %s: no %s device visible%s", name, name, why);
    if (spec->workers > 0) {
        if ((size_t)spec->workers * (size_t)per > n_dev)
            return too_few_devices(spec->workers, per, name, n_dev, why, err);
        *n_workers = (size_t)spec->workers;
        return 0;
    }
    if (n_dev % (size_t)per != 0)
        return xmp_error_set(err, 0,
                             "workers auto: %zu visible %s devices%s do not divide into groups of "
                             "devices.per_worker %ld; set workers or per_worker",
                             n_dev, name, why, per);
    *n_workers = n_dev / (size_t)per;
    return 0;
}

static int
fill_worker(const struct xmp_spec *spec, const struct xmp_host *host, struct xmp_plan *plan,
            struct xmp_plan_worker *w, size_t i, const struct xmp_plan_sel *sel, size_t per,
            size_t n_workers, const cpu_set_t *cpus, bool has_cpus, struct xmp_error *err)
{
    w->local_rank = (int)i;
    w->rank = plan->node_rank * plan->local_world_size + (int)i;
    w->n_devices = plan->kind == XMP_DEVICE_CPU ? 1 : per;
    w->devices = calloc(w->n_devices + 1, sizeof(*w->devices));
    if (w->devices == NULL)
        return xmp_error_set(err, ENOMEM, "calloc");
    for (size_t d = 0; d < w->n_devices; d++) {
        int rc = plan->kind == XMP_DEVICE_CPU
                     ? asprintf(&w->devices[d], "cpu")
                     : asprintf(&w->devices[d], "%s:%d", xmp_device_kind_name(plan->kind),
                                sel[i * per + d].dev->index);
        if (rc < 0) {
            w->devices[d] = NULL;
            return xmp_error_set(err, ENOMEM, "asprintf");
        }
    }
    limits_unlimited(&w->limits);
    w->limits.memory = spec->worker.memory;
    w->limits.memory_high = spec->worker.memory_high;
    w->limits.swap = spec->worker.swap;
    w->limits.cpus_milli = spec->worker.cpus_milli;
    w->limits.pids = spec->worker.pids;
    w->limits.has_cpus = has_cpus;
    w->limits.cpus_auto = spec->worker.cpuset_mode == XMP_CPUSET_AUTO;
    if (has_cpus) {
        w->limits.cpus = *cpus;
        xmp_cpulist_format(cpus, w->cpuset, sizeof(w->cpuset));
    }
    if (spec->devices != XMP_DEVICES_OFF &&
        xmp_plan_device_rules(host, plan, w, sel, per, n_workers, err) < 0)
        return -1;
    w->argv = strv_dup(spec->command);
    if (w->argv == NULL)
        return xmp_error_set(err, ENOMEM, "argv");
    if (asprintf(&w->error_file, "%s/error-%d.json", plan->run_dir, w->rank) < 0) {
        w->error_file = NULL;
        return xmp_error_set(err, ENOMEM, "asprintf");
    }
    if (spec->log_dir != NULL && spec->log_dir[0] != '\0') {
        if (asprintf(&w->stdout_path, "%s/rank-%d.out", spec->log_dir, w->rank) < 0 ||
            asprintf(&w->stderr_path, "%s/rank-%d.err", spec->log_dir, w->rank) < 0)
            return xmp_error_set(err, ENOMEM, "asprintf");
    }
    return 0;
}

static int
fill_job(const struct xmp_spec *spec, char *const *envp, pid_t pid, struct xmp_plan *plan,
         struct xmp_error *err)
{
    const char *tmp = xmp_plan_getenv(envp, "TMPDIR");

    plan->spec = spec;
    if (make_job_id(pid, &plan->job_id, err) < 0)
        return -1;
    plan->job_name = strdup(spec->name ? spec->name : "job");
    if (plan->job_name == NULL)
        return xmp_error_set(err, ENOMEM, "strdup");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    if (asprintf(&plan->cgroup_name, "xmprun-%s-%s", plan->job_name, plan->job_id) < 0 ||
        asprintf(&plan->run_dir, "%s/xmprun-%s-%s", tmp, plan->job_name, plan->job_id) < 0)
        return xmp_error_set(err, ENOMEM, "asprintf");
    /* On a shared filesystem the nodes of one job must not overwrite each other's report. */
    if (spec->report != NULL && spec->report[0] != '\0')
        plan->report_path = strdup(spec->report);
    else if (plan->nnodes > 1 ? asprintf(&plan->report_path, "%s.node%d.report.json",
                                         plan->job_name, plan->node_rank) < 0
                              : asprintf(&plan->report_path, "%s.report.json", plan->job_name) < 0)
        plan->report_path = NULL;
    if (plan->report_path == NULL)
        return xmp_error_set(err, ENOMEM, "report path");
    if (spec->workdir != NULL)
        plan->workdir = strdup(spec->workdir);
    else if ((plan->workdir = getcwd(NULL, 0)) == NULL)
        return xmp_error_set(err, errno, "getcwd");
    if (plan->workdir == NULL)
        return xmp_error_set(err, ENOMEM, "strdup");
    limits_unlimited(&plan->job_limits);
    plan->job_limits.memory = spec->job_memory;
    return 0;
}

int
xmp_plan_build(const struct xmp_spec *spec, const struct xmp_host *host, char *const *envp,
               pid_t pid, struct xmp_plan *out, struct xmp_error *err)
{
    struct xmp_plan plan;
    cleanup_free struct xmp_plan_sel *vis = NULL;
    cleanup_free struct xmp_plan_sel *picked = NULL;
    cleanup_free cpu_set_t *sets = NULL;
    cleanup_free bool *has = NULL;
    struct xmp_plan_sel *sel;
    size_t n_vis = 0, n_sel = 0, n_workers = 0;
    size_t per = spec->per_worker > 0 ? (size_t)spec->per_worker : 1;
    char why[256] = "";

    memset(&plan, 0, sizeof(plan));
    for (size_t i = 0; i < spec->env_len; i++)
        if (xmp_spec_env_reserved(spec->env[i].name))
            return xmp_error_set(err, 0, "env: %s is set by xmprun and may not be set in a spec",
                                 spec->env[i].name);
    plan.slurm_step = xmp_plan_getenv(envp, "SLURM_JOB_ID") != NULL &&
                      xmp_plan_getenv(envp, "SLURM_STEP_ID") != NULL;
    if (xmp_plan_check_one_per_node(envp, err) < 0)
        return -1;
    if (resolve_kind(spec, host, envp, &vis, &n_vis, why, sizeof(why), &plan.kind, err) < 0)
        return -1;
    sel = vis;
    n_sel = n_vis;
    if (plan.kind != XMP_DEVICE_CPU && spec->device_ids != NULL) {
        if (pick_ids(spec, plan.kind, vis, n_vis, why, &picked, &n_sel, err) < 0)
            return -1;
        sel = picked;
    }
    if (plan.kind == XMP_DEVICE_CPU)
        per = 1;
    if (resolve_workers(spec, host, plan.kind, n_sel, why, &n_workers, err) < 0)
        return -1;
    plan.local_world_size = (int)n_workers;
    if (xmp_plan_resolve_nodes(spec, envp, &plan, err) < 0)
        goto fail;
    plan.world_size = plan.nnodes * plan.local_world_size;
    if (fill_job(spec, envp, pid, &plan, err) < 0 ||
        xmp_plan_resolve_run_id(spec, envp, &plan, err) < 0)
        goto fail;

    sets = calloc(n_workers, sizeof(*sets));
    has = calloc(n_workers, sizeof(*has));
    plan.workers = calloc(n_workers, sizeof(*plan.workers));
    if (sets == NULL || has == NULL || plan.workers == NULL) {
        xmp_error_set(err, ENOMEM, "calloc");
        goto fail;
    }
    plan.n_workers = n_workers;
    xmp_plan_check_allocation(spec, envp, per, &plan);
    xmp_plan_check_shm(envp, &plan);
    if (assign_cpusets(spec, host, sel, per, n_workers, plan.kind, sets, has, err) < 0)
        goto fail;
    for (size_t i = 0; i < n_workers; i++) {
        if (fill_worker(spec, host, &plan, &plan.workers[i], i, sel, per, n_workers, &sets[i],
                        has[i], err) < 0 ||
            xmp_plan_worker_env(&plan, host, envp, sel, per, &plan.workers[i], err) < 0) {
            xmp_error_wrap(err, "worker %zu", i);
            goto fail;
        }
    }
    *out = plan;
    return 0;
fail:
    xmp_plan_free(&plan);
    return -1;
}

void
xmp_plan_free(struct xmp_plan *plan)
{
    if (plan == NULL)
        return;
    for (size_t i = 0; i < plan->n_workers; i++) {
        struct xmp_plan_worker *w = &plan->workers[i];
        xmp_strv_free(w->devices);
        xmp_devices_free(&w->limits.devices);
        for (size_t e = 0; e < w->env_len; e++) {
            free(w->env[e].name);
            free(w->env[e].value);
        }
        free(w->env);
        xmp_strv_free(w->argv);
        free(w->stdout_path);
        free(w->stderr_path);
        free(w->error_file);
    }
    free(plan->workers);
    free(plan->job_name);
    free(plan->job_id);
    free(plan->cgroup_name);
    free(plan->master_addr);
    free(plan->run_id);
    xmp_strv_free(plan->warnings);
    free(plan->workdir);
    free(plan->report_path);
    free(plan->run_dir);
    memset(plan, 0, sizeof(*plan));
}
