/* The positioned node tree of a spec or profile file (nodes, pairs, the arena they live in, the
 * null test, edit distance for hints) and the diagnostic collector shared by the spec parser.
 * The YAML reader that builds the tree is spec_tree_yaml.c. */
#include "runner/spec/spec_tree.h"

#include "isolate/array.h"
#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

void *
xmp_tree_xmalloc(size_t n)
{
    void *p = malloc(n == 0 ? 1 : n);
    if (p == NULL) {
        fputs("xmprun: out of memory while reading the spec\n", stderr);
        abort();
    }
    return p;
}

_Noreturn void
xmp_tree_out_of_memory(void)
{
    fputs("xmprun: out of memory while reading the spec\n", stderr);
    abort();
}

void *
xmp_tree_xrealloc_array(void *p, size_t n, size_t size)
{
    if (n != 0 && size > SIZE_MAX / n)
        abort();
    p = realloc(p, n * size == 0 ? 1 : n * size);
    if (p == NULL)
        xmp_tree_out_of_memory();
    return p;
}

void *
xmp_xcalloc(size_t n, size_t size)
{
    void *p = xmp_tree_xrealloc_array(NULL, n, size);

    memset(p, 0, n * size);
    return p;
}

char *
xmp_xstrdup(const char *s)
{
    size_t len = strlen(s);
    char *copy = xmp_tree_xmalloc(len + 1);

    memcpy(copy, s, len + 1);
    return copy;
}

/* ---- diagnostics ---- */

void
xmp_sink_add(struct xmp_diag_sink *ds, const char *file, int line, int col, const char *fmt, ...)
{
    struct xmp_diag *d;
    va_list ap;

    if (ds->n >= XMP_SPEC_MAX_COLLECTED) {
        ds->dropped++;
        return;
    }
    if (!xmp_array_reserve(ds->items, ds->cap, ds->n + 1, 16))
        xmp_tree_out_of_memory();
    ds->items[ds->n].seq = ds->n;
    d = &ds->items[ds->n].diag;
    memset(d, 0, sizeof(*d));
    snprintf(d->file, sizeof(d->file), "%s", file);
    d->line = line;
    d->col = col;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
    va_end(ap);
    ds->n++;
}

/* Position order, the spec file before --set, and otherwise the order found. */
static int
compare_diags(const void *a, const void *b)
{
    const struct xmp_sink_item *ia = a, *ib = b;
    const struct xmp_diag *da = &ia->diag, *db = &ib->diag;
    int ra = strcmp(da->file, "--set") == 0, rb = strcmp(db->file, "--set") == 0;

    if (ra != rb)
        return ra - rb;
    if (da->line != db->line)
        return da->line < db->line ? -1 : 1;
    if (da->col != db->col)
        return da->col < db->col ? -1 : 1;
    return ia->seq < ib->seq ? -1 : ia->seq > ib->seq;
}

void
xmp_sink_finish(struct xmp_diag_sink *ds, struct xmp_diags *out)
{
    memset(out, 0, sizeof(*out));
    if (ds->n > 1)
        qsort(ds->items, ds->n, sizeof(*ds->items), compare_diags);
    for (size_t i = 0; i < ds->n; i++) {
        if (out->count < XMP_SPEC_MAX_ERRORS)
            out->items[out->count++] = ds->items[i].diag;
        else
            out->dropped++;
    }
    out->dropped += ds->dropped;
    free(ds->items);
    memset(ds, 0, sizeof(*ds));
}

/* ---- tree ---- */

/* Nodes, scalar text and child arrays all come from one bump arena that is freed at once: a
 * 10 MB spec holds up to a million nodes, and a malloc each made parsing several times slower
 * than libyaml itself. A growing child array leaves its old copy behind, at most doubling the
 * space it takes. */
struct xmp_arena_chunk {
    struct xmp_arena_chunk *next;
    size_t used;
    size_t cap;
    max_align_t data[];
};

