/* The supervisor's state: the job's workers, its zygote, the event loop's sources, the report
 * being filled. Data only, shared by supervise.c (setup, cgroups, restarts, report), group.c (one
 * run of the worker group: spawning and the event loop) and zygote.c (start: fork). */
#ifndef XMP_SUPERVISOR_H
#define XMP_SUPERVISOR_H

#include "isolate/cgroup.h"
#include "isolate/thread.h"
#include "runner/plan/enforce.h"
#include "runner/plan/host.h"
#include "runner/plan/isolation.h"
#include "runner/plan/nvml.h"
#include "runner/plan/plan.h"
#include "runner/report/report.h"
#include "runner/run/output.h"
#include "runner/run/spawn.h"
#include "runner/run/status.h"
#include "runner/spec/spec.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

struct xmp_run_options {
    int verbosity;        /* -1 with -q, 0 default, 1 with -v */
    const char *report;   /* --report PATH, or NULL for the spec's / the default */
    char *const *environ; /* xmprun's environment */
};

enum xmp_ev_kind {
    XMP_EV_SIGNAL = 1,
    XMP_EV_TIMER,
    XMP_EV_PIDFD,
    XMP_EV_STDOUT,
    XMP_EV_STDERR,
    XMP_EV_CONSOLE,  /* index 0: xmprun's stdout, 1: its stderr, writable again */
    XMP_EV_EXEC,     /* a worker's exec-status pipe */
    XMP_EV_ZYGOTE,   /* the zygote's pidfd (start: fork) */
    XMP_EV_ZSOCK,    /* the zygote's socket, until it says it is ready */
    XMP_EV_STATUS,   /* the status line's 1 s timer */
    XMP_EV_KMSG,     /* the kernel's log, for the GPUs' Xid events */
    XMP_EV_ZSTDERR,  /* the zygote's stderr pipe */
    XMP_EV_MEMWATCH, /* the memory watchdog's timer (no writable cgroup) */
};

/* An event source's epoll tag: its kind, and an index (a worker's, a console stream's). */
static inline uint64_t
xmp_ev_tag(enum xmp_ev_kind kind, size_t index)
{
    return (uint64_t)kind << 32 | (uint32_t)index;
}

static inline enum xmp_ev_kind
xmp_ev_tag_kind(uint64_t tag)
{
    return (enum xmp_ev_kind)(tag >> 32);
}

static inline size_t
xmp_ev_tag_index(uint64_t tag)
{
    return (size_t)(tag & 0xffffffffu);
}

enum xmp_stop_reason {
    XMP_STOP_NONE = 0,
    XMP_STOP_FAILURE,
    XMP_STOP_TIMEOUT,
    XMP_STOP_INTERRUPT,
    XMP_STOP_HUNG, /* the hang watchdog (group_watch.c) */
};

struct xmp_worker {
    const struct xmp_plan_worker *pw;
    struct xmp_cgroup *cg;
    char **environ;
    char *path;
    cpu_set_t cpus;
    bool has_cpus;
    pid_t pid;
    int pidfd;
    struct xmp_spawned spawned; /* its exec status arrives through spawned.status_fd */
    bool running;               /* a process to reap */
    bool start_failed;          /* the child reported why it could not exec */
    bool stop_sent;             /* xmprun asked it to stop */
    bool hung;                  /* the hang watchdog stopped the job for it */
    bool unkillable;            /* SIGKILL did not end it: left behind, unreaped */
    bool mem_over;              /* the memory watchdog stopped it at a memory limit */
    /* start: fork's memory watchdog (group_memwatch.c): its tree's private pages at the last
     * walk, its RssAnon then, and which processes it held then (0: not walked yet). */
    int64_t mw_private;
    int64_t mw_anon;
    uint64_t mw_tree;
    /* The hang watchdog (group_watch.c): its last output (as the pipes saw it), the earliest
     * its CPU time can have last grown (the check before the one that saw it grow), and the CPU
     * time that check read (-1: none yet). */
    int64_t output_ns;
    int64_t cpu_ns;
    int64_t cpu_usec;
    struct xmp_cgroup_oom_snap oom_snap; /* the limit counters of its chain at its start */
    struct xmp_stream out;
    struct xmp_stream err;
    struct xmp_tail tail;
    struct xmp_worker_report *rep;
};

/* start: fork: the process that runs `command` once, preloads, and forks the workers
 * (runner/run/zygote.c). It lives across restarts. */
struct xmp_zygote {
    struct xmp_cgroup *cg;
    char **environ;
    char *path;
    char *error_file; /* its TORCHELASTIC_ERROR_FILE (the clients write an exception there) */
    int sock;         /* xmprun's end of the socketpair; -1 when none */
    pid_t pid;
    int pidfd;
    struct xmp_spawned spawned;
    bool running;
    bool ready;     /* it said HELLO: it preloaded and called spawn() */
    bool forked;    /* it forked at least one worker */
    bool done_sent; /* it was told that the job is over */
    bool done_ok;
    bool stop_sent; /* xmprun is stopping it */
    int64_t kill_at_ns;
    struct xmp_stream err; /* its stderr, passed on as it is, with its last lines kept */
    struct xmp_tail tail;
    struct xmp_worker_report rep;
};

