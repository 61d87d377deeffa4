/* How each limit of a plan is kept where xmprun runs, and the places that give no writable
 * cgroup: one table of limits for the report and `xmprun plan`, and the words for a refusal. */
#include "runner/plan/enforce.h"

#include "isolate/privilege.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *
xmp_enforce_no_cgroup(const struct xmp_plan *plan, const struct xmp_error *err)
{
    if (err->errnum == EROFS)
        return "the cgroup filesystem is mounted read-only (as in a default Docker or "
               "Kubernetes container)";
    if ((err->errnum != EACCES && err->errnum != EPERM && err->errnum != ENODEV &&
         err->errnum != EDQUOT) ||
        xmp_priv_root())
        return NULL;
    if (!xmp_priv_initial_userns())
        return "uid 0 in a user namespace has no rights over the host's cgroups (rootless "
               "Podman, Apptainer's fakeroot)";
    if (plan->slurm_step && err->errnum == EDQUOT)
        return "the job has more workers than the cgroups Slurm's spank_xmprun plugin prepared "
               "for the task (one per CPU, up to the plugin's max_workers)";
    if (plan->slurm_step)
        return "a Slurm step's cgroups belong to root";
    return "xmprun is not root and has no delegated cgroup";
}

void
xmp_enforce_advise(const struct xmp_plan *plan, struct xmp_error *err)
{
    const char *fix = NULL;
    size_t len = strlen(err->msg);

    if (plan->slurm_step)
        fix = "ask the cluster's admins to enable xmprun's Slurm plugin (spank_xmprun.so) and "
              "run with srun --xmprun-cgroups";
    else if (err->errnum == EROFS)
        fix = NULL; /* the cgroup layer's message says what a container needs */
    else if (!xmp_priv_initial_userns())
        fix = "run xmprun in a cgroup delegated to the namespace's owner (systemd-run --user -p "
              "Delegate=yes --scope ...)";
    else if (access("/run/systemd/system", F_OK) == 0)
        fix = "ask your user manager for a delegated cgroup: systemd-run --user -p Delegate=yes "
              "--scope xmprun ...";
    else
        fix = "run as root or in a cgroup delegated to you";
    snprintf(err->msg + len, sizeof(err->msg) - len,
             "; %s%sor set isolation.cgroups: auto to run with xmprun's memory watchdog",
             fix != NULL ? fix : "", fix != NULL ? "; " : "");
}

/* Appends ", item" (or "item" first) to list. */
static void
list_add(char *list, size_t size, const char *item)
{
    size_t len = strlen(list);

    snprintf(list + len, size - len, "%s%s", len > 0 ? ", " : "", item);
}

