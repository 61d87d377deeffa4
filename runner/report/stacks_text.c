/* A capture in words: the innermost frames in a line (the summary, `xmprun report`), every
 * thread as text (the .txt file beside the report, `xmprun stacks`), and the report's JSON. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/stacks_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *
base_name(const char *path)
{
    const char *slash = path != NULL ? strrchr(path, '/') : NULL;
    return slash != NULL ? slash + 1 : path != NULL ? path : "?";
}

const char *
xmp_stacks_thread_innermost(const struct xmp_stack_thread *t, char *buf, size_t size)
{
    size_t len = 0;
    int named = 0;

    buf[0] = '\0';
    if (t->n_python > 0) {
        const struct xmp_stack_frame *f = &t->python[0];
        snprintf(buf, size, "%s (%s:%d)", f->function != NULL ? f->function : "?",
                 f->file != NULL ? f->file : "?", f->line);
        return buf;
    }
    /* The innermost two named native frames: the call that blocks and its caller. */
    for (size_t i = 0; i < t->n_native && named < 2 && len < size; i++) {
        if (t->native[i].function == NULL)
            continue;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", named > 0 ? " < " : "",
                                t->native[i].function);
        named++;
    }
    if (named == 0 && t->wchan[0] != '\0')
        snprintf(buf, size, "kernel: %s", t->wchan);
    return buf;
}

static bool
has_python(const struct xmp_stack_proc *p)
{
    for (size_t i = 0; i < p->n_threads; i++)
        if (p->threads[i].n_python > 0)
            return true;
    return false;
}

/* Its main thread waits for a child to end (a shell that runs the command, a launcher). */
static bool
waits_for_children(const struct xmp_stack_proc *p)
{
    const struct xmp_stack_thread *t = p->n_threads > 0 ? &p->threads[0] : NULL;

    if (t == NULL || t->n_python > 0)
        return false;
    if (strcmp(t->wchan, "do_wait") == 0)
        return true;
    for (size_t i = 0; i < t->n_native; i++)
        if (t->native[i].function != NULL)
            return strstr(t->native[i].function, "wait4") != NULL ||
                   strstr(t->native[i].function, "waitpid") != NULL ||
                   strstr(t->native[i].function, "waitid") != NULL;
    return false;
}

/* The process of a worker whose stack says most: the first with Python frames (the worker's,
 * then its children's), else the first that does more than wait for a child. */
static const struct xmp_stack_proc *
interesting(const struct xmp_stack_proc *p)
{
    if (has_python(p))
        return p;
    for (size_t i = 0; i < p->n_children; i++)
        if (has_python(&p->children[i]))
            return &p->children[i];
    if (!waits_for_children(p))
        return p;
    for (size_t i = 0; i < p->n_children; i++)
        if (p->children[i].n_threads > 0 && !waits_for_children(&p->children[i]))
            return &p->children[i];
    return p;
}

static const char *
proc_innermost(const struct xmp_stack_proc *p, char *buf, size_t size)
{
    char first[256], other[256];
    size_t len;

    buf[0] = '\0';
    if (p->n_threads == 0) {
        snprintf(buf, size, "%s", p->error[0] != '\0' ? p->error : "no stack");
        return buf;
    }
    xmp_stacks_thread_innermost(&p->threads[0], first, sizeof(first));
    len = (size_t)snprintf(buf, size, "%s", first[0] != '\0' ? first : "?");
    if (p->n_threads > 1 && len < size) {
        /* The first other thread with Python frames says most; else the second thread. */
        const struct xmp_stack_thread *t = &p->threads[1];
        for (size_t i = 1; i < p->n_threads; i++)
            if (p->threads[i].n_python > 0) {
                t = &p->threads[i];
                break;
            }
        xmp_stacks_thread_innermost(t, other, sizeof(other));
        snprintf(buf + len, size - len, "; %zu more thread%s%s%s", p->n_threads - 1,
                 p->n_threads == 2 ? "" : "s", other[0] != '\0' ? ", e.g. " : "", other);
    }
    return buf;
}

