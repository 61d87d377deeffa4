/* The classic BPF that a worker loads, made short: libseccomp writes a test for every syscall
 * a profile names (~400 instructions for Docker's list), and the kernel converts, JITs and
 * caches the whole program again for every worker that loads it. The calls that a profile
 * decides by number alone fall into a few dozen runs of consecutive numbers, so they are
 * decided here by a binary search over those runs; libseccomp's own program still decides the
 * ABI and every rule that compares arguments, and each program is checked against libseccomp's
 * whole one by running both on every input at which either can change its answer. */
#include "isolate/seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the binary search over runs ---- */

/* Runs are calls too: run i starts at number runs[i].nr, and every number up to the next run's
 * start gets runs[i].action. */
static void
push_run(struct xmp_bpf_call *runs, size_t *n, uint32_t start, uint32_t action)
{
    if (*n > 0 && runs[*n - 1].action == action)
        return;
    runs[(*n)++] = (struct xmp_bpf_call){start, action};
}

static int
by_nr(const void *a, const void *b)
{
    const struct xmp_bpf_call *x = a, *y = b;
    return x->nr < y->nr ? -1 : x->nr > y->nr;
}

/* Instructions of the search over runs lo..hi: a jump whose target lies more than 255
 * instructions on (the most a conditional jump reaches) goes through an unconditional one. */
static size_t
tree_size(size_t lo, size_t hi)
{
    if (lo == hi)
        return 1;
    size_t mid = (lo + hi + 1) / 2, left = tree_size(lo, mid - 1);
    return 1 + (left > 255) + left + tree_size(mid, hi);
}

static void
tree_emit(const struct xmp_bpf_call *runs, size_t lo, size_t hi, struct sock_filter *p, size_t *k)
{
    if (lo == hi) {
        p[(*k)++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, runs[lo].action);
        return;
    }
    size_t mid = (lo + hi + 1) / 2, left = tree_size(lo, mid - 1);
    if (left > 255) {
        p[(*k)++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, runs[mid].nr, 0, 1);
        p[(*k)++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, (uint32_t)left);
    } else {
        p[(*k)++] =
            (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, runs[mid].nr, (uint8_t)left, 0);
    }
    tree_emit(runs, lo, mid - 1, p, k);
    tree_emit(runs, mid, hi, p, k);
}

int
xmp_bpf_compose(const struct xmp_scmp_filter *head, uint32_t sentinel, struct xmp_bpf_call *calls,
                size_t n, uint32_t def, struct xmp_scmp_filter *out, struct xmp_error *err)
{
    const struct sock_filter *h = head->insns;
    /* Each call starts at most two runs (the gap before it, itself), and the rest one more. */
    struct xmp_bpf_call *runs = calloc(2 * n + 1, sizeof(*runs));
    uint64_t next = 0;
    size_t n_runs = 0, len, k = 0;
    struct sock_filter *p;

    memset(out, 0, sizeof(*out));
    if (runs == NULL)
        return xmp_error_set(err, ENOMEM, "seccomp: filter");
    qsort(calls, n, sizeof(*calls), by_nr);
    for (size_t i = 0; i < n; i++) {
        if (calls[i].nr > next)
            push_run(runs, &n_runs, (uint32_t)next, def);
        push_run(runs, &n_runs, calls[i].nr, calls[i].action);
        next = (uint64_t)calls[i].nr + 1;
    }
    if (next <= UINT32_MAX)
        push_run(runs, &n_runs, (uint32_t)next, def);
    len = head->len + 1 + tree_size(0, n_runs - 1);
    if (len > BPF_MAXINSNS || (p = calloc(len, sizeof(*p))) == NULL) {
        free(runs);
        return xmp_error_set(err, len > BPF_MAXINSNS ? E2BIG : ENOMEM,
                             "seccomp: a filter of %zu instructions", len);
    }
    /* libseccomp's program for the ABI and the rules on arguments, whose answer for every
     * other call (the sentinel) becomes a jump to the search. */
    for (; k < head->len; k++) {
        p[k] = h[k];
        if (h[k].code == (BPF_RET | BPF_K) && h[k].k == sentinel)
            p[k] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, (uint32_t)(head->len - k - 1));
    }
    p[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0); /* seccomp_data.nr */
    tree_emit(runs, 0, n_runs - 1, p, &k);
    free(runs);
    out->insns = p;
    out->len = (unsigned short)k;
    return 0;
}

