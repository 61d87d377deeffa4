/* Everything of the stack capture that is libdw's: the library, loaded when the first stack is
 * captured (see stacks_internal.h); a process's modules, read into a libdwfl session from its
 * /proc maps and a capture thread's open module files; its native frames, and their symbols. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/stacks_internal.h"

#include "isolate/array.h"
#include "isolate/dynlib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <unistd.h>

#define XMP_DW_DEFINE(f) __typeof__(xmp_dw_##f) xmp_dw_##f; /* as declared, before the names */
XMP_DW_FUNCS(XMP_DW_DEFINE)

#define XMP_DW_SYM(f) {#f, (void **)&xmp_dw_##f, false},
static const struct xmp_dynlib_sym syms[] = {XMP_DW_FUNCS(XMP_DW_SYM)};
static struct xmp_dynlib libdw = {"libdw.so.1", syms, sizeof(syms) / sizeof(syms[0]), 0, ""};

bool
xmp_stacks_dw_load(char *err, size_t size)
{
    return xmp_dynlib_load(&libdw, err, size);
}

void *
xmp_stacks_preload(void *arg)
{
    char err[256];

    (void)arg;
    /* What fails here fails again in the capture, which says why. */
    xmp_stacks_dw_load(err, sizeof(err));
    return NULL;
}

/* Symbol names by module and offset, shared by every capture of the process: a job's workers
 * run the same binaries, and a name's lookup (libdwfl reads the module's symbol table anew for
 * each process it attaches to) was most of a capture's time. A module is told by its path and
 * its size; entries are never removed (a capture is once a run, `xmprun stacks` once a process). */
#define SYM_CACHE_SIZE 4096 /* a power of two */

struct sym_entry {
    const char *module; /* the module's name: its path */
    uint64_t size, rel; /* the module's size; the address's offset into it */
    char *name;         /* NULL: no symbol there */
    uint64_t off;       /* from the symbol's start */
};

static struct sym_entry sym_cache[SYM_CACHE_SIZE];
static size_t sym_used;
static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t
sym_slot(const char *module, uint64_t size, uint64_t rel)
{
    uint64_t h = 1469598103934665603ULL ^ size ^ (rel * 0x9e3779b97f4a7c15ULL);

    for (const char *c = module; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    for (size_t i = (size_t)h & (SYM_CACHE_SIZE - 1);; i = (i + 1) & (SYM_CACHE_SIZE - 1)) {
        const struct sym_entry *e = &sym_cache[i];
        if (e->module == NULL ||
            (e->size == size && e->rel == rel && strcmp(e->module, module) == 0))
            return i;
    }
}

/* The symbol at adj in mod: its name (NULL if none; the cache's, never freed) and *off from its
 * start. */
static const char *
sym_lookup(Dwfl_Module *mod, Dwarf_Addr adj, GElf_Off *off)
{
    Dwarf_Addr start = 0, end = 0;
    const char *module = dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL);
    const char *name;
    GElf_Sym sym;
    size_t i;

    if (module == NULL)
        return dwfl_module_addrinfo(mod, adj, off, &sym, NULL, NULL, NULL);
    pthread_mutex_lock(&sym_lock);
    i = sym_slot(module, end - start, adj - start);
    if (sym_cache[i].module != NULL) {
        *off = sym_cache[i].off;
        name = sym_cache[i].name;
        pthread_mutex_unlock(&sym_lock);
        return name;
    }
    pthread_mutex_unlock(&sym_lock);
    name = dwfl_module_addrinfo(mod, adj, off, &sym, NULL, NULL, NULL);
    pthread_mutex_lock(&sym_lock);
    i = sym_slot(module, end - start, adj - start);
    /* Kept at most three quarters full, so that a miss ends at an empty slot. */
    if (sym_cache[i].module == NULL && sym_used < SYM_CACHE_SIZE * 3 / 4) {
        char *m = strdup(module), *n = name != NULL ? strdup(name) : NULL;
        if (m != NULL && (name == NULL || n != NULL)) {
            sym_cache[i] = (struct sym_entry){m, end - start, adj - start, n, *off};
            sym_used++;
            name = n;
        } else {
            free(m);
            free(n);
        }
    }
    pthread_mutex_unlock(&sym_lock);
    return name;
}

struct native_walk {
    Dwfl *dwfl;
    struct xmp_stack_thread *t;
    int64_t deadline_ns;
};

