/* Internal to the spec parser: a positioned YAML node tree (built from libyaml events by
 * spec_tree.c) and the diagnostic collector. Not a public API; only spec*.c include it. */
#ifndef XMP_SPEC_TREE_H
#define XMP_SPEC_TREE_H

#include "runner/spec/diag.h"

#include <stdbool.h>
#include <stddef.h>

/* Alias expansion cap: the number of nodes that aliases may stand for in total. A real spec
 * uses a handful; "billion laughs" files reach it after a few lines. */
#define XMP_SPEC_MAX_ALIAS_NODES 100000
#define XMP_SPEC_MAX_DEPTH       256
/* Values, keys and containers in one spec. A real spec has hundreds; the cap bounds the memory
 * (about 100 MB) and time a hostile file of tiny nodes ("[x,x,x,...]") can take. */
#define XMP_SPEC_MAX_NODES 1000000
/* Diagnostics kept before sorting; beyond this they are only counted. */
#define XMP_SPEC_MAX_COLLECTED 1000

enum xmp_node_kind { XMP_NODE_SCALAR, XMP_NODE_SEQ, XMP_NODE_MAP };

struct xmp_node;

struct xmp_pair {
    struct xmp_node *key;
    struct xmp_node *value;
};

/* Nodes belong to their tree and may be shared (aliases make a DAG), so nothing is freed or
 * changed through a node; --set copies a mapping before changing it. */
struct xmp_node {
    enum xmp_node_kind kind;
    const char *file; /* owned by the tree or static */
    int line;         /* 1-based, 0 = no position */
    int col;
    bool
        quoted; /* scalar written quoted or as a block, or tagged !!str: a string, never a number */
    char *text; /* scalar, NUL-terminated; len may be shorter than strlen if it holds a NUL */
    size_t len;
    struct xmp_node **items; /* sequence */
    size_t n_items;
    struct xmp_pair *pairs; /* mapping */
    size_t n_pairs;
    size_t cap;
    size_t weight; /* nodes in this subtree with aliases expanded (saturating) */
};

struct xmp_arena_chunk;

struct xmp_tree {
    struct xmp_arena_chunk *chunks;
    size_t n_nodes;
};

struct xmp_sink_item {
    struct xmp_diag diag;
    size_t seq;
};

struct xmp_diag_sink {
    struct xmp_sink_item *items;
    size_t n;
    size_t cap;
    size_t dropped;
};

void xmp_sink_add(struct xmp_diag_sink *ds, const char *file, int line, int col, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
/* Sorts by position (the spec file before --set) and moves the first XMP_SPEC_MAX_ERRORS into
 * out; the rest are counted in out->dropped. Frees the sink. */
void xmp_sink_finish(struct xmp_diag_sink *ds, struct xmp_diags *out);

/* Allocation failures abort: a spec parser that half-works under memory pressure would report
 * wrong errors, and nothing has been created yet that would need cleaning up. */
void *xmp_xcalloc(size_t n, size_t size);
char *xmp_xstrdup(const char *s);

void xmp_tree_free(struct xmp_tree *t);
struct xmp_node *xmp_tree_new_node(struct xmp_tree *t, enum xmp_node_kind kind, const char *file,
                                   int line, int col);
struct xmp_node *xmp_tree_new_scalar(struct xmp_tree *t, const char *file, int line, int col,
                                     const char *text, size_t len, bool quoted);
void xmp_node_push_item(struct xmp_tree *t, struct xmp_node *seq, struct xmp_node *item);
void xmp_node_push_pair(struct xmp_tree *t, struct xmp_node *map, struct xmp_node *key,
                        struct xmp_node *value);
struct xmp_node *xmp_tree_clone_map(struct xmp_tree *t, const struct xmp_node *map);

bool xmp_node_is_null(const struct xmp_node *n);

/* Parses buf as one YAML document. Returns 0 with *root (NULL for an empty stream), or -1 after
 * adding diagnostics for a fatal problem. Non-fatal problems (duplicate keys) are added as
 * diagnostics with a 0 return. When fixed_line > 0 (a --set value), every position is on that
 * line, at col_base + column + 1, and key (the --set KEY, or NULL) prefixes syntax errors. */
int xmp_tree_parse(struct xmp_tree *t, struct xmp_diag_sink *ds, const char *file, const char *buf,
                   size_t len, int fixed_line, int col_base, const char *key,
                   struct xmp_node **root);

/* Specs are a few hundred bytes; the cap keeps a wrong path (a dataset, /dev/zero) from being
 * read into memory. Users see it in the "too large" error. */
#define XMP_SPEC_MAX_BYTES (16u << 20)
/* Reads a whole file (at most 16 MiB) for parsing; what ("spec") names it in the diagnostic
 * added to ds when it cannot be read. NULL then. */
char *xmp_spec_read_file(struct xmp_diag_sink *ds, const char *path, const char *what, size_t *len);

/* Optimal string alignment distance, for "did you mean" hints. */
size_t xmp_edit_distance(const char *a, const char *b);

/* The allocation helpers of spec_tree.c that its YAML reader (spec_tree_yaml.c) uses: abort on
 * exhaustion, as the tree's other allocations do; node memory from the tree's arena; a
 * saturating sum for the alias expansion's weight. */
void *xmp_tree_xmalloc(size_t n);
void *xmp_tree_xrealloc_array(void *p, size_t n, size_t size);
/* Says that the spec's reading ran out of memory, and aborts. */
_Noreturn void xmp_tree_out_of_memory(void);
void *xmp_tree_arena_alloc(struct xmp_tree *t, size_t size);
size_t xmp_tree_add_weight(size_t a, size_t b);

#endif
