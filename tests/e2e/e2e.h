/* Helpers shared by the end-to-end tests: a temp dir per test with a spec, a report path and a
 * state dir; running the real xmprun; loading and schema-checking the report; and the leak
 * checks every test ends with (no cgroup of the job left in any hierarchy, no process left). */
#ifndef XMP_E2E_H
#define XMP_E2E_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

struct e2e {
    char *dir;
    char *spec;
    char *report;
    char *state_env; /* "XMPRUN_STATE_DIR=<dir>/state" */
    struct xt_result r;
    json_t *rep; /* the parsed report, or NULL */
};

static inline void
e2e_init(struct e2e *e)
{
    memset(e, 0, sizeof(*e));
    e->dir = xt_tmpdir();
    cr_assert_eq(asprintf(&e->report, "%s/report.json", e->dir) > 0, 1);
    cr_assert_eq(asprintf(&e->state_env, "XMPRUN_STATE_DIR=%s/state", e->dir) > 0, 1);
}

static inline char *
e2e_path(const struct e2e *e, const char *name)
{
    char *p = NULL;
    cr_assert_eq(asprintf(&p, "%s/%s", e->dir, name) > 0, 1);
    return p;
}

static inline void
e2e_set_spec(struct e2e *e, char *text)
{
    free(e->spec);
    e->spec = xt_write_file(e->dir, "job.yaml", text);
    free(text);
}

/* Writes job.yaml from a printf format (a literal, so the compiler checks it): "%1$s" is the
 * probe's absolute path, "%2$s" the test directory. */
#define e2e_spec(e, fmt)                                                                           \
    do {                                                                                           \
        char *text_ = NULL;                                                                        \
        cr_assert_eq(                                                                              \
            asprintf(&text_, "# probe: %1$s, test dir: %2$s\n" fmt, xt_probe(), (e)->dir) > 0, 1); \
        e2e_set_spec((e), text_);                                                                  \
    } while (0)

/* Loads and schema-checks the report; every outcome must have written one. */
static inline void
e2e_load_report(struct e2e *e)
{
    char msg[4096];
    json_error_t jerr;

    json_decref(e->rep);
    e->rep = json_load_file(e->report, 0, &jerr);
    cr_assert_not_null(e->rep, "no report at %s (%s); xmprun said:\n%s", e->report, jerr.text,
                       e->r.err);
    cr_assert_eq(xt_validate_json("report.schema.json", e->report, msg, sizeof(msg)), 0,
                 "report does not match the schema: %s", msg);
}

/* Runs `xmprun --report R [args...] job.yaml` (args NULL-terminated), in the test directory. */
static inline int
e2e_run(struct e2e *e, int timeout_s, ...)
{
    char *argv[32];
    char *envp[] = {e->state_env, NULL};
    int n = 0;
    va_list ap;
    char *a;

    argv[n++] = (char *)xt_bin();
    argv[n++] = "--report";
    argv[n++] = e->report;
    va_start(ap, timeout_s);
    while ((a = va_arg(ap, char *)) != NULL && n < 29)
        argv[n++] = a;
    va_end(ap);
    argv[n++] = e->spec;
    argv[n] = NULL;
    xt_result_free(&e->r);
    cr_assert_eq(xt_run(&e->r, argv, envp, e->dir, timeout_s), 0);
    return e->r.status;
}

/* Runs a shell script (with $XMPRUN, $SPEC, $REPORT, $DIR set) in the test directory. */
static inline int
e2e_sh(struct e2e *e, int timeout_s, const char *script)
{
    char *xmprun_env = NULL, *spec_env = NULL, *report_env = NULL, *dir_env = NULL;
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};

    cr_assert_eq(asprintf(&xmprun_env, "XMPRUN=%s", xt_bin()) > 0, 1);
    cr_assert_eq(asprintf(&spec_env, "SPEC=%s", e->spec != NULL ? e->spec : "") > 0, 1);
    cr_assert_eq(asprintf(&report_env, "REPORT=%s", e->report) > 0, 1);
    cr_assert_eq(asprintf(&dir_env, "DIR=%s", e->dir) > 0, 1);
    char *envp[] = {e->state_env, xmprun_env, spec_env, report_env, dir_env, NULL};
    xt_result_free(&e->r);
    cr_assert_eq(xt_run(&e->r, argv, envp, e->dir, timeout_s), 0);
    /* putenv kept pointers to these in the child only; the parent may free them. */
    free(xmprun_env);
    free(spec_env);
    free(report_env);
    free(dir_env);
    return e->r.status;
}

/* Runs `xmprun gc` with the test's state directory, from the test's own cgroup. */
static inline int
e2e_gc(struct e2e *e)
{
    char *argv[] = {(char *)xt_bin(), "gc", NULL};
    char *envp[] = {e->state_env, NULL};

    xt_result_free(&e->r);
    cr_assert_eq(xt_run(&e->r, argv, envp, e->dir, 60), 0);
    return e->r.status;
}