json_t *
xmp_enforce_json(const struct xmp_plan *plan, enum xmp_enforce_means means, bool device_filter,
                 const char *why, char *say, size_t say_size)
{
    const struct xmp_limits *l = plan->n_workers > 0 ? &plan->workers[0].limits : NULL;
    bool watch = means == XMP_ENFORCE_WATCHDOG;
    char sampled[64], sum[96], kept[512] = "", none[128] = "";
    json_t *o = json_object();

    if (l == NULL)
        return o;
    snprintf(sampled, sizeof(sampled), "measured every %d ms", XMP_MEMWATCH_PERIOD_MS);
    snprintf(sum, sizeof(sum), "the workers' sum, %s", sampled);
    /* Each limit the spec sets: what keeps it without a cgroup, and why a cgroup would be
     * needed. All workers have the same kinds of limits; the first stands for them. */
    const struct {
        const char *key, *name;
        bool set;
        const char *without, *what;
    } rules[] = {
        {"resources.worker.memory", "memory", l->memory > 0, watch ? "watchdog" : "none",
         watch ? sampled : NULL},
        {"resources.job.memory", "job memory", plan->job_limits.memory > 0,
         watch ? "watchdog" : "none", watch ? sum : NULL},
        {"resources.worker.memory_high", "memory_high", l->memory_high > 0, "none",
         "a soft limit needs a cgroup"},
        {"resources.worker.swap", "swap", l->swap >= 0 && l->memory > 0, "none",
         "swap is limited by a cgroup only"},
        {"resources.worker.cpus", "cpus", l->cpus_milli > 0, "none", "a CPU quota needs a cgroup"},
        {"resources.worker.cpuset", "cpuset", l->has_cpus, "affinity",
         "pinned by sched_setaffinity"},
        {"resources.worker.pids", "pids", l->pids > 0, "none", "a process limit needs a cgroup"},
        {"isolation.devices", "devices", l->has_devices, "none", "the device filter needs root"},
    };
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        bool devices = strcmp(rules[i].key, "isolation.devices") == 0;
        const char *by = means == XMP_ENFORCE_CGROUPS && (!devices || device_filter)
                             ? "cgroup"
                             : rules[i].without;
        char text[256];

        if (!rules[i].set)
            continue;
        snprintf(text, sizeof(text), "%s%s%s", rules[i].what != NULL ? rules[i].what : "",
                 rules[i].what != NULL ? ": " : "", why != NULL ? why : "");
        json_object_set_new(o, rules[i].key,
                            json_pack("{s:s, s:o}", "by", by, "why",
                                      strcmp(by, "cgroup") == 0 ? json_null() : json_string(text)));
        if (strcmp(by, "none") == 0) {
            list_add(none, sizeof(none), rules[i].name);
        } else if (strcmp(by, "cgroup") != 0) {
            char item[96];
            snprintf(item, sizeof(item), "%s by %s", rules[i].name,
                     strcmp(by, "watchdog") == 0 ? "xmprun's memory watchdog" : "CPU affinity");
            list_add(kept, sizeof(kept), item);
        }
    }
    if (say != NULL)
        snprintf(say, say_size, "no cgroup per worker here (%s)%s%s%s%s", why != NULL ? why : "",
                 kept[0] ? "; " : "", kept, none[0] ? "; not enforced: " : "", none);
    return o;
}

json_t *
xmp_enforce_predict(const struct xmp_plan *plan)
{
    const struct xmp_spec *spec = plan->spec;
    enum xmp_cgroup_mode mode = XMP_CGROUP_MODE_NONE;
    struct xmp_cgroup *own = NULL;
    struct xmp_error err = {0};
    const char *why = NULL;
    bool writable;

    if (spec->cgroups == XMP_CGROUPS_OFF)
        return xmp_enforce_json(plan, XMP_ENFORCE_NONE, false, "isolation.cgroups is off", NULL, 0);
    writable = xmp_cgroup_detect(&mode, &err) == 0 && mode != XMP_CGROUP_MODE_NONE &&
               xmp_cgroup_observe(mode, &own, &err) == 0 &&
               xmp_cgroup_check_writable(own, &err) == 0;
    if (writable && xmp_cgroup_from_slurm(own))
        fprintf(stderr, "xmprun: note: cgroups from Slurm's spank_xmprun plugin (a cgroup per "
                        "worker below the task's)\n");
    xmp_cgroup_abandon(own);
    /* Where the own cgroup may not be written on a systemd host, the run asks systemd for a
     * scope (never in a Slurm step, nor for a read-only cgroupfs). */
    if (!writable && mode == XMP_CGROUP_MODE_UNIFIED && err.errnum != EROFS && !plan->slurm_step &&
        spec->cgroup_manager != XMP_CGROUP_MANAGER_CGROUPFS &&
        access("/run/systemd/system", F_OK) == 0)
        writable = true;
    if (!writable)
        why = xmp_enforce_no_cgroup(plan, &err);
    if (writable || why == NULL) /* cgroups, or a refusal that names its reason at run time */
        return xmp_enforce_json(plan, XMP_ENFORCE_CGROUPS, xmp_priv_admin(), NULL, NULL, 0);
    return xmp_enforce_json(
        plan, spec->cgroups == XMP_CGROUPS_AUTO ? XMP_ENFORCE_WATCHDOG : XMP_ENFORCE_NONE, false,
        why, NULL, 0);
}
