/* systemd as the cgroup manager (pure cgroup v2): where xmprun's own cgroup cannot host a job,
 * xmprun asks systemd over D-Bus (sd-bus) for a transient scope with Delegate=yes and itself in
 * it, as `systemd-run --scope` and crun's systemd driver (cgroup-systemd.c) do; the cgroupfs code
 * then takes the scope as xmprun's own cgroup. systemd removes the scope once it is empty. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"
#include "isolate/cleanup.h"
#include "isolate/dynlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

/* libsystemd is loaded when systemd is first asked (load_sd_bus), not linked: with what it
 * loads in turn (libgcrypt, liblzma, libzstd, liblz4, libcap) it would be loaded at every start
 * of xmprun, for the jobs that need a scope. Each function is called through a pointer of its
 * own type, under its own name. */
#define SD_FUNCS(X)                                                                                \
    X(sd_bus_call)                                                                                 \
    X(sd_bus_error_free)                                                                           \
    X(sd_bus_flush_close_unref)                                                                    \
    X(sd_bus_is_bus_client)                                                                        \
    X(sd_bus_match_signal)                                                                         \
    X(sd_bus_message_append)                                                                       \
    X(sd_bus_message_close_container)                                                              \
    X(sd_bus_message_new_method_call)                                                              \
    X(sd_bus_message_open_container)                                                               \
    X(sd_bus_message_read)                                                                         \
    X(sd_bus_message_unref)                                                                        \
    X(sd_bus_new)                                                                                  \
    X(sd_bus_open_system)                                                                          \
    X(sd_bus_open_user)                                                                            \
    X(sd_bus_process)                                                                              \
    X(sd_bus_set_address)                                                                          \
    X(sd_bus_slot_unref)                                                                           \
    X(sd_bus_start)                                                                                \
    X(sd_bus_unref)                                                                                \
    X(sd_bus_wait)
#define SD_DECLARE(f) static __typeof__(f) *p_##f;
SD_FUNCS(SD_DECLARE)
#define sd_bus_call                    p_sd_bus_call
#define sd_bus_error_free              p_sd_bus_error_free
#define sd_bus_flush_close_unref       p_sd_bus_flush_close_unref
#define sd_bus_is_bus_client           p_sd_bus_is_bus_client
#define sd_bus_match_signal            p_sd_bus_match_signal
#define sd_bus_message_append          p_sd_bus_message_append
#define sd_bus_message_close_container p_sd_bus_message_close_container
#define sd_bus_message_new_method_call p_sd_bus_message_new_method_call
#define sd_bus_message_open_container  p_sd_bus_message_open_container
#define sd_bus_message_read            p_sd_bus_message_read
#define sd_bus_message_unref           p_sd_bus_message_unref
#define sd_bus_new                     p_sd_bus_new
#define sd_bus_open_system             p_sd_bus_open_system
#define sd_bus_open_user               p_sd_bus_open_user
#define sd_bus_process                 p_sd_bus_process
#define sd_bus_set_address             p_sd_bus_set_address
#define sd_bus_slot_unref              p_sd_bus_slot_unref
#define sd_bus_start                   p_sd_bus_start
#define sd_bus_unref                   p_sd_bus_unref
#define sd_bus_wait                    p_sd_bus_wait

#define SD_SYM(f) {#f, (void **)&p_##f, false},
static const struct xmp_dynlib_sym sd_syms[] = {SD_FUNCS(SD_SYM)};
static struct xmp_dynlib libsystemd = {"libsystemd.so.0", sd_syms,
                                       sizeof(sd_syms) / sizeof(sd_syms[0]), 0, ""};

static int
load_sd_bus(struct xmp_error *err)
{
    char why[256];

    if (!xmp_dynlib_load(&libsystemd, why, sizeof(why)))
        return xmp_error_set(err, ENOENT, "%s", why);
    return 0;
}

