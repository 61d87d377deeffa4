/* The exit report (SPEC.md section 5): what happened to each worker, the root cause in plain
 * words, the outcome and xmprun's exit status. The exit rules live only here. */
#ifndef XMP_REPORT_H
#define XMP_REPORT_H

#include "isolate/error.h"
#include "isolate/file.h"
#include "runner/report/stacks.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

enum xmp_outcome {
    XMP_OUTCOME_SUCCEEDED = 0,
    XMP_OUTCOME_FAILED,
    XMP_OUTCOME_TIMEOUT,
    XMP_OUTCOME_INTERRUPTED,
    XMP_OUTCOME_SETUP_FAILED,
};

enum xmp_worker_state {
    XMP_WORKER_RUNNING = 0, /* not ended yet (only while the job runs) */
    XMP_WORKER_EXITED,
    XMP_WORKER_SIGNALED,
    XMP_WORKER_OOM_KILLED,
    XMP_WORKER_STOPPED_BY_XMPRUN,
    XMP_WORKER_TIMEOUT,
    XMP_WORKER_FAILED_TO_START,
    XMP_WORKER_HUNG,         /* stopped by the hang watchdog (on_failure.hang_timeout) */
    XMP_WORKER_UNKILLABLE,   /* still there after SIGKILL and XMP_UNKILLABLE_MS: left behind */
    XMP_WORKER_MEMORY_LIMIT, /* stopped by xmprun's memory watchdog at its (or the job's) limit */
};

/* How long a worker may take to die after SIGKILL before xmprun reports it unkillable (D state:
 * a GPU driver, NFS or RDMA wait; a frozen cgroup) and ends without it, leaving its cgroup to
 * `xmprun gc`. The same bound as the cgroup layer's wait for an emptied cgroup. */
#define XMP_UNKILLABLE_MS 5000

/* Why a failure happened, for root_cause.reason. */
enum xmp_cause_kind {
    XMP_CAUSE_NONE = 0,
    XMP_CAUSE_WORKER, /* a worker failed: the reason is its state */
    XMP_CAUSE_TIMEOUT,
    XMP_CAUSE_INTERRUPTED,
    XMP_CAUSE_SETUP,
    XMP_CAUSE_ZYGOTE, /* start: fork: the zygote died or exited on its own */
    XMP_CAUSE_HUNG,   /* the hang watchdog found a worker with no output and no CPU time */
};

