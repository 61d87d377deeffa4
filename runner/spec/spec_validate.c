/* Validation of the spec tree into struct xmp_spec: the known keys at each level, the typed
 * checks of each field, cross-field rules and defaults (SPEC.md section 1). Every problem is
 * reported with its position; validation goes on after an error to find the others. */
#define _GNU_SOURCE /* asprintf */
#include "runner/spec/spec_validate.h"

#include "runner/spec/seccomp_profile.h"

#include "isolate/cleanup.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define KEYS(a)            a, sizeof(a) / sizeof(a[0])
#define XMP_MAX_DEVICE_IDS 1024

enum { D_KIND, D_IDS, D_PER_WORKER, D_N };
static const struct xmp_keydef device_keys[] = {
    [D_KIND] = {"kind"}, [D_IDS] = {"ids"}, [D_PER_WORKER] = {"per_worker"}};

const char *const xmp_rlimit_names[XMP_RLIMIT_N] = {"nofile", "memlock", "core", "stack", "nproc"};
static const struct xmp_keydef rlimit_keys[] = {
    {"nofile"}, {"memlock"}, {"core"}, {"stack"}, {"nproc"}};

enum { W_MEMORY, W_MEMORY_HIGH, W_SWAP, W_CPUS, W_CPUSET, W_PIDS, W_RLIMITS, W_N };
static const struct xmp_keydef worker_keys[] = {[W_MEMORY] = {"memory"},
                                                [W_MEMORY_HIGH] = {"memory_high"},
                                                [W_SWAP] = {"swap"},
                                                [W_CPUS] = {"cpus"},
                                                [W_CPUSET] = {"cpuset"},
                                                [W_PIDS] = {"pids"},
                                                [W_RLIMITS] = {"rlimits", KEYS(rlimit_keys)}};

static const struct xmp_keydef memory_keys[] = {{"memory"}};

enum { R_WORKER, R_JOB, R_SHARED, R_N };
static const struct xmp_keydef resource_keys[] = {[R_WORKER] = {"worker", KEYS(worker_keys)},
                                                  [R_JOB] = {"job", KEYS(memory_keys)},
                                                  [R_SHARED] = {"shared", KEYS(memory_keys)}};

enum { I_CGROUPS, I_CGROUP_MANAGER, I_SECCOMP, I_NO_NEW_PRIVS, I_DEVICES, I_USER, I_N };
static const struct xmp_keydef isolation_keys[] = {
    [I_CGROUPS] = {"cgroups"}, [I_CGROUP_MANAGER] = {"cgroup_manager"},
    [I_SECCOMP] = {"seccomp"}, [I_NO_NEW_PRIVS] = {"no_new_privs"},
    [I_DEVICES] = {"devices"}, [I_USER] = {"user"}};

enum { F_ACTION, F_GRACE, F_RESTARTS, F_HANG_TIMEOUT, F_STACKS, F_N };
static const struct xmp_keydef failure_keys[] = {[F_ACTION] = {"action"},
                                                 [F_GRACE] = {"grace"},
                                                 [F_RESTARTS] = {"restarts"},
                                                 [F_HANG_TIMEOUT] = {"hang_timeout"},
                                                 [F_STACKS] = {"stacks"}};

enum { L_CONSOLE, L_DIR, L_TAIL, L_N };
static const struct xmp_keydef log_keys[] = {
    [L_CONSOLE] = {"console"}, [L_DIR] = {"dir"}, [L_TAIL] = {"tail"}};

enum { N_NNODES, N_NODE_RANK, N_MASTER_ADDR, N_MASTER_PORT, N_RUN_ID, N_N };
static const struct xmp_keydef dist_keys[] = {[N_NNODES] = {"nnodes"},
                                              [N_NODE_RANK] = {"node_rank"},
                                              [N_MASTER_ADDR] = {"master_addr"},
                                              [N_MASTER_PORT] = {"master_port"},
                                              [N_RUN_ID] = {"run_id"}};

