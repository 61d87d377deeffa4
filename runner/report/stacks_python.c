/* The Python stack of every thread of a CPython 3.11 or 3.12 process, read from its memory from
 * outside while its threads are stopped, as py-spy and austin do: the exported _PyRuntime ->
 * its interpreters -> each one's thread states (matched to threads by native_thread_id) -> each
 * thread's frame chain -> each frame's code object (qualified name, file name) and its line,
 * decoded from co_linetable at the frame's instruction (Objects/locations.md).
 *
 * Why from outside rather than faulthandler: faulthandler armed through the environment dumps
 * only on a fatal signal, which the process must then die of, and `xmprun stacks` has to read a
 * running job without ending it; nothing is asked of the user's program either way.
 *
 * The offsets are CPython's own (x86-64 and aarch64 alike: LP64), from its headers:
 * Include/internal/pycore_runtime.h (_PyRuntimeState.interpreters.head), pycore_interp.h
 * (PyInterpreterState.threads.head), cpython/pystate.h (PyThreadState: next, cframe,
 * native_thread_id; _PyCFrame.current_frame), pycore_frame.h (_PyInterpreterFrame), code.h
 * (PyCodeObject), cpython/unicodeobject.h and bytesobject.h. The 3.11 ones were checked here
 * with offsetof against Debian's python3.11-dev headers and by the e2e tests; the 3.12 ones come
 * from its headers (v3.12.0) only: no 3.12 interpreter was at hand to test them on. Another
 * version is named but not read. A process that changes under the reader (a thread not
 * stopped) gives at worst a shorter or odd stack: every read is bounded and checked. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/stacks_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

struct py_layout {
    int minor;
    size_t runtime_interp_head;
    size_t interp_next;
    size_t interp_threads_head;
    size_t tstate_next;
    size_t tstate_cframe;
    size_t tstate_native_id;
    size_t cframe_current;
    size_t frame_code;
    size_t frame_previous;
    size_t frame_prev_instr;
    size_t frame_owner;
    size_t code_filename;
    size_t code_qualname;
    size_t code_linetable;
    size_t code_firstlineno;
    size_t code_adaptive;
    size_t ascii_size;   /* sizeof(PyASCIIObject): a compact ASCII string's data follows */
    size_t compact_size; /* sizeof(PyCompactUnicodeObject) */
    size_t str_length;   /* PyASCIIObject.length */
    size_t str_state;    /* PyASCIIObject.state: interned:2, kind:3, compact:1, ascii:1 */
    size_t bytes_size;   /* PyBytesObject's ob_size (PyObject_VAR_HEAD) */
    size_t bytes_data;   /* PyBytesObject.ob_sval */
};

static const struct py_layout layouts[] = {
    {
        .minor = 11,
        .runtime_interp_head = 40,
        .interp_next = 0,
        .interp_threads_head = 16,
        .tstate_next = 8,
        .tstate_cframe = 56,
        .tstate_native_id = 160,
        .cframe_current = 8,
        .frame_code = 32,
        .frame_previous = 48,
        .frame_prev_instr = 56,
        .frame_owner = 69,
        .code_filename = 112,
        .code_qualname = 128,
        .code_linetable = 136,
        .code_firstlineno = 72,
        .code_adaptive = 184,
        .ascii_size = 48,
        .compact_size = 72,
        .str_length = 16,
        .str_state = 32,
        .bytes_size = 16,
        .bytes_data = 32,
    },
    {
        .minor = 12,
        .runtime_interp_head = 40,
        .interp_next = 0,
        .interp_threads_head = 72,
        .tstate_next = 8,
        .tstate_cframe = 56,
        .tstate_native_id = 144,
        .cframe_current = 0,
        .frame_code = 0,
        .frame_previous = 8,
        .frame_prev_instr = 56,
        .frame_owner = 70,
        .code_filename = 112,
        .code_qualname = 128,
        .code_linetable = 136,
        .code_firstlineno = 68,
        .code_adaptive = 192,
        .ascii_size = 40,
        .compact_size = 56,
        .str_length = 16,
        .str_state = 32,
        .bytes_size = 16,
        .bytes_data = 32,
    },
};

