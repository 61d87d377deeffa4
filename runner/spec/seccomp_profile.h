/* A seccomp profile file (SPEC.md section 7), read with the spec's YAML tree and checks. */
#ifndef XMP_SECCOMP_PROFILE_H
#define XMP_SECCOMP_PROFILE_H

#include "isolate/seccomp.h"
#include "runner/spec/spec_check.h"

/* Reads and validates the seccomp profile file at path (named by the spec's node at) into *out;
 * its problems are reported at their own file:line:col. */
void xmp_seccomp_profile_check(struct xmp_check *c, const struct xmp_node *at, const char *path,
                               struct xmp_scmp_profile *out);

#endif