enum {
    T_VERSION,
    T_NAME,
    T_COMMAND,
    T_WORKDIR,
    T_ENV,
    T_INHERIT_ENV,
    T_WORKERS,
    T_DEVICES,
    T_RESOURCES,
    T_START,
    T_ISOLATION,
    T_ON_FAILURE,
    T_TIMEOUT,
    T_LOGS,
    T_REPORT,
    T_DISTRIBUTED,
    T_N
};
const struct xmp_keydef xmp_spec_keys[] = {
    [T_VERSION] = {"version"},
    [T_NAME] = {"name"},
    [T_COMMAND] = {"command"},
    [T_WORKDIR] = {"workdir"},
    [T_ENV] = {"env", NULL, 0, true},
    [T_INHERIT_ENV] = {"inherit_env"},
    [T_WORKERS] = {"workers"},
    [T_DEVICES] = {"devices", KEYS(device_keys)},
    [T_RESOURCES] = {"resources", KEYS(resource_keys)},
    [T_START] = {"start"},
    [T_ISOLATION] = {"isolation", KEYS(isolation_keys)},
    [T_ON_FAILURE] = {"on_failure", KEYS(failure_keys)},
    [T_TIMEOUT] = {"timeout"},
    [T_LOGS] = {"logs", KEYS(log_keys)},
    [T_REPORT] = {"report"},
    [T_DISTRIBUTED] = {"distributed", KEYS(dist_keys)},
};
const size_t xmp_spec_n_keys = T_N;

/* Variables xmprun computes per worker (SPEC.md section 3); a spec that set them would give
 * every rank the same value and silently break the job. */
static const char *const reserved_env[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PJRT_LOCAL_PROCESS_RANK",
    "PJRT_LOCAL_PROCESS_COUNT",
    "TORCHELASTIC_ERROR_FILE",
    "XMPRUN_JOB_ID",
    "XMPRUN_JOB_NAME",
    "XMPRUN_RESTART_COUNT",
};

bool
xmp_spec_env_reserved(const char *name)
{
    for (size_t r = 0; r < sizeof(reserved_env) / sizeof(reserved_env[0]); r++)
        if (strcmp(name, reserved_env[r]) == 0)
            return true;
    return false;
}

static const char *const kind_names[] = {"auto", "cuda", "tpu", "cpu"};
static const char *const start_names[] = {"exec", "fork"};
static const char *const cgroups_names[] = {"auto", "required", "optional", "off"};
static const char *const cgroup_manager_names[] = {"auto", "cgroupfs", "systemd"};
static const char *const action_names[] = {"kill-all", "continue"};
/* In enum xmp_stacks_policy's order. */
static const char *const stacks_names[] = {"auto", "always", "never"};
static const char *const console_names[] = {"prefix", "raw", "rank0", "none"};

#define COUNT(a) (sizeof(a) / sizeof(a[0]))

static bool
valid_name(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len > 63)
        return false;
    if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') ||
          (s[0] >= '0' && s[0] <= '9')))
        return false;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

static bool
valid_env_name(const char *s)
{
    if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
           strlen(s);
}

static void
check_version(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    char got[128];

    if (n->kind == XMP_NODE_SCALAR && !n->quoted && strcmp(n->text, "1") == 0) {
        s->version = 1;
        return;
    }
    if (n->kind == XMP_NODE_SCALAR && !n->quoted && strspn(n->text, "0123456789") == n->len &&
        n->len > 0 && n->len < 10) {
        xmp_check_error(c, n, "version", "unsupported version %s (this xmprun reads version 1)",
                        n->text);
        return;
    }
    xmp_describe(n, got, sizeof(got));
    xmp_check_error(c, n, "version", "expected the integer 1, got %s", got);
}

static void
check_command(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    char got[128], path[64];
    const char *text;

    if (n->kind == XMP_NODE_SCALAR && !xmp_node_is_null(n)) {
        if (!xmp_check_string(c, n, "command", false, &text))
            return;
        s->command = xmp_xcalloc(4, sizeof(char *));
        s->command[0] = xmp_xstrdup("/bin/sh");
        s->command[1] = xmp_xstrdup("-c");
        s->command[2] = xmp_xstrdup(text);
        s->command_len = 3;
        s->command_shell = true;
        return;
    }
    if (n->kind != XMP_NODE_SEQ) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, "command", "expected a list of strings or one string, got %s", got);
        return;
    }
    if (n->n_items == 0) {
        xmp_check_error(c, n, "command", "must not be an empty list");
        return;
    }
    s->command = xmp_xcalloc(n->n_items + 1, sizeof(char *));
    for (size_t i = 0; i < n->n_items; i++) {
        snprintf(path, sizeof(path), "command[%zu]", i);
        if (!xmp_check_string(c, n->items[i], path, i > 0, &text))
            continue;
        s->command[s->command_len++] = xmp_xstrdup(text);
    }
}

