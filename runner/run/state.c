/* State files of running jobs and the orphan collector (see state.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/state.h"
#include "isolate/proc.h"

#include "isolate/cleanup.h"
#include "isolate/file.h"
#include "isolate/privilege.h"
#include "runner/report/report.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *
env_get(char *const *envp, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=' && envp[i][len + 1] != '\0')
            return envp[i] + len + 1;
    return NULL;
}

const char *
xmp_state_dir(char *const *envp, char *buf, size_t size)
{
    const char *dir = env_get(envp, "XMPRUN_STATE_DIR");
    const char *xdg = env_get(envp, "XDG_RUNTIME_DIR");
    struct stat st;

    if (dir != NULL)
        return dir;
    /* Root of the host's user namespace only: uid 0 in another (rootless Podman, Apptainer's
     * fakeroot, unshare --map-root-user) may find the host's /run/xmprun, which is not its own. */
    if (geteuid() == 0 && xmp_priv_initial_userns())
        return "/run/xmprun";
    /* A user cannot write /run/xmprun: their own runtime directory (systemd's per-user tmpfs,
     * removed at logout, which is what state files should outlive no longer), if it is theirs;
     * else one per uid in /tmp, which prepare_dir checks before trusting. */
    if (xdg != NULL && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid() && snprintf(buf, size, "%s/xmprun", xdg) < (int)size)
        return buf;
    snprintf(buf, size, "/tmp/xmprun-%u", (unsigned)geteuid());
    return buf;
}

/* Creates the state directory if need be and checks that it is safe to keep state in: a real
 * directory (not a link) of this user's, that nobody else may write, so that another user
 * cannot plant state files that make gc kill or remove what they name. */
static int
prepare_dir(const char *dir, bool create, struct xmp_error *err)
{
    struct stat st;
    bool shared = geteuid() != 0 || !xmp_priv_initial_userns();

    if (create && mkdir(dir, shared ? 0700 : 0755) < 0 && errno != EEXIST)
        return xmp_error_set(err, errno, "mkdir `%s`", dir);
    if (lstat(dir, &st) < 0)
        return xmp_error_set(err, errno, "state directory `%s`", dir);
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0)
        return xmp_error_set(err, EPERM,
                             "state directory `%s` is not a directory of uid %u that only it may "
                             "write; remove it, or set XMPRUN_STATE_DIR",
                             dir, (unsigned)geteuid());
    return 0;
}

int
xmp_state_write(const char *dir, const char *cgroup_name, enum xmp_cgroup_mode mode,
                const char *cgroup_path, const char *const *cgroup_dirs, size_t n_dirs,
                const char *self_leaf, const char *run_dir, const struct xmp_state_proc *procs,
                size_t n_procs, struct xmp_error *err)
{
    cleanup_free char *path = NULL;
    cleanup_free char *text = NULL;
    unsigned long long start = 0;
    json_t *doc, *workers = json_array(), *dirs = json_array();

    if (prepare_dir(dir, true, err) < 0) {
        json_decref(workers);
        json_decref(dirs);
        return -1;
    }
    xmp_proc_start_time(getpid(), &start);
    for (size_t i = 0; i < n_procs; i++) {
        unsigned long long st = procs[i].start;
        if (procs[i].pid <= 0 || (st == 0 && xmp_proc_start_time(procs[i].pid, &st) < 0))
            continue;
        json_array_append_new(workers, json_pack("{s:i, s:I}", "pid", (int)procs[i].pid,
                                                 "start_time", (json_int_t)st));
    }
    /* Where the job's directories are, in every hierarchy: gc may run from another cgroup
     * (a login shell, a cron job) than the one this xmprun ran in (a Slurm step's). */
    for (size_t i = 0; i < n_dirs; i++)
        json_array_append_new(dirs, json_string(cgroup_dirs[i]));
    doc = json_pack("{s:i, s:I, s:s, s:s, s:s?, s:o, s:s?, s:s?, s:o}", "pid", (int)getpid(),
                    "start_time", (json_int_t)start, "cgroup_name", cgroup_name, "cgroup_mode",
                    xmp_cgroup_mode_name(mode), "cgroup_path", cgroup_path, "cgroup_dirs", dirs,
                    "self_leaf", self_leaf, "run_dir", run_dir, "workers", workers);
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (text == NULL || asprintf(&path, "%s/%s.json", dir, cgroup_name) < 0)
        return xmp_error_set(err, ENOMEM, "state file");
    /* Not fsynced: the file only has to outlive xmprun, not the machine (nor its cgroups). */
    if (xmp_file_write_atomic(path, text, false, err) < 0)
        return -1;
    return 0;
}

