/* libdw, loaded when the first stack is captured (see stacks_internal.h). */
#include "runner/report/stacks_internal.h"

#include "isolate/dynlib.h"

#define XMP_DW_DEFINE(f) __typeof__(xmp_dw_##f) xmp_dw_##f; /* as declared, before the names */
XMP_DW_FUNCS(XMP_DW_DEFINE)

#define XMP_DW_SYM(f) {#f, (void **)&xmp_dw_##f, false},
static const struct xmp_dynlib_sym syms[] = {XMP_DW_FUNCS(XMP_DW_SYM)};
static struct xmp_dynlib libdw = {"libdw.so.1", syms, sizeof(syms) / sizeof(syms[0]), 0, ""};

bool
xmp_stacks_dw_load(char *err, size_t size)
{
    return xmp_dynlib_load(&libdw, err, size);
}
