/* The error context: formatting and wrapping of struct xmp_error messages. */
#include "isolate/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
xmp_error_set(struct xmp_error *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (err == NULL)
        return -1;
    err->errnum = errnum;
    va_start(ap, fmt);
    n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (errnum != 0 && n >= 0 && (size_t)n < sizeof(err->msg))
        snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", strerror(errnum));
    return -1;
}

int
xmp_error_wrap(struct xmp_error *err, const char *fmt, ...)
{
    char prefix[sizeof(err->msg)];
    char old[sizeof(err->msg)];
    va_list ap;

    if (err == NULL)
        return -1;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    /* Truncation is accepted (the innermost context is cut); testing the result also keeps
     * GCC's -Wformat-truncation quiet under -Werror. */
    if (snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old) < 0)
        err->msg[0] = '\0';
    return -1;
}

void
xmp_error_clear(struct xmp_error *err)
{
    if (err == NULL)
        return;
    err->errnum = 0;
    err->msg[0] = '\0';
}
