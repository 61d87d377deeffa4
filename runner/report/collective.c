/* Reading PyTorch's NCCL watchdog timeouts (ProcessGroupNCCL.cpp, 2.0 to 2.5; tests/unit/
 * test_collective.c has real runs' lines) and finding the rank that fell behind: every rank
 * waiting in a collective that one rank never reached prints the same timeout and aborts, so
 * the rank that prints it first is a victim. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long
number_after(const char *line, const char *key, long long unknown)
{
    const char *p = strstr(line, key);
    char *end;
    long long v;

    if (p == NULL)
        return unknown;
    v = strtoll(p + strlen(key), &end, 10);
    return end == p + strlen(key) ? unknown : v;
}

bool
xmp_collective_timeout_find(char *const *lines, size_t n, struct xmp_collective_timeout *out)
{
    bool found = false;

    *out = (struct xmp_collective_timeout){-1, "", -1, -1, XMP_SEQ_UNKNOWN};
    for (size_t i = n; i-- > 0;) {
        const char *line = lines[i], *op;
        if (line == NULL)
            continue;
        if (out->last_completed == XMP_SEQ_UNKNOWN &&
            strstr(line, "Timeout at NCCL work: ") != NULL)
            out->last_completed = number_after(line, "last completed NCCL work: ", XMP_SEQ_UNKNOWN);
        if (found || strstr(line, "Watchdog caught collective operation timeout") == NULL)
            continue;
        found = true;
        out->seq = number_after(line, "SeqNum=", -1);
        out->timeout_ms = number_after(line, "Timeout(ms)=", -1);
        out->ran_ms = number_after(line, ") ran for ", -1);
        if ((op = strstr(line, "OpType=")) != NULL)
            snprintf(out->op, sizeof(out->op), "%.*s", (int)strcspn(op + 7, ", )"), op + 7);
    }
    return found;
}

/* "ALLREDUCE (SeqNum 42, timeout 600000 ms)". */
static void
describe_op(const struct xmp_collective_timeout *t, char *buf, size_t size)
{
    char seq[48] = "", timeout[48] = "";

    if (t->seq >= 0)
        snprintf(seq, sizeof(seq), "SeqNum %lld", t->seq);
    if (t->timeout_ms >= 0)
        snprintf(timeout, sizeof(timeout), "%stimeout %lld ms", seq[0] ? ", " : "", t->timeout_ms);
    snprintf(buf, size, "%s%s%s%s%s", t->op[0] ? t->op : "a collective",
             seq[0] || timeout[0] ? " (" : "", seq, timeout, seq[0] || timeout[0] ? ")" : "");
}

/* The rank that fell behind: of the workers that timed out, the one whose last completed work
 * is lowest (when it is the only one that low); else the one worker that did not time out and
 * was stopped while the others waited. NULL when neither says. */
static const struct xmp_worker_report *
behind(const struct xmp_report *r, long long *its_last, long long *others_last)
{
    const struct xmp_worker_report *low = NULL, *elsewhere = NULL;
    long long min = 0, second = 0;
    bool have_second = false;
    size_t n_low = 0, n_elsewhere = 0, n_timed_out = 0;

    for (size_t i = 0; i < r->n_workers; i++) {
        const struct xmp_worker_report *w = &r->workers[i];
        struct xmp_collective_timeout t;
        if (!xmp_collective_timeout_find(w->stderr_tail, w->n_tail, &t)) {
            if (w->state == XMP_WORKER_STOPPED_BY_XMPRUN) {
                elsewhere = w;
                n_elsewhere++;
            } else if (xmp_worker_failed(w)) {
                return NULL; /* a failure of another kind: not this rule's to judge */
            }
            continue;
        }
        n_timed_out++;
        if (t.last_completed == XMP_SEQ_UNKNOWN) {
            continue;
        } else if (low == NULL || t.last_completed < min) {
            /* The old lowest is below every other seen so far. */
            have_second = low != NULL;
            second = min;
            min = t.last_completed;
            low = w;
            n_low = 1;
        } else if (t.last_completed == min) {
            n_low++;
        } else if (!have_second || t.last_completed < second) {
            have_second = true;
            second = t.last_completed;
        }
    }
    if (low != NULL && n_low == 1 && have_second) {
        *its_last = min;
        *others_last = second;
        return low;
    }
    *its_last = *others_last = XMP_SEQ_UNKNOWN;
    return n_timed_out > 0 && n_elsewhere == 1 ? elsewhere : NULL;
}

bool
xmp_collective_cause(struct xmp_report *r, const struct xmp_worker_report *first)
{
    struct xmp_collective_timeout t;
    const struct xmp_worker_report *late;
    char who[160], late_who[160], op[128], where[256] = "";
    long long its_last, others_last;

    if (!xmp_collective_timeout_find(first->stderr_tail, first->n_tail, &t))
        return false;
    snprintf(r->cause_reason, sizeof(r->cause_reason), "collective_timeout");
    describe_op(&t, op, sizeof(op));
    xmp_worker_who(first, who, sizeof(who));
    late = behind(r, &its_last, &others_last);
    if (late == NULL || late == first) {
        if (t.ran_ms >= 0)
            snprintf(where, sizeof(where), " after %lld ms", t.ran_ms);
        snprintf(
            r->cause_message, sizeof(r->cause_message),
            "%.80s timed out in NCCL %.100s%s: a rank did not reach it (see the other workers)",
            who, op, where);
        return true;
    }
    r->cause_rank = late->rank;
    xmp_worker_who(late, late_who, sizeof(late_who));
    if (its_last != XMP_SEQ_UNKNOWN)
        snprintf(
            r->cause_message, sizeof(r->cause_message),
            "%.80s fell behind: the other ranks timed out waiting in NCCL %.100s, first %.80s; "
            "its last completed NCCL work is %lld, theirs %lld",
            late_who, op, who, its_last, others_last);
    else {
        if (late->stacks != NULL) {
            char frame[200];
            snprintf(where, sizeof(where), ", in `%s`",
                     xmp_stacks_innermost(late->stacks, frame, sizeof(frame)));
        }
        snprintf(
            r->cause_message, sizeof(r->cause_message),
            "%.80s fell behind: the other ranks timed out waiting in NCCL %.100s, first %.80s, "
            "while it was elsewhere%.150s",
            late_who, op, who, where);
    }
    return true;
}
