/* Running a job end to end: signals, host discovery and plan, cgroups (required, optional, off),
 * the runs of the worker group (group.c) with restarts, cleanup on every path, the exit report,
 * and `xmprun gc`. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/supervise.h"

#include "isolate/cleanup.h"
#include "isolate/file.h"
#include "isolate/thread.h"
#include "runner/run/group.h"
#include "runner/run/spawn.h"
#include "runner/run/state.h"
#include "runner/run/zygote.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

static const int handled_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* The start's work that needs nothing of the job (the gc of what an xmprun killed with SIGKILL
 * left behind, and libcgroup's init) runs on a second thread while this one discovers the
 * host, plans the job and prepares its workers: when a job starts, the other CPUs are idle.
 * Joined before the job's cgroups are made; without a thread, it is done in line. */
struct prelude {
    const char *state_dir;
    bool cgroups;
    struct xmp_thread thread;
};

/* As large as a default thread's: gc's walks of a dead job's cgroup tree recurse once per level
 * of what its workers made there. Only the pages it touches are ever resident. */
#define PRELUDE_STACK (8 * 1024 * 1024)

static void *
prelude_main(void *arg)
{
    struct prelude *p = arg;
    struct xmp_error err = {0};

    /* Quietly: what it cannot collect stays for `xmprun gc`. */
    xmp_state_gc(p->state_dir, &err);
    if (p->cgroups)
        xmp_cgroup_prepare();
    return NULL;
}

static void
prelude_start(struct prelude *p)
{
    if (!xmp_thread_start(&p->thread, prelude_main, p, PRELUDE_STACK))
        prelude_main(p);
}

static void
prelude_join(struct prelude *p)
{
    xmp_thread_join(&p->thread);
}

static int
setup_signals(struct xmp_supervisor *sv, struct xmp_error *err)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL}, ign = {.sa_handler = SIG_IGN};
    sigset_t set;

    /* An inherited SIG_IGN for SIGCHLD would make the kernel discard exit statuses. */
    sigaction(SIGCHLD, &dfl, &sv->old_chld);
    /* A closed console must not kill the supervisor: writes then fail with EPIPE instead. */
    sigaction(SIGPIPE, &ign, &sv->old_pipe);
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(handled_signals) / sizeof(handled_signals[0]); i++)
        sigaddset(&set, handled_signals[i]);
    if (sigprocmask(SIG_BLOCK, &set, &sv->old_mask) < 0)
        return xmp_error_set(err, errno, "sigprocmask");
    sv->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sv->sigfd < 0)
        return xmp_error_set(err, errno, "signalfd");
    /* Orphaned grandchildren reparent to xmprun rather than to init, so it can reap and kill
     * them; as PID 1 this is what the kernel does anyway. */
    if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return xmp_error_set(err, errno, "prctl(PR_SET_CHILD_SUBREAPER)");
    sv->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sv->epfd < 0)
        return xmp_error_set(err, errno, "epoll_create1");
    sv->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (sv->timerfd < 0)
        return xmp_error_set(err, errno, "timerfd_create");
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = xmp_ev_tag(XMP_EV_SIGNAL, 0)};
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = xmp_ev_tag(XMP_EV_TIMER, 0)};
    if (epoll_ctl(sv->epfd, EPOLL_CTL_ADD, sv->sigfd, &sev) < 0 ||
        epoll_ctl(sv->epfd, EPOLL_CTL_ADD, sv->timerfd, &tev) < 0)
        return xmp_error_set(err, errno, "epoll_ctl");
    return 0;
}

static void
restore_signals(struct xmp_supervisor *sv)
{
    struct signalfd_siginfo fsi;

    /* Swallow what arrived after the last worker ended (a late SIGCHLD, a forwarded ^C), so
     * that unblocking does not act on it. */
    if (sv->sigfd >= 0) {
        while (read(sv->sigfd, &fsi, sizeof(fsi)) == (ssize_t)sizeof(fsi))
            ;
        close(sv->sigfd);
    }
    sigprocmask(SIG_SETMASK, &sv->old_mask, NULL);
    sigaction(SIGCHLD, &sv->old_chld, NULL);
    /* SIGPIPE stays ignored until xmprun exits: a console reader that went away (`| head -1`)
     * must not kill it before its summary and its exit status, which are the report's. */
}