void
xmp_state_remove(const char *dir, const char *cgroup_name)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s.json", dir, cgroup_name);
    unlink(path);
}

static bool
process_matches(pid_t pid, unsigned long long start)
{
    unsigned long long now;
    return xmp_proc_start_time(pid, &now) == 0 && now == start;
}

/* True when a process xmprun cannot see shares its cgroup or an xmprun-self-* leaf next to it:
 * cgroup.procs shows such processes as pid 0. That happens when xmprun runs in a pid namespace
 * of its own (as PID 1 of `unshare -p`, say) inside a cgroup it shares with the parent
 * namespace, where other xmpruns' pids look dead from here. Errs on the side of "yes". */
static bool
foreign_processes_nearby(void)
{
    char path[4096], dir[4096], procs[4400], line[32];
    bool found = false;
    DIR *d;
    struct dirent *de;

    /* The cgroup2 tree when there is one (unified or hybrid), else the v1 pids hierarchy. */
    if (xmp_cgroup_self("", path, sizeof(path), dir, sizeof(dir)) < 0 &&
        xmp_cgroup_self("pids", path, sizeof(path), dir, sizeof(dir)) < 0)
        return true;
    xmp_cgroup_own_normalize(dir);
    d = opendir(dir);
    if (d == NULL)
        return true;
    for (de = NULL; !found;) {
        /* First xmprun's own cgroup, then every xmprun-self-* leaf beside it. */
        if (de == NULL)
            snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
        else if (strncmp(de->d_name, "xmprun-self-", 12) == 0)
            snprintf(procs, sizeof(procs), "%s/%s/cgroup.procs", dir, de->d_name);
        else
            procs[0] = '\0';
        if (procs[0] != '\0') {
            cleanup_fclose FILE *f = fopen(procs, "re");
            while (f != NULL && fgets(line, sizeof(line), f) != NULL)
                if (strcmp(line, "0\n") == 0)
                    found = true;
        }
        if ((de = readdir(d)) == NULL)
            break;
    }
    closedir(d);
    return found;
}

/* What the collector learned from the state files, for deciding on cgroup names. */
struct gc_ctx {
    char **live; /* cgroup names whose owner runs */
    size_t n_live;
    char **dead; /* cgroup names whose owner is gone */
    size_t n_dead;
    char **files; /* their state files, removed once the cgroups are */
    size_t n_files;
    char **cleaned; /* the jobs something was really killed or removed for */
    size_t n_cleaned;
    char **stuck; /* dead jobs whose processes did not die: left for a later gc */
    size_t n_stuck;
    int pids_visible;     /* every owner pid can be checked from here: 1, 0, -1 not looked yet */
    size_t n_recounted;   /* names the cgroup scan takes that were counted already */
    struct xmp_error err; /* the first job that could not be cleaned */
    bool failed;
};

