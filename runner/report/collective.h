/* An NCCL collective that timed out, as PyTorch's ProcessGroupNCCL watchdog says it, and which
 * rank of the job fell behind when every rank waiting in it timed out. */
#ifndef XMP_COLLECTIVE_H
#define XMP_COLLECTIVE_H

#include "runner/report/report.h"

#include <stdbool.h>
#include <stddef.h>

struct xmp_collective_timeout {
    long long seq;            /* WorkNCCL(SeqNum=42, ...): the collective; -1 unknown */
    char op[32];              /* OpType=ALLREDUCE; "" unknown */
    long long timeout_ms;     /* Timeout(ms)=600000; -1 unknown */
    long long ran_ms;         /* "ran for 600087 milliseconds"; -1 unknown */
    long long last_completed; /* "last completed NCCL work: 41"; XMP_SEQ_UNKNOWN unknown */
};

#define XMP_SEQ_UNKNOWN (-2) /* PyTorch prints -1 when none has completed */

/* The newest watchdog timeout in the tail ("[Rank 0] Watchdog caught collective operation
 * timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, ..., Timeout(ms)=600000) ran for 600087
 * milliseconds before timing out.") with the "Timeout at NCCL work: 42, last enqueued NCCL
 * work: 42, last completed NCCL work: 41." that PyTorch 2.2 and later print beside it; false if
 * none. */
bool xmp_collective_timeout_find(char *const *lines, size_t n, struct xmp_collective_timeout *out);

/* When the job's first failure (first) is such a timeout, the root cause (reason
 * collective_timeout): the operation, its SeqNum and timeout; and when every rank that failed
 * timed out there, the rank that fell behind (the lowest last completed work, else the one that
 * was still elsewhere when the others timed out), named as the cause. False when first's
 * failure is not a collective timeout. */
bool xmp_collective_cause(struct xmp_report *r, const struct xmp_worker_report *first);

#endif