static int
setup_workers(struct xmp_supervisor *sv, struct xmp_error *err)
{
    sv->n_workers = sv->plan.n_workers;
    sv->workers = calloc(sv->n_workers + 1, sizeof(*sv->workers));
    sv->report.workers = calloc(sv->n_workers + 1, sizeof(*sv->report.workers));
    if (sv->workers == NULL || sv->report.workers == NULL)
        return xmp_error_set(err, ENOMEM, "workers");
    sv->report.n_workers = sv->n_workers;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        struct xmp_error e = {0};
        char **env;

        w->pw = &sv->plan.workers[i];
        w->pidfd = -1;
        w->out.fd = w->err.fd = w->out.log_fd = w->err.log_fd = -1;
        /* Resolve the program against the worker's own PATH, as execvp would. */
        env = xmp_plan_worker_environ(&sv->plan, w->pw, sv->opts->environ);
        w->path = xmp_spawn_resolve(w->pw->argv[0], env);
        xmp_strv_free(env);
        if (w->path == NULL)
            return xmp_error_set(err, ENOMEM, "worker %d", w->pw->rank);
        if (w->pw->cpuset[0] != '\0' && xmp_cpulist_parse(w->pw->cpuset, &w->cpus, &e) == 0)
            w->has_cpus = true;
    }
    /* The scratch directory for the workers' TORCHELASTIC_ERROR_FILEs, private to the job. It
     * must be new: in a shared /tmp an existing one could belong to someone else. xmprun works
     * on it through a descriptor from here on: a worker that runs as isolation.user owns it and
     * could put another directory or a link at its name. */
    if (sv->plan.run_dir != NULL) {
        if (mkdir(sv->plan.run_dir, 0700) < 0)
            return xmp_error_set(err, errno, "mkdir `%s`", sv->plan.run_dir);
        sv->run_fd = open(sv->plan.run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sv->run_fd < 0) {
            xmp_error_set(err, errno, "open `%s`", sv->plan.run_dir);
            rmdir(sv->plan.run_dir);
            return -1;
        }
        /* Workers running as isolation.user write their error files there. */
        if (sv->iso.confine.change_user &&
            fchown(sv->run_fd, sv->iso.confine.uid, sv->iso.confine.gid) < 0)
            return xmp_error_set(err, errno, "chown `%s`", sv->plan.run_dir);
    }
    if (sv->spec->log_dir != NULL && mkdir(sv->spec->log_dir, 0755) < 0 && errno != EEXIST)
        return xmp_error_set(err, errno, "logs.dir: mkdir `%s`", sv->spec->log_dir);
    /* A link, FIFO or device planted at a log file's name is refused before anything starts;
     * the open itself does not follow links either, for what is planted later. */
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_plan_worker *pw = sv->workers[i].pw;
        if ((pw->stdout_path != NULL && xmp_file_check_target(pw->stdout_path, err) < 0) ||
            (pw->stderr_path != NULL && xmp_file_check_target(pw->stderr_path, err) < 0))
            return xmp_error_wrap(err, "logs.dir");
    }
    /* The job-wide serial lock (MpSerialExecutor, xmprun_serial_lock): a file the workers
     * flock, which the kernel releases when its holder dies. Readable by a worker that runs as
     * another user. */
    if (sv->run_fd >= 0) {
        cleanup_close int fd = -1;
        if (asprintf(&sv->serial_lock, "%s/serial.lock", sv->plan.run_dir) < 0) {
            sv->serial_lock = NULL;
            return xmp_error_set(err, ENOMEM, "serial lock");
        }
        fd = openat(sv->run_fd, "serial.lock", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                    0666);
        if (fd < 0)
            return xmp_error_set(err, errno, "create `%s`", sv->serial_lock);
        fchmod(fd, 0666);
        fchmod(sv->run_fd, 0711);
    }
    xmp_zygote_find_client(sv);
    return 0;
}

/* What one worker holds open once all are spawned: its pidfd, the read ends of its two output
 * pipes, its exec-status pipe, its start gate and its cgroup directory; two more with logs.dir
 * (200 workers were measured to need 1215 descriptors, 1615 with logs.dir). */
#define FDS_PER_WORKER 6
/* xmprun's own besides those: the four pipe ends of the worker being spawned, the report's and
 * the state file's writes, cgroup and error files read at a worker's end. */
#define FDS_RESERVE 32

