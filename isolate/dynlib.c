/* Libraries loaded at run time, once (isolate/dynlib.h). */
#include "isolate/dynlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* One lock for every library: a load happens a few times in a process's life. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void
load(struct xmp_dynlib *lib)
{
    void *handle = dlopen(lib->name, RTLD_NOW | RTLD_LOCAL);

    if (handle == NULL) {
        snprintf(lib->why, sizeof(lib->why), "%s cannot be loaded: %s", lib->name, dlerror());
        lib->state = -1;
        return;
    }
    for (size_t i = 0; i < lib->n_syms; i++) {
        *lib->syms[i].slot = dlsym(handle, lib->syms[i].name);
        if (*lib->syms[i].slot == NULL && !lib->syms[i].optional) {
            snprintf(lib->why, sizeof(lib->why), "%s has no %s", lib->name, lib->syms[i].name);
            lib->state = -1;
            /* The library stays loaded: a pointer into it may have been handed out already. */
            return;
        }
    }
    lib->state = 1;
}

bool
xmp_dynlib_load(struct xmp_dynlib *lib, char *err, size_t size)
{
    bool ok;

    pthread_mutex_lock(&lock);
    if (lib->state == 0)
        load(lib);
    ok = lib->state == 1;
    if (!ok && err != NULL)
        snprintf(err, size, "%s", lib->why);
    pthread_mutex_unlock(&lock);
    return ok;
}