/* What sd_booted() says, without loading libsystemd for it. */
static bool
systemd_runs(void)
{
    struct stat st;

    return lstat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

#define SD_DEST  "org.freedesktop.systemd1"
#define SD_PATH  "/org/freedesktop/systemd1"
#define SD_IFACE "org.freedesktop.systemd1.Manager"

/* How long the scope's start job may take: systemd answers in milliseconds, but under
 * emulation or on a loaded host it can take seconds; past this the manager is stuck. */
#define SCOPE_TIMEOUT_US (30ULL * 1000 * 1000)

/* A bus, a message or a slot exists only once libsystemd is loaded. */
static inline void
bus_unref(sd_bus **bus)
{
    if (*bus != NULL)
        sd_bus_flush_close_unref(*bus);
}
#define cleanup_bus __attribute__((cleanup(bus_unref)))

static inline void
bus_msg_unref(sd_bus_message **m)
{
    if (*m != NULL)
        sd_bus_message_unref(*m);
}
#define cleanup_bus_msg __attribute__((cleanup(bus_msg_unref)))

static inline void
bus_slot_unref(sd_bus_slot **s)
{
    if (*s != NULL)
        sd_bus_slot_unref(*s);
}
#define cleanup_bus_slot __attribute__((cleanup(bus_slot_unref)))

/* A D-Bus address value: bytes outside [A-Za-z0-9_/.-] as %XX (the D-Bus specification's
 * "optionally-escaped" set). */
static int
escape_address(const char *path, char *buf, size_t size)
{
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)path; *p != '\0'; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("_/.-", *p) != NULL;
        int n = plain ? snprintf(buf + o, size - o, "%c", *p)
                      : snprintf(buf + o, size - o, "%%%02x", *p);
        if (n < 0 || (size_t)n >= size - o)
            return -1;
        o += (size_t)n;
    }
    return 0;
}

/* The manager xmprun's scope belongs to: root's is the system manager, a user's their own. As
 * systemctl does, first its private socket, which needs no D-Bus daemon (and is what systemd
 * itself uses while it starts), then the bus. */
static int
connect_manager(sd_bus **out, bool user, struct xmp_error *err)
{
    const char *rt = getenv("XDG_RUNTIME_DIR");
    char path[XMP_CG_PATH], addr[3 * XMP_CG_PATH + 16] = "";
    sd_bus *bus = NULL;
    int r;

    if (load_sd_bus(err) < 0)
        return -1;
    if (!user)
        snprintf(addr, sizeof(addr), "unix:path=/run/systemd/private");
    else if (rt != NULL && rt[0] == '/' &&
             snprintf(path, sizeof(path), "%s/systemd/private", rt) < (int)sizeof(path) &&
             access(path, F_OK) == 0) {
        memcpy(addr, "unix:path=", sizeof("unix:path="));
        if (escape_address(path, addr + strlen(addr), sizeof(addr) - strlen(addr)) < 0)
            addr[0] = '\0';
    }
    if (addr[0] != '\0' && sd_bus_new(&bus) >= 0) {
        if (sd_bus_set_address(bus, addr) >= 0 && sd_bus_start(bus) >= 0) {
            *out = bus;
            return 0;
        }
        sd_bus_unref(bus);
        bus = NULL;
    }
    r = user ? sd_bus_open_user(&bus) : sd_bus_open_system(&bus);
    if (r < 0)
        return xmp_error_set(err, -r,
                             user ? "connect to your systemd user manager (through "
                                    "$XDG_RUNTIME_DIR/systemd/private and the session bus)"
                                  : "connect to systemd (through /run/systemd/private and the "
                                    "system bus)");
    *out = bus;
    return 0;
}

struct job_wait {
    const char *job; /* the start job's object path, once StartTransientUnit answered */
    bool done;
    char result[32];
};

/* JobRemoved(u id, o job, s unit, s result) for every job of the manager; only ours counts. A
 * signal that comes before the method's answer is queued, not dispatched, by sd_bus_call, so
 * the path is known when it is looked at. */
static int
on_job_removed(sd_bus_message *m, void *data, sd_bus_error *ret_error)
{
    struct job_wait *w = data;
    const char *path = NULL, *unit = NULL, *result = NULL;
    uint32_t id;

    (void)ret_error;
    if (sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0 || w->job == NULL ||
        strcmp(path, w->job) != 0)
        return 0;
    w->done = true;
    snprintf(w->result, sizeof(w->result), "%s", result);
    return 0;
}

/* StartTransientUnit(unit, "fail", properties, aux): the scope, with this process in it. */
static int
call_start(sd_bus *bus, const char *unit, const char *description, sd_bus_message **reply,
           struct xmp_error *err)
{
    cleanup_bus_msg sd_bus_message *m = NULL;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    int r;

    r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH, SD_IFACE, "StartTransientUnit");
    if (r >= 0)
        r = sd_bus_message_append(m, "ss", unit, "fail");
    if (r >= 0)
        r = sd_bus_message_open_container(m, 'a', "(sv)");
    /* Delegate=yes: the scope's subtree is xmprun's to manage, with every controller systemd
     * can give; inactive-or-failed: the unit is gone once it stops, even after a failure. */
    if (r >= 0)
        r = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)", "Description", "s", description, "PIDs",
                                  "au", 1, (uint32_t)getpid(), "Delegate", "b", 1, "CollectMode",
                                  "s", "inactive-or-failed");
    if (r >= 0)
        r = sd_bus_message_close_container(m);
    if (r >= 0)
        r = sd_bus_message_append(m, "a(sa(sv))", 0);
    if (r < 0)
        return xmp_error_set(err, -r, "build the StartTransientUnit call");
    r = sd_bus_call(bus, m, SCOPE_TIMEOUT_US, &error, reply);
    if (r < 0) {
        xmp_error_set(err, -r, "StartTransientUnit %s: %s", unit,
                      error.message != NULL ? error.message : "failed");
        sd_bus_error_free(&error);
        return -1;
    }
    return 0;
}