static void
check_env(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    char got[128], path[256];

    if (n->kind != XMP_NODE_MAP) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, "env", "expected a mapping of NAME: value, got %s", got);
        return;
    }
    s->env = xmp_xcalloc(n->n_pairs + 1, sizeof(*s->env));
    for (size_t i = 0; i < n->n_pairs; i++) {
        const struct xmp_node *key = n->pairs[i].key, *val = n->pairs[i].value;
        const char *text;
        bool reserved = false;
        xmp_join_path(path, sizeof(path), "env", key->text);
        if (!valid_env_name(key->text) || strlen(key->text) != key->len) {
            xmp_check_error(c, key, path,
                            "not a valid variable name (letters, digits and _, not starting with "
                            "a digit)");
            continue;
        }
        reserved = xmp_spec_env_reserved(key->text);
        if (reserved) {
            xmp_check_error(c, key, path,
                            "%s is set by xmprun for each worker and cannot be set "
                            "in the spec",
                            key->text);
            continue;
        }
        if (val->kind != XMP_NODE_SCALAR || xmp_node_is_null(val)) {
            xmp_describe(val, got, sizeof(got));
            xmp_check_error(c, val, path, "expected a string, number or boolean, got %s", got);
            continue;
        }
        if (!xmp_check_string(c, val, path, true, &text))
            continue;
        s->env[s->env_len].name = xmp_xstrdup(key->text);
        s->env[s->env_len].value = xmp_xstrdup(text);
        s->env_len++;
    }
}

static void
check_device_ids(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const char *expect = "expected \"all\" or a list of device indices or GPU UUIDs";
    char got[128], path[64];

    if (n->kind == XMP_NODE_SCALAR && strcmp(n->text, "all") == 0)
        return;
    if (n->kind != XMP_NODE_SEQ) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, "devices.ids", "%s, got %s", expect, got);
        return;
    }
    if (n->n_items == 0) {
        xmp_check_error(c, n, "devices.ids", "must not be an empty list (use all)");
        return;
    }
    /* No host has more; the cap also keeps the duplicate check below cheap. */
    if (n->n_items > XMP_MAX_DEVICE_IDS) {
        xmp_check_error(c, n, "devices.ids", "lists %zu devices (at most %d)", n->n_items,
                        XMP_MAX_DEVICE_IDS);
        return;
    }
    s->device_ids = xmp_xcalloc(n->n_items + 1, sizeof(char *));
    for (size_t i = 0; i < n->n_items; i++) {
        const struct xmp_node *item = n->items[i];
        char text[80];
        long index;
        bool dup = false;
        snprintf(path, sizeof(path), "devices.ids[%zu]", i);
        if (item->kind == XMP_NODE_SCALAR && !item->quoted &&
            strspn(item->text, "-+0123456789") == item->len && item->len > 0) {
            if (!xmp_check_int(c, item, path, 0, INT_MAX, false, 0, &index))
                continue;
            snprintf(text, sizeof(text), "%ld", index);
        } else if (item->kind == XMP_NODE_SCALAR && strncmp(item->text, "GPU-", 4) == 0 &&
                   item->len > 4 && item->len < 64 && strlen(item->text) == item->len) {
            snprintf(text, sizeof(text), "%s", item->text);
        } else {
            xmp_describe(item, got, sizeof(got));
            xmp_check_error(c, item, path,
                            "expected a device index (integer >= 0) or a GPU UUID (\"GPU-...\"), "
                            "got %s",
                            got);
            continue;
        }
        for (size_t j = 0; j < s->device_ids_len; j++)
            dup = dup || strcmp(s->device_ids[j], text) == 0;
        if (dup) {
            xmp_check_error(c, item, path, "device %s is listed twice", text);
            continue;
        }
        s->device_ids[s->device_ids_len++] = xmp_xstrdup(text);
    }
}

