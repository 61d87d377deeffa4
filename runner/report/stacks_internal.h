/* Internal to the stack capture (stacks.c: threads, ptrace, native frames; stacks_python.c: the
 * CPython frames; stacks_text.c: words, text and JSON). */
#ifndef XMP_STACKS_INTERNAL_H
#define XMP_STACKS_INTERNAL_H

#include "runner/report/stacks.h"

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stddef.h>

/* libdw is loaded by the first capture (xmp_stacks_dw_load), not linked: with what it needs
 * (libelf, libz, libbz2, liblzma, libzstd) it would be loaded at every start of xmprun, for the
 * few jobs that stop a worker. Each function is called through a pointer of its own type, under
 * its own name. */
#define XMP_DW_FUNCS(X)                                                                            \
    X(dwfl_addrmodule)                                                                             \
    X(dwfl_attach_state)                                                                           \
    X(dwfl_begin)                                                                                  \
    X(dwfl_build_id_find_debuginfo)                                                                \
    X(dwfl_end)                                                                                    \
    X(dwfl_errmsg)                                                                                 \
    X(dwfl_frame_pc)                                                                               \
    X(dwfl_getmodules)                                                                             \
    X(dwfl_getthread_frames)                                                                       \
    X(dwfl_linux_proc_attach)                                                                      \
    X(dwfl_linux_proc_find_elf)                                                                    \
    X(dwfl_module_addrinfo)                                                                        \
    X(dwfl_module_getsym_info)                                                                     \
    X(dwfl_module_getsymtab)                                                                       \
    X(dwfl_module_info)                                                                            \
    X(dwfl_report_end)                                                                             \
    X(dwfl_report_module)                                                                          \
    X(dwfl_thread_state_registers)                                                                 \
    X(elf_begin)                                                                                   \
    X(elf_end)
#define XMP_DW_DECLARE(f) extern __typeof__(f) *xmp_dw_##f;
XMP_DW_FUNCS(XMP_DW_DECLARE)
#define dwfl_addrmodule              xmp_dw_dwfl_addrmodule
#define dwfl_attach_state            xmp_dw_dwfl_attach_state
#define dwfl_begin                   xmp_dw_dwfl_begin
#define dwfl_build_id_find_debuginfo xmp_dw_dwfl_build_id_find_debuginfo
#define dwfl_end                     xmp_dw_dwfl_end
#define dwfl_errmsg                  xmp_dw_dwfl_errmsg
#define dwfl_frame_pc                xmp_dw_dwfl_frame_pc
#define dwfl_getmodules              xmp_dw_dwfl_getmodules
#define dwfl_getthread_frames        xmp_dw_dwfl_getthread_frames
#define dwfl_linux_proc_attach       xmp_dw_dwfl_linux_proc_attach
#define dwfl_linux_proc_find_elf     xmp_dw_dwfl_linux_proc_find_elf
#define dwfl_module_addrinfo         xmp_dw_dwfl_module_addrinfo
#define dwfl_module_getsym_info      xmp_dw_dwfl_module_getsym_info
#define dwfl_module_getsymtab        xmp_dw_dwfl_module_getsymtab
#define dwfl_module_info             xmp_dw_dwfl_module_info
#define dwfl_report_end              xmp_dw_dwfl_report_end
#define dwfl_report_module           xmp_dw_dwfl_report_module
#define dwfl_thread_state_registers  xmp_dw_dwfl_thread_state_registers
#define elf_begin                    xmp_dw_elf_begin
#define elf_end                      xmp_dw_elf_end

/* Loads libdw once (any thread); false, with why in err, when it cannot be. */
bool xmp_stacks_dw_load(char *err, size_t size);

/* A capture thread's module files: kept open from begin to end for every process it reads (a
 * job's workers map the same few), in the thread's own cache (libelf's descriptors are not shared
 * between threads). */
void xmp_stacks_dw_thread_begin(void);
void xmp_stacks_dw_thread_end(void);

/* p's modules (its /proc maps and their files), read into a libdwfl session that callbacks
 * (the caller's, until dwfl_end) serve: none of it needs p stopped. NULL, with why in p->error,
 * when they cannot be read. */
Dwfl *xmp_stacks_dw_report(struct xmp_stack_proc *p, Dwfl_Callbacks *callbacks);

/* Once every thread of p that could be is stopped (stopped[i]; seized[i]: asked to): the Python
 * frames, then the native ones, until deadline_ns. */
void xmp_stacks_dw_unwind(Dwfl *dwfl, struct xmp_stack_proc *p, const bool *seized,
                          const bool *stopped, int64_t deadline_ns);

/* Most frames kept per thread and stack. */
#define XMP_STACKS_MAX_FRAMES 64

int64_t xmp_stacks_now_ns(void);

/* Fills the Python frames of p's threads when the process (reported in dwfl, every thread
 * stopped) is a CPython 3.11 or 3.12; sets p->python. Gives up at deadline_ns. */
void xmp_stacks_python(Dwfl *dwfl, struct xmp_stack_proc *p, int64_t deadline_ns);

/* The line of the instruction at byte offset addr in a CPython 3.11 or 3.12 code object whose
 * co_linetable is p[0, size) and co_firstlineno firstlineno, as PyCode_Addr2Line reads it; 0
 * when it has none (a "no location" entry, a table that is not one). */
int xmp_stacks_py_line(const unsigned char *p, size_t size, int firstlineno, int addr);

#endif