static inline json_t *
e2e_worker(const struct e2e *e, size_t i)
{
    json_t *w = json_array_get(json_object_get(e->rep, "workers"), i);
    cr_assert_not_null(w, "no worker %zu in the report", i);
    return w;
}

static inline const char *
e2e_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* True if pid is gone: no /proc entry, or a zombie (dead; reaping is init's job once xmprun,
 * its subreaper, has exited). */
static inline bool
e2e_pid_dead(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;

    /* 0 or a negative number is no process: judging it "dead" would hide a lost pid. */
    cr_assert_gt(pid, 0, "no pid to check (%d)", (int)pid);
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return true;
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p == NULL)
        return true;
    p = strrchr(buf, ')');
    return p != NULL && (p[2] == 'Z' || p[2] == 'X');
}

/* Asserts the pid in a probe's pidfile is gone; the pidfile must have been written, or the
 * check would pass without checking anything. */
static inline void
e2e_assert_pidfile_dead(const struct e2e *e, const char *name)
{
    char *path = e2e_path(e, name);
    char *text = xt_read_file(path);
    cr_assert_not_null(text, "pidfile %s was never written", path);
    pid_t pid = (pid_t)atoi(text);
    cr_assert(e2e_pid_dead(pid), "process %d (%s) is still alive", (int)pid, name);
    free(text);
    free(path);
}

/* Every directory of xmprun's own cgroup, one per hierarchy (the test runs xmprun in its own
 * cgroup, so the test's cgroups are xmprun's): from /proc/self/cgroup and the mount table. */
static inline size_t
e2e_own_cgroup_dirs(char dirs[][4096], size_t max)
{
    char line[4096], mline[4096];
    size_t n = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");

    while (f != NULL && n < max && fgets(line, sizeof(line), f) != NULL) {
        char *c1 = strchr(line, ':'), *c2, *path;
        if (c1 == NULL || (c2 = strchr(c1 + 1, ':')) == NULL)
            continue;
        *c2 = '\0';
        path = c2 + 1;
        path[strcspn(path, "\n")] = '\0';
        char *ctrl = c1 + 1, *comma = strchr(ctrl, ',');
        if (comma != NULL)
            *comma = '\0';
        FILE *m = fopen("/proc/self/mountinfo", "r");
        while (m != NULL && fgets(mline, sizeof(mline), m) != NULL) {
            char root[1024], mnt[1024], fstype[64], super[1024];
            char *dash = strstr(mline, " - ");
            if (dash == NULL || sscanf(mline, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
                sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2)
                continue;
            bool match = false;
            if (ctrl[0] == '\0')
                match = strcmp(fstype, "cgroup2") == 0;
            else if (strcmp(fstype, "cgroup") == 0) {
                for (char *tok = strtok(super, ","); tok != NULL; tok = strtok(NULL, ","))
                    if (strcmp(tok, ctrl) == 0)
                        match = true;
            }
            if (!match)
                continue;
            size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
            if (strncmp(path, root, rl) != 0)
                continue;
            snprintf(dirs[n++], 4096, "%s%s", mnt, path + rl);
            break;
        }
        if (m != NULL)
            fclose(m);
    }
    if (f != NULL)
        fclose(f);
    return n;
}

/* Asserts that no cgroup of the xmprun with this pid is left below xmprun's own cgroup in any
 * hierarchy: no "xmprun-<name>-<pid>-<hex>" job cgroup, no "xmprun-self-<pid>" leaf. */
static inline void
e2e_assert_no_cgroups(pid_t owner)
{
    static char dirs[16][4096];
    size_t n = e2e_own_cgroup_dirs(dirs, 16);
    char mid[32], self[48];

    snprintf(mid, sizeof(mid), "-%d-", (int)owner);
    snprintf(self, sizeof(self), "xmprun-self-%d", (int)owner);
    for (size_t i = 0; i < n; i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, "xmprun-", 7) != 0)
                continue;
            cr_assert(strstr(de->d_name, mid) == NULL && strcmp(de->d_name, self) != 0,
                      "cgroup %s/%s was left behind", dirs[i], de->d_name);
        }
        if (d != NULL)
            closedir(d);
    }
}

/* A test's own cleanup of a cgroup tree it made, whatever the code under test left in it:
 * depth first, each cgroup is thawed (v1 freezer.state, v2 cgroup.freeze), every task in it
 * is SIGKILLed by pid, and the directory is removed once empty. */
