/* Helpers shared by the spec parser tests: load in-memory YAML (with --set overrides) and check
 * the first diagnostic's file, line, column and text. */
#ifndef XMP_TEST_SPEC_HELPERS_H
#define XMP_TEST_SPEC_HELPERS_H

#include "runner/spec/spec.h"

#include <criterion/criterion.h>
#include <string.h>

#define BASE "version: 1\nname: a\ncommand: x\n"

static inline int
load_len(const char *yaml, size_t len, char *const *sets, size_t n_sets, struct xmp_spec *spec,
         struct xmp_diags *diags)
{
    struct xmp_spec_source src = {
        .path = "job.yaml",
        .text = yaml,
        .text_len = len,
        .sets = sets,
        .n_sets = n_sets,
        .cwd = "/",
    };

    return xmp_spec_load(&src, spec, diags);
}

static inline int
load_sets(const char *yaml, char *const *sets, size_t n_sets, struct xmp_spec *spec,
          struct xmp_diags *diags)
{
    return load_len(yaml, strlen(yaml), sets, n_sets, spec, diags);
}

static inline void
expect_first(const struct xmp_diags *d, const char *file, int line, int col, const char *msg)
{
    cr_assert(d->count > 0, "expected an error \"%s\", got none", msg);
    cr_expect_str_eq(d->items[0].file, file);
    cr_expect_str_eq(d->items[0].msg, msg);
    cr_expect_eq(d->items[0].line, line, "line %d, want %d (%s)", d->items[0].line, line, msg);
    cr_expect_eq(d->items[0].col, col, "col %d, want %d (%s)", d->items[0].col, col, msg);
}

#endif