static bool
in_list(char **list, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

/* "xmprun-<name>-<pid>-<hex>" -> pid, or -1. The job name may itself contain dashes. */
static pid_t
owner_from_name(const char *name)
{
    const char *hex = strrchr(name, '-');
    const char *p;
    long pid = 0;

    if (hex == NULL || hex == name)
        return -1;
    for (p = hex - 1; p > name && *p >= '0' && *p <= '9'; p--)
        ;
    if (*p != '-' || p + 1 == hex)
        return -1;
    for (p++; p < hex; p++)
        pid = pid * 10 + (*p - '0');
    return pid > 0 && pid < (1L << 22) ? (pid_t)pid : -1;
}

/* Looked at only when there is something to judge: most starts find no other job at all. */
static bool
pids_visible(struct gc_ctx *ctx)
{
    if (ctx->pids_visible < 0)
        ctx->pids_visible = !foreign_processes_nearby();
    return ctx->pids_visible;
}

static bool
is_orphan(const char *name, void *data)
{
    struct gc_ctx *ctx = data;
    pid_t owner;

    /* A job whose processes outlived SIGKILL for the whole wait is not waited for twice. */
    if (in_list(ctx->live, ctx->n_live, name) || in_list(ctx->stuck, ctx->n_stuck, name))
        return false;
    /* Without a state file only the owner pid in the name is left to judge by, and from inside
     * a pid namespace the owners outside it look dead: never collect on that basis there. */
    if (!in_list(ctx->dead, ctx->n_dead, name) && !pids_visible(ctx))
        return false;
    /* The leaf a cgroup v2 xmprun moved itself into: collectable once that xmprun is gone. */
    if (xmp_cgroup_self_leaf_pid(name, &owner))
        return owner > 0 && owner != getpid() && kill(owner, 0) < 0 && errno == ESRCH;
    if (in_list(ctx->dead, ctx->n_dead, name)) {
        if (in_list(ctx->cleaned, ctx->n_cleaned, name))
            ctx->n_recounted++;
        return true;
    }
    /* No state file (it could not be written, or was lost): only a dead owner pid counts, so
     * that a running job is never collected. */
    owner = owner_from_name(name);
    if (owner <= 0 || owner == getpid())
        return false;
    return kill(owner, 0) < 0 && errno == ESRCH;
}

static void
push(char ***list, size_t *n, const char *name)
{
    char **grown = realloc(*list, (*n + 1) * sizeof(char *));
    if (grown == NULL)
        return;
    *list = grown;
    grown[*n] = strdup(name);
    if (grown[*n] != NULL)
        (*n)++;
}

/* Removes a dead job's scratch directory and what is in it, as the job's own end would have
 * (only a path that looks like one xmprun made is touched, and never through a link there). */
static bool
remove_run_dir(const char *run_dir)
{
    const char *base = run_dir != NULL ? strrchr(run_dir, '/') : NULL;
    int fd;

    if (base == NULL || strncmp(base + 1, "xmprun-", 7) != 0)
        return false;
    fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        xmp_file_clear_dir(fd);
        close(fd);
    }
    return rmdir(run_dir) == 0;
}

/* Reads one state file; for a dead owner, kills its workers (by pid and start time, never a
 * recycled pid), then everything in its cgroup directories (by membership: setsid grandchildren
 * too), removes those directories and its scratch directory; records the job as live or dead. */