/* 3.12: a frame the C stack owns (an entry shim), not the user's code. */
#define FRAME_OWNED_BY_CSTACK 3
#define MAX_INTERPRETERS      16
#define MAX_TSTATES           1024
#define MAX_STRING            1024
#define MAX_LINETABLE         (64 * 1024)

struct reader {
    pid_t pid;
    const struct py_layout *l;
};

static bool
peek(const struct reader *r, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = {buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};

    return addr != 0 && process_vm_readv(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)len;
}

static uint64_t
peek_ptr(const struct reader *r, uint64_t addr)
{
    uint64_t v = 0;
    return peek(r, addr, &v, sizeof(v)) ? v : 0;
}

static void
put_utf8(char *out, size_t *len, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (char)(0xc0 | (cp >> 6));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*len)++] = (char)(0xe0 | (cp >> 12));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*len)++] = (char)(0xf0 | (cp >> 18));
        out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* A str object as UTF-8 (compact strings only: every name and file name CPython makes). */
static char *
read_str(const struct reader *r, uint64_t addr)
{
    int64_t length = 0;
    uint32_t state = 0;
    unsigned kind;
    unsigned char *raw;
    char *out;
    size_t len = 0;

    if (!peek(r, addr + r->l->str_length, &length, sizeof(length)) ||
        !peek(r, addr + r->l->str_state, &state, sizeof(state)))
        return NULL;
    kind = (state >> 2) & 7;
    /* interned:2, kind:3, compact:1, ascii:1 */
    if (length < 0 || length > MAX_STRING || !(state & (1u << 5)) ||
        (kind != 1 && kind != 2 && kind != 4))
        return NULL;
    raw = malloc((size_t)length * kind + 1);
    out = malloc((size_t)length * 4 + 1);
    if (raw == NULL || out == NULL ||
        !peek(r, addr + ((state & (1u << 6)) ? r->l->ascii_size : r->l->compact_size), raw,
              (size_t)length * kind)) {
        free(raw);
        free(out);
        return NULL;
    }
    for (int64_t i = 0; i < length; i++) {
        uint32_t cp = kind == 1   ? raw[i]
                      : kind == 2 ? ((uint16_t *)(void *)raw)[i]
                                  : ((uint32_t *)(void *)raw)[i];
        put_utf8(out, &len, cp > 0x10ffff ? 0xfffd : cp);
    }
    out[len] = '\0';
    free(raw);
    return out;
}

static unsigned
read_varint(const unsigned char **p, const unsigned char *end)
{
    unsigned val = 0, shift = 0;
    unsigned char b;

    do {
        if (*p >= end || shift > 28)
            return val;
        b = *(*p)++;
        val |= (unsigned)(b & 63) << shift;
        shift += 6;
    } while (b & 64);
    return val;
}

