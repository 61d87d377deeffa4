/* Where every thread of a process is, read from outside without killing it: each thread's
 * state, wchan and kernel stack (/proc), its native stack with function names (elfutils'
 * libdwfl, as eu-stack does) and, for a CPython 3.11 or 3.12 process, the Python stack of every
 * thread (function, file, line), read from its memory as py-spy does. The processes are
 * captured in parallel under one time budget; each is stopped (ptrace) only while it is read. */
#ifndef XMP_STACKS_H
#define XMP_STACKS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The budget for one capture of all processes before xmprun stops them (the grace and the exit
 * move by at most this), and for `xmprun stacks`, which nothing waits on but the person who
 * asked (and which a slow machine, an emulator, needs). */
#define XMP_STACKS_BUDGET_MS         1000
#define XMP_STACKS_COMMAND_BUDGET_MS 10000

struct xmp_stack_frame {
    char *function;  /* NULL when unknown */
    char *file;      /* native: the module's path; Python: the code's file name */
    uint64_t offset; /* native: from the start of function (or the module when unnamed) */
    int line;        /* Python: the line, 0 when unknown */
};

struct xmp_stack_thread {
    pid_t tid;
    char name[32];  /* comm */
    char state;     /* /proc stat's state letter: 'S', 'R', 'D', ...; 0 unknown */
    char wchan[64]; /* "" when not sleeping in the kernel or unreadable */
    char **kernel;  /* "pipe_read+0x14f/0x3f0", innermost first */
    size_t n_kernel;
    struct xmp_stack_frame *native; /* innermost first */
    size_t n_native;
    struct xmp_stack_frame *python; /* innermost first */
    size_t n_python;
    char note[128]; /* "" or why a stack is missing ("in D state: not stopped") */
};

struct xmp_stack_proc {
    pid_t pid;
    char comm[32];
    char python[8]; /* "3.11", "3.12", or "" when not a CPython that is read */
    struct xmp_stack_thread *threads;
    size_t n_threads;
    bool truncated;  /* the budget ran out before all was read */
    char error[256]; /* "" or why nothing (or less) could be read */
    /* A worker's top process only: its other processes (what it forked: the Python under
     * `sh -c`, DataLoader workers), at most XMP_STACKS_MAX_PROCS - 1. */
    struct xmp_stack_proc *children;
    size_t n_children;
};

/* The processes of one worker whose stacks are taken, itself included. */
#define XMP_STACKS_MAX_PROCS 8

struct xmp_stacks {
    struct xmp_stack_proc *procs; /* one per pid given, in order */
    size_t n;
};

/* Captures the n processes in parallel and returns within about budget_ms (what did not finish
 * in time is marked truncated, never waited for: its thread ends its current step and frees what
 * it holds, or the process exits under it, which is safe because a capture loads only libdw and
 * what libdw links, none with exit handlers; never debuginfod's client, whose libcurl and OpenSSL
 * handlers crashed an exit under a capture). A process that is gone or exits meanwhile is
 * reported with an error. Returns 0, or -1 with errno (ENOMEM) and nothing captured. */
int xmp_stacks_capture(const pid_t *pids, size_t n, long budget_ms, struct xmp_stacks *out);

/* A thread's function that loads what a capture needs (libdw and what it links, a millisecond
 * or two) ahead of the first, which then stops no process while it is loaded: for a job that
 * takes stacks before every stop. arg is unused; returns NULL. */
void *xmp_stacks_preload(void *arg);

/* Moves procs[i] out of s (the caller frees it with xmp_stack_proc_free and free). */
struct xmp_stack_proc *xmp_stacks_take(struct xmp_stacks *s, size_t i);

/* Takes s's procs [first, first + n) as one worker's (n >= 1): the first, with the others as its
 * children; NULL when out of memory. */
struct xmp_stack_proc *xmp_stacks_take_group(struct xmp_stacks *s, size_t first, size_t n);

void xmp_stack_proc_free(struct xmp_stack_proc *p);

/* What /proc says of one thread without stopping it: its name, state letter, wchan and kernel
 * stack (root's to read), into *t (freed with xmp_stack_thread_free). */
void xmp_stacks_read_thread(pid_t pid, pid_t tid, struct xmp_stack_thread *t);
void xmp_stack_thread_free(struct xmp_stack_thread *t);
void xmp_stacks_free(struct xmp_stacks *s);

/* One thread's innermost frame in words, "wait_for_peer (job/w.py:7)": its Python frame when
 * it has one, else its innermost named native frames ("read < block_in_read"), else its
 * wchan; "" when nothing is known. */
const char *xmp_stacks_thread_innermost(const struct xmp_stack_thread *t, char *buf, size_t size);

/* The process's innermost frame in one line: its main thread's, and how many other threads
 * there are ("wait_for_peer (w.py:7); 1 more thread: spin (w.py:12)"). */
const char *xmp_stacks_innermost(const struct xmp_stack_proc *p, char *buf, size_t size);

/* Every thread and frame as text, for a person (the .txt file, `xmprun stacks`). */
void xmp_stacks_print(const struct xmp_stack_proc *p, FILE *out);

/* The report's `stacks` object, and back (NULL when j is not one). */
json_t *xmp_stacks_to_json(const struct xmp_stack_proc *p);
struct xmp_stack_proc *xmp_stacks_from_json(json_t *j);

#endif