struct xmp_worker_report {
    int rank;
    int local_rank;
    pid_t pid;                  /* 0 when no process was ever created */
    const char *const *devices; /* borrowed, NULL-terminated ("cuda:3", "cpu") */
    char cpuset[1024];          /* "" when none */
    struct timespec started_at; /* CLOCK_REALTIME */
    struct timespec ended_at;
    int64_t ended_mono_ns; /* CLOCK_MONOTONIC, orders failures ("earliest") */
    enum xmp_worker_state state;
    int exit_code; /* -1: null (killed by a signal, or never started) */
    int signal;    /* 0: null */
    /* It died of the outside stop signal that reached xmprun too (scancel, a container stop,
     * ^C to the process group), just before xmprun saw it: a consequence of the interrupt,
     * not a failure of its own, so never the root cause. */
    bool interrupted;
    int64_t memory_limit; /* bytes, -1: null */
    /* resources.job.memory, -1: none; names the limit of an OOM kill the worker's own limit
     * did not cause. */
    int64_t job_memory_limit;
    int64_t memory_peak; /* bytes, -1: null */
    int64_t oom_kills;   /* -1: null */
    /* Whose memory limit fired for an OOM kill: "worker", "job", "shared", "enclosing" or NULL
     * (memory.oom_at), with that limit in bytes (-1 unknown) and, for an enclosing cgroup, its
     * path as /proc/self/cgroup shows it. */
    const char *oom_at;
    int64_t oom_limit;
    char oom_path[512];
    bool oom_unseen; /* oom_at is NULL although the chain was read: no visible limit fired */
    /* Measured by xmprun's memory watchdog (no writable cgroup): memory_peak is the largest of
     * its samples, taken every memory_period_ms; memory_over says which limit it was stopped
     * at ("worker", "job"; NULL: none), with its measure then and, for the job's, the job's sum.
     * memory_unmeasured says why its memory could not be measured ("" when it could). */
    bool memory_sampled;
    int64_t memory_period_ms;
    const char *memory_over;
    int64_t memory_used;
    int64_t memory_job_used;
    char memory_unmeasured[256];
    int64_t pids_limit;     /* resources.worker.pids, -1: null */
    int64_t job_pids_limit; /* resources.job.pids, -1: none */
    int64_t pids_hits;      /* forks refused by a pids limit, -1: null */
    double user_s;
    double system_s;
    char **stderr_tail; /* owned, n_tail lines, oldest first */
    size_t n_tail;
    json_t *error_file; /* owned reference, or NULL */
    /* "" or why error_file is not (all of) the worker's JSON: cut at the bound, not JSON, not
     * a regular file. */
    char error_file_note[576];
    char start_error[512]; /* failed_to_start: "exec `x`: No such file or directory" */
    /* Xid events the kernel logged for the worker's GPUs while it ran (the first few). */
    struct xmp_gpu_fault {
        int xid;
        char device[16]; /* "cuda:3" */
        char pci[32];    /* as the kernel printed it: "0000:41:00" */
        char text[200];  /* the rest of the kernel's line */
        struct timespec at;
    } faults[4];
    size_t n_faults;
    /* The device memory its processes used on each of its GPUs, sampled from NVML about once a
     * second while it ran (none when NVML could not be asked). */
    struct xmp_gpu_memory {
        char device[16]; /* "cuda:3" */
        int64_t peak;    /* bytes, -1: NVML could not say */
        int64_t current; /* bytes at the last sample, -1: unknown (the status line's) */
        int64_t total;   /* the device's memory, bytes, -1: unknown */
    } gpu_memory[4];
    size_t n_gpu_memory;
    /* Killed by its seccomp filter (SIGSYS under a filter that kills): the profile's name
     * (borrowed; NULL otherwise) and the syscall's name when the kernel's audit record gave it. */
    const char *seccomp_profile;
    char seccomp_syscall[64];
    /* Why its signal came, where xmprun could tell ("" otherwise), appended to its root cause:
     * a SIGBUS with /dev/shm full or small. */
    char signal_cause[256];
    char log_error[512]; /* "" or why its logs.dir file stops short (a full disk) */
    /* Where its threads were when xmprun stopped it (owned, NULL when it ended by itself), and
     * the text file beside the report that holds them ("" when none was written). */
    struct xmp_stack_proc *stacks;
    char stacks_file[1100];
    /* XMP_WORKER_UNKILLABLE: where the process was stuck when xmprun gave up on it, from
     * /proc/PID/stat (state, "D"), /proc/PID/wchan and /proc/PID/stack (root only; the frames
     * as the kernel prints them), and the cgroup left for `xmprun gc` ("" when none). */
    struct xmp_unkillable {
        char state[4];
        char wchan[64];
        char stack[16][96];
        size_t n_stack;
        char cgroup[512];
    } unkillable;
};

/* A failure that led to a restart of the whole group. */
struct xmp_attempt {
    int restart; /* 0 for the first run */
    enum xmp_cause_kind kind;
    int rank;
    char reason[32];
    char message[512];
    int exit_code;
};

struct xmp_report {
    const char *job_name; /* borrowed strings; NULL is written as null */
    const char *job_id;
    const char *spec_path;
    const char *host;
    int node_rank;
    int nnodes;
    int world_size;
    const char *master_addr; /* borrowed; NULL when no plan was made */
    int master_port;
    const char *run_id; /* borrowed; NULL when no plan was made */
    struct timespec started_at;
    struct timespec ended_at;
    int64_t started_mono_ns;
    int64_t ended_mono_ns;
    const char *cgroup_mode;    /* "unified", "hybrid", "legacy", "none" */
    const char *cgroup_manager; /* "cgroupfs", "systemd"; NULL (null) without cgroups */
    char cgroup_scope[256];     /* the systemd scope; "" is written as null */
    char cgroup_path[512];      /* "" is written as null */
    char cgroup_note[1024];     /* "" is written as null */
    /* How each limit the spec sets was kept (runner/plan/enforce.h), owned; NULL: {}. */
    json_t *enforcement;
    /* cgroup.paths: the job cgroup in each hierarchy, as /proc/self/cgroup shows it. */
    struct xmp_report_cgroup_path {
        char hier[32];
        char path[512];
    } cgroup_paths[8];
    size_t n_cgroup_paths;
    /* Set by the supervisor; the report derives outcome, exit code and root cause. */
    char setup_error[512]; /* non-empty: the job could not be set up */
    int interrupt_signal;  /* the first SIGINT/SIGTERM/SIGHUP xmprun got, or 0 */
    int64_t interrupt_mono_ns;
    bool timed_out;
    int64_t timeout_ms;
    /* The hang watchdog: the worker it found hung (NULL: none), when, and the hang_timeout. */
    const struct xmp_worker_report *hung;
    int64_t hung_mono_ns;
    int64_t hang_timeout_ms;
    int64_t timeout_mono_ns;
    int restarts; /* how many times the group was restarted */
    int restarts_allowed;
    struct xmp_attempt *attempts; /* one per failed run that was restarted */
    size_t n_attempts;
    struct xmp_worker_report *workers; /* the last run's workers */
    size_t n_workers;
    /* start: fork: the zygote (rank -1, borrowed; NULL in exec mode), and whether its end
     * failed the job, and when it ended: before it forked any worker, after the job was over. */
    const struct xmp_worker_report *zygote;
    bool zygote_failed;
    bool zygote_before_fork;
    bool zygote_after_done;
    /* Derived by xmp_report_finish. */
    enum xmp_outcome outcome;
    int exit_code;
    enum xmp_cause_kind cause;
    int cause_rank; /* -1 when the cause is not a worker */
    char cause_reason[32];
    char cause_message[512];
};