void *
xmp_tree_arena_alloc(struct xmp_tree *t, size_t size)
{
    struct xmp_arena_chunk *c = t->chunks;
    size_t need = (size + 15) & ~(size_t)15;

    if (need < size)
        abort();
    if (c == NULL || c->cap - c->used < need) {
        size_t cap = c == NULL ? 16384 : c->cap * 2;
        if (cap > (1u << 20))
            cap = 1u << 20;
        if (cap < need)
            cap = need;
        c = xmp_tree_xmalloc(sizeof(*c) + cap);
        c->used = 0;
        c->cap = cap;
        c->next = t->chunks;
        t->chunks = c;
    }
    c->used += need;
    return (char *)c->data + c->used - need;
}

static void *
arena_grow(struct xmp_tree *t, void *old, size_t n, size_t *cap, size_t size)
{
    size_t new_cap = *cap ? *cap * 2 : 4;
    void *p;

    if (new_cap > SIZE_MAX / size)
        abort();
    p = xmp_tree_arena_alloc(t, new_cap * size);
    if (n > 0)
        memcpy(p, old, n * size);
    *cap = new_cap;
    return p;
}

void
xmp_tree_free(struct xmp_tree *t)
{
    while (t->chunks != NULL) {
        struct xmp_arena_chunk *next = t->chunks->next;
        free(t->chunks);
        t->chunks = next;
    }
    memset(t, 0, sizeof(*t));
}

struct xmp_node *
xmp_tree_new_node(struct xmp_tree *t, enum xmp_node_kind kind, const char *file, int line, int col)
{
    struct xmp_node *n = xmp_tree_arena_alloc(t, sizeof(*n));

    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->file = file;
    n->line = line;
    n->col = col;
    n->weight = 1;
    t->n_nodes++;
    return n;
}

struct xmp_node *
xmp_tree_new_scalar(struct xmp_tree *t, const char *file, int line, int col, const char *text,
                    size_t len, bool quoted)
{
    struct xmp_node *n = xmp_tree_new_node(t, XMP_NODE_SCALAR, file, line, col);

    if (len == SIZE_MAX)
        abort();
    n->text = xmp_tree_arena_alloc(t, len + 1);
    memcpy(n->text, text, len);
    n->text[len] = '\0';
    n->len = len;
    n->quoted = quoted;
    return n;
}

size_t
xmp_tree_add_weight(size_t a, size_t b)
{
    return a > SIZE_MAX / 4 - b ? SIZE_MAX / 4 : a + b;
}

void
xmp_node_push_item(struct xmp_tree *t, struct xmp_node *seq, struct xmp_node *item)
{
    if (seq->n_items == seq->cap)
        seq->items = arena_grow(t, seq->items, seq->n_items, &seq->cap, sizeof(*seq->items));
    seq->items[seq->n_items++] = item;
    seq->weight = xmp_tree_add_weight(seq->weight, item->weight);
}

void
xmp_node_push_pair(struct xmp_tree *t, struct xmp_node *map, struct xmp_node *key,
                   struct xmp_node *value)
{
    if (map->n_pairs == map->cap)
        map->pairs = arena_grow(t, map->pairs, map->n_pairs, &map->cap, sizeof(*map->pairs));
    map->pairs[map->n_pairs].key = key;
    map->pairs[map->n_pairs].value = value;
    map->n_pairs++;
    map->weight = xmp_tree_add_weight(map->weight, xmp_tree_add_weight(key->weight, value->weight));
}

struct xmp_node *
xmp_tree_clone_map(struct xmp_tree *t, const struct xmp_node *map)
{
    struct xmp_node *c = xmp_tree_new_node(t, XMP_NODE_MAP, map->file, map->line, map->col);

    for (size_t i = 0; i < map->n_pairs; i++)
        xmp_node_push_pair(t, c, map->pairs[i].key, map->pairs[i].value);
    return c;
}

bool
xmp_node_is_null(const struct xmp_node *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};

    if (n->kind != XMP_NODE_SCALAR || n->quoted)
        return false;
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
        if (strcmp(n->text, nulls[i]) == 0)
            return true;
    return false;
}

size_t
xmp_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[33][33];

    if (la > 32 || lb > 32)
        return SIZE_MAX;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}