/* Refuses a job that cannot get the descriptors it needs, before anything is created, rather
 * than fail at worker 162 with whatever message the call that hit EMFILE gives. */
static int
check_fd_budget(struct xmp_supervisor *sv, struct xmp_error *err)
{
    size_t per = FDS_PER_WORKER + (sv->spec->log_dir != NULL ? 2 : 0);
    size_t need = xmp_file_count_open() + FDS_RESERVE + sv->plan.n_workers * per;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    /* Each worker's cgroup files held open for its end (xmp_cgroup_hold), only where they fit. */
    sv->hold_files =
        rl.rlim_cur == RLIM_INFINITY || need + sv->plan.n_workers * XMP_CGROUP_HELD <= rl.rlim_cur;
    if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur)
        return 0;
    xmp_error_set(err, 0,
                  "out of file descriptors (RLIMIT_NOFILE %llu): %zu workers need about "
                  "%zu; raise the limit (ulimit -n, LimitNOFILE=, --ulimit nofile=) or run "
                  "fewer workers",
                  (unsigned long long)rl.rlim_cur, sv->plan.n_workers, need);
    err->errnum = EMFILE;
    return -1;
}

static void
record_attempt(struct xmp_supervisor *sv)
{
    struct xmp_report *r = &sv->report;
    struct xmp_attempt *grown = realloc(r->attempts, (r->n_attempts + 1) * sizeof(*grown));

    xmp_report_finish(r);
    if (grown == NULL)
        return;
    r->attempts = grown;
    grown[r->n_attempts] = (struct xmp_attempt){
        .restart = sv->restart, .kind = r->cause, .rank = r->cause_rank, .exit_code = r->exit_code};
    snprintf(grown[r->n_attempts].reason, sizeof(grown->reason), "%s", r->cause_reason);
    snprintf(grown[r->n_attempts].message, sizeof(grown->message), "%s", r->cause_message);
    r->n_attempts++;
    if (!xmp_quiet(sv))
        fprintf(stderr, "xmprun: %s; restarting the workers (restart %d of %ld)\n",
                r->cause_message, sv->restart + 1, sv->spec->restarts);
}

static bool
group_failed(const struct xmp_supervisor *sv)
{
    for (size_t i = 0; i < sv->n_workers; i++)
        if (xmp_worker_failed(&sv->report.workers[i]))
            return true;
    return false;
}

/* Frees what a finished run left in the report before the next run fills it again. */
static void
reset_run(struct xmp_supervisor *sv)
{
    for (size_t i = 0; i < sv->report.n_workers; i++)
        xmp_worker_report_clear(&sv->report.workers[i]);
}

static void
run_job(struct xmp_supervisor *sv)
{
    struct xmp_error err = {0};

    for (;;) {
        xmp_group_run(sv);
        /* A ^C during the last moments of a failed run must not be answered with a restart. */
        xmp_group_take_signals(sv);
        /* start: fork restarts by forking again from the same zygote, which must still live. */
        if (!group_failed(sv) || sv->report.interrupt_signal != 0 || sv->report.timed_out ||
            sv->restart >= sv->spec->restarts || (sv->fork_mode && !sv->zy.running) ||
            sv->report.zygote_failed || sv->left_behind)
            return;
        record_attempt(sv);
        /* Fresh cgroups, so that the next run's peak memory and OOM count are its own and
         * nothing the failed run left behind survives. */
        if (sv->job_cg != NULL) {
            xmp_sv_destroy_worker_cgroups(sv);
            if (xmp_sv_create_worker_cgroups(sv, &err) < 0) {
                xmp_sv_destroy_worker_cgroups(sv);
                fprintf(stderr, "xmprun: cannot restart: %s\n", err.msg);
                return;
            }
        }
        reset_run(sv);
        sv->restart++;
        sv->report.restarts = sv->restart;
    }
}

