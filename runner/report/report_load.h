/* A saved exit report read back into the struct the live run fills, so that `xmprun report`
 * prints it with the very code a live run prints its summary with (xmp_report_print_summary). */
#ifndef XMP_REPORT_LOAD_H
#define XMP_REPORT_LOAD_H

#include "isolate/error.h"
#include "runner/report/report.h"

#include <jansson.h>

struct xmp_report_file {
    json_t *doc;                     /* the parsed file; the report's strings point into it */
    struct xmp_report report;        /* what the summary needs: job, outcome, root cause, workers */
    const char **devices;            /* one NULL-terminated list per worker, end to end */
    struct xmp_worker_report zygote; /* start: fork: report.zygote points here */
};

/* Reads and checks path (JSON whose schema is "xmprun.report/v1"); fields a summary does not
 * need may be missing. Returns 0, or -1 with err saying what is wrong with the file. */
int xmp_report_load(const char *path, struct xmp_report_file *f, struct xmp_error *err);

void xmp_report_file_free(struct xmp_report_file *f);

#endif
