/* Scope-bound cleanup (GNU cleanup attribute), after crun's cleanup_freep/cleanup_closep and
 * bubblewrap's steal_pointer. Initialise every such variable where it is declared. */
#ifndef XMP_CLEANUP_H
#define XMP_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void
xmp_freep(void *p)
{
    free(*(void **)p);
}

static inline void
xmp_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

static inline void
xmp_fclosep(FILE **f)
{
    if (*f != NULL) {
        int saved = errno;
        fclose(*f);
        errno = saved;
    }
}

#define cleanup_free   __attribute__((cleanup(xmp_freep)))
#define cleanup_close  __attribute__((cleanup(xmp_closep)))
#define cleanup_fclose __attribute__((cleanup(xmp_fclosep)))

static inline int
steal_fd(int *fd)
{
    int ret = *fd;
    *fd = -1;
    return ret;
}

static inline void *
xmp_steal_pointer(void *pp)
{
    void **p = (void **)pp;
    void *ret = *p;
    *p = NULL;
    return ret;
}

/* Type-checked: the result has the pointee type of pp, as bubblewrap's steal_pointer. */
#define steal_pointer(pp) ((__typeof__(*(pp)))xmp_steal_pointer(pp))

#endif