/* ---- running a program ---- */

/* seccomp_data as 32-bit words: nr, arch, ip (2), args (6 x 2, low word first). */
#define WORDS 16

/* A set of 32-bit values per word of seccomp_data: those tried (v, sorted) and those found
 * since (more, few: a round finds only what the last one's values led to). */
struct values {
    uint32_t *v, *more;
    size_t n, n_more, cap_more;
    uint32_t last_k, last_mask; /* the comparison last recorded, which most runs repeat */
    bool has_last, failed;
};

static void
push_value(struct values *s, uint32_t v)
{
    if (s->n_more == s->cap_more) {
        size_t cap = s->cap_more ? 2 * s->cap_more : 64;
        uint32_t *nv = realloc(s->more, cap * sizeof(*nv));
        if (nv == NULL) {
            s->failed = true;
            return;
        }
        s->more = nv;
        s->cap_more = cap;
    }
    s->more[s->n_more++] = v;
}

static int
by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void
add_value(struct values *s, uint32_t v)
{
    if (s->n > 0 && bsearch(&v, s->v, s->n, sizeof(v), by_value) != NULL)
        return;
    for (size_t i = 0; i < s->n_more; i++)
        if (s->more[i] == v)
            return;
    push_value(s, v);
}

/* Merges the waiting values in; true when any was new. */
static bool
merge(struct values *s)
{
    size_t n = s->n + s->n_more, u = 0;
    uint32_t *all;

    if (s->n_more == 0)
        return false;
    if ((all = realloc(s->v, n * sizeof(*all))) == NULL) {
        s->failed = true;
        return false;
    }
    memcpy(all + s->n, s->more, s->n_more * sizeof(*all));
    qsort(all, n, sizeof(*all), by_value);
    for (size_t i = 0; i < n; i++)
        if (u == 0 || all[i] != all[u - 1])
            all[u++] = all[i];
    s->v = all;
    s->n = u;
    s->n_more = 0;
    return true;
}

/* Runs f on d: 0 with its answer in *ret, or -1 for an instruction this does not know
 * (libseccomp writes loads, AND, jumps and returns). Each word it reads is marked in *read,
 * and each constant it compares a word with goes into that word's set, with its neighbours
 * (between two such values a comparison of the whole word cannot tell inputs apart) and, for a
 * masked word, the values that match the constant with every other bit set or clear; every
 * set holds each single bit too. */
static int
run(const struct xmp_scmp_filter *f, const uint32_t *d, uint32_t *ret, uint32_t *read,
    struct values *seen)
{
    const struct sock_filter *p = f->insns;
    uint32_t a = 0, mask = UINT32_MAX;
    int w = -1;

    for (size_t pc = 0; pc < f->len; pc++) {
        const struct sock_filter *i = &p[pc];
        bool taken;
        switch (i->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (i->k % 4 != 0 || i->k / 4 >= WORDS)
                return -1;
            w = (int)(i->k / 4);
            a = d[w];
            mask = UINT32_MAX;
            *read |= 1u << w;
            continue;
        case BPF_ALU | BPF_AND | BPF_K:
            a &= i->k;
            mask &= i->k;
            continue;
        case BPF_JMP | BPF_JA:
            pc += i->k;
            continue;
        case BPF_JMP | BPF_JEQ | BPF_K:
            taken = a == i->k;
            break;
        case BPF_JMP | BPF_JGT | BPF_K:
            taken = a > i->k;
            break;
        case BPF_JMP | BPF_JGE | BPF_K:
            taken = a >= i->k;
            break;
        case BPF_JMP | BPF_JSET | BPF_K:
            taken = (a & i->k) != 0;
            break;
        case BPF_RET | BPF_K:
            *ret = i->k;
            return 0;
        default:
            return -1;
        }
        /* The number's values are all there from the start. */
        struct values *s = w > 0 ? &seen[w] : NULL;
        if (s != NULL && !(s->has_last && s->last_k == i->k && s->last_mask == mask)) {
            s->has_last = true;
            s->last_k = i->k;
            s->last_mask = mask;
            add_value(s, i->k);
            add_value(s, i->k - 1);
            add_value(s, i->k + 1);
            if (mask != UINT32_MAX) {
                add_value(s, i->k | ~mask);
                add_value(s, ~i->k & mask);
            }
        }
        pc += taken ? i->jt : i->jf;
    }
    return -1;
}

