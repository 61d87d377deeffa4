/* Internal to the stack capture (stacks.c: threads, ptrace, native frames; stacks_python.c: the
 * CPython frames; stacks_text.c: words, text and JSON). */
#ifndef XMP_STACKS_INTERNAL_H
#define XMP_STACKS_INTERNAL_H

#include "runner/report/stacks.h"

#include <elfutils/libdwfl.h>

/* Most frames kept per thread and stack. */
#define XMP_STACKS_MAX_FRAMES 64

int64_t xmp_stacks_now_ns(void);

/* Fills the Python frames of p's threads when the process (reported in dwfl, every thread
 * stopped) is a CPython 3.11 or 3.12; sets p->python. Gives up at deadline_ns. */
void xmp_stacks_python(Dwfl *dwfl, struct xmp_stack_proc *p, int64_t deadline_ns);

#endif