static void
scan_state_file(const char *dir, const char *file, struct gc_ctx *ctx)
{
    char path[4096];
    json_t *doc, *workers, *w, *dirs;
    json_int_t pid = 0, start = 0;
    const char *cg = NULL;
    const char *cg_dirs[16];
    size_t i, n_dirs = 0;
    struct xmp_error e = {0};
    bool did = false;
    int ret;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    doc = json_load_file(path, 0, NULL);
    if (doc == NULL || json_unpack(doc, "{s:I, s:I, s:s, s:o}", "pid", &pid, "start_time", &start,
                                   "cgroup_name", &cg, "workers", &workers) < 0) {
        json_decref(doc);
        return;
    }
    /* Where other namespaces' pids are invisible, a missing owner proves nothing. */
    if ((pid > 0 && process_matches((pid_t)pid, (unsigned long long)start)) || !pids_visible(ctx)) {
        push(&ctx->live, &ctx->n_live, cg);
        json_decref(doc);
        return;
    }
    json_array_foreach(workers, i, w)
    {
        json_int_t wpid = json_integer_value(json_object_get(w, "pid"));
        json_int_t wstart = json_integer_value(json_object_get(w, "start_time"));
        if (wpid > 1 && process_matches((pid_t)wpid, (unsigned long long)wstart)) {
            kill(-(pid_t)wpid, SIGKILL);
            kill((pid_t)wpid, SIGKILL);
            did = true;
        }
    }
    dirs = json_object_get(doc, "cgroup_dirs");
    json_array_foreach(dirs, i, w)
    {
        const char *d = json_string_value(w);
        const char *base = d != NULL ? strrchr(d, '/') : NULL;
        /* Only the job's own directories: their last component is the job's cgroup name. */
        if (base != NULL && strcmp(base + 1, cg) == 0 &&
            n_dirs < sizeof(cg_dirs) / sizeof(*cg_dirs))
            cg_dirs[n_dirs++] = d;
    }
    ret = xmp_cgroup_gc_dirs(cg_dirs, n_dirs, &e);
    /* The leaf it moved itself into (cgroup v2), once the job's cgroups are gone. */
    if (ret >= 0 && json_is_string(json_object_get(doc, "self_leaf")))
        ret = xmp_cgroup_gc_leaf(json_string_value(json_object_get(doc, "self_leaf")), &e) < 0
                  ? -1
                  : ret;
    if (remove_run_dir(json_string_value(json_object_get(doc, "run_dir"))))
        did = true;
    push(&ctx->dead, &ctx->n_dead, cg);
    if (ret < 0) {
        /* The state file stays, so that a later gc can try again. */
        if (!ctx->failed) {
            ctx->err = e;
            xmp_error_wrap(&ctx->err, "%s", cg);
            if (e.errnum == EBUSY)
                snprintf(ctx->err.msg + strlen(ctx->err.msg),
                         sizeof(ctx->err.msg) - strlen(ctx->err.msg),
                         " (SIGKILL cannot end them: D state, or a frozen cgroup); left for a "
                         "later gc");
        }
        ctx->failed = true;
        push(&ctx->stuck, &ctx->n_stuck, cg);
    } else {
        push(&ctx->files, &ctx->n_files, path);
        if (ret > 0 || did)
            push(&ctx->cleaned, &ctx->n_cleaned, cg);
    }
    json_decref(doc);
}

/* Does job name this cgroup name ("xmprun-<name>-<pid>-<hex>") or its owner? */
static bool
job_matches(const char *cg, pid_t owner, const char *job)
{
    const char *hex = strrchr(cg, '-');
    const char *dash = hex;
    size_t len = strlen(job);

    if (strcmp(cg, job) == 0 ||
        (owner > 0 && strtol(job, NULL, 10) == owner && strspn(job, "0123456789") == len))
        return true;
    while (dash != NULL && dash > cg && dash[-1] != '-')
        dash--;
    if (dash == NULL || dash <= cg + 1)
        return false;
    dash--; /* the '-' before the owner pid */
    /* The job id ("<pid>-<hex>") or the job's name. */
    return strcmp(dash + 1, job) == 0 ||
           (strncmp(cg, "xmprun-", 7) == 0 && (size_t)(dash - cg - 7) == len &&
            strncmp(cg + 7, job, len) == 0);
}

int
xmp_state_find_job(const char *dir, const char *job, struct xmp_state_job *out,
                   struct xmp_error *err)
{
    DIR *d = NULL;
    struct dirent *de;
    size_t n_found = 0;
    char names[512] = "";

