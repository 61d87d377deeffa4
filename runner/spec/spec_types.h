/* The validated job spec (SPEC.md section 1) as typed structs: data only, filled by
 * spec_validate.c and read by every later stage. */
#ifndef XMP_SPEC_TYPES_H
#define XMP_SPEC_TYPES_H

#include "isolate/cgroup.h"
#include "isolate/seccomp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* devices.kind (the plan resolves auto against the host). */
enum xmp_device_kind {
    XMP_DEVICE_AUTO = 0,
    XMP_DEVICE_CUDA,
    XMP_DEVICE_TPU,
    XMP_DEVICE_CPU,
};

enum xmp_cpuset_mode { XMP_CPUSET_AUTO = 0, XMP_CPUSET_NONE, XMP_CPUSET_LIST };
enum xmp_start_mode { XMP_START_EXEC = 0, XMP_START_FORK };
/* isolation.cgroups. auto: a cgroup per worker where xmprun can make one; where the place is known
 * to give it none (a read-only cgroupfs, a user without delegation, a Slurm step), the job runs
 * and each limit is enforced by the best means at hand (memory by xmprun's watchdog). */
enum xmp_cgroups_policy {
    XMP_CGROUPS_AUTO = 0,
    XMP_CGROUPS_REQUIRED,
    XMP_CGROUPS_OPTIONAL,
    XMP_CGROUPS_OFF,
};
enum xmp_seccomp_mode {
    XMP_SECCOMP_DEFAULT = 0,
    XMP_SECCOMP_STRICT,
    XMP_SECCOMP_OFF,
    XMP_SECCOMP_PROFILE
};
/* isolation.devices: which device nodes a worker may open. job (the default): the job's own
 * accelerators on the node, all of them, so that NCCL keeps CUDA IPC and NVLink between its
 * workers; worker: only its own; off: no filter. */
enum xmp_devices_mode { XMP_DEVICES_JOB = 0, XMP_DEVICES_WORKER, XMP_DEVICES_OFF };
enum xmp_failure_action { XMP_FAILURE_KILL_ALL = 0, XMP_FAILURE_CONTINUE };
/* on_failure.stacks: when the workers' stacks are taken before a stop. */
enum xmp_stacks_policy { XMP_STACKS_AUTO = 0, XMP_STACKS_ALWAYS, XMP_STACKS_NEVER };
enum xmp_console_mode {
    XMP_CONSOLE_PREFIX = 0,
    XMP_CONSOLE_RAW,
    XMP_CONSOLE_RANK0,
    XMP_CONSOLE_NONE
};

struct xmp_env_var {
    char *name;
    char *value;
};

/* resources.worker.rlimits, in this order. */
enum xmp_rlimit_kind {
    XMP_RLIMIT_NOFILE = 0,
    XMP_RLIMIT_MEMLOCK,
    XMP_RLIMIT_CORE,
    XMP_RLIMIT_STACK,
    XMP_RLIMIT_NPROC,
    XMP_RLIMIT_N
};
extern const char *const xmp_rlimit_names[XMP_RLIMIT_N];

/* Unset integer quantities are -1 throughout. */
struct xmp_worker_resources {
    int64_t memory;      /* bytes */
    int64_t memory_high; /* bytes */
    int64_t swap;        /* bytes */
    int64_t cpus_milli;  /* CPU quota in thousandths of a CPU: 4 -> 4000, "500m" -> 500 */
    enum xmp_cpuset_mode cpuset_mode;
    char *cpuset; /* XMP_CPUSET_LIST: the list as written, validated */
    int64_t pids;
    bool rlimit_set[XMP_RLIMIT_N]; /* unset ones are inherited */
    uint64_t rlimit[XMP_RLIMIT_N]; /* soft = hard; RLIM_INFINITY for unlimited */
};

struct xmp_spec {
    char file[256]; /* the spec's path as given, or "<command line>" for -n N -- CMD */
    int version;
    char *name;
    char **command; /* NULL-terminated argv; a string command becomes {"/bin/sh", "-c", s} */
    size_t command_len;
    bool command_shell; /* command was one string */
    char *workdir;      /* absolute, resolved against xmprun's cwd */
    struct xmp_env_var *env;
    size_t env_len;
    bool inherit_env;
    long workers; /* 0 = auto */
    enum xmp_device_kind device_kind;
    char **device_ids; /* NULL-terminated; NULL = all */
    size_t device_ids_len;
    long per_worker;
    struct xmp_worker_resources worker;
    int64_t job_memory;    /* bytes, -1 unset */
    int64_t shared_memory; /* bytes, -1 unset */
    enum xmp_start_mode start;
    enum xmp_cgroups_policy cgroups;
    enum xmp_cgroup_manager cgroup_manager; /* isolation.cgroup_manager */
    enum xmp_seccomp_mode seccomp;
    char *seccomp_profile;                 /* XMP_SECCOMP_PROFILE: path, resolved against workdir */
    struct xmp_scmp_profile seccomp_rules; /* XMP_SECCOMP_PROFILE: the file, validated */
    bool no_new_privs;
    enum xmp_devices_mode devices; /* isolation.devices */
    /* isolation.devices was set by the spec or --set, not left to its default: a filter that
     * cannot be had is then refused rather than noted */
    bool devices_explicit;
    char *user; /* isolation.user: NULL = xmprun's own */
    enum xmp_failure_action on_failure;
    int64_t grace_ms;
    long restarts;
    /* on_failure.hang_timeout: a worker with no output and no CPU time for this long is hung
     * (0 = off, the default). */
    int64_t hang_timeout_ms;
    enum xmp_stacks_policy stacks; /* on_failure.stacks */
    int64_t timeout_ms;            /* 0 = none */
    enum xmp_console_mode console;
    char *log_dir; /* NULL = none */
    long log_tail;
    char *report;      /* NULL = "<name>.report.json" in the current directory */
    long nnodes;       /* -1 = auto */
    long node_rank;    /* -1 = auto */
    char *master_addr; /* NULL = auto */
    long master_port;
    char *run_id; /* NULL = auto (the Slurm job id, else the job name) */
};

#endif