struct xmp_supervisor {
    const struct xmp_spec *spec;
    const struct xmp_run_options *opts;
    struct xmp_host host;
    struct xmp_plan plan;
    struct xmp_isolation iso; /* seccomp filter, rlimits, user: the same for every worker */
    bool have_host;
    bool have_plan;
    enum xmp_cgroup_mode mode;
    struct xmp_cgroup *job_cg;
    const char *state_dir;
    char state_dir_buf[512]; /* where state_dir points when it is not from the environment */
    bool state_written;
    bool state_warned; /* the state file could not be written, and the user was told */
    int run_fd; /* the job's scratch directory (plan.run_dir), made and opened by xmprun; -1 */
    int epfd;
    int sigfd;
    int kmsg_fd; /* /dev/kmsg (below XMPRUN_HOST_ROOT in tests) while GPU workers run, or -1 */
    int64_t gpumem_at_ns; /* the next GPU memory sample while GPU workers run, 0: none */
    /* isolation.cgroups: auto where no cgroup can be written: the workers' memory is measured
     * and limited by xmprun's samples (memwatch, its timer memwatch_fd while workers run, or
     * -1), and xmprun's own cgroup is observed (own_cg) to name an enclosing limit that fired. */
    bool memwatch;
    int memwatch_fd;
    size_t mw_turn;     /* start: fork: the worker whose walk is next in turn */
    int64_t mw_walk_at; /* and when (CLOCK_MONOTONIC ns) the budget allows it */
    struct xmp_cgroup *own_cg;
    char no_cgroup_why[256]; /* why no cgroup could be written here, in words */
    struct xmp_nvml *nvml;   /* loaded at the first sample, kept to the end; NULL */
    /* on_failure.stacks: always loads what the stacks need once the workers run, joined when
     * they have ended (group.c). */
    struct xmp_thread stacks_preload;
    bool nvml_tried;
    int timerfd;
    int stdin_fd; /* /dev/null when xmprun's stdin is a terminal, else -1 (inherit) */
    struct xmp_console consoles[2]; /* xmprun's stdout and stderr */
    bool consoles_shared;           /* both are one file: consoles[0] serves both */
    int console_watched[2];         /* the fd in the epoll set for EPOLLOUT, or -1 */
    bool reading_paused;            /* a console is over XMP_CONSOLE_HIGH */
    struct xmp_status status;       /* the live status line (a terminal stderr only) */
    struct xmp_worker *workers;
    size_t n_workers;
    size_t n_running;
    enum xmp_stop_reason stopping;
    int64_t kill_at_ns;       /* 0: no kill pending */
    int64_t deadline_ns;      /* 0: no timeout */
    int64_t peer_wait_ns;     /* a worker lost its peer: when the job stops if nothing else fails */
    int64_t watch_at_ns;      /* the hang watchdog's next check, 0: off */
    int64_t watch_prev_ns;    /* its last check (the run's start before the first) */
    int64_t unkillable_at_ns; /* SIGKILL was sent: when a worker still there is given up on */
    bool left_behind;         /* a worker was unkillable: its cgroup and state file stay for gc */
    /* The descriptors allow holding each worker's cgroup files open (xmp_cgroup_hold), which
     * the idle loop does for workers [0, held_upto) so far. */
    bool hold_files;
    size_t held_upto;
    int restart;
    sigset_t old_mask; /* the mask xmprun started with, restored in workers and at the end */
    /* RLIMIT_NOFILE as xmprun inherited it, before it raised its own soft limit; the workers
     * get it back. */
    struct rlimit inherited_nofile;
    bool have_inherited_nofile;
    struct sigaction old_chld;
    struct sigaction old_pipe;
    struct xmp_report report;
    bool fork_mode;
    bool no_device_filter; /* isolation.devices wanted, but unprivileged with nothing to guard */
    struct xmp_zygote zy;
    char client_python[512]; /* the Python client's directory (PYTHONPATH) */
    char client_lib[512];    /* libxmprun.so */
    char *serial_lock;       /* the job's serial lock file, or NULL */
};

/* supervise_cgroups.c: the job's cgroups, made by setup (none with isolation.cgroups: off, or
 * optional and unusable; the report's cgroup.note says why), the workers' again for a restart,
 * and all removed by destroy. */
int xmp_sv_setup_cgroups(struct xmp_supervisor *sv, struct xmp_error *err);
int xmp_sv_create_worker_cgroups(struct xmp_supervisor *sv, struct xmp_error *err);
void xmp_sv_destroy_worker_cgroups(struct xmp_supervisor *sv);
void xmp_sv_destroy_cgroups(struct xmp_supervisor *sv);
/* The report's enforcement (how each limit the spec sets is kept), said once on stderr where
 * no cgroup keeps them. */
void xmp_sv_record_enforcement(struct xmp_supervisor *sv);

static inline int64_t
xmp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void
xmp_now_real(struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
}

static inline bool
xmp_quiet(const struct xmp_supervisor *sv)
{
    return sv->opts != NULL && sv->opts->verbosity < 0;
}

#endif
