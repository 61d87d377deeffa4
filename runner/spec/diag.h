/* Diagnostics of a spec or profile file: "file:line:col: message", collected up to a limit. */
#ifndef XMP_DIAG_H
#define XMP_DIAG_H

#include <stddef.h>

#define XMP_SPEC_MAX_ERRORS 20

/* One diagnostic: "file:line:col: message". line/col are 1-based; 0 when there is no position
 * (e.g. an unreadable file). For --set overrides, file is "--set" and col points into the
 * KEY=VALUE text. */
struct xmp_diag {
    char file[256];
    int line;
    int col;
    char msg[512];
};

struct xmp_diags {
    struct xmp_diag items[XMP_SPEC_MAX_ERRORS];
    size_t count;   /* stored items */
    size_t dropped; /* errors beyond XMP_SPEC_MAX_ERRORS */
};

#endif