static void
check_devices(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[D_N];
    int kind;

    if (!xmp_check_map(c, n, "devices", device_keys, D_N, v))
        return;
    /* "gpu" is one edit from "tpu", but a user who writes it means CUDA. */
    if (v[D_KIND] && v[D_KIND]->kind == XMP_NODE_SCALAR &&
        (strcasecmp(v[D_KIND]->text, "gpu") == 0 || strcasecmp(v[D_KIND]->text, "nvidia") == 0)) {
        char got[128];
        xmp_describe(v[D_KIND], got, sizeof(got));
        xmp_check_error(c, v[D_KIND], "devices.kind",
                        "expected one of auto, cuda, tpu, cpu, got %s (did you mean \"cuda\"?)",
                        got);
    } else if (v[D_KIND] &&
               xmp_check_enum(c, v[D_KIND], "devices.kind", kind_names, COUNT(kind_names), &kind))
        s->device_kind = (enum xmp_device_kind[]){XMP_DEVICE_AUTO, XMP_DEVICE_CUDA, XMP_DEVICE_TPU,
                                                  XMP_DEVICE_CPU}[kind];
    if (v[D_IDS])
        check_device_ids(c, v[D_IDS], s);
    if (v[D_PER_WORKER])
        xmp_check_int(c, v[D_PER_WORKER], "devices.per_worker", 1, INT_MAX, false, 0,
                      &s->per_worker);
}

/* resources.worker.rlimits: each an integer >= 0 or "unlimited", set as both the soft and the
 * hard limit, as `docker run --ulimit nofile=N` does. */
static void
check_rlimits(struct xmp_check *c, const struct xmp_node *n, struct xmp_worker_resources *w)
{
    const struct xmp_node *v[XMP_RLIMIT_N];
    char path[64], got[128];
    long value;

    if (!xmp_check_map(c, n, "resources.worker.rlimits", rlimit_keys, XMP_RLIMIT_N, v))
        return;
    for (size_t i = 0; i < XMP_RLIMIT_N; i++) {
        if (v[i] == NULL)
            continue;
        snprintf(path, sizeof(path), "resources.worker.rlimits.%s", xmp_rlimit_names[i]);
        if (v[i]->kind == XMP_NODE_SCALAR && strcmp(v[i]->text, "unlimited") == 0) {
            w->rlimit_set[i] = true;
            w->rlimit[i] = RLIM_INFINITY;
        } else if (v[i]->kind == XMP_NODE_SCALAR && !v[i]->quoted &&
                   (v[i]->text[0] >= '0' && v[i]->text[0] <= '9')) {
            if (xmp_check_int(c, v[i], path, 0, LONG_MAX, false, 0, &value)) {
                w->rlimit_set[i] = true;
                w->rlimit[i] = (uint64_t)value;
            }
        } else {
            xmp_describe(v[i], got, sizeof(got));
            xmp_check_error(c, v[i], path, "expected an integer >= 0 or unlimited, got %s", got);
        }
    }
}

