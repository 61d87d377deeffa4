/* Compiles the built-in seccomp profiles (`default`, `strict`) with libseccomp at build time and
 * writes them as C arrays of classic BPF, so that a job does not compile them again at every
 * start (1.4 ms of a launch). A program that disagrees with libseccomp's fails the build.
 * The compiler is isolate/seccomp.c's, the one user profiles go through at run time.
 *
 *   seccomp_gen OUT.c */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/seccomp.h"

#include <linux/filter.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
emit(FILE *f, const char *name, enum xmp_scmp_builtin which)
{
    struct xmp_scmp_filter prog;
    struct xmp_error err = {0};

    if (xmp_seccomp_compile_builtin(which, &prog, &err) < 0) {
        fprintf(stderr, "seccomp_gen: %s: %s\n", name, err.msg);
        return -1;
    }
    const struct sock_filter *in = prog.insns;
    fprintf(f, "static const struct sock_filter %s[%u] = {\n", name, prog.len);
    for (unsigned i = 0; i < prog.len; i++)
        fprintf(f, "    {0x%04x, %u, %u, 0x%08x},\n", in[i].code, in[i].jt, in[i].jf, in[i].k);
    fprintf(f, "};\n\n");
    xmp_seccomp_filter_free(&prog);
    return 0;
}

int
main(int argc, char **argv)
{
    const struct scmp_version *v = seccomp_version();
    char tmp[4096];
    FILE *f;

    if (argc != 2 || snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]) >= (int)sizeof(tmp)) {
        fprintf(stderr, "usage: seccomp_gen OUT.c\n");
        return 2;
    }
    if ((f = fopen(tmp, "w")) == NULL) {
        perror(tmp);
        return 1;
    }
    fprintf(f,
            "/* Generated at build time by isolate/tools/seccomp_gen.c with libseccomp %u.%u.%u: "
            "do not edit. */\n#include \"isolate/seccomp.h\"\n\n#include <linux/filter.h>\n\n",
            v->major, v->minor, v->micro);
    if (emit(f, "default_prog", XMP_SCMP_DEFAULT) < 0 ||
        emit(f, "strict_prog", XMP_SCMP_STRICT) < 0)
        return 1;
    fprintf(f, "const struct xmp_scmp_prog xmp_seccomp_builtins[2] = {\n"
               "    [XMP_SCMP_DEFAULT] = {default_prog, sizeof(default_prog) / "
               "sizeof(default_prog[0])},\n"
               "    [XMP_SCMP_STRICT] = {strict_prog, sizeof(strict_prog) / "
               "sizeof(strict_prog[0])},\n};\n");
    if (fclose(f) != 0 || rename(tmp, argv[1]) < 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
