/* One error context type for every fallible call: an errno and a message that each layer
 * prefixes with its own context. Only runner/main.c prints it. */
#ifndef XMP_ERROR_H
#define XMP_ERROR_H

struct xmp_error {
    int errnum;
    char msg[512];
};

/* Sets the message (and errnum; 0 if there is no errno to report, in which case no strerror
 * text is appended). Always returns -1 so that callers can `return xmp_error_set(...)`. */
int xmp_error_set(struct xmp_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "fmt: " to the message already in err. Always returns -1. */
int xmp_error_wrap(struct xmp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears err, after a tolerated failure. */
void xmp_error_clear(struct xmp_error *err);

#endif