static void
check_worker_resources(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[W_N];
    struct xmp_worker_resources *w = &s->worker;
    long pids;

    if (!xmp_check_map(c, n, "resources.worker", worker_keys, W_N, v))
        return;
    if (v[W_MEMORY])
        xmp_check_memory(c, v[W_MEMORY], "resources.worker.memory", false, &w->memory);
    if (v[W_MEMORY_HIGH] && xmp_check_memory(c, v[W_MEMORY_HIGH], "resources.worker.memory_high",
                                             false, &w->memory_high)) {
        if (w->memory > 0 && w->memory_high > w->memory) {
            char high[80], hard[80];
            xmp_clip(v[W_MEMORY_HIGH]->text, high, sizeof(high));
            xmp_clip(v[W_MEMORY]->text, hard, sizeof(hard));
            xmp_check_error(c, v[W_MEMORY_HIGH], "resources.worker.memory_high",
                            "\"%s\" is above resources.worker.memory (\"%s\")", high, hard);
        }
    }
    if (v[W_SWAP])
        xmp_check_memory(c, v[W_SWAP], "resources.worker.swap", true, &w->swap);
    if (v[W_CPUS])
        xmp_check_cpus(c, v[W_CPUS], "resources.worker.cpus", &w->cpus_milli);
    if (v[W_CPUSET]) {
        const struct xmp_node *cs = v[W_CPUSET];
        const char *text;
        /* A lone CPU may be written as a plain number ("cpuset: 3"): its text is the list. */
        if (xmp_check_string(c, cs, "resources.worker.cpuset", false, &text)) {
            if (strcmp(text, "auto") == 0) {
                w->cpuset_mode = XMP_CPUSET_AUTO;
            } else if (strcmp(text, "none") == 0) {
                w->cpuset_mode = XMP_CPUSET_NONE;
            } else if (xmp_check_cpulist(c, cs, "resources.worker.cpuset")) {
                w->cpuset_mode = XMP_CPUSET_LIST;
                w->cpuset = xmp_xstrdup(text);
            }
        }
    }
    if (v[W_PIDS] &&
        xmp_check_int(c, v[W_PIDS], "resources.worker.pids", 1, INT_MAX, false, 0, &pids))
        w->pids = pids;
    if (v[W_RLIMITS])
        check_rlimits(c, v[W_RLIMITS], w);
}

static void
check_resources(struct xmp_check *c, const struct xmp_node *n, bool start_ok, struct xmp_spec *s)
{
    const struct xmp_node *v[R_N], *m[1];

    if (!xmp_check_map(c, n, "resources", resource_keys, R_N, v))
        return;
    if (v[R_WORKER])
        check_worker_resources(c, v[R_WORKER], s);
    if (v[R_JOB] && xmp_check_map(c, v[R_JOB], "resources.job", memory_keys, 1, m) && m[0])
        xmp_check_memory(c, m[0], "resources.job.memory", false, &s->job_memory);
    if (v[R_SHARED] && xmp_check_map(c, v[R_SHARED], "resources.shared", memory_keys, 1, m) &&
        m[0] && xmp_check_memory(c, m[0], "resources.shared.memory", false, &s->shared_memory)) {
        /* Only a zygote has pages to share; in exec mode the budget would limit nothing. A bad
         * start value has its own error already. */
        if (start_ok && s->start != XMP_START_FORK)
            xmp_check_error(c, m[0], "resources.shared.memory", "only valid with start: fork");
    }
}

/* Resolves the workdir against the current directory; it must exist now, so that a typo fails
 * before any cgroup is created rather than in every worker's chdir. */
static void
check_workdir(struct xmp_check *c, const struct xmp_node *n, const char *cwd, struct xmp_spec *s)
{
    char clipped[80];
    const char *text;
    cleanup_free char *joined = NULL;
    char *real;
    struct stat st;

    if (!xmp_check_string(c, n, "workdir", false, &text))
        return;
    xmp_clip(text, clipped, sizeof(clipped));
    if (text[0] == '/')
        joined = xmp_xstrdup(text);
    else if (asprintf(&joined, "%s/%s", cwd, text) < 0)
        abort();
    real = realpath(joined, NULL);
    if (real == NULL) {
        if (errno == ENOENT)
            xmp_check_error(c, n, "workdir", "\"%s\" does not exist", clipped);
        else if (errno == ENOTDIR)
            xmp_check_error(c, n, "workdir", "\"%s\" is not a directory", clipped);
        else
            xmp_check_error(c, n, "workdir", "\"%s\": %s", clipped, strerror(errno));
        return;
    }
    if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
        xmp_check_error(c, n, "workdir", "\"%s\" is not a directory", clipped);
        free(real);
        return;
    }
    free(s->workdir);
    s->workdir = real;
}

static bool
is_plain_bool(const struct xmp_node *n)
{
    static const char *const words[] = {"true", "True", "TRUE", "false", "False", "FALSE"};

    for (size_t i = 0; n->kind == XMP_NODE_SCALAR && !n->quoted && i < COUNT(words); i++)
        if (strcmp(n->text, words[i]) == 0)
            return true;
    return false;
}

