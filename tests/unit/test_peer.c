/* The peer-loss patterns, each against a real worker's stderr tail (tests/fixtures/peer, whose
 * SOURCES.md says where each came from), and the root cause they give in a report. */
#define _GNU_SOURCE
#include "helpers/testlib.h"
#include "runner/report/collective.h"
#include "runner/report/peer.h"
#include "runner/report/report.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tail {
    char *text;
    char *lines[64];
    size_t n;
};

/* The fixture's lines, as the report keeps a worker's stderr tail. */
static void
load_tail(const char *name, struct tail *t)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/peer/%s.txt", xt_fixtures(), name);
    t->text = xt_read_file(path);
    cr_assert_not_null(t->text, "%s", path);
    t->n = xt_split_lines(t->text, t->lines, 64);
}

struct peer_case {
    const char *name; /* the fixture, and the pattern it must match */
    const char *addr;
};

static const struct peer_case cases[] = {
    {"gloo-closed", "127.0.0.1"},
    {"gloo-reset", "127.0.0.1"},
    {"gloo-timeout", ""},
    {"nccl-closed",
     "a100-st-p4d24xlarge-22.luciodelelis-92732890-0458-4f76-8369-c4fee80b23e7.pcluster"},
    {"nccl-reset", "172...."},
    {"nccl-remote-error", ""},
    {"nccl-ib-completion", "10.0.35.1"},
    {"nccl-watchdog", ""},
    {"store-connect", "127.0.0.1"},
    {"store-socket-timeout", ""},
    {"store-clients", ""},
};

Test(peer, every_pattern_matches_its_real_output)
{
    /* Every entry of the table has its case. */
    for (size_t k = 0; k < xmp_peer_n_patterns; k++) {
        bool found = false;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            found |= strcmp(cases[i].name, xmp_peer_patterns[k].name) == 0;
        cr_assert(found, "pattern %s has no real output to test it", xmp_peer_patterns[k].name);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tail t;
        char addr[128];
        const struct xmp_peer_pattern *p;

        load_tail(cases[i].name, &t);
        p = xmp_peer_find(t.lines, t.n, addr, sizeof(addr));
        cr_assert_not_null(p, "%s: no pattern matched", cases[i].name);
        cr_assert_str_eq(p->name, cases[i].name);
        cr_assert_str_eq(addr, cases[i].addr, "%s", cases[i].name);
        free(t.text);
    }
}

Test(peer, unrelated_failures_do_not_match)
{
    struct tail t;
    char addr[128];
    char *plain[] = {"Traceback (most recent call last):", "ValueError: bad batch"};

    load_tail("not-peer-socket-reset", &t);
    cr_assert_null(xmp_peer_find(t.lines, t.n, addr, sizeof(addr)));
    free(t.text);
    cr_assert_null(xmp_peer_find(plain, 2, addr, sizeof(addr)));
    cr_assert_null(xmp_peer_find(NULL, 0, addr, sizeof(addr)));
}

static struct xmp_worker_report *
add_worker(struct xmp_report *r, int rank, int exit_code, int64_t ended_ns, const char *fixture)
{
    static const char *const cpu[] = {"cpu", NULL};
    struct xmp_worker_report *w;
    struct tail t;

    r->workers = realloc(r->workers, (r->n_workers + 1) * sizeof(*r->workers));
    w = &r->workers[r->n_workers++];
    memset(w, 0, sizeof(*w));
    w->rank = rank;
    w->devices = cpu;
    w->state = XMP_WORKER_EXITED;
    w->exit_code = exit_code;
    w->memory_limit = w->memory_peak = w->oom_kills = w->job_memory_limit = -1;
    w->ended_mono_ns = ended_ns;
    if (fixture != NULL) {
        load_tail(fixture, &t);
        w->stderr_tail = calloc(t.n, sizeof(char *));
        for (size_t i = 0; i < t.n; i++)
            w->stderr_tail[i] = strdup(t.lines[i]);
        w->n_tail = t.n;
        free(t.text);
    }
    return w;
}

Test(peer, root_cause_points_across_nodes)
{
    struct xmp_report r;

    memset(&r, 0, sizeof(r));
    r.nnodes = 2;
    add_worker(&r, 0, 1, 100, "gloo-closed");
    add_worker(&r, 1, 1, 200, "gloo-reset");
    xmp_report_finish(&r);
    cr_assert_eq(r.outcome, XMP_OUTCOME_FAILED);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_eq(r.cause_rank, 0);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) lost its connection to a peer (127.0.0.1): the job probably "
                     "failed on another node first; see that node's report");
    xmp_report_release(&r);

    /* On one node there is no other node to blame. */
    memset(&r, 0, sizeof(r));
    r.nnodes = 1;
    add_worker(&r, 0, 1, 100, "gloo-timeout");
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message, "worker 0 (cpu) timed out waiting for a peer");
    xmp_report_release(&r);

    memset(&r, 0, sizeof(r));
    r.nnodes = 2;
    add_worker(&r, 2, 1, 100, "store-connect");
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_message,
                     "worker 2 (cpu) could not reach the rendezvous store (127.0.0.1): the master "
                     "node's job may not have started, or failed first; see its report");
    xmp_report_release(&r);
}

/* A worker of this node that failed on its own is the cause, even when the worker that lost
 * its connection to it ended first. */
Test(peer, own_failure_beats_peer_loss)
{
    struct xmp_report r;

    memset(&r, 0, sizeof(r));
    r.nnodes = 2;
    add_worker(&r, 0, 1, 100, "gloo-closed");
    add_worker(&r, 1, 3, 150, NULL);
    xmp_report_finish(&r);
    cr_assert_eq(r.cause_rank, 1);
    cr_assert_eq(r.exit_code, 3);
    cr_assert_str_eq(r.cause_message, "worker 1 (cpu) exited with status 3");
    xmp_report_release(&r);
}