const char *xmp_outcome_name(enum xmp_outcome outcome);
const char *xmp_worker_state_name(enum xmp_worker_state state);

/* True for a state that is a failure of the worker itself (not one xmprun caused). */
bool xmp_worker_failed(const struct xmp_worker_report *w);

/* "SIGKILL" for 9; "SIG<n>" when unknown. */
void xmp_signal_name(int sig, char *buf, size_t size);
/* "8.0 GiB", "512.0 MiB", "100 B". */
void xmp_format_bytes(int64_t bytes, char *buf, size_t size);
/* "30s", "1h30m", "250ms". */
void xmp_format_duration(int64_t ms, char *buf, size_t size);

/* The peer-loss message that a failed worker's stderr lines show (the newest matching line
 * wins; addr gets the peer it names, or ""), or NULL. An OOM kill or a failed start is its own
 * cause whatever the lines say. */
struct xmp_peer_pattern;
/* "worker 3 (cuda:3)", or "worker 3" without devices. */
void xmp_worker_who(const struct xmp_worker_report *w, char *buf, size_t size);

const struct xmp_peer_pattern *xmp_worker_peer_loss(const struct xmp_worker_report *w,
                                                    char *const *lines, size_t n, char *addr,
                                                    size_t size);

/* The plain-words message for a failed worker ("worker 1 (cpu) exited with status 3"). */
void xmp_worker_describe(const struct xmp_worker_report *w, char *buf, size_t size);

/* The root cause of a hang: "worker 3 (cuda:3) hung: no output and no CPU time for 10m", then
 * ", in " and where (the hung worker's innermost frame, "`all_reduce` (c10d.py:2501)") unless
 * where is NULL or "". The one place that words it. */
void xmp_report_describe_hang(const struct xmp_worker_report *w, int64_t idle_ms, const char *where,
                              char *buf, size_t size);

/* The exit status a failed worker alone gives (its code, 128+n, 137 for OOM, 125 if it never
 * existed). */
int xmp_worker_exit_status(const struct xmp_worker_report *w);

/* Picks the root cause (the earliest failure), the outcome and the exit status. */
void xmp_report_finish(struct xmp_report *r);

/* The report object, keys in a stable order. Call xmp_report_finish first. */
json_t *xmp_report_to_json(const struct xmp_report *r);

/* A JSON string of text that may not be UTF-8 (a worker's output): bad bytes become U+FFFD. */
json_t *xmp_report_text_json(const char *text);

/* Starts writing the report atomically: a temp file in the same directory, fsync, rename, fsync
 * of the directory, the last three on a thread while the caller goes on (isolate/file.h);
 * xmp_file_write_atomic_finish(c) waits for them and says whether the report is in place. */
int xmp_report_write_start(const struct xmp_report *r, const char *path, struct xmp_file_commit *c,
                           struct xmp_error *err);

/* Writes each stopped worker's stacks as text beside the report (REPORT.json ->
 * REPORT.stacks/worker-RANK.txt) and names the file in its stacks_file; removes such a file
 * that an earlier run left for a worker that has none now. Failures are only noted in
 * stacks_file's absence: the report itself still holds every frame. */
void xmp_report_write_stacks(struct xmp_report *r, const char *report_path);

/* The short human table (rank, device, state, exit, peak memory, time) and the root cause. */
void xmp_report_print_summary(const struct xmp_report *r, FILE *out);

/* Frees what the report owns (tails, error files, attempts, the workers array). */
void xmp_report_release(struct xmp_report *r);

/* Frees what a worker's report holds (its stderr tail, error file, stacks) and empties it: for
 * the next run of a restarted group, and at the end. */
void xmp_worker_report_clear(struct xmp_worker_report *w);

#endif