/* isolation.devices: job, worker or off, and the booleans it was before (true is job, the
 * default; false is off). */
static void
check_devices_mode(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    static const char *const names[] = {"job", "worker", "off"};
    int idx;

    if (is_plain_bool(n)) {
        s->devices = strcasecmp(n->text, "true") == 0 ? XMP_DEVICES_JOB : XMP_DEVICES_OFF;
        s->devices_explicit = true;
        return;
    }
    if (!xmp_check_enum(c, n, "isolation.devices", names, COUNT(names), &idx))
        return;
    s->devices =
        (enum xmp_devices_mode[]){XMP_DEVICES_JOB, XMP_DEVICES_WORKER, XMP_DEVICES_OFF}[idx];
    s->devices_explicit = true;
}

static void
check_isolation(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[I_N];
    const char *text;
    int idx;

    if (!xmp_check_map(c, n, "isolation", isolation_keys, I_N, v))
        return;
    if (v[I_CGROUPS] && xmp_check_enum(c, v[I_CGROUPS], "isolation.cgroups", cgroups_names,
                                       COUNT(cgroups_names), &idx))
        s->cgroups = (enum xmp_cgroups_policy[]){XMP_CGROUPS_AUTO, XMP_CGROUPS_REQUIRED,
                                                 XMP_CGROUPS_OPTIONAL, XMP_CGROUPS_OFF}[idx];
    if (v[I_CGROUP_MANAGER] &&
        xmp_check_enum(c, v[I_CGROUP_MANAGER], "isolation.cgroup_manager", cgroup_manager_names,
                       COUNT(cgroup_manager_names), &idx))
        s->cgroup_manager = (enum xmp_cgroup_manager[]){
            XMP_CGROUP_MANAGER_AUTO, XMP_CGROUP_MANAGER_CGROUPFS, XMP_CGROUP_MANAGER_SYSTEMD}[idx];
    /* An unquoted boolean would otherwise become a profile path named "false". */
    if (v[I_SECCOMP] && is_plain_bool(v[I_SECCOMP])) {
        bool t = strcasecmp(v[I_SECCOMP]->text, "true") == 0;
        xmp_check_error(c, v[I_SECCOMP], "isolation.seccomp",
                        "expected default, strict, off or a profile path, got \"%s\" (did you "
                        "mean \"%s\"?)",
                        v[I_SECCOMP]->text, t ? "default" : "off");
    } else if (v[I_SECCOMP] &&
               xmp_check_string(c, v[I_SECCOMP], "isolation.seccomp", false, &text)) {
        if (strcmp(text, "default") == 0) {
            s->seccomp = XMP_SECCOMP_DEFAULT;
        } else if (strcmp(text, "strict") == 0) {
            s->seccomp = XMP_SECCOMP_STRICT;
        } else if (strcmp(text, "off") == 0) {
            s->seccomp = XMP_SECCOMP_OFF;
        } else {
            /* Any other word is a profile path; relative to the workdir, like the command. It
             * is read and validated with the spec, below. */
            s->seccomp = XMP_SECCOMP_PROFILE;
            if (text[0] == '/')
                s->seccomp_profile = xmp_xstrdup(text);
            else if (asprintf(&s->seccomp_profile, "%s/%s", s->workdir, text) < 0)
                abort();
        }
    }
    if (v[I_NO_NEW_PRIVS])
        xmp_check_bool(c, v[I_NO_NEW_PRIVS], "isolation.no_new_privs", &s->no_new_privs);
    if (v[I_DEVICES])
        check_devices_mode(c, v[I_DEVICES], s);
    /* Whether the user exists is checked at run time, where the user database is the one the
     * workers will run with (a spec may be validated on another host). */
    if (v[I_USER] && xmp_check_string(c, v[I_USER], "isolation.user", true, &text) &&
        text[0] != '\0')
        s->user = xmp_xstrdup(text);
    if (s->seccomp == XMP_SECCOMP_PROFILE && s->seccomp_profile != NULL)
        xmp_seccomp_profile_check(c, v[I_SECCOMP], s->seccomp_profile, &s->seccomp_rules);
}

