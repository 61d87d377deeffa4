/* Job spec v1 (SPEC.md section 1): parsing YAML with libyaml into typed structs, with
 * file:line:col diagnostics, --set overrides and the spec-less `-n N -- CMD` form. */
#ifndef XMP_SPEC_H
#define XMP_SPEC_H

#include "runner/spec/diag.h"
#include "runner/spec/quantity.h"
#include "runner/spec/spec_types.h"

#include <stddef.h>

/* Where a spec comes from. Exactly one of path and argv is set: path for `xmprun JOB.yaml`,
 * argv (with workers) for `xmprun -n N -- CMD ARGS`. sets are KEY=VALUE overrides from --set,
 * applied after the file and validated with the same rules and the same error quality. */
struct xmp_spec_source {
    const char *path;
    const char *text; /* optional: the file's contents already in memory (tests, fuzzing) */
    size_t text_len;
    char *const *argv; /* spec-less form: the command */
    size_t argc;
    long workers; /* -n N, or 0 when not given */
    char *const *sets;
    size_t n_sets;
    const char *cwd; /* for relative workdir; NULL = getcwd() */
};

/* Parses and validates. On success returns 0 and fills *out. On any error returns -1 with every
 * diagnostic (up to XMP_SPEC_MAX_ERRORS) in *diags and leaves *out empty. */
int xmp_spec_load(const struct xmp_spec_source *src, struct xmp_spec *out, struct xmp_diags *diags);
void xmp_spec_free(struct xmp_spec *spec);

#endif