    if (prepare_dir(dir, false, err) < 0 || (d = opendir(dir)) == NULL)
        return xmp_error_set(err, errno, "no running job: cannot read the state directory `%s`",
                             dir);
    while ((de = readdir(d)) != NULL) {
        char path[4096];
        size_t len = strlen(de->d_name), i;
        json_t *doc, *workers, *w;
        json_int_t pid = 0, start = 0;
        const char *cg = NULL;

        if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        doc = json_load_file(path, 0, NULL);
        if (doc == NULL ||
            json_unpack(doc, "{s:I, s:I, s:s, s:o}", "pid", &pid, "start_time", &start,
                        "cgroup_name", &cg, "workers", &workers) < 0 ||
            !process_matches((pid_t)pid, (unsigned long long)start) ||
            (job != NULL && !job_matches(cg, (pid_t)pid, job))) {
            json_decref(doc);
            continue;
        }
        if (n_found++ == 0) {
            memset(out, 0, sizeof(*out));
            snprintf(out->cgroup_name, sizeof(out->cgroup_name), "%s", cg);
            out->owner = (pid_t)pid;
            json_array_foreach(workers, i, w)
            {
                pid_t wpid = (pid_t)json_integer_value(json_object_get(w, "pid"));
                json_int_t wstart = json_integer_value(json_object_get(w, "start_time"));
                /* A worker that ended (its pid maybe reused since) is not read. */
                if (out->n_pids < sizeof(out->pids) / sizeof(*out->pids))
                    out->pids[out->n_pids++] =
                        wpid > 0 && process_matches(wpid, (unsigned long long)wstart) ? wpid : 0;
            }
        }
        len = strlen(names);
        snprintf(names + len, sizeof(names) - len, "%s%s", len > 0 ? ", " : "", cg);
        json_decref(doc);
    }
    closedir(d);
    if (n_found == 1)
        return 0;
    if (n_found == 0)
        return xmp_error_set(err, 0, "%s%s%s", job != NULL ? "no running job is " : "",
                             job != NULL ? job : "no running job",
                             job != NULL ? "" : " (in this user's state directory)");
    return xmp_error_set(err, 0, "%zu running jobs match: %s; name one", n_found, names);
}

static void
free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

int
xmp_state_gc(const char *dir, struct xmp_error *err)
{
    struct gc_ctx ctx = {0};
    enum xmp_cgroup_mode mode = XMP_CGROUP_MODE_NONE;
    struct xmp_error e = {0};
    DIR *d = NULL;
    struct dirent *de;
    int removed = 0, ret = 0;

    /* Where the cgroup filesystems cannot be seen (`ip netns exec`'s fresh /sys), the orphans'
     * cgroups cannot be removed: say so, and keep the state files for a gc that can. */
    if (xmp_cgroup_detect(&mode, err) < 0)
        return xmp_error_wrap(err, "cannot see the cgroup filesystems, so nothing was cleaned up");
    ctx.pids_visible = -1;
    /* State files are trusted only in a directory that is safely this user's. */
    if (prepare_dir(dir, false, &e) == 0)
        d = opendir(dir);
    while (d != NULL && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        scan_state_file(dir, de->d_name, &ctx);
    }
    if (d != NULL)
        closedir(d);

    xmp_error_clear(&e);
    if (mode != XMP_CGROUP_MODE_NONE) {
        removed = xmp_cgroup_gc(mode, is_orphan, &ctx, &e);
        if (removed < 0 && !ctx.failed) {
            ctx.err = e;
            ctx.failed = true;
        }
    }
    for (size_t i = 0; i < ctx.n_files; i++)
        unlink(ctx.files[i]);
    if (removed > 0)
        removed = removed > (int)ctx.n_recounted ? removed - (int)ctx.n_recounted : 0;
    ret = ctx.failed ? -1 : (int)ctx.n_cleaned + (removed > 0 ? removed : 0);
    if (ctx.failed && err != NULL)
        *err = ctx.err;
    free_list(ctx.files, ctx.n_files);
    free_list(ctx.dead, ctx.n_dead);
    free_list(ctx.live, ctx.n_live);
    free_list(ctx.cleaned, ctx.n_cleaned);
    free_list(ctx.stuck, ctx.n_stuck);
    return ret;
}