const char *
xmp_stacks_innermost(const struct xmp_stack_proc *p, char *buf, size_t size)
{
    const struct xmp_stack_proc *q;
    size_t len;

    buf[0] = '\0';
    if (p == NULL)
        return buf;
    q = interesting(p);
    proc_innermost(q, buf, size);
    len = strlen(buf);
    if (q != p && len < size)
        snprintf(buf + len, size - len, " (its child %d, %s)", (int)q->pid, q->comm);
    return buf;
}

static void
print_proc(const struct xmp_stack_proc *p, FILE *out)
{
    fprintf(out, "pid %d (%s)%s%s%s\n", (int)p->pid, p->comm,
            p->python[0] != '\0' ? ", Python " : "", p->python,
            p->truncated ? ", truncated: the time budget ran out" : "");
    if (p->error[0] != '\0')
        fprintf(out, "  note: %s\n", p->error);
    for (size_t i = 0; i < p->n_threads; i++) {
        const struct xmp_stack_thread *t = &p->threads[i];
        fprintf(out, "\nthread %d \"%s\" state %c%s%s\n", (int)t->tid, t->name,
                t->state != 0 ? t->state : '?', t->wchan[0] != '\0' ? " wchan " : "", t->wchan);
        if (t->note[0] != '\0')
            fprintf(out, "  note: %s\n", t->note);
        if (t->n_python > 0)
            fprintf(out, "  python:\n");
        for (size_t k = 0; k < t->n_python; k++)
            fprintf(out, "    %s (%s:%d)\n", t->python[k].function ? t->python[k].function : "?",
                    t->python[k].file ? t->python[k].file : "?", t->python[k].line);
        if (t->n_native > 0)
            fprintf(out, "  native:\n");
        for (size_t k = 0; k < t->n_native; k++)
            fprintf(out, "    #%-2zu %s+0x%llx (%s)\n", k,
                    t->native[k].function ? t->native[k].function : "??",
                    (unsigned long long)t->native[k].offset, base_name(t->native[k].file));
        if (t->n_kernel > 0)
            fprintf(out, "  kernel:\n");
        for (size_t k = 0; k < t->n_kernel; k++)
            fprintf(out, "    %s\n", t->kernel[k]);
    }
}

void
xmp_stacks_print(const struct xmp_stack_proc *p, FILE *out)
{
    print_proc(p, out);
    for (size_t i = 0; i < p->n_children; i++) {
        fprintf(out, "\n--- its process ");
        print_proc(&p->children[i], out);
    }
}

static json_t *
str_json(const char *s)
{
    return s != NULL && s[0] != '\0' ? json_string(s) : json_null();
}

json_t *
xmp_stacks_to_json(const struct xmp_stack_proc *p)
{
    json_t *threads = json_array(), *out;

    for (size_t i = 0; i < p->n_threads; i++) {
        const struct xmp_stack_thread *t = &p->threads[i];
        json_t *kernel = json_array(), *native = json_array(), *python = json_array();
        char state[2] = {t->state, '\0'};
        for (size_t k = 0; k < t->n_kernel; k++)
            json_array_append_new(kernel, json_string(t->kernel[k]));
        for (size_t k = 0; k < t->n_native; k++)
            json_array_append_new(native, json_pack("{s:o, s:o, s:I}", "function",
                                                    str_json(t->native[k].function), "module",
                                                    str_json(t->native[k].file), "offset",
                                                    (json_int_t)t->native[k].offset));
        for (size_t k = 0; k < t->n_python; k++)
            json_array_append_new(
                python,
                json_pack("{s:o, s:o, s:o}", "function", str_json(t->python[k].function), "file",
                          str_json(t->python[k].file), "line",
                          t->python[k].line > 0 ? json_integer(t->python[k].line) : json_null()));
        json_array_append_new(threads,
                              json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:o, s:o}", "tid",
                                        (int)t->tid, "name", t->name, "state", str_json(state),
                                        "wchan", str_json(t->wchan), "kernel", kernel, "native",
                                        native, "python", python, "note", str_json(t->note)));
    }
    out = json_pack("{s:i, s:o, s:o, s:b, s:o, s:o}", "pid", (int)p->pid, "python",
                    str_json(p->python), "error", str_json(p->error), "truncated", p->truncated,
                    "threads", threads, "comm", str_json(p->comm));
    if (out != NULL && p->n_children > 0) {
        json_t *children = json_array();
        for (size_t i = 0; i < p->n_children; i++)
            json_array_append_new(children, xmp_stacks_to_json(&p->children[i]));
        json_object_set_new(out, "children", children);
    }
    return out;
}

