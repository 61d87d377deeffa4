/* libdw, loaded when the first stack is captured (see stacks_internal.h). */
#include "runner/report/stacks_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define XMP_DW_DEFINE(f) __typeof__(xmp_dw_##f) xmp_dw_##f; /* as declared, before the names */
XMP_DW_FUNCS(XMP_DW_DEFINE)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;
static char why[256]; /* why not */

static void
load(void)
{
    void *lib = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL) {
        snprintf(why, sizeof(why), "elfutils' libdw cannot be loaded: %s", dlerror());
        return;
    }
#define XMP_DW_LOAD(f)                                                                             \
    if ((*(void **)&xmp_dw_##f = dlsym(lib, #f)) == NULL) {                                        \
        snprintf(why, sizeof(why), "libdw.so.1 has no %s", #f);                                    \
        return;                                                                                    \
    }
    XMP_DW_FUNCS(XMP_DW_LOAD)
    loaded = true;
}

bool
xmp_stacks_dw_load(char *err, size_t size)
{
    pthread_once(&once, load);
    if (!loaded)
        snprintf(err, size, "%s", why);
    return loaded;
}