static void
check_on_failure(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[F_N];
    int idx;

    if (!xmp_check_map(c, n, "on_failure", failure_keys, F_N, v))
        return;
    if (v[F_ACTION] && xmp_check_enum(c, v[F_ACTION], "on_failure.action", action_names,
                                      COUNT(action_names), &idx))
        s->on_failure = idx == 0 ? XMP_FAILURE_KILL_ALL : XMP_FAILURE_CONTINUE;
    if (v[F_GRACE])
        xmp_check_duration(c, v[F_GRACE], "on_failure.grace", &s->grace_ms);
    if (v[F_RESTARTS])
        xmp_check_int(c, v[F_RESTARTS], "on_failure.restarts", 0, INT_MAX, false, 0, &s->restarts);
    if (v[F_HANG_TIMEOUT])
        xmp_check_duration(c, v[F_HANG_TIMEOUT], "on_failure.hang_timeout", &s->hang_timeout_ms);
    if (v[F_STACKS] && xmp_check_enum(c, v[F_STACKS], "on_failure.stacks", stacks_names,
                                      COUNT(stacks_names), &idx))
        s->stacks = (enum xmp_stacks_policy)idx;
}

static void
check_logs(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[L_N];
    const char *text;
    int idx;

    if (!xmp_check_map(c, n, "logs", log_keys, L_N, v))
        return;
    if (v[L_CONSOLE] &&
        xmp_check_enum(c, v[L_CONSOLE], "logs.console", console_names, COUNT(console_names), &idx))
        s->console = (enum xmp_console_mode[]){XMP_CONSOLE_PREFIX, XMP_CONSOLE_RAW,
                                               XMP_CONSOLE_RANK0, XMP_CONSOLE_NONE}[idx];
    if (v[L_DIR] && xmp_check_string(c, v[L_DIR], "logs.dir", true, &text) && text[0] != '\0')
        s->log_dir = xmp_xstrdup(text);
    if (v[L_TAIL])
        xmp_check_int(c, v[L_TAIL], "logs.tail", 0, INT_MAX, false, 0, &s->log_tail);
}

static void
check_distributed(struct xmp_check *c, const struct xmp_node *n, struct xmp_spec *s)
{
    const struct xmp_node *v[N_N];
    const char *text;
    bool nn_ok = true, nr_ok = true;

    if (!xmp_check_map(c, n, "distributed", dist_keys, N_N, v))
        return;
    if (v[N_NNODES])
        nn_ok =
            xmp_check_int(c, v[N_NNODES], "distributed.nnodes", 1, INT_MAX, true, -1, &s->nnodes);
    if (v[N_NODE_RANK])
        nr_ok = xmp_check_int(c, v[N_NODE_RANK], "distributed.node_rank", 0, INT_MAX, true, -1,
                              &s->node_rank);
    if (nn_ok && nr_ok && s->nnodes > 0 && s->node_rank >= s->nnodes)
        xmp_check_error(c, v[N_NODE_RANK] ? v[N_NODE_RANK] : v[N_NNODES],
                        v[N_NODE_RANK] ? "distributed.node_rank" : "distributed.nnodes",
                        "node_rank %ld must be less than nnodes %ld", s->node_rank, s->nnodes);
    if (v[N_MASTER_ADDR] &&
        xmp_check_string(c, v[N_MASTER_ADDR], "distributed.master_addr", false, &text) &&
        strcmp(text, "auto") != 0)
        s->master_addr = xmp_xstrdup(text);
    if (v[N_MASTER_PORT])
        xmp_check_int(c, v[N_MASTER_PORT], "distributed.master_port", 1, 65535, false, 0,
                      &s->master_port);
    /* "" (the default) means: the Slurm job id, else the job name (SPEC.md section 3). */
    if (v[N_RUN_ID] && xmp_check_string(c, v[N_RUN_ID], "distributed.run_id", true, &text) &&
        text[0] != '\0')
        s->run_id = xmp_xstrdup(text);
}

