/* Validation of a spec tree into struct xmp_spec: the known keys at each level, the typed checks
 * of each field, cross-field rules and defaults (spec_validate.c). */
#ifndef XMP_SPEC_VALIDATE_H
#define XMP_SPEC_VALIDATE_H

#include "runner/spec/spec_check.h"
#include "runner/spec/spec_types.h"

#include <stdbool.h>
#include <stddef.h>

/* The keys the spec knows, as a tree: validation reports unknown keys with it, and --set
 * resolves its KEY paths with it. */
extern const struct xmp_keydef xmp_spec_keys[];
extern const size_t xmp_spec_n_keys;

/* Validates a spec tree whose root is a mapping into *s (defaults first); relative paths are
 * resolved against cwd. */
void xmp_spec_validate(struct xmp_check *c, const struct xmp_node *root, const char *cwd,
                       struct xmp_spec *s);

/* True for the variables xmprun sets per worker (RANK, WORLD_SIZE, MASTER_ADDR, ...), which a
 * spec's env may not set. */
bool xmp_spec_env_reserved(const char *name);

#endif