/* Asks systemd for the scope `unit` with this process in it and waits for its start job, as
 * systemd-run's bus_wait_for_jobs does. */
static int
start_scope(const char *unit, const char *description, struct xmp_error *err)
{
    cleanup_bus sd_bus *bus = NULL;
    cleanup_bus_slot sd_bus_slot *slot = NULL;
    cleanup_bus_msg sd_bus_message *reply = NULL;
    cleanup_free char *job = NULL;
    struct job_wait w = {0};
    const char *path = NULL;
    uint64_t deadline;
    int r;

    if (connect_manager(&bus, geteuid() != 0, err) < 0)
        return -1;
    /* Before the call, so that the signal cannot be missed. A direct connection has no bus
     * daemon to name the sender, so it matches on the rest only (systemd-run does the same). */
    r = sd_bus_match_signal(bus, &slot, sd_bus_is_bus_client(bus) ? SD_DEST : NULL, SD_PATH,
                            SD_IFACE, "JobRemoved", on_job_removed, &w);
    if (r < 0)
        return xmp_error_set(err, -r, "watch systemd's JobRemoved signal");
    if (call_start(bus, unit, description, &reply, err) < 0)
        return -1;
    r = sd_bus_message_read(reply, "o", &path);
    if (r < 0 || (job = strdup(path)) == NULL)
        return xmp_error_set(err, r < 0 ? -r : ENOMEM, "read StartTransientUnit's answer");
    w.job = job;
    deadline = (uint64_t)xmp_cg_now_ms() * 1000 + SCOPE_TIMEOUT_US;
    while (!w.done) {
        uint64_t now = (uint64_t)xmp_cg_now_ms() * 1000;
        r = sd_bus_process(bus, NULL);
        if (r < 0)
            return xmp_error_set(err, -r, "wait for systemd to start %s", unit);
        if (r > 0)
            continue;
        if (now >= deadline)
            return xmp_error_set(err, ETIMEDOUT, "systemd did not start %s within %llu s", unit,
                                 SCOPE_TIMEOUT_US / 1000000);
        r = sd_bus_wait(bus, deadline - now);
        if (r < 0 && r != -EINTR)
            return xmp_error_set(err, -r, "wait for systemd to start %s", unit);
    }
    if (strcmp(w.result, "done") != 0)
        return xmp_error_set(err, EIO, "systemd's job to start %s ended \"%s\" (journalctl -u %s)",
                             unit, w.result, unit);
    return 0;
}

/* True when this process is in the cgroup named `unit` (the scope). */
static bool
in_unit(const char *unit)
{
    char path[XMP_CG_PATH];
    const char *base;

    if (xmp_cgroup_self("", path, sizeof(path), NULL, 0) < 0)
        return false;
    base = strrchr(path, '/');
    return base != NULL && strcmp(base + 1, unit) == 0;
}

static bool
is_other(pid_t pid, void *data)
{
    bool *other = data;

    *other = pid != getpid();
    return !*other;
}

/* True when another process is in xmprun's own cgroup (not the root, which the "no internal
 * processes" rule exempts): then cgroupfs cannot enable controllers there, and its try would
 * only cost a mkdir and two slow writes (the move into xmprun-self, then the refused enable). */
static bool
own_cgroup_shared(void)
{
    char path[XMP_CG_PATH], dir[XMP_CG_PATH], procs[XMP_CG_PATH + 16];
    bool other = false;

    if (xmp_cgroup_self("", path, sizeof(path), dir, sizeof(dir)) < 0 || strcmp(path, "/") == 0)
        return false;
    xmp_cgroup_own_normalize(dir); /* a dead xmprun's leaf: its parent is the own cgroup */
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    xmp_cg_each_pid(procs, is_other, &other);
    return other;
}

/* Moves xmprun into a new scope `<name>.scope`. A xmprun-self leaf the failed cgroupfs try moved
 * it into is left empty by the move; it is removed. */
static int
enter_scope(const char *name, char *unit, size_t size, struct xmp_error *err)
{
    char old_leaf[XMP_CG_PATH], description[128];
    bool had_leaf = xmp_cgroup_self_leaf(old_leaf, sizeof(old_leaf)) == 1;

    if (snprintf(unit, size, "%s.scope", name) >= (int)size)
        return xmp_error_set(err, ENAMETOOLONG, "systemd scope name %s.scope", name);
    snprintf(description, sizeof(description), "xmprun job %s", name);
    if (start_scope(unit, description, err) < 0)
        return -1;
    if (!in_unit(unit))
        return xmp_error_set(err, EIO, "systemd started %s, but xmprun is not in it", unit);
    if (had_leaf)
        rmdir(old_leaf); /* EBUSY: something else is in it, and it is not ours to remove */
    return 0;
}