static void
set_defaults(struct xmp_spec *s)
{
    s->workers = 0;
    s->device_kind = XMP_DEVICE_AUTO;
    s->per_worker = 1;
    s->worker = (struct xmp_worker_resources){-1, -1, -1, -1, XMP_CPUSET_AUTO, NULL, -1};
    s->job_memory = -1;
    s->shared_memory = -1;
    s->start = XMP_START_EXEC;
    s->cgroups = XMP_CGROUPS_AUTO;
    s->cgroup_manager = XMP_CGROUP_MANAGER_AUTO;
    s->seccomp = XMP_SECCOMP_DEFAULT;
    s->no_new_privs = true;
    s->devices = XMP_DEVICES_JOB;
    s->devices_explicit = false;
    s->inherit_env = true;
    s->on_failure = XMP_FAILURE_KILL_ALL;
    s->grace_ms = 5000; /* fits inside Docker/Podman's 10 s stop timeout (SPEC.md) */
    s->restarts = 0;
    s->hang_timeout_ms = 0;
    s->stacks = XMP_STACKS_AUTO;
    s->timeout_ms = 0;
    s->console = XMP_CONSOLE_PREFIX;
    s->log_tail = 40;
    s->nnodes = 1;
    s->node_rank = 0;
    s->master_port = 29500;
}

void
xmp_spec_validate(struct xmp_check *c, const struct xmp_node *root, const char *cwd,
                  struct xmp_spec *s)
{
    const struct xmp_node *v[T_N];
    const char *text;
    bool start_ok = true;
    int idx;

    set_defaults(s);
    if (!xmp_check_map(c, root, "", xmp_spec_keys, T_N, v))
        return;
    for (size_t i = 0; i < 3; i++) {
        static const int required[] = {T_VERSION, T_NAME, T_COMMAND};
        if (v[required[i]] == NULL)
            xmp_check_error(c, root, xmp_spec_keys[required[i]].name, "required key is missing");
    }
    if (v[T_VERSION])
        check_version(c, v[T_VERSION], s);
    if (v[T_NAME] && xmp_check_string(c, v[T_NAME], "name", false, &text)) {
        char clipped[80];
        xmp_clip(text, clipped, sizeof(clipped));
        if (valid_name(text))
            s->name = xmp_xstrdup(text);
        else
            xmp_check_error(c, v[T_NAME], "name",
                            "\"%s\" is not a valid name (1-63 letters, digits, '.', '_' or '-', "
                            "starting with a letter or digit)",
                            clipped);
    }
    if (v[T_COMMAND])
        check_command(c, v[T_COMMAND], s);
    /* The workdir comes first: a seccomp profile path is relative to it. */
    s->workdir = realpath(cwd, NULL);
    if (s->workdir == NULL)
        s->workdir = xmp_xstrdup(cwd);
    if (v[T_WORKDIR])
        check_workdir(c, v[T_WORKDIR], cwd, s);
    if (v[T_ENV])
        check_env(c, v[T_ENV], s);
    if (v[T_INHERIT_ENV])
        xmp_check_bool(c, v[T_INHERIT_ENV], "inherit_env", &s->inherit_env);
    if (v[T_WORKERS])
        xmp_check_int(c, v[T_WORKERS], "workers", 1, INT_MAX, true, 0, &s->workers);
    if (v[T_DEVICES])
        check_devices(c, v[T_DEVICES], s);
    if (v[T_START]) {
        start_ok = xmp_check_enum(c, v[T_START], "start", start_names, COUNT(start_names), &idx);
        if (start_ok)
            s->start = idx == 0 ? XMP_START_EXEC : XMP_START_FORK;
    }
    if (v[T_RESOURCES])
        check_resources(c, v[T_RESOURCES], start_ok, s);
    if (v[T_ISOLATION])
        check_isolation(c, v[T_ISOLATION], s);
    if (v[T_ON_FAILURE])
        check_on_failure(c, v[T_ON_FAILURE], s);
    if (v[T_TIMEOUT])
        xmp_check_duration(c, v[T_TIMEOUT], "timeout", &s->timeout_ms);
    if (v[T_LOGS])
        check_logs(c, v[T_LOGS], s);
    if (v[T_REPORT] && xmp_check_string(c, v[T_REPORT], "report", true, &text) && text[0] != '\0')
        s->report = xmp_xstrdup(text);
    if (v[T_DISTRIBUTED])
        check_distributed(c, v[T_DISTRIBUTED], s);
}