static int
on_frame(Dwfl_Frame *state, void *arg)
{
    struct native_walk *nw = arg;
    struct xmp_stack_thread *t = nw->t;
    struct xmp_stack_frame *f;
    Dwarf_Addr pc, adj;
    bool activation;
    Dwfl_Module *mod;
    GElf_Off off = 0;
    const char *name = NULL, *file = NULL;
    Dwarf_Addr start = 0;

    if (t->n_native >= XMP_STACKS_MAX_FRAMES || xmp_stacks_now_ns() > nw->deadline_ns)
        return DWARF_CB_ABORT;
    if (!dwfl_frame_pc(state, &pc, &activation))
        return DWARF_CB_ABORT;
    /* A return address points after the call: look up the call itself. */
    adj = pc - (activation ? 0 : 1);
    mod = dwfl_addrmodule(nw->dwfl, adj);
    if (mod != NULL) {
        name = sym_lookup(mod, adj, &off);
        file = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, NULL, NULL);
    }
    f = &t->native[t->n_native++];
    f->function = name != NULL ? strdup(name) : NULL;
    f->file = file != NULL ? strdup(file) : NULL;
    f->offset = name != NULL ? off + (activation ? 0 : 1) : pc - start;
    return DWARF_CB_OK;
}

/* The module files a capture thread has opened, kept for every process it reads: a job's
 * workers map the same few files, which libdwfl opened, mapped and unmapped anew per process (each
 * unmap a TLB shootdown on every CPU). A file is told by its device, inode, size and time; the
 * cache hands libdwfl a reference (elf_begin on the cached descriptor counts it), and its
 * dwfl_end only drops that. Per thread: libelf's descriptors are not shared between threads. */
struct elf_file {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int fd;
    Elf *elf;
};

struct elf_cache {
    struct elf_file *files;
    size_t n, cap;
};

static __thread struct elf_cache thread_elf_cache;
static __thread bool thread_elf_cache_on;

static struct elf_file *
elf_cache_get(struct elf_cache *c, const char *path, const struct stat *st)
{
    struct elf_file *f;
    int fd;
    Elf *elf;

    for (size_t i = 0; i < c->n; i++) {
        f = &c->files[i];
        if (f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size &&
            f->mtime.tv_sec == st->st_mtim.tv_sec && f->mtime.tv_nsec == st->st_mtim.tv_nsec)
            return f;
    }
    if (!xmp_array_reserve(c->files, c->cap, c->n + 1, 16))
        return NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf == NULL) {
        close(fd);
        return NULL;
    }
    f = &c->files[c->n++];
    *f = (struct elf_file){st->st_dev, st->st_ino, st->st_size, st->st_mtim, fd, elf};
    return f;
}

static void
elf_cache_free(struct elf_cache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        elf_end(c->files[i].elf);
        close(c->files[i].fd);
    }
    free(c->files);
    memset(c, 0, sizeof(*c));
}

/* Dwfl_Callbacks.find_elf: a module's file from the thread's cache; anything else (the vDSO, a
 * deleted file, a file the cache cannot open) as libdwfl's own callback finds it. */
static int
find_elf(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr base, char **file_name,
         Elf **elfp)
{
    struct elf_file *f = NULL;
    struct stat st;

    if (thread_elf_cache_on && name[0] == '/' && stat(name, &st) == 0 && S_ISREG(st.st_mode))
        f = elf_cache_get(&thread_elf_cache, name, &st);
    if (f == NULL)
        return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
    *file_name = strdup(name);
    if (*file_name == NULL)
        return -1;
    *elfp = elf_begin(-1, ELF_C_READ_MMAP, f->elf);
    return -1;
}

void
xmp_stacks_dw_thread_begin(void)
{
    thread_elf_cache_on = true;
}

void
xmp_stacks_dw_thread_end(void)
{
    thread_elf_cache_on = false;
    elf_cache_free(&thread_elf_cache);
}

/* One line of /proc/PID/maps: "start-end perms offset major:minor inode   path". */
struct maps_line {
    uint64_t start, end, ino;
    unsigned long dev_major, dev_minor;
    const char *path; /* "" when the mapping has none */
};