/* The cgroupfs try failed because xmprun's own cgroup cannot host the job: other processes are
 * in it (EBUSY), controllers are not delegated to it (ENODEV), or it may not be written
 * (EACCES, EPERM). A read-only cgroupfs (EROFS) is a container's: no systemd to ask. */
static bool
cannot_host(int errnum)
{
    return errnum == EBUSY || errnum == ENODEV || errnum == EACCES || errnum == EPERM;
}

/* cgroupfs's reason (and advice) first, then why systemd could not help. Returns -1. */
static int
both_failed(struct xmp_error *err, const struct xmp_error *why)
{
    char first[sizeof(err->msg)];
    int errnum;

    if (err == NULL)
        return -1;
    errnum = err->errnum;
    memcpy(first, err->msg, sizeof(first));
    xmp_error_set(err, 0, "%s; asking systemd for a scope failed too: %s", first, why->msg);
    err->errnum = errnum;
    return -1;
}

/* Where the job's cgroup is made, in which order (crun's cgroup managers, chosen once). */
enum manager_order {
    ORDER_FS,            /* the cgroupfs only */
    ORDER_SCOPE,         /* a systemd scope only (isolation.cgroup_manager: systemd) */
    ORDER_FS_THEN_SCOPE, /* the cgroupfs; a scope where the own cgroup cannot host the job */
    ORDER_SCOPE_THEN_FS, /* a scope, the own cgroup being shared; the cgroupfs says why not */
};

static int
decide(enum xmp_cgroup_mode mode, enum xmp_cgroup_manager manager, enum manager_order *order,
       struct xmp_error *err)
{
    if (manager == XMP_CGROUP_MANAGER_SYSTEMD) {
        if (mode != XMP_CGROUP_MODE_UNIFIED)
            return xmp_error_set(err, ENOTSUP,
                                 "isolation.cgroup_manager: systemd needs pure cgroup v2, and "
                                 "this host's cgroups are %s (use auto or cgroupfs)",
                                 xmp_cgroup_mode_name(mode));
        if (!systemd_runs())
            return xmp_error_set(err, ENOTSUP,
                                 "isolation.cgroup_manager: systemd, but systemd does not run "
                                 "here (no /run/systemd/system; use auto or cgroupfs)");
        *order = ORDER_SCOPE;
    } else if (manager != XMP_CGROUP_MANAGER_AUTO || mode != XMP_CGROUP_MODE_UNIFIED ||
               !systemd_runs()) {
        *order = ORDER_FS;
    } else {
        *order = own_cgroup_shared() ? ORDER_SCOPE_THEN_FS : ORDER_FS_THEN_SCOPE;
    }
    return 0;
}

int
xmp_cgroup_create_job(enum xmp_cgroup_mode mode, enum xmp_cgroup_manager manager, const char *name,
                      const struct xmp_limits *limits, struct xmp_cgroup **out,
                      struct xmp_error *err)
{
    enum manager_order order;
    struct xmp_error why = {0};
    char unit[256];

    if (decide(mode, manager, &order, err) < 0)
        return -1;
    switch (order) {
    case ORDER_FS:
        return xmp_cg_create_job_fs(mode, name, limits, out, err);
    case ORDER_SCOPE:
        if (enter_scope(name, unit, sizeof(unit), err) < 0)
            return xmp_error_wrap(err, "isolation.cgroup_manager: systemd");
        break;
    case ORDER_FS_THEN_SCOPE:
        if (xmp_cg_create_job_fs(mode, name, limits, out, err) == 0)
            return 0;
        if (err == NULL || !cannot_host(err->errnum))
            return -1;
        if (enter_scope(name, unit, sizeof(unit), &why) < 0)
            return both_failed(err, &why);
        break;
    case ORDER_SCOPE_THEN_FS:
        if (enter_scope(name, unit, sizeof(unit), &why) == 0)
            break;
        if (xmp_cg_create_job_fs(mode, name, limits, out, err) == 0)
            return 0;
        return both_failed(err, &why);
    }
    if (xmp_cg_create_job_fs(mode, name, limits, out, err) < 0)
        return xmp_error_wrap(err, "in systemd scope %s", unit);
    snprintf((*out)->layout->scope, sizeof((*out)->layout->scope), "%s", unit);
    return 0;
}

const char *
xmp_cgroup_scope(const struct xmp_cgroup *cg)
{
    return cg->layout->scope[0] != '\0' ? cg->layout->scope : NULL;
}
