/* libFuzzer target for the job spec parser: any byte string must give either a spec or
 * diagnostics, never a crash, a leak or undefined behaviour. */
#define _GNU_SOURCE /* memmem */
#include "runner/spec/spec.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Input after this line is taken as --set overrides, one KEY=VALUE per line, so that the
 * override path is fuzzed too. It is a YAML comment, so every seed and every input without it is
 * exactly a spec file. */
#define SET_SEPARATOR "\n#--set\n"
#define MAX_SETS      16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *sep = memmem(data, size, SET_SEPARATOR, strlen(SET_SEPARATOR));
    size_t text_len = sep != NULL ? (size_t)(sep - (const char *)data) : size;
    char *sets_buf = NULL;
    char *sets[MAX_SETS];
    size_t n_sets = 0;

    if (sep != NULL) {
        size_t off = text_len + strlen(SET_SEPARATOR);
        sets_buf = malloc(size - off + 1);
        if (sets_buf == NULL)
            return 0;
        memcpy(sets_buf, data + off, size - off);
        sets_buf[size - off] = '\0';
        for (char *line = sets_buf; line != NULL && n_sets < MAX_SETS;) {
            char *nl = strchr(line, '\n');
            if (nl != NULL)
                *nl = '\0';
            sets[n_sets++] = line;
            line = nl != NULL ? nl + 1 : NULL;
        }
    }

    /* The text is passed without a terminating NUL, as the bytes of a file would be; a fixed cwd
     * keeps workdir resolution away from getcwd() and the fuzzer's own directory. */
    struct xmp_spec_source src = {
        .path = "fuzz.yaml",
        .text = (const char *)data,
        .text_len = text_len,
        .sets = sets,
        .n_sets = n_sets,
        .cwd = "/",
    };
    struct xmp_spec spec;
    struct xmp_diags diags;

    memset(&spec, 0, sizeof(spec));
    memset(&diags, 0, sizeof(diags));
    /* A failed load leaves the spec empty (spec.h), so freeing it either way also checks that
     * nothing half-built is left behind in it. */
    (void)xmp_spec_load(&src, &spec, &diags);
    xmp_spec_free(&spec);
    free(sets_buf);
    return 0;
}
