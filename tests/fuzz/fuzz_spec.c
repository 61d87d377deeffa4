/* libFuzzer target for the job spec parser: any byte string must give either a spec or
 * diagnostics, never a crash, a leak or undefined behaviour. */
#include "runner/spec.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The source is read-only input, so the text is passed as is; a fixed cwd keeps workdir
     * resolution away from getcwd() and the fuzzer's own directory. */
    struct xmp_spec_source src = {
        .path = "fuzz.yaml",
        .text = (const char *)data,
        .text_len = size,
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
    return 0;
}
