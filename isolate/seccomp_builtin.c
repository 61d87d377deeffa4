/* The built-in seccomp profiles as the build compiled them (isolate/tools/seccomp_gen.c writes
 * xmp_seccomp_builtins): a job copies one instead of compiling it with libseccomp again. Apart
 * from isolate/seccomp.c, which the generator links and which so cannot refer to its output. */
#include "isolate/seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>

int
xmp_seccomp_build_builtin(enum xmp_scmp_builtin which, struct xmp_scmp_filter *out,
                          struct xmp_error *err)
{
    const struct xmp_scmp_prog *p = &xmp_seccomp_builtins[which];
    size_t size = p->len * sizeof(struct sock_filter);

    memset(out, 0, sizeof(*out));
    if ((out->insns = malloc(size)) == NULL)
        return xmp_error_set(err, ENOMEM, "seccomp: filter");
    memcpy(out->insns, p->insns, size);
    out->len = p->len;
    return 0;
}
