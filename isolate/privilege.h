/* What the kernel grants this process, as opposed to what its uid says: uid 0 in a user
 * namespace (rootless Podman, Apptainer's fakeroot, `unshare --user --map-root-user`) may not
 * write the host's cgroups nor load a BPF device program, and a process without uid 0 may hold
 * the capabilities that allow both. */
#ifndef XMP_PRIVILEGE_H
#define XMP_PRIVILEGE_H

#include <stdbool.h>

/* True when this process runs in the initial user namespace (its /proc/self/uid_map maps the
 * whole range onto itself). */
bool xmp_priv_initial_userns(void);

/* True when the capability (CAP_SYS_ADMIN, ...) is in this process's effective set. */
bool xmp_priv_has_cap(int cap);

/* CAP_SYS_ADMIN in the initial user namespace: what loading and attaching a BPF device program
 * needs. */
bool xmp_priv_admin(void);

/* "Root" as the cgroup layer needs it: xmp_priv_admin, and CAP_DAC_OVERRIDE over root's cgroup
 * files. */
bool xmp_priv_root(void);

#endif