static int
read_svarint(const unsigned char **p, const unsigned char *end)
{
    unsigned v = read_varint(p, end);
    return (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
}

int
xmp_stacks_py_line(const unsigned char *p, size_t size, int firstlineno, int addr)
{
    const unsigned char *end = p + size;
    int line = firstlineno, at = 0;

    if (addr < 0)
        return firstlineno;
    while (p < end) {
        unsigned char first = *p++;
        int code = (first >> 3) & 15, units = (first & 7) + 1, delta = 0;

        if (!(first & 0x80))
            return 0; /* not an entry's start: the table is not what it should be */
        if (code == 15) {
            /* no location */
        } else if (code == 14) {
            delta = read_svarint(&p, end);
            read_varint(&p, end);
            read_varint(&p, end);
            read_varint(&p, end);
        } else if (code == 13) {
            delta = read_svarint(&p, end);
        } else if (code >= 10) {
            delta = code - 10;
            p += 2;
        } else {
            p += 1;
        }
        line += delta;
        if (addr < at + units * 2)
            return code == 15 ? 0 : line;
        at += units * 2;
    }
    return 0;
}

static int
code_line(const struct reader *r, uint64_t code, uint64_t prev_instr)
{
    uint64_t table = peek_ptr(r, code + r->l->code_linetable);
    int64_t size = 0;
    int first = 0, line = 0;
    unsigned char *bytes;
    int64_t addr;

    if (table == 0 || !peek(r, table + r->l->bytes_size, &size, sizeof(size)) || size <= 0 ||
        size > MAX_LINETABLE || !peek(r, code + r->l->code_firstlineno, &first, sizeof(first)))
        return 0;
    bytes = malloc((size_t)size);
    if (bytes == NULL || !peek(r, table + r->l->bytes_data, bytes, (size_t)size)) {
        free(bytes);
        return 0;
    }
    /* _PyInterpreterFrame_LASTI: code units from the code's start, in bytes for Addr2Line. */
    addr = ((int64_t)prev_instr - (int64_t)(code + r->l->code_adaptive)) / 2 * 2;
    if (addr < (int64_t)-2 || addr > (int64_t)size * 64)
        addr = -2;
    line = xmp_stacks_py_line(bytes, (size_t)size, first, (int)addr);
    free(bytes);
    return line;
}

static void
read_frames(const struct reader *r, uint64_t tstate, struct xmp_stack_thread *t,
            int64_t deadline_ns)
{
    uint64_t cframe = peek_ptr(r, tstate + r->l->tstate_cframe);
    uint64_t frame = cframe != 0 ? peek_ptr(r, cframe + r->l->cframe_current) : 0;

    free(t->python);
    t->python = calloc(XMP_STACKS_MAX_FRAMES, sizeof(*t->python));
    t->n_python = 0;
    for (int depth = 0; frame != 0 && t->python != NULL && depth < 4 * XMP_STACKS_MAX_FRAMES &&
                        t->n_python < XMP_STACKS_MAX_FRAMES && xmp_stacks_now_ns() < deadline_ns;
         depth++, frame = peek_ptr(r, frame + r->l->frame_previous)) {
        uint64_t code = peek_ptr(r, frame + r->l->frame_code);
        uint64_t instr = peek_ptr(r, frame + r->l->frame_prev_instr);
        char owner = 0;
        struct xmp_stack_frame *f;

        if (code == 0 || !peek(r, frame + r->l->frame_owner, &owner, 1))
            break;
        if (r->l->minor >= 12 && owner == FRAME_OWNED_BY_CSTACK)
            continue;
        f = &t->python[t->n_python];
        f->function = read_str(r, peek_ptr(r, code + r->l->code_qualname));
        f->file = read_str(r, peek_ptr(r, code + r->l->code_filename));
        if (f->function == NULL && f->file == NULL)
            break;
        f->line = code_line(r, code, instr);
        t->n_python++;
    }
}

struct sym_find {
    uint64_t runtime;
    uint64_t version;
};

/* Where an interpreter module holds _PyRuntime and Py_Version, by the module's path and size,
 * found once per capture of many workers rather than by a walk of its symbol table (thousands of
 * symbols) in each: a job's workers run the same interpreter. Offsets from the module's start;
 * 0: not there. */
#define PY_MODULES_CACHED 16

struct py_module {
    char *path;
    uint64_t size;
    uint64_t runtime, version;
};

static struct py_module py_modules[PY_MODULES_CACHED];
static size_t py_modules_used;
static pthread_mutex_t py_modules_lock = PTHREAD_MUTEX_INITIALIZER;

static bool
py_module_cached(const char *path, uint64_t size, struct py_module *out)
{
    bool found = false;

    pthread_mutex_lock(&py_modules_lock);
    for (size_t i = 0; i < py_modules_used && !found; i++)
        if (py_modules[i].size == size && strcmp(py_modules[i].path, path) == 0) {
            *out = py_modules[i];
            found = true;
        }
    pthread_mutex_unlock(&py_modules_lock);
    return found;
}

static void
py_module_keep(const char *path, uint64_t size, uint64_t runtime, uint64_t version)
{
    char *copy;

    pthread_mutex_lock(&py_modules_lock);
    if (py_modules_used < PY_MODULES_CACHED && (copy = strdup(path)) != NULL)
        py_modules[py_modules_used++] = (struct py_module){copy, size, runtime, version};
    pthread_mutex_unlock(&py_modules_lock);
}

static int
find_python_syms(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start, void *arg)
{
    struct sym_find *sf = arg;
    const char *base = strrchr(name, '/');
    struct py_module known;
    Dwarf_Addr low = 0, high = 0;
    uint64_t runtime = 0, version = 0;
    int n;

    (void)userdata;
    (void)start;
    base = base != NULL ? base + 1 : name;
    /* The interpreter (python3.11) or its library (libpython3.12.so.1.0) only. */
    if (strncmp(base, "python", 6) != 0 && strncmp(base, "libpython", 9) != 0)
        return DWARF_CB_OK;
    dwfl_module_info(mod, NULL, &low, &high, NULL, NULL, NULL, NULL);
    if (py_module_cached(name, high - low, &known)) {
        runtime = known.runtime;
        version = known.version;
    } else {
        n = dwfl_module_getsymtab(mod);
        for (int i = 1; i < n && (runtime == 0 || version == 0); i++) {
            GElf_Sym sym;
            GElf_Addr addr;
            const char *s = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
            if (s == NULL || GELF_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx == SHN_UNDEF)
                continue;
            if (strcmp(s, "_PyRuntime") == 0)
                runtime = addr - low;
            else if (strcmp(s, "Py_Version") == 0)
                version = addr - low;
        }
        py_module_keep(name, high - low, runtime, version);
    }
    if (runtime != 0 && sf->runtime == 0)
        sf->runtime = low + runtime;
    if (version != 0 && sf->version == 0)
        sf->version = low + version;
    return sf->runtime != 0 && sf->version != 0 ? DWARF_CB_ABORT : DWARF_CB_OK;
}

void
xmp_stacks_python(Dwfl *dwfl, struct xmp_stack_proc *p, int64_t deadline_ns)
{
    struct sym_find sf = {0};
    struct reader r = {p->pid, NULL};
    uint32_t version = 0;
    unsigned major, minor;
    uint64_t interp;

    dwfl_getmodules(dwfl, find_python_syms, &sf, 0);
    if (sf.runtime == 0 || sf.version == 0 || !peek(&r, sf.version, &version, sizeof(version)))
        return;
    major = (version >> 24) & 0xff;
    minor = (version >> 16) & 0xff;
    for (size_t i = 0; i < sizeof(layouts) / sizeof(*layouts); i++)
        if (major == 3 && layouts[i].minor == (int)minor)
            r.l = &layouts[i];
    snprintf(p->python, sizeof(p->python), "%u.%u", major, minor);
    if (r.l == NULL) {
        snprintf(p->error, sizeof(p->error),
                 "Python %u.%u: its frames are not read (3.11 and 3.12 are)", major, minor);
        return;
    }
    interp = peek_ptr(&r, sf.runtime + r.l->runtime_interp_head);
    for (int ni = 0; interp != 0 && ni < MAX_INTERPRETERS;
         ni++, interp = peek_ptr(&r, interp + r.l->interp_next)) {
        uint64_t ts = peek_ptr(&r, interp + r.l->interp_threads_head);
        for (int nt = 0; ts != 0 && nt < MAX_TSTATES && xmp_stacks_now_ns() < deadline_ns;
             nt++, ts = peek_ptr(&r, ts + r.l->tstate_next)) {
            uint64_t native_id = peek_ptr(&r, ts + r.l->tstate_native_id);
            for (size_t k = 0; k < p->n_threads; k++)
                if ((uint64_t)p->threads[k].tid == native_id)
                    read_frames(&r, ts, &p->threads[k], deadline_ns);
        }
    }
}
