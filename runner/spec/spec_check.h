/* Internal to the spec parser: typed checks of single values. Each takes the node, its key path
 * for the message ("resources.worker.memory") and reports its own diagnostic. */
#ifndef XMP_SPEC_CHECK_H
#define XMP_SPEC_CHECK_H

#include "runner/spec/spec_tree.h"

#include <stdbool.h>
#include <stdint.h>

/* cpu_set_t holds CPU_SETSIZE (1024) CPUs; a larger CPU number could not be applied. */
#define XMP_MAX_CPUS 1024

struct xmp_keydef;
struct xmp_check {
    struct xmp_diag_sink *ds;
    bool profile; /* checking a seccomp profile: no hints from the spec's keys */
    /* All the spec's keys, for "did you mean" hints at another level (xmp_spec_keys). */
    const struct xmp_keydef *spec_keys;
    size_t n_spec_keys;
};

/* The keys the spec knows, as a tree: validation reports unknown keys with it, and --set
 * resolves its KEY paths with it. */
struct xmp_keydef {
    const char *name;
    const struct xmp_keydef *sub; /* known keys of a mapping value, or NULL for a leaf */
    size_t n_sub;
    bool any_keys; /* env: a mapping of free-form names */
};

const struct xmp_keydef *xmp_find_key(const struct xmp_keydef *keys, size_t n, const char *name,
                                      size_t *index);
/* "PATH: unknown key", with a "did you mean" hint among keys when one is close, else the path
 * of a key of that name elsewhere in root (the spec's keys). */
void xmp_unknown_key(struct xmp_diag_sink *ds, const char *file, int line, int col,
                     const char *path, const char *word, const struct xmp_keydef *keys, size_t n,
                     const struct xmp_keydef *root, size_t n_root);
/* buf = prefix.key (or key at the top), with key clipped for a message. */
void xmp_join_path(char *buf, size_t size, const char *prefix, const char *key);

/* Checks that node is a mapping of known keys and fills vals[i] with the value of keys[i]
 * (NULL when absent). Returns false when node is not a mapping. */
bool xmp_check_map(struct xmp_check *c, const struct xmp_node *node, const char *path,
                   const struct xmp_keydef *keys, size_t n, const struct xmp_node **vals);

void xmp_check_error(struct xmp_check *c, const struct xmp_node *n, const char *path,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* text made safe to quote in a message (no quotes or control characters, at most ~60 chars). */
void xmp_clip(const char *text, char *buf, size_t size);
/* "a mapping", "a list", "null", "\"text\"" or "the string \"text\"" (quoted in the YAML). */
void xmp_describe(const struct xmp_node *n, char *buf, size_t size);
/* The closest of names to word, or NULL when none is close enough to be a likely typo. */
const char *xmp_suggest(const char *word, const char *const *names, size_t n);

bool xmp_check_int(struct xmp_check *c, const struct xmp_node *n, const char *path, long min,
                   long max, bool allow_auto, long auto_value, long *out);
bool xmp_check_bool(struct xmp_check *c, const struct xmp_node *n, const char *path, bool *out);
bool xmp_check_enum(struct xmp_check *c, const struct xmp_node *n, const char *path,
                    const char *const *names, size_t count, int *out);
/* Any non-null scalar, numbers and booleans as written. *out points into the node. */
bool xmp_check_string(struct xmp_check *c, const struct xmp_node *n, const char *path,
                      bool allow_empty, const char **out);
bool xmp_check_memory(struct xmp_check *c, const struct xmp_node *n, const char *path,
                      bool allow_zero, int64_t *out);
bool xmp_check_cpus(struct xmp_check *c, const struct xmp_node *n, const char *path, int64_t *out);
bool xmp_check_duration(struct xmp_check *c, const struct xmp_node *n, const char *path,
                        int64_t *out);
/* A Linux CPU list ("0-7,16") with ascending ranges; the caller handles auto and none. */
bool xmp_check_cpulist(struct xmp_check *c, const struct xmp_node *n, const char *path);

#endif