static void
fill_job_info(struct xmp_supervisor *sv)
{
    struct xmp_report *r = &sv->report;

    r->job_name = sv->have_plan ? sv->plan.job_name : sv->spec->name;
    r->job_id = sv->have_plan ? sv->plan.job_id : NULL;
    r->spec_path = sv->spec->file;
    r->host = sv->have_host && sv->host.hostname[0] != '\0' ? sv->host.hostname : NULL;
    /* Without a plan, what the spec says (auto is unknown then). */
    r->node_rank = sv->have_plan ? sv->plan.node_rank
                                 : (int)(sv->spec->node_rank > 0 ? sv->spec->node_rank : 0);
    r->nnodes =
        sv->have_plan ? sv->plan.nnodes : (int)(sv->spec->nnodes > 1 ? sv->spec->nnodes : 1);
    r->world_size = sv->have_plan ? sv->plan.world_size : 0;
    r->master_addr = sv->have_plan ? sv->plan.master_addr : NULL;
    r->master_port = sv->have_plan ? sv->plan.master_port : (int)sv->spec->master_port;
    r->run_id = sv->have_plan ? sv->plan.run_id : NULL;
    r->restarts_allowed = (int)sv->spec->restarts;
    r->timeout_ms = sv->spec->timeout_ms;
}

static const char *
report_path(struct xmp_supervisor *sv, char *buf, size_t size)
{
    if (sv->opts->report != NULL && sv->opts->report[0] != '\0')
        return sv->opts->report;
    if (sv->have_plan && sv->plan.report_path != NULL)
        return sv->plan.report_path;
    if (sv->spec->report != NULL)
        return sv->spec->report;
    /* No plan (it was refused): still one report per node where the spec names the node. */
    if (sv->spec->nnodes > 1 && sv->spec->node_rank >= 0)
        snprintf(buf, size, "%s.node%ld.report.json",
                 sv->spec->name != NULL ? sv->spec->name : "xmprun", sv->spec->node_rank);
    else
        snprintf(buf, size, "%s.report.json", sv->spec->name != NULL ? sv->spec->name : "xmprun");
    return buf;
}

/* A report path one run holds: the path, and the lock on its lock file for the run's life. */
struct report_claim {
    char path[4096], lock[4200];
    int lock_fd;
};

/* Two live runs of one job in one directory (a sweep, an array job, quick mode run twice) would
 * write one report path, and the first one's report would be lost to the second's rename. So a
 * run holds a lock on ".<report>.lock" beside its report from the start to the report's write
 * (the kernel drops it when the run dies, however it dies). A run whose default path is held by
 * a live run takes "<name>.<job id>.report.json" instead, and says so; a path the user gave
 * (--report, the spec's report) is theirs: it is kept, with a warning that the run that ends
 * last replaces the other's report. Returns the path to write. */
static const char *
claim_report_path(struct xmp_supervisor *sv, struct report_claim *c, const char *path)
{
    static const char suffix[] = ".report.json";
    bool given = (sv->opts->report != NULL && sv->opts->report[0] != '\0') ||
                 (sv->spec->report != NULL && sv->spec->report[0] != '\0');
    const char *slash = strrchr(path, '/');
    size_t len = strlen(path), sl = sizeof(suffix) - 1;
    struct xmp_error err = {0};
    pid_t holder = 0;
    char id[64], who[64] = "";

    snprintf(c->path, sizeof(c->path), "%s", path);
    snprintf(c->lock, sizeof(c->lock), "%.*s.%s.lock", slash != NULL ? (int)(slash - path + 1) : 0,
             path, slash != NULL ? slash + 1 : path);
    /* No lock (a directory where no file can be made yet): the run goes on as before. */
    if (xmp_file_lock_take(c->lock, &c->lock_fd, &holder, &err) != 1)
        return c->path;
    if (holder > 0)
        snprintf(who, sizeof(who), " (xmprun pid %ld)", (long)holder);
    if (given || len <= sl || strcmp(path + len - sl, suffix) != 0) {
        fprintf(stderr,
                "xmprun: warning: another run%s is writing its report to %s too: the run that "
                "ends last replaces the other's report (give each run its own --report)\n",
                who, path);
        return c->path;
    }
    if (sv->have_plan && sv->plan.job_id != NULL)
        snprintf(id, sizeof(id), "%s", sv->plan.job_id);
    else
        snprintf(id, sizeof(id), "%ld", (long)getpid());
    snprintf(c->path, sizeof(c->path), "%.*s.%s%s", (int)(len - sl), path, id, suffix);
    fprintf(stderr, "xmprun: another run of job %s%s is writing %s: this run's report goes to %s\n",
            sv->spec->name != NULL ? sv->spec->name : "?", who, path, c->path);
    return c->path;
}

/* Everything in the scratch directory goes with it (the error files, the serial lock, what a
 * worker left there), through its descriptor: never through a link at its name. */