static char *
dup_str(json_t *j)
{
    const char *s = json_string_value(j);
    return s != NULL ? strdup(s) : NULL;
}

static void
copy_str(char *dst, size_t size, json_t *j)
{
    const char *s = json_string_value(j);
    snprintf(dst, size, "%s", s != NULL ? s : "");
}

static struct xmp_stack_frame *
frames_from_json(json_t *arr, size_t *n, const char *file_key)
{
    struct xmp_stack_frame *f = calloc(json_array_size(arr) + 1, sizeof(*f));
    size_t i;
    json_t *e;

    *n = 0;
    if (f == NULL)
        return NULL;
    json_array_foreach(arr, i, e)
    {
        f[*n].function = dup_str(json_object_get(e, "function"));
        f[*n].file = dup_str(json_object_get(e, file_key));
        f[*n].offset = (uint64_t)json_integer_value(json_object_get(e, "offset"));
        f[*n].line = (int)json_integer_value(json_object_get(e, "line"));
        (*n)++;
    }
    return f;
}

/* Fills p (zeroed) from j; false when j is not a process's stacks. */
static bool
proc_from_json(json_t *j, struct xmp_stack_proc *p)
{
    json_t *threads = json_object_get(j, "threads"), *t, *children = json_object_get(j, "children");
    size_t i;

    if (!json_is_object(j) || !json_is_array(threads))
        return false;
    p->pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
    p->truncated = json_is_true(json_object_get(j, "truncated"));
    copy_str(p->comm, sizeof(p->comm), json_object_get(j, "comm"));
    copy_str(p->python, sizeof(p->python), json_object_get(j, "python"));
    copy_str(p->error, sizeof(p->error), json_object_get(j, "error"));
    if (json_array_size(children) > 0 &&
        (p->children = calloc(json_array_size(children), sizeof(*p->children))) != NULL)
        json_array_foreach(children, i, t) if (proc_from_json(t, &p->children[p->n_children]))
            p->n_children++;
    p->threads = calloc(json_array_size(threads) + 1, sizeof(*p->threads));
    if (p->threads == NULL)
        return true;
    json_array_foreach(threads, i, t)
    {
        struct xmp_stack_thread *th = &p->threads[p->n_threads++];
        json_t *kernel = json_object_get(t, "kernel"), *k;
        size_t ki;
        th->tid = (pid_t)json_integer_value(json_object_get(t, "tid"));
        copy_str(th->name, sizeof(th->name), json_object_get(t, "name"));
        th->state = json_is_string(json_object_get(t, "state"))
                        ? json_string_value(json_object_get(t, "state"))[0]
                        : 0;
        copy_str(th->wchan, sizeof(th->wchan), json_object_get(t, "wchan"));
        copy_str(th->note, sizeof(th->note), json_object_get(t, "note"));
        th->kernel = calloc(json_array_size(kernel) + 1, sizeof(char *));
        json_array_foreach(kernel, ki, k) if (th->kernel != NULL && json_is_string(k))
            th->kernel[th->n_kernel++] = strdup(json_string_value(k));
        th->native = frames_from_json(json_object_get(t, "native"), &th->n_native, "module");
        th->python = frames_from_json(json_object_get(t, "python"), &th->n_python, "file");
    }
    return true;
}

struct xmp_stack_proc *
xmp_stacks_from_json(json_t *j)
{
    struct xmp_stack_proc *p = calloc(1, sizeof(*p));

    if (p != NULL && !proc_from_json(j, p)) {
        free(p);
        return NULL;
    }
    return p;
}
