/* The messages between xmprun and a start: fork zygote (client/xmprun.c), over the SOCK_SEQPACKET
 * socket whose fd number the zygote finds in XMPRUN_ZYGOTE_FD. One message per packet; a
 * WORKER message carries its fds with SCM_RIGHTS. */
#ifndef XMP_ZYGOTE_MSG_H
#define XMP_ZYGOTE_MSG_H

#include <sched.h>
#include <stdint.h>

enum xmp_zmsg_type {
    XMP_ZMSG_HELLO = 1, /* zygote -> xmprun: preloaded, ready to fork the workers */
    XMP_ZMSG_WORKER,    /* xmprun -> zygote: fork this worker (env, then confine, follow) */
    XMP_ZMSG_FORKED,    /* zygote -> xmprun: pid (and in_unified), or status = errno and msg */
    XMP_ZMSG_DONE,      /* xmprun -> zygote: no more workers; status 0 when the job succeeded */
    XMP_ZMSG_ERROR,     /* zygote -> xmprun: why it will not fork (msg), for the report */
};

/* WORKER flags: which optional fds follow the four fixed ones (gate read end, status write end,
 * stdout, stderr), in this order, and what the child applies. */
#define XMP_ZW_STDIN  0x1u
#define XMP_ZW_CGROUP 0x2u /* the worker's cgroup2 directory, for CLONE_INTO_CGROUP */
#define XMP_ZW_CPUS   0x8u
/* n_tasks v1 `tasks` files, after stdin: the child joins them itself */
#define XMP_ZW_TASKS 0x10u
/* FORKED flags */
#define XMP_ZF_IN_UNIFIED 0x1u /* clone3 placed it in the cgroup2 directory */

#define XMP_ZMSG_MAX   (512 * 1024) /* the largest packet (the environment must fit) */
#define XMP_ZMSG_TASKS 8            /* v1 hierarchies a worker joins, at most */
#define XMP_ZMSG_FDS   (6 + XMP_ZMSG_TASKS)

struct xmp_zmsg {
    uint32_t type;
    uint32_t flags;
    int32_t rank;
    int32_t local_rank;
    int32_t status;
    int32_t pid; /* WORKER: xmprun's pid, the parent the worker must have; FORKED: the worker */
    int32_t restart;
    uint32_t env_len; /* WORKER: bytes of NUL-terminated "NAME=value" strings after the header */
    uint32_t confine_len; /* WORKER: bytes of the packed struct xmp_confine after the env */
    uint32_t n_tasks;     /* WORKER: how many `tasks` fds (XMP_ZW_TASKS) */
    cpu_set_t cpus;
    char msg[256];
};

#endif