static bool
parse_maps_line(char *line, struct maps_line *m)
{
    char *c = line;

    m->start = strtoull(c, &c, 16);
    if (*c++ != '-')
        return false;
    m->end = strtoull(c, &c, 16);
    /* Past the permissions and the offset. */
    if (*c != ' ' || (c = strchr(c + 1, ' ')) == NULL || (c = strchr(c + 1, ' ')) == NULL)
        return false;
    m->dev_major = strtoul(c + 1, &c, 16);
    if (*c++ != ':')
        return false;
    m->dev_minor = strtoul(c, &c, 16);
    m->ino = strtoull(c, &c, 10);
    c += strspn(c, " \t");
    m->path = c;
    return true;
}

/* The files mapped into p, each reported to dwfl once over the span of its consecutive
 * mappings, and the vDSO under the name libdwfl's find_elf reads from the process's memory: what
 * dwfl_linux_proc_report reports, read without its scanf per line (most of its time). */
static int
report_maps(Dwfl *dwfl, pid_t pid)
{
    char path[64], buf[16384], file[PATH_MAX] = "";
    struct maps_line last = {0};
    size_t have = 0;
    bool open_span = false;
    int fd, rc = 0;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof(buf) - 1 - have);
        char *line = buf, *nl;
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        have += (size_t)got;
        buf[have] = '\0';
        for (; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
            struct maps_line m;
            *nl = '\0';
            if (!parse_maps_line(line, &m)) {
                errno = ENOEXEC;
                rc = -1;
                goto out;
            }
            if (strcmp(m.path, "[vdso]") == 0) {
                char name[32];
                snprintf(name, sizeof(name), "[vdso: %d]", (int)pid);
                if (dwfl_report_module(dwfl, name, m.start, m.end) == NULL)
                    rc = -1;
                continue;
            }
            if (m.path[0] != '/' || (m.ino == 0 && m.dev_major == 0 && m.dev_minor == 0))
                continue;
            if (open_span && m.ino == last.ino && m.dev_major == last.dev_major &&
                m.dev_minor == last.dev_minor && strcmp(m.path, file) == 0) {
                last.end = m.end;
                continue;
            }
            if (open_span && dwfl_report_module(dwfl, file, last.start, last.end) == NULL)
                rc = -1;
            last = m;
            snprintf(file, sizeof(file), "%s", m.path);
            open_span = true;
        }
        /* A line longer than the buffer is not one of /proc/PID/maps (its path is at most
         * PATH_MAX): the rest is read as it comes. */
        have = line == buf && have == sizeof(buf) - 1 ? 0 : have - (size_t)(line - buf);
        memmove(buf, line, have);
    }
    if (open_span && dwfl_report_module(dwfl, file, last.start, last.end) == NULL)
        rc = -1;
out:
    close(fd);
    return rc;
}

/* p's modules (its /proc maps and their files), read into a libdwfl session while its threads
 * are on their way to stop: none of it needs them stopped. NULL, with why in p->error, when
 * they cannot be read. */
/* The process state libdwfl unwinds from, served without dwfl_linux_proc_attach, which reads
 * /proc/PID/status, lists the threads again and maps the executable (unmapped at dwfl_end: a TLB
 * shootdown on every CPU) for each process: the threads are stopped already (capture's), their
 * registers are read with ptrace, their memory a page at a time. On other machines than x86-64
 * (whose registers' layout this knows), libdwfl's own attach serves. */
#if defined(__x86_64__)
#define OWN_ATTACH 1
#endif

#ifdef OWN_ATTACH
#define MEM_PAGE  4096
#define MEM_PAGES 4 /* a stack's frames are in a few pages */

struct attach {
    pid_t pid;
    uint64_t page_addr[MEM_PAGES]; /* 0: empty (page 0 is never read) */
    unsigned char page[MEM_PAGES][MEM_PAGE];
    size_t next; /* the slot the next page replaces */
};

static pid_t
next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
    /* Only dwfl_getthreads asks, which the capture never calls: it names its threads. */
    (void)dwfl;
    (void)arg;
    (void)thread_argp;
    return 0;
}

static bool
get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
    (void)dwfl;
    (void)arg;
    *thread_argp = (void *)(intptr_t)tid;
    return true;
}

static bool
read_remote(pid_t pid, uint64_t addr, void *buf, size_t size)
{
    struct iovec local = {buf, size}, remote = {(void *)(uintptr_t)addr, size};

    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)size;
}