/* ---- the check ---- */

static int
compare(const struct xmp_scmp_filter *a, const struct xmp_scmp_filter *b, const uint32_t *d,
        uint32_t *read, struct values *seen, char *why, size_t size)
{
    uint32_t ra = 0, rb = 0;

    if (run(a, d, &ra, read, seen) < 0 || run(b, d, &rb, read, seen) < 0) {
        snprintf(why, size, "an instruction the check does not know");
        return -1;
    }
    if (ra == rb)
        return 0;
    snprintf(why, size, "arch %#x, call %u, args[0] %#x%08x: %#x against %#x", d[1], d[0], d[5],
             d[4], ra, rb);
    return 1;
}

int
xmp_seccomp_differ(const struct xmp_scmp_filter *a, const struct xmp_scmp_filter *b, char *why,
                   size_t size)
{
    struct values seen[WORDS] = {0};
    bool grew = true, failed = false;
    int rc = 0;

    /* Numbers: every constant either program holds, so that the first round walks every path
     * of the binary searches instead of finding them a level per round. */
    for (int j = 0; j < 2; j++) {
        const struct xmp_scmp_filter *f = j ? b : a;
        const struct sock_filter *p = f->insns;
        for (size_t i = 0; i < f->len; i++)
            if (BPF_CLASS(p[i].code) == BPF_JMP && BPF_OP(p[i].code) != BPF_JA) {
                push_value(&seen[0], p[i].k);
                push_value(&seen[0], p[i].k - 1);
                push_value(&seen[0], p[i].k + 1);
            }
    }
    for (int w = 0; w < WORDS; w++) {
        push_value(&seen[w], 0);
        push_value(&seen[w], UINT32_MAX);
        for (int bit = 0; bit < 32; bit++)
            push_value(&seen[w], 1u << bit);
        merge(&seen[w]);
    }
    /* Every pair of arch and number that either program tells apart, and where either looks at
     * an argument (or the instruction pointer), that word across its values too, one word at a
     * time (xmprun's rules each compare one argument), until no run finds a value not yet
     * tried. */
    while (grew && rc == 0) {
        size_t n_arch = seen[1].n, n_nr = seen[0].n;
        for (size_t i = 0; i < n_arch && rc == 0; i++) {
            for (size_t j = 0; j < n_nr && rc == 0; j++) {
                uint32_t d[WORDS] = {seen[0].v[j], seen[1].v[i]}, read = 0;
                if ((rc = compare(a, b, d, &read, seen, why, size)) != 0 || (read >> 2) == 0)
                    continue;
                for (unsigned w = 2; w < WORDS && rc == 0; w++) {
                    size_t n_w = seen[w].n;
                    for (size_t x = 0; (read & (1u << w)) && x < n_w && rc == 0; x++) {
                        uint32_t e[WORDS] = {seen[0].v[j], seen[1].v[i]}, r2 = 0;
                        e[w] = seen[w].v[x];
                        rc = compare(a, b, e, &r2, seen, why, size);
                    }
                }
            }
        }
        grew = false;
        for (int w = 0; w < WORDS; w++) {
            grew |= merge(&seen[w]);
            failed |= seen[w].failed;
        }
        if (failed && rc == 0) {
            snprintf(why, size, "out of memory");
            rc = -1;
        }
    }
    for (int w = 0; w < WORDS; w++) {
        free(seen[w].v);
        free(seen[w].more);
    }
    return rc;
}
