/* A library loaded when first needed rather than linked (libsystemd for the systemd scope,
 * elfutils' libdw for stacks, NVML for GPU memory): most runs never need it, and linking it would
 * load it, and what it depends on, at every start. Loaded once per process, by whichever thread
 * asks first; its functions are looked up into the pointers the caller names. */
#ifndef XMP_DYNLIB_H
#define XMP_DYNLIB_H

#include <stdbool.h>
#include <stddef.h>

struct xmp_dynlib_sym {
    const char *name;
    void **slot;   /* where its address goes */
    bool optional; /* its absence does not fail the load (the caller checks its slot) */
};

struct xmp_dynlib {
    const char *name;                  /* the soname ("libdw.so.1"), or a path */
    const struct xmp_dynlib_sym *syms; /* looked up in order */
    size_t n_syms;
    /* The loader's: */
    int state; /* 0: not tried, 1: loaded, -1: failed (why says why) */
    char why[256];
};

/* Loads lib the first time (every later call, from any thread, gives the first one's result);
 * false, with why in err, when it cannot be loaded or lacks a function it must have. */
bool xmp_dynlib_load(struct xmp_dynlib *lib, char *err, size_t size);

#endif