static bool
memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    struct attach *a = arg;
    uint64_t base = addr & ~(uint64_t)(MEM_PAGE - 1);
    size_t slot;

    (void)dwfl;
    /* A word across two pages, or on a page that cannot be read whole: as it is. */
    if (addr - base > MEM_PAGE - sizeof(*result) || base == 0)
        return read_remote(a->pid, addr, result, sizeof(*result));
    for (slot = 0; slot < MEM_PAGES && a->page_addr[slot] != base; slot++)
        ;
    if (slot == MEM_PAGES) {
        slot = a->next;
        if (!read_remote(a->pid, base, a->page[slot], MEM_PAGE)) {
            a->page_addr[slot] = 0;
            return read_remote(a->pid, addr, result, sizeof(*result));
        }
        a->page_addr[slot] = base;
        a->next = (a->next + 1) % MEM_PAGES;
    }
    memcpy(result, a->page[slot] + (addr - base), sizeof(*result));
    return true;
}

static bool
set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
    struct user_regs_struct r;

    if (ptrace(PTRACE_GETREGS, (pid_t)(intptr_t)thread_arg, 0, &r) != 0)
        return false;
    /* In DWARF's numbering of x86-64's registers; the last is the pc. */
    const Dwarf_Word regs[] = {r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8,
                               r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip};
    return dwfl_thread_state_registers(thread, 0, sizeof(regs) / sizeof(*regs), regs);
}

static void
detach_state(Dwfl *dwfl, void *arg)
{
    (void)dwfl;
    free(arg);
}

static void
thread_detach(Dwfl_Thread *thread, void *thread_arg)
{
    /* The capture lets go of its threads itself. */
    (void)thread;
    (void)thread_arg;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
    .detach = detach_state,
    .thread_detach = thread_detach,
};

static bool
attach_stopped(Dwfl *dwfl, pid_t pid)
{
    struct attach *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return false;
    a->pid = pid;
    /* No ELF: libdwfl takes the machine from the first module it can read (the cache's). */
    if (!dwfl_attach_state(dwfl, NULL, pid, &thread_callbacks, a)) {
        free(a);
        return false;
    }
    return true;
}
#else
static bool
attach_stopped(Dwfl *dwfl, pid_t pid)
{
    return dwfl_linux_proc_attach(dwfl, pid, true) == 0;
}
#endif

Dwfl *
xmp_stacks_dw_report(struct xmp_stack_proc *p, Dwfl_Callbacks *callbacks)
{
    Dwfl *dwfl;

    /* Separate debug info by build id on this machine only (/usr/lib/debug/.build-id, where
     * -dbgsym packages put it): the standard lookup falls back to debuginfod, which loads
     * libcurl and its TLS stack into xmprun (about 30 libraries, twice a capture's time) even
     * with no server set, and would download within a 1 s budget. */
    callbacks->find_elf = find_elf;
    callbacks->find_debuginfo = dwfl_build_id_find_debuginfo;
    dwfl = dwfl_begin(callbacks);

    if (dwfl == NULL || report_maps(dwfl, p->pid) != 0 || dwfl_report_end(dwfl, NULL, NULL) != 0 ||
        !attach_stopped(dwfl, p->pid)) {
        snprintf(p->error, sizeof(p->error), "read the modules: %s", dwfl_errmsg(-1));
        if (dwfl != NULL)
            dwfl_end(dwfl);
        return NULL;
    }
    return dwfl;
}

/* Once every thread of p that could be is stopped: the Python frames, then the native ones. */
void
xmp_stacks_dw_unwind(Dwfl *dwfl, struct xmp_stack_proc *p, const bool *seized, const bool *stopped,
                     int64_t deadline_ns)
{
    /* The Python frames first: they say most, and cost little next to unwinding (which reads
     * each module's call frame information) when the budget is tight (a slow machine). */
    xmp_stacks_python(dwfl, p, deadline_ns);
    for (size_t i = 0; i < p->n_threads; i++) {
        struct native_walk nw = {dwfl, &p->threads[i], deadline_ns};
        if (!stopped[i]) {
            if (seized[i])
                snprintf(p->threads[i].note, sizeof(p->threads[i].note),
                         "did not stop within the budget");
            continue;
        }
        if (xmp_stacks_now_ns() > deadline_ns) {
            p->truncated = true;
            break;
        }
        if (p->threads[i].native != NULL &&
            dwfl_getthread_frames(dwfl, p->threads[i].tid, on_frame, &nw) != 0 &&
            p->threads[i].n_native == 0)
            snprintf(p->threads[i].note, sizeof(p->threads[i].note), "unwind: %s", dwfl_errmsg(-1));
    }
    if (xmp_stacks_now_ns() > deadline_ns)
        p->truncated = true;
}