/* NCCL's watchdog timeout, read from real runs: the collective, its SeqNum, its timeout and how
 * long it ran; PyTorch 2.2 and later add the last completed work. */
Test(peer, collective_timeout_is_read)
{
    struct tail t;
    struct xmp_collective_timeout ct;

    load_tail("nccl-timeout-pg", &t);
    cr_assert(xmp_collective_timeout_find(t.lines, t.n, &ct));
    cr_assert_eq(ct.seq, 1);
    cr_assert_str_eq(ct.op, "COALESCED");
    cr_assert_eq(ct.timeout_ms, 1800000);
    cr_assert_eq(ct.ran_ms, 1800014);
    cr_assert_eq(ct.last_completed, -1);
    free(t.text);

    load_tail("nccl-watchdog", &t);
    cr_assert(xmp_collective_timeout_find(t.lines, t.n, &ct));
    cr_assert_eq(ct.seq, 469508);
    cr_assert_str_eq(ct.op, "ALLREDUCE");
    cr_assert_eq(ct.timeout_ms, 1800000);
    cr_assert_eq(ct.ran_ms, 1802212);
    cr_assert_eq(ct.last_completed, XMP_SEQ_UNKNOWN);
    free(t.text);

    load_tail("gloo-timeout", &t);
    cr_assert_not(xmp_collective_timeout_find(t.lines, t.n, &ct));
    free(t.text);
}

/* A rank's lines in the format of nccl-timeout-pg.txt, for the collective SeqNum 42 and the
 * given last completed work. */
static void
timed_out(struct xmp_worker_report *w, long long last_completed)
{
    w->stderr_tail = calloc(2, sizeof(char *));
    cr_assert(asprintf(&w->stderr_tail[0],
                       "[rank%d]:[E1103 07:34:57.460801783 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG "
                       "GUID 0(default_pg) Rank %d] Timeout at NCCL work: 42, last enqueued NCCL "
                       "work: 42, last completed NCCL work: %lld.",
                       w->rank, w->rank, last_completed) > 0);
    cr_assert(asprintf(&w->stderr_tail[1],
                       "[rank%d]:[E1103 07:34:57.462234381 ProcessGroupNCCL.cpp:1595] [Rank %d] "
                       "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, "
                       "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                       "600087 milliseconds before timing out.",
                       w->rank, w->rank) > 0);
    w->n_tail = 2;
    w->state = XMP_WORKER_SIGNALED;
    w->signal = SIGABRT;
    w->exit_code = -1;
}

/* Every rank waiting in the collective times out, the first to print it a victim: the cause is
 * the rank whose last completed work is lowest, or the one that was elsewhere. */
Test(peer, collective_timeout_names_the_rank_that_fell_behind)
{
    struct xmp_report r;

    memset(&r, 0, sizeof(r));
    r.nnodes = 1;
    timed_out(add_worker(&r, 0, 0, 100, NULL), 41);
    timed_out(add_worker(&r, 1, 0, 110, NULL), 41);
    timed_out(add_worker(&r, 2, 0, 120, NULL), 40);
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_reason, "collective_timeout");
    cr_assert_eq(r.cause_rank, 2);
    cr_assert_str_eq(r.cause_message,
                     "worker 2 (cpu) fell behind: the other ranks timed out waiting in NCCL "
                     "ALLREDUCE (SeqNum 42, timeout 600000 ms), first worker 0 (cpu); its last "
                     "completed NCCL work is 40, theirs 41");
    cr_assert_eq(r.exit_code, 128 + SIGABRT);
    xmp_report_release(&r);

    /* One rank never reached the collective: it was still running when the others timed out,
     * and stopped. */
    memset(&r, 0, sizeof(r));
    r.nnodes = 1;
    timed_out(add_worker(&r, 0, 0, 100, NULL), 41);
    add_worker(&r, 1, 0, 300, NULL)->state = XMP_WORKER_STOPPED_BY_XMPRUN;
    timed_out(add_worker(&r, 2, 0, 120, NULL), 41);
    xmp_report_finish(&r);
    cr_assert_eq(r.cause_rank, 1);
    cr_assert_str_eq(r.cause_message,
                     "worker 1 (cpu) fell behind: the other ranks timed out waiting in NCCL "
                     "ALLREDUCE (SeqNum 42, timeout 600000 ms), first worker 0 (cpu), while it was "
                     "elsewhere");
    xmp_report_release(&r);

    /* Nothing tells them apart: the first one, with what it says. */
    memset(&r, 0, sizeof(r));
    r.nnodes = 1;
    timed_out(add_worker(&r, 0, 0, 100, NULL), 41);
    timed_out(add_worker(&r, 1, 0, 110, NULL), 41);
    xmp_report_finish(&r);
    cr_assert_str_eq(r.cause_reason, "collective_timeout");
    cr_assert_eq(r.cause_rank, 0);
    cr_assert_str_eq(r.cause_message,
                     "worker 0 (cpu) timed out in NCCL ALLREDUCE (SeqNum 42, timeout 600000 ms) "
                     "after 600087 ms: a rank did not reach it (see the other workers)");
    xmp_report_release(&r);

    /* A rank's own failure is the cause, not the timeouts it led to. */
    memset(&r, 0, sizeof(r));
    r.nnodes = 1;
    timed_out(add_worker(&r, 0, 0, 100, NULL), 41);
    add_worker(&r, 1, 3, 150, NULL);
    xmp_report_finish(&r);
    cr_assert_eq(r.cause_rank, 1);
    cr_assert_str_eq(r.cause_reason, "exited");
    xmp_report_release(&r);
}
