/* A failed worker's own words on its failure, found in what it left: its error file and its
 * stderr tail. */
#ifndef XMP_WORDS_H
#define XMP_WORDS_H

#include "runner/report/report.h"

#include <stdbool.h>

/* The message of a torchelastic error file ({"message": {"message": "RuntimeError: ..."}}, or
 * a plain string message): the exception that ended the process, or NULL. */
const char *xmp_words_error_file(const struct xmp_worker_report *w);

/* Whether line is the last line of a Python traceback: "ModuleNotFoundError: No module named
 * 'x'", "torch.OutOfMemoryError: ...", "KeyboardInterrupt" (a dotted name ending in Error,
 * Exception, Interrupt or Exit, alone or before ": "). */
bool xmp_words_is_exception(const char *line);

/* The zygote's own words in its stderr tail: its last exception line (exception set), else its
 * last line that is not blank; NULL when it wrote nothing. */
const char *xmp_words_tail(const struct xmp_worker_report *z, bool *exception);

/* What the worker said of an exit with a failing status: its error file's message, else the
 * newest line of its stderr tail that ends a Python traceback or that is the shell's or
 * Python's complaint about the command for the status (127, 126, 2); NULL when neither. */
const char *xmp_words_own(const struct xmp_worker_report *w);

#endif
