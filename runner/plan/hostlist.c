/* Slurm hostlist expansion ("gpu[01-04,07],login1", "rack[1-2]-n[01-02]"), for the master
 * address and the TPU host list of a multi-node job. */
#define _GNU_SOURCE
#include "runner/plan/hostlist.h"

#include "runner/util/strv.h"

#include "isolate/array.h"
#include "isolate/cleanup.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Slurm allocation holds at most a few tens of thousands of nodes; a bigger expansion is a typo
 * like "n[1-1000000000]" that would otherwise eat the machine's memory. */
#define HOSTLIST_MAX 65536

struct strv {
    char **v;
    size_t n;
    size_t cap;
};

static int
strv_push(struct strv *s, char *item, struct xmp_error *err)
{
    if (!xmp_array_reserve(s->v, s->cap, s->n + 2, 8)) {
        free(item);
        return xmp_error_set(err, errno, "realloc");
    }
    s->v[s->n++] = item;
    s->v[s->n] = NULL;
    return 0;
}

/* Parses one bound of a range: digits only, as Slurm does. */
static int
parse_bound(const char *text, size_t len, unsigned long *out)
{
    char buf[32];
    char *end = NULL;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)text[i]))
            return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    errno = 0;
    *out = strtoul(buf, &end, 10);
    return errno == 0 ? 0 : -1;
}

/* Expands one host expression (no top-level comma) with any number of bracket groups, the first
 * group varying slowest, as Slurm orders "rack[1-2]-n[01-02]": rack1-n01, rack1-n02, rack2-n01...
 */
static int
expand_one(const char *full, const char *prefix, const char *expr, size_t len, struct strv *out,
           struct xmp_error *err)
{
    const char *open = memchr(expr, '[', len);
    const char *close;
    const char *p;
    cleanup_free char *head = NULL;

    if (open == NULL) {
        char *host = NULL;

        if (memchr(expr, ']', len) != NULL)
            return xmp_error_set(err, 0, "hostlist \"%s\": ']' without '['", full);
        if (asprintf(&host, "%s%.*s", prefix, (int)len, expr) < 0)
            return xmp_error_set(err, ENOMEM, "asprintf");
        if (host[0] == '\0') {
            free(host);
            return xmp_error_set(err, 0, "hostlist \"%s\": empty host name", full);
        }
        if (out->n >= HOSTLIST_MAX) {
            free(host);
            return xmp_error_set(err, 0, "hostlist \"%s\": more than %d hosts", full, HOSTLIST_MAX);
        }
        return strv_push(out, host, err);
    }
    close = memchr(open, ']', len - (size_t)(open - expr));
    if (close == NULL)
        return xmp_error_set(err, 0, "hostlist \"%s\": '[' without ']'", full);
    if (memchr(open + 1, '[', (size_t)(close - open - 1)) != NULL)
        return xmp_error_set(err, 0, "hostlist \"%s\": nested '['", full);
    if (memchr(expr, ']', (size_t)(open - expr)) != NULL)
        return xmp_error_set(err, 0, "hostlist \"%s\": ']' without '['", full);
    if (close == open + 1)
        return xmp_error_set(err, 0, "hostlist \"%s\": empty brackets", full);
    if (asprintf(&head, "%s%.*s", prefix, (int)(open - expr), expr) < 0)
        return xmp_error_set(err, ENOMEM, "asprintf");

    p = open + 1;
    while (p < close) {
        const char *item_end = memchr(p, ',', (size_t)(close - p));
        const char *dash;
        unsigned long lo = 0, hi = 0;
        int width;

        if (item_end == NULL)
            item_end = close;
        dash = memchr(p, '-', (size_t)(item_end - p));
        if (parse_bound(p, (size_t)((dash ? dash : item_end) - p), &lo) < 0 ||
            (dash && parse_bound(dash + 1, (size_t)(item_end - dash - 1), &hi) < 0))
            return xmp_error_set(err, 0, "hostlist \"%s\": \"%.*s\" is not a number or a range",
                                 full, (int)(item_end - p), p);
        if (!dash)
            hi = lo;
        if (hi < lo)
            return xmp_error_set(err, 0, "hostlist \"%s\": range %lu-%lu is reversed", full, lo,
                                 hi);
        if (hi - lo >= HOSTLIST_MAX)
            return xmp_error_set(err, 0, "hostlist \"%s\": more than %d hosts", full, HOSTLIST_MAX);
        /* Zero padding follows the lower bound as written: [01-10] gives 01..10, [1-10] 1..10. */
        width = (int)((dash ? dash : item_end) - p);
        for (unsigned long v = lo; v <= hi; v++) {
            cleanup_free char *next = NULL;

            if (asprintf(&next, "%s%0*lu", head, width, v) < 0)
                return xmp_error_set(err, ENOMEM, "asprintf");
            if (expand_one(full, next, close + 1, len - (size_t)(close + 1 - expr), out, err) < 0)
                return -1;
        }
        p = item_end + 1;
        if (item_end < close && p == close)
            return xmp_error_set(err, 0, "hostlist \"%s\": trailing ',' in brackets", full);
    }
    return 0;
}

int
xmp_hostlist_expand(const char *text, char ***out, struct xmp_error *err)
{
    struct strv list = {0};
    const char *p = text;

    if (text == NULL || *text == '\0')
        return xmp_error_set(err, 0, "empty hostlist");
    while (*p != '\0') {
        const char *end = p;
        int depth = 0;

        /* Split at commas outside brackets only: "gpu[01-04,07],login1". */
        while (*end != '\0' && (depth > 0 || *end != ',')) {
            if (*end == '[')
                depth++;
            else if (*end == ']')
                depth--;
            end++;
        }
        if (end == p || expand_one(text, "", p, (size_t)(end - p), &list, err) < 0) {
            if (end == p)
                xmp_error_set(err, 0, "hostlist \"%s\": empty host name", text);
            xmp_strv_free(list.v);
            return -1;
        }
        p = *end == ',' ? end + 1 : end;
        if (*end == ',' && *p == '\0') {
            xmp_strv_free(list.v);
            return xmp_error_set(err, 0, "hostlist \"%s\": trailing ','", text);
        }
    }
    *out = list.v;
    return 0;
}

/* Slurm's per-node counts ("2(x3),1" for SLURM_STEP_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE):
 * node i's count, or -1 when the text is not such a list or has no node i. *max gets the largest
 * count and *uniform whether every node has the same one. */
long
xmp_slurm_count_at(const char *text, size_t index, long *max, bool *uniform)
{
    const char *p = text;
    size_t node = 0;
    long found = -1, first = -1;

    *max = -1;
    *uniform = true;
    while (*p != '\0') {
        char *end = NULL;
        long count, repeat = 1;

        if (!isdigit((unsigned char)*p))
            return -1;
        errno = 0;
        count = strtol(p, &end, 10);
        if (errno != 0)
            return -1;
        p = end;
        if (strncmp(p, "(x", 2) == 0) {
            if (!isdigit((unsigned char)p[2]))
                return -1;
            repeat = strtol(p + 2, &end, 10);
            if (errno != 0 || *end != ')' || repeat < 1)
                return -1;
            p = end + 1;
        }
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
        if (first < 0)
            first = count;
        *uniform = *uniform && count == first;
        if (count > *max)
            *max = count;
        if (index >= node && index - node < (size_t)repeat)
            found = count;
        node += (size_t)repeat;
    }
    return found;
}