static inline void
e2e_purge_cgroup_tree(const char *path)
{
    char sub[4400], *text;
    DIR *d = opendir(path);
    struct dirent *de;

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && de->d_name[0] != '.') {
            snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
            e2e_purge_cgroup_tree(sub);
        }
    closedir(d);
    const char *thaw[][2] = {{"freezer.state", "THAWED"}, {"cgroup.freeze", "0"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(sub, sizeof(sub), "%s/%s", path, thaw[i][0]);
        FILE *f = fopen(sub, "w");
        if (f != NULL) {
            fputs(thaw[i][1], f);
            fclose(f);
        }
    }
    snprintf(sub, sizeof(sub), "%s/cgroup.procs", path);
    for (int k = 0; k < 200 && rmdir(path) < 0 && errno == EBUSY; k++) {
        text = xt_read_file(sub);
        for (char *p = text; p != NULL && *p != '\0';
             p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
            if (atoi(p) > 0)
                kill((pid_t)atoi(p), SIGKILL);
        free(text);
        usleep(10000);
    }
}

/* The owner pid from the report's job id ("<pid>-<hex>"). */
static inline pid_t
e2e_owner(const struct e2e *e)
{
    const char *id = e2e_str(json_object_get(e->rep, "job"), "id");
    return (pid_t)atoi(id);
}

/* The checks every test ends with: the report's workers are gone, no cgroup of the job is
 * left, and the state file and the job's scratch directory (TMPDIR or /tmp) were removed. */
static inline void
e2e_assert_clean(const struct e2e *e)
{
    json_t *workers = json_object_get(e->rep, "workers"), *w;
    size_t i;
    char *state;

    json_array_foreach(workers, i, w)
    {
        json_t *jpid = json_object_get(w, "pid");
        /* Only a worker that was never forked may have no pid: one that failed to start, or
         * (start: fork) one whose zygote never forked it, which never started either. */
        if (json_is_null(jpid) && (strcmp(e2e_str(w, "state"), "failed_to_start") == 0 ||
                                   json_is_null(json_object_get(w, "started_at"))))
            continue;
        cr_assert(json_is_integer(jpid), "worker %zu has no integer pid", i);
        json_int_t pid = json_integer_value(jpid);
        cr_assert(e2e_pid_dead((pid_t)pid), "worker %zu (pid %lld) is still alive", i,
                  (long long)pid);
    }
    e2e_assert_no_cgroups(e2e_owner(e));
    state = e2e_path(e, "state");
    DIR *d = opendir(state);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        cr_assert(de->d_name[0] == '.', "state file %s/%s was left behind", state, de->d_name);
    if (d != NULL)
        closedir(d);
    free(state);
    json_t *job = json_object_get(e->rep, "job");
    const char *tmp = getenv("TMPDIR") != NULL && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    char run_dir[4096];
    snprintf(run_dir, sizeof(run_dir), "%s/xmprun-%s-%s", tmp, e2e_str(job, "name"),
             e2e_str(job, "id"));
    cr_assert(access(run_dir, F_OK) != 0, "the job's scratch directory %s was left behind",
              run_dir);
}

static inline void
e2e_fini(struct e2e *e)
{
    json_decref(e->rep);
    xt_result_free(&e->r);
    xt_tmpdir_remove(e->dir);
    free(e->dir);
    free(e->spec);
    free(e->report);
    free(e->state_env);
}

/* The report's duration in seconds. jansson's json_real_value() gives 0.0 for an integer, so a
 * whole-second duration would pass any "less than" check: read it as any number. */
static inline double
e2e_duration(const struct e2e *e)
{
    json_t *d = json_object_get(e->rep, "duration_s");
    cr_assert(json_is_number(d), "duration_s is not a number");
    return json_number_value(d);
}

/* True when the cgroup hierarchy this test runs in can be written: root, or a user to whom the
 * cgroup was delegated (every hierarchy's directory of our own cgroup is writable). */
static inline bool
e2e_can_cgroup(void)
{
    static char dirs[16][4096];
    size_t n;

    if (geteuid() == 0)
        return true;
    n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n; i++)
        if (access(dirs[i], W_OK) != 0)
            return false;
    return n > 0;
}

/* Runs xmprun (with the spec) in a private cgroup and mount namespace with a tmpfs over
 * /sys/fs/cgroup and fresh cgroup mounts (what slurmd gets with task/cgroup, or a container
 * runtime makes): /proc/self/mountinfo still lists the old mounts, now hidden, with roots from
 * the other cgroup namespace ("/../.."). `skip` names a v1 controller not mounted again
 * ("unified": cgroup2 on a pure v2 machine), or is "". `prep` is shell run in each v1
 * hierarchy's new cgroup $d once it is made ($first: its first controller), to set up what
 * encloses the job there (a devices list, as a Slurm step's); its exports reach xmprun.
 * `run` (NULL: "run_xmprun; rc=$?") is the shell that runs it, through run_xmprun, and sets rc,
 * the exit status returned once the namespace's cgroups are removed. */