static void
remove_run_dir(struct xmp_supervisor *sv)
{
    if (sv->run_fd < 0)
        return;
    xmp_file_clear_dir(sv->run_fd);
    close(sv->run_fd);
    sv->run_fd = -1;
    rmdir(sv->plan.run_dir);
}

/* Kubernetes shows a container's termination message (kubectl describe pod, the pod's status)
 * from /dev/termination-log, or the terminationMessagePath the pod names (say it in
 * XMPRUN_TERMINATION_LOG): where that file exists and the job failed, the root cause goes there.
 * It is never created, and a link planted there is not followed. */
static void
write_termination_message(const struct xmp_supervisor *sv)
{
    const char *path = getenv("XMPRUN_TERMINATION_LOG");
    int fd;

    if (sv->report.cause == XMP_CAUSE_NONE)
        return;
    fd = open(path != NULL && path[0] != '\0' ? path : "/dev/termination-log",
              O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    dprintf(fd, "xmprun: exit status %d: %s\n", sv->report.exit_code, sv->report.cause_message);
    close(fd);
}

/* Says what the consoles could not show, then writes what they still hold and the summary, all
 * (and where the report is, or why it is missing) through the consoles: a stalled reader holds
 * xmprun's exit for XMP_CONSOLE_STALL_MS at most, and a slow one still gets everything, in
 * order. report is the report's path, NULL when none was written. */
static void
finish_consoles(struct xmp_supervisor *sv, const char *report, const char *report_error)
{
    /* -q keeps what a failed job must still say: its root cause and where its report is. */
    bool failed = sv->report.exit_code != 0;
    struct xmp_console *out = xmp_group_console(sv, 0), *err = xmp_group_console(sv, 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    if (out != err)
        xmp_console_drain(out, XMP_CONSOLE_STALL_MS);
    f = open_memstream(&text, &len);
    if (f == NULL) {
        xmp_console_drain(err, XMP_CONSOLE_STALL_MS);
        return;
    }
    for (int i = 0; i < 2 && !xmp_quiet(sv); i++) {
        const struct xmp_console *c = xmp_group_console(sv, i);
        if (c->dropped == 0 || c->write_errno == EPIPE || (i == 1 && out == err))
            continue;
        if (c->write_errno == ETIMEDOUT)
            fprintf(f, "xmprun: warning: the reader of xmprun's %s took nothing for %d ms; ",
                    i == 0 ? "stdout" : "stderr", XMP_CONSOLE_STALL_MS);
        else
            fprintf(f, "xmprun: warning: %s: write: %s; ", i == 0 ? "stdout" : "stderr",
                    strerror(c->write_errno));
        fprintf(f, "%zu bytes of the workers' output were not shown%s\n", c->dropped,
                sv->spec->log_dir != NULL ? " (logs.dir has them)" : "");
    }
    if (!xmp_quiet(sv) && sv->report.outcome != XMP_OUTCOME_SETUP_FAILED)
        xmp_report_print_summary(&sv->report, f);
    else if (failed && sv->report.outcome != XMP_OUTCOME_SETUP_FAILED &&
             sv->report.cause != XMP_CAUSE_NONE)
        fprintf(f, "xmprun: root cause: %s\n", sv->report.cause_message);
    /* Last, so that it is not lost among the workers' output. */
    if (report_error != NULL)
        fprintf(f, "xmprun: the report was not written: %s\n", report_error);
    else if (report != NULL && (failed || !xmp_quiet(sv)))
        fprintf(f, "xmprun: report: %s\n", report);
    if (fclose(f) == 0 && len > 0)
        xmp_console_put(err, text, len);
    free(text);
    xmp_console_drain(err, XMP_CONSOLE_STALL_MS);
}

static void
cleanup(struct xmp_supervisor *sv)
{
    free(sv->serial_lock);
    xmp_zygote_free(&sv->zy);
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        if (w->pidfd >= 0)
            close(w->pidfd);
        free(w->path);
        xmp_strv_free(w->environ);
    }
    free(sv->workers);
    if (sv->epfd >= 0)
        close(sv->epfd);
    if (sv->timerfd >= 0)
        close(sv->timerfd);
    if (sv->stdin_fd >= 0)
        close(sv->stdin_fd);
    for (int i = 0; i < 2; i++)
        xmp_console_free(&sv->consoles[i]);
    xmp_status_free(&sv->status);
    free(sv->nvml); /* the library stays loaded: no nvmlShutdown on the way out */
    if (sv->have_plan)
        xmp_plan_free(&sv->plan);
    if (sv->have_host)
        xmp_host_free(&sv->host);
    xmp_isolation_free(&sv->iso);
    xmp_report_release(&sv->report);
}

/* What the setup and the end of a run share: the report's path, claimed for the run. */
struct run_report {
    char buf[512];
    const char *path; /* NULL until claimed */
    struct report_claim claim;
    bool refused; /* the path cannot be written: the setup failed on it, and it is not */
};

/* The supervisor before anything is set up: every descriptor closed (-1), no console yet (what
 * the end writes is then dropped, not sent to fd 0). */
static void
supervisor_init(struct xmp_supervisor *sv, const struct xmp_spec *spec,
                const struct xmp_run_options *opts)
{
    *sv = (struct xmp_supervisor){
        .spec = spec,
        .opts = opts,
        .epfd = -1,
        .run_fd = -1,
        .sigfd = -1,
        .timerfd = -1,
        .kmsg_fd = -1,
        .memwatch_fd = -1,
        .stdin_fd = -1,
        .status = {.fd = -1, .timerfd = -1},
        .fork_mode = spec->start == XMP_START_FORK,
        .zy = {.sock = -1,
               .pidfd = -1,
               .spawned = {.pidfd = -1, .status_fd = -1, .gate_fd = -1},
               .err = {.fd = -1, .log_fd = -1}},
    };
    for (int i = 0; i < 2; i++) {
        xmp_console_init(&sv->consoles[i], -1, true);
        sv->console_watched[i] = -1;
    }
    xmp_now_real(&sv->report.started_at);
    sv->report.started_mono_ns = xmp_now_ns();
    sv->report.cgroup_mode = "none";
    sv->state_dir = xmp_state_dir(opts->environ, sv->state_dir_buf, sizeof(sv->state_dir_buf));
}

/* Everything before the job starts: signals, consoles, the host and the plan, the report's
 * path, the isolation, the workers' cgroups. */
static int
setup_job(struct xmp_supervisor *sv, struct prelude *prelude, struct run_report *rr,
          struct xmp_error *err)
{
    const struct xmp_spec *spec = sv->spec;

    /* Workers run in their own process groups, in the background as far as a terminal is
     * concerned: one that read the terminal would be stopped by SIGTTIN for good. So a terminal
     * stdin is replaced by /dev/null; a file or pipe is passed on. */
    if (isatty(STDIN_FILENO))
        sv->stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (setup_signals(sv, err) < 0)
        return -1;
    /* A failure to raise it is not fatal: the budget check below says what the job needs. */
    if (xmp_file_raise_nofile(&sv->inherited_nofile, err) == 0)
        sv->have_inherited_nofile = true;
    xmp_error_clear(err);
    xmp_group_setup_consoles(sv);
    if (xmp_host_discover(getenv("XMPRUN_HOST_ROOT"), &sv->host, err) < 0)
        return xmp_error_wrap(err, "host discovery");
    sv->have_host = true;
    if (xmp_plan_build(spec, &sv->host, sv->opts->environ, getpid(), &sv->plan, err) < 0)
        return -1;
    sv->have_plan = true;
    for (char **w = sv->plan.warnings; w != NULL && *w != NULL; w++)
        fprintf(stderr, "xmprun: warning: %s\n", *w);
    /* Before anything is created or started: a report that cannot be written, or would replace
     * a device node, FIFO or directory, is refused now rather than lost after the job ran. */
    rr->path = report_path(sv, rr->buf, sizeof(rr->buf));
    if (xmp_file_check_target(rr->path, err) < 0) {
        rr->refused = true;
        return xmp_error_wrap(err, "report");
    }
    rr->path = claim_report_path(sv, &rr->claim, rr->path);
    if (check_fd_budget(sv, err) < 0)
        return -1;
    /* The seccomp filter is compiled here, once for every worker and restart. */
    if (xmp_isolation_setup(spec, &sv->iso, err) < 0)
        return -1;
    if (setup_workers(sv, err) < 0)
        return -1;
    prelude_join(prelude);
    if (xmp_sv_setup_cgroups(sv, err) < 0)
        return -1;
    sv->report.cgroup_mode = xmp_cgroup_mode_name(sv->mode);
    xmp_sv_record_enforcement(sv);
    if (spec->timeout_ms > 0)
        sv->deadline_ns = sv->report.started_mono_ns + spec->timeout_ms * 1000000;
    return 0;
}

/* The end of every run, set up or not: the report, written while the cgroups, the scratch
 * directory and the state file go; what the run left is reaped; the exit status. */
static int
finish_job(struct xmp_supervisor *sv, struct run_report *rr)
{
    struct xmp_error err = {0};
    struct xmp_file_commit commit;
    bool report_started, report_lost;

    xmp_now_real(&sv->report.ended_at);
    sv->report.ended_mono_ns = xmp_now_ns();
    fill_job_info(sv);
    xmp_report_finish(&sv->report);
    /* A setup that failed before the report path was claimed claims it now (a refused path
     * was never claimed, and is not written). */
    if (rr->path == NULL)
        rr->path = claim_report_path(sv, &rr->claim, report_path(sv, rr->buf, sizeof(rr->buf)));
    if (!rr->refused)
        xmp_report_write_stacks(&sv->report, rr->path);
    /* Nothing below changes the report: it is written now, and its fsyncs wait for the disk
     * while the cgroups and the scratch directory are removed. */
    report_started =
        !rr->refused && xmp_report_write_start(&sv->report, rr->path, &commit, &err) == 0;
    report_lost = !rr->refused && !report_started;
    /* Before the cgroups: what the workers left is killed already (xmp_group_run), and the
     * remover may still be removing their cgroups, which destroy waits for. */
    remove_run_dir(sv);
    xmp_sv_destroy_cgroups(sv);
    /* Leave the cgroup as it was found: out of the xmprun-self leaf (cgroup v2), which is
     * removed, so that it neither piles up nor blocks the next process that joins the parent. */
    {
        struct xmp_error e = {0};
        if (xmp_cgroup_leave_self_leaf(&e) < 0 && !xmp_quiet(sv))
            fprintf(stderr, "xmprun: warning: %s\n", e.msg);
    }
    /* Destroying the cgroups killed what was left; those were xmprun's children (it is their
     * subreaper), so reap them rather than leave zombies. */
    xmp_group_kill_orphans(sv, 0);
    /* What an unkillable worker left is gc's, which finds it through the state file. */
    if (sv->state_written && !sv->left_behind)
        xmp_state_remove(sv->state_dir, sv->plan.cgroup_name);

    if (report_started && xmp_file_write_atomic_finish(&commit, &err) < 0)
        report_lost = true;
    xmp_file_lock_drop(rr->claim.lock, rr->claim.lock_fd);
    restore_signals(sv);
    /* A job that succeeded but whose report is lost is not a success (SPEC.md section 5). */
    if (report_lost && sv->report.exit_code == 0)
        sv->report.exit_code = 125;
    write_termination_message(sv);
    finish_consoles(sv, report_started ? rr->path : NULL, report_lost ? err.msg : NULL);
    return sv->report.exit_code;
}

int
xmp_job_run(const struct xmp_spec *spec, const struct xmp_run_options *opts,
            struct xmp_error *setup_err)
{
    struct xmp_supervisor sv;
    struct run_report rr = {.claim = {.lock_fd = -1}};
    struct prelude prelude = {0};
    struct xmp_error err = {0};
    int status;

    supervisor_init(&sv, spec, opts);
    prelude.state_dir = sv.state_dir;
    prelude.cgroups = spec->cgroups != XMP_CGROUPS_OFF;
    prelude_start(&prelude);
    if (setup_job(&sv, &prelude, &rr, &err) == 0 &&
        !(sv.fork_mode && xmp_zygote_start(&sv, &err) < 0)) {
        run_job(&sv);
        if (sv.fork_mode)
            xmp_group_end_zygote(&sv, !group_failed(&sv) && sv.report.interrupt_signal == 0 &&
                                          !sv.report.timed_out && !sv.report.zygote_failed);
    } else {
        prelude_join(&prelude);
        snprintf(sv.report.setup_error, sizeof(sv.report.setup_error), "%s", err.msg);
        *setup_err = err;
        sv.report.n_workers = 0;
    }
    status = finish_job(&sv, &rr);
    cleanup(&sv);
    return status;
}

int
xmp_job_gc(const struct xmp_run_options *opts, struct xmp_error *err)
{
    char buf[512];

    return xmp_state_gc(xmp_state_dir(opts->environ, buf, sizeof(buf)), err);
}