static inline int
e2e_run_hidden_mounts(struct e2e *e, const char *skip, const char *prep, const char *run)
{
    char *script = NULL;
    cr_assert_eq(
        asprintf(
            &script,
            "set -u\n"
            "SKIP=%s\n"
            "dirs=''; join=''; mounts=''\n"
            "if [ -f /sys/fs/cgroup/cgroup.controllers ]; then\n"
            "  p=$(sed -n 's/^0:://p' /proc/self/cgroup); d=/sys/fs/cgroup${p%%/}/xmp-hidden-$$\n"
            "  mkdir $d || exit 90; dirs=$d; join=\"echo \\$\\$ > $d/cgroup.procs;\"\n"
            "  [ \"$SKIP\" = unified ] || mounts='mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit "
            "94;'\n"
            "else\n"
            "  while IFS=: read -r id ctrls p; do\n"
            "    case $ctrls in ''|name=*) continue;; esac\n"
            "    first=${ctrls%%%%,*}; d=/sys/fs/cgroup/$first${p%%/}/xmp-hidden-$$\n"
            "    mkdir $d || exit 90\n"
            "    if [ $first = cpuset ]; then cat ${d%%/*}/cpuset.cpus > $d/cpuset.cpus;\n"
            "      cat ${d%%/*}/cpuset.mems > $d/cpuset.mems; fi\n"
            "    %s\n"
            "    dirs=\"$dirs $d\"; join=\"$join echo \\$\\$ > $d/cgroup.procs;\"\n"
            "    [ \"$first\" = \"$SKIP\" ] && continue\n"
            "    mounts=\"$mounts mkdir -p /sys/fs/cgroup/$first;\"\n"
            "    mounts=\"$mounts mount -t cgroup -o $ctrls cgroup /sys/fs/cgroup/$first || exit "
            "94;\"\n"
            "  done < /proc/self/cgroup\n"
            "fi\n"
            "printf '%%s\\n' 'mount -t tmpfs -o mode=755 xmp_hidden /sys/fs/cgroup || exit 93' \\\n"
            "  \"$mounts\" 'exec \"$@\"' > \"$DIR/inner.sh\"\n"
            "run_xmprun() {\n"
            "  sh -c \"$join exec unshare --cgroup --mount --propagation private sh $DIR/inner.sh "
            "\\\"\\$@\\\"\" \\\n"
            "    sh \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"\n"
            "}\n"
            "%s\n"
            "for d in $dirs; do\n"
            "  for l in $d/xmprun-self-*; do [ -d \"$l\" ] && rmdir \"$l\"; done\n"
            "  rmdir $d || { echo \"LEFT in $d: $(ls $d)\" >&2; exit 99; }\n"
            "done\n"
            "exit $rc\n",
            skip, prep, run != NULL ? run : "run_xmprun; rc=$?") > 0,
        1);
    int status = e2e_sh(e, 90, script);
    free(script);
    return status;
}

/* ---- pure cgroup v2 (run in the guest by tests/run-v2.sh) ---- */

/* A child cgroup of the test's own one, for xmprun to start in, as a fresh scope or a
 * container's cgroup would be; "" when not on pure v2 as root. */
static inline void
make_v2_cgroup(const char *tag, char *dir, size_t size)
{
    static char dirs[16][4096];
    struct statfs sf;

    dir[0] = '\0';
    if (geteuid() != 0 || statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC ||
        e2e_own_cgroup_dirs(dirs, 16) != 1)
        return;
    cr_assert(snprintf(dir, size, "%s/xmptest-%s-%d", dirs[0], tag, (int)getpid()) < (int)size);
    cr_assert_eq(mkdir(dir, 0755), 0, "mkdir %s: %s", dir, strerror(errno));
}

/* The names of the subdirectories of dir, space-separated ("" when none). */
static inline void
subdirs(const char *dir, char *buf, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t o = 0;

    buf[0] = '\0';
    while (d != NULL && (de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && de->d_name[0] != '.' && o < size)
            o += (size_t)snprintf(buf + o, size - o, "%s ", de->d_name);
    if (d != NULL)
        closedir(d);
}

/* Runs `sh -c script` with $CG set to the test cgroup. */
static inline int sh_in(struct e2e *e, const char *cg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline int
sh_in(struct e2e *e, const char *cg, const char *fmt, ...)
{
    char script[4096], *full = NULL;
    va_list ap;
    int status;

    va_start(ap, fmt);
    vsnprintf(script, sizeof(script), fmt, ap);
    va_end(ap);
    cr_assert(asprintf(&full, "export CG='%s'; %s", cg, script) > 0);
    status = e2e_sh(e, 600, full);
    free(full);
    return status;
}

#endif
