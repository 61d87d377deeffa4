/* YAML text -> positioned node tree, from libyaml's parser events: anchors and aliases (with an
 * expansion cap), merge keys, duplicate keys, one document only, and libyaml's own errors turned
 * into file:line:col diagnostics; and reading a spec or profile file, bounded. */
#include "runner/spec/spec_tree.h"

#include "isolate/array.h"
#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>
/* ---- anchors: name -> completed node, open addressing ---- */

struct anchor {
    char *name;
    struct xmp_node *node;
};

struct anchors {
    struct anchor *slots;
    size_t cap; /* power of two */
    size_t used;
};

static size_t
hash_name(const char *s)
{
    size_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static struct anchor *
anchor_slot(struct anchors *a, const char *name)
{
    size_t i = hash_name(name) & (a->cap - 1);

    while (a->slots[i].name != NULL && strcmp(a->slots[i].name, name) != 0)
        i = (i + 1) & (a->cap - 1);
    return &a->slots[i];
}

static void
anchor_set(struct anchors *a, const char *name, struct xmp_node *node)
{
    struct anchor *s;

    if (a->used * 2 >= a->cap) {
        struct anchors bigger = {NULL, a->cap ? a->cap * 2 : 16, 0};
        bigger.slots = xmp_tree_xrealloc_array(NULL, bigger.cap, sizeof(*bigger.slots));
        memset(bigger.slots, 0, bigger.cap * sizeof(*bigger.slots));
        for (size_t i = 0; i < a->cap; i++) {
            if (a->slots[i].name != NULL) {
                *anchor_slot(&bigger, a->slots[i].name) = a->slots[i];
                bigger.used++;
            }
        }
        free(a->slots);
        *a = bigger;
    }
    s = anchor_slot(a, name);
    if (s->name == NULL) {
        size_t len = strlen(name);
        s->name = xmp_tree_xmalloc(len + 1);
        memcpy(s->name, name, len + 1);
        a->used++;
    }
    /* YAML lets an anchor be redefined; later aliases refer to the latest definition. */
    s->node = node;
}

static struct xmp_node *
anchor_get(struct anchors *a, const char *name)
{
    return a->cap == 0 ? NULL : anchor_slot(a, name)->node;
}

static void
anchors_free(struct anchors *a)
{
    for (size_t i = 0; i < a->cap; i++)
        free(a->slots[i].name);
    free(a->slots);
}

/* ---- the event loop ---- */

struct frame {
    struct xmp_node *node;
    struct xmp_node *key; /* mapping: the key whose value is being read, or NULL */
    char *anchor;
};

struct builder {
    struct xmp_tree *t;
    struct xmp_diag_sink *ds;
    const char *file;
    const char *buf;
    size_t len;
    int fixed_line;
    int col_base;
    const char *prefix; /* "KEY: " for a --set value, else "" */
    struct frame *stack;
    size_t depth;
    size_t cap;
    struct xmp_node *root;
    size_t expanded;
    struct anchors anchors;
};

static void
position(const struct builder *b, yaml_mark_t m, int *line, int *col)
{
    if (b->fixed_line > 0) {
        /* libyaml puts the end of the stream on a new line; for a one-line value that is just
         * past its last character. */
        size_t column = m.line > 0 ? b->len : m.column;
        *line = b->fixed_line;
        *col = b->col_base + (column < INT32_MAX / 2 ? (int)column : INT32_MAX / 2) + 1;
    } else {
        *line = m.line < INT32_MAX ? (int)m.line + 1 : INT32_MAX;
        *col = m.column < INT32_MAX ? (int)m.column + 1 : INT32_MAX;
    }
}

/* The key path of the node being read, for messages: "resources.worker", "command[2]". */
static void
current_path(const struct builder *b, size_t depth, char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < depth && o < size; i++) {
        const struct frame *f = &b->stack[i];
        int n = 0;
        if (f->node->kind == XMP_NODE_SEQ)
            n = snprintf(buf + o, size - o, "[%zu]", f->node->n_items);
        else if (f->key != NULL && f->key->kind == XMP_NODE_SCALAR)
            n = snprintf(buf + o, size - o, "%s%s", o ? "." : "", f->key->text);
        else
            n = snprintf(buf + o, size - o, "%s?", o ? "." : "");
        if (n < 0)
            break;
        o += (size_t)n;
    }
}

static int
add_to_parent(struct builder *b, struct xmp_node *node)
{
    struct frame *f;

    if (b->depth == 0) {
        b->root = node;
        return 0;
    }
    f = &b->stack[b->depth - 1];
    if (f->node->kind == XMP_NODE_SEQ) {
        xmp_node_push_item(b->t, f->node, node);
    } else if (f->key == NULL) {
        if (node->kind != XMP_NODE_SCALAR) {
            char path[256];
            current_path(b, b->depth - 1, path, sizeof(path));
            xmp_sink_add(b->ds, b->file, node->line, node->col,
                         "%s%skeys must be plain strings, not %s", path, path[0] ? ": " : "",
                         node->kind == XMP_NODE_MAP ? "mappings" : "lists");
            return -1;
        }
        f->key = node;
    } else {
        xmp_node_push_pair(b->t, f->node, f->key, node);
        f->key = NULL;
    }
    return 0;
}

struct keyed {
    const struct xmp_pair *pair;
    bool explicit_key; /* written in this mapping, not brought in by a merge key */
};

static bool
same_key(const struct xmp_node *x, const struct xmp_node *y)
{
    return x->len == y->len && memcmp(x->text, y->text, x->len) == 0;
}

static size_t
hash_key(const struct xmp_node *key)
{
    size_t h = 1469598103934665603u;

    for (size_t i = 0; i < key->len; i++)
        h = (h ^ (unsigned char)key->text[i]) * 1099511628211u;
    return h;
}

static bool
is_merge_key(const struct xmp_node *key)
{
    return key->kind == XMP_NODE_SCALAR && !key->quoted && strcmp(key->text, "<<") == 0;
}

static void
push_keyed(struct keyed **list, size_t *n, size_t *cap, const struct xmp_pair *pair,
           bool explicit_key)
{
    if (!xmp_array_reserve(*list, *cap, *n + 1, 16))
        xmp_tree_out_of_memory();
    (*list)[*n].pair = pair;
    (*list)[*n].explicit_key = explicit_key;
    (*n)++;
}

static void
collect_merge_source(struct builder *b, const struct xmp_node *src, struct keyed **list, size_t *n,
                     size_t *cap)
{
    if (src->kind != XMP_NODE_MAP) {
        char path[256];
        current_path(b, b->depth - 1, path, sizeof(path));
        xmp_sink_add(b->ds, b->file, src->line, src->col,
                     "%s%s<<: a merge key takes a mapping or a list of mappings", path,
                     path[0] ? "." : "");
        return;
    }
    for (size_t i = 0; i < src->n_pairs; i++)
        push_keyed(list, n, cap, &src->pairs[i], false);
}

/* Applies merge keys (written keys win, then earlier sources, as YAML's merge key spec says)
 * and reports a duplicate written key at its second occurrence. A hash of the keys seen keeps
 * this linear for the 500k-key mappings a hostile file can hold. */
static void
finish_map(struct builder *b, struct xmp_node *map)
{
    struct keyed *list = NULL;
    size_t *seen = NULL; /* index + 1 into list, 0 = empty */
    size_t n = 0, cap = 0, kept = 0, mask;
    bool merged = false;

    for (size_t i = 0; i < map->n_pairs; i++) {
        if (is_merge_key(map->pairs[i].key))
            merged = true;
        else
            push_keyed(&list, &n, &cap, &map->pairs[i], true);
    }
    for (size_t i = 0; merged && i < map->n_pairs; i++) {
        const struct xmp_node *v = map->pairs[i].value;
        if (!is_merge_key(map->pairs[i].key))
            continue;
        if (v->kind == XMP_NODE_SEQ)
            for (size_t j = 0; j < v->n_items; j++)
                collect_merge_source(b, v->items[j], &list, &n, &cap);
        else
            collect_merge_source(b, v, &list, &n, &cap);
    }
    for (mask = 15; mask < 2 * n; mask = mask * 2 + 1)
        ;
    seen = xmp_xcalloc(mask + 1, sizeof(*seen));
    map->pairs = n > 0 ? xmp_tree_arena_alloc(b->t, n * sizeof(*map->pairs)) : NULL;
    map->weight = 1;
    for (size_t i = 0; i < n; i++) {
        const struct xmp_node *key = list[i].pair->key;
        size_t h = hash_key(key) & mask;
        while (seen[h] != 0 && !same_key(list[seen[h] - 1].pair->key, key))
            h = (h + 1) & mask;
        if (seen[h] != 0) {
            /* Written keys come first in list, so the first one is written too. */
            if (list[i].explicit_key) {
                char path[256];
                current_path(b, b->depth - 1, path, sizeof(path));
                xmp_sink_add(b->ds, b->file, key->line, key->col,
                             "%s%s%s: duplicate key (first defined at line %d)", path,
                             path[0] ? "." : "", key->text, list[seen[h] - 1].pair->key->line);
            }
            continue;
        }
        seen[h] = i + 1;
        map->pairs[kept++] = *list[i].pair;
        map->weight = xmp_tree_add_weight(
            map->weight, xmp_tree_add_weight(key->weight, list[i].pair->value->weight));
    }
    map->n_pairs = kept;
    map->cap = n;
    free(seen);
    free(list);
}

/* Byte offset of a libyaml mark: libyaml counts columns in characters, so walk the line. */
static size_t
mark_offset(const struct builder *b, size_t line, size_t column)
{
    size_t off = 0;

    for (size_t l = 0; l < line && off < b->len; off++)
        if (b->buf[off] == '\n')
            l++;
    while (column > 0 && off < b->len) {
        off++;
        while (off < b->len && ((unsigned char)b->buf[off] & 0xc0) == 0x80)
            off++;
        column--;
    }
    return off;
}

static void
report_yaml_error(struct builder *b, const yaml_parser_t *p)
{
    const char *problem = p->problem ? p->problem : "malformed input";
    int line = 1, col = 1;

    if (p->error == YAML_MEMORY_ERROR) {
        xmp_sink_add(b->ds, b->file, 0, 0, "out of memory while reading YAML");
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset only; libyaml's marks stop before the bad bytes. */
        size_t off = p->problem_offset < b->len ? p->problem_offset : b->len;
        size_t l = 0, start = 0, chars = 0;
        for (size_t i = 0; i < off; i++) {
            if (b->buf[i] == '\n') {
                l++;
                start = i + 1;
            }
        }
        for (size_t i = start; i < off; i++)
            if (((unsigned char)b->buf[i] & 0xc0) != 0x80)
                chars++;
        position(b, (yaml_mark_t){off, l, chars}, &line, &col);
        xmp_sink_add(b->ds, b->file, line, col, "%sinvalid YAML: %s%s", b->prefix, problem,
                     strstr(problem, "UTF") ? " (the spec must be UTF-8 text)" : "");
        return;
    }
    position(b, p->problem_mark, &line, &col);
    {
        size_t off = mark_offset(b, p->problem_mark.line, p->problem_mark.column);
        if (off < b->len && b->buf[off] == '\t') {
            xmp_sink_add(b->ds, b->file, line, col,
                         "%sinvalid YAML: tabs are not allowed for indentation; use spaces",
                         b->prefix);
            return;
        }
    }
    if (p->context != NULL && b->fixed_line == 0)
        xmp_sink_add(b->ds, b->file, line, col, "%sinvalid YAML: %s (%s at line %d, column %d)",
                     b->prefix, problem, p->context, (int)p->context_mark.line + 1,
                     (int)p->context_mark.column + 1);
    else if (p->context != NULL)
        xmp_sink_add(b->ds, b->file, line, col, "%sinvalid YAML: %s (%s)", b->prefix, problem,
                     p->context);
    else
        xmp_sink_add(b->ds, b->file, line, col, "%sinvalid YAML: %s", b->prefix, problem);
}

static int
push_frame(struct builder *b, struct xmp_node *node, const yaml_char_t *anchor, yaml_mark_t mark)
{
    if (b->depth >= XMP_SPEC_MAX_DEPTH) {
        int line, col;
        position(b, mark, &line, &col);
        xmp_sink_add(b->ds, b->file, line, col, "nesting is too deep (more than %d levels)",
                     XMP_SPEC_MAX_DEPTH);
        return -1;
    }
    if (!xmp_array_reserve(b->stack, b->cap, b->depth + 1, 16))
        xmp_tree_out_of_memory();
    b->stack[b->depth].node = node;
    b->stack[b->depth].key = NULL;
    b->stack[b->depth].anchor = NULL;
    if (anchor != NULL) {
        size_t len = strlen((const char *)anchor);
        b->stack[b->depth].anchor = xmp_tree_xmalloc(len + 1);
        memcpy(b->stack[b->depth].anchor, anchor, len + 1);
    }
    b->depth++;
    return 0;
}

static bool
is_str_tag(const yaml_char_t *tag)
{
    return tag != NULL &&
           (strcmp((const char *)tag, YAML_STR_TAG) == 0 || strcmp((const char *)tag, "!") == 0);
}

/* Handles one event; returns 1 at the end of the stream, 0 to go on, -1 on a fatal error. */
static int
handle_event(struct builder *b, yaml_event_t *ev, int *docs)
{
    struct xmp_node *node = NULL;
    int line, col;

    position(b, ev->start_mark, &line, &col);
    if (b->t->n_nodes > XMP_SPEC_MAX_NODES) {
        xmp_sink_add(b->ds, b->file, line, col, "the spec has too many YAML nodes (more than %d)",
                     XMP_SPEC_MAX_NODES);
        return -1;
    }
    switch (ev->type) {
    case YAML_NO_EVENT:
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
        return 0;
    case YAML_STREAM_END_EVENT:
        return 1;
    case YAML_DOCUMENT_START_EVENT:
        if (++*docs > 1) {
            xmp_sink_add(b->ds, b->file, line, col,
                         "the spec must be a single YAML document (a second one starts here)");
            return -1;
        }
        return 0;
    case YAML_ALIAS_EVENT:
        node = anchor_get(&b->anchors, (const char *)ev->data.alias.anchor);
        if (node == NULL) {
            xmp_sink_add(b->ds, b->file, line, col, "invalid YAML: unknown alias *%s",
                         (const char *)ev->data.alias.anchor);
            return -1;
        }
        b->expanded = xmp_tree_add_weight(b->expanded, node->weight);
        if (b->expanded > XMP_SPEC_MAX_ALIAS_NODES) {
            xmp_sink_add(b->ds, b->file, line, col,
                         "aliases expand to more than %d nodes (an alias bomb?)",
                         XMP_SPEC_MAX_ALIAS_NODES);
            return -1;
        }
        {
            /* A positioned reference, so that "report: *cmd" is reported where it is used. */
            struct xmp_node *ref = xmp_tree_new_node(b->t, node->kind, b->file, line, col);
            *ref = *node;
            ref->line = line;
            ref->col = col;
            /* Full, so that anything added to it gets its own array and the anchor's stays. */
            ref->cap = node->kind == XMP_NODE_SEQ ? node->n_items : node->n_pairs;
            return add_to_parent(b, ref);
        }
    case YAML_SCALAR_EVENT:
        node = xmp_tree_new_scalar(
            b->t, b->file, line, col, (const char *)ev->data.scalar.value, ev->data.scalar.length,
            ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || is_str_tag(ev->data.scalar.tag));
        if (ev->data.scalar.anchor != NULL)
            anchor_set(&b->anchors, (const char *)ev->data.scalar.anchor, node);
        return add_to_parent(b, node);
    case YAML_SEQUENCE_START_EVENT:
        node = xmp_tree_new_node(b->t, XMP_NODE_SEQ, b->file, line, col);
        return push_frame(b, node, ev->data.sequence_start.anchor, ev->start_mark);
    case YAML_MAPPING_START_EVENT:
        node = xmp_tree_new_node(b->t, XMP_NODE_MAP, b->file, line, col);
        return push_frame(b, node, ev->data.mapping_start.anchor, ev->start_mark);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        struct frame f = b->stack[b->depth - 1];
        if (f.node->kind == XMP_NODE_MAP)
            finish_map(b, f.node);
        b->depth--;
        if (f.anchor != NULL)
            anchor_set(&b->anchors, f.anchor, f.node);
        free(f.anchor);
        return add_to_parent(b, f.node);
    }
    }
    return 0;
}

int
xmp_tree_parse(struct xmp_tree *t, struct xmp_diag_sink *ds, const char *file, const char *buf,
               size_t len, int fixed_line, int col_base, const char *key, struct xmp_node **root)
{
    char prefix[160];
    struct builder b = {.prefix = prefix,
                        .t = t,
                        .ds = ds,
                        .file = file,
                        .buf = buf,
                        .len = len,
                        .fixed_line = fixed_line,
                        .col_base = col_base};
    yaml_parser_t parser;
    int docs = 0;
    int rc = 0;

    *root = NULL;
    prefix[0] = '\0';
    if (key != NULL)
        snprintf(prefix, sizeof(prefix), "%.140s: ", key);
    if (!yaml_parser_initialize(&parser)) {
        xmp_sink_add(ds, file, 0, 0, "out of memory while reading YAML");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            report_yaml_error(&b, &parser);
            rc = -1;
            break;
        }
        rc = handle_event(&b, &ev, &docs);
        yaml_event_delete(&ev);
        if (rc != 0)
            break;
    }
    yaml_parser_delete(&parser);
    for (size_t i = 0; i < b.depth; i++)
        free(b.stack[i].anchor);
    free(b.stack);
    anchors_free(&b.anchors);
    if (rc < 0)
        return -1;
    *root = b.root;
    return 0;
}

char *
xmp_spec_read_file(struct xmp_diag_sink *ds, const char *path, const char *what, size_t *len)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    cleanup_free char *buf = NULL;
    size_t size = 0, cap = 0;
    struct stat st;

    if (fd < 0 || fstat(fd, &st) < 0) {
        xmp_sink_add(ds, path, 0, 0, "cannot read the %s: %s", what, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        xmp_sink_add(ds, path, 0, 0, "cannot read the %s: it is a directory", what);
        return NULL;
    }
    for (;;) {
        ssize_t n;
        if (size == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > XMP_SPEC_MAX_BYTES + 1)
                cap = XMP_SPEC_MAX_BYTES + 1;
            buf = realloc(buf, cap + 1);
            if (buf == NULL)
                abort();
        }
        if (size >= XMP_SPEC_MAX_BYTES + 1)
            break;
        n = read(fd, buf + size, cap - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            xmp_sink_add(ds, path, 0, 0, "cannot read the %s: %s", what, strerror(errno));
            return NULL;
        }
        if (n == 0)
            break;
        size += (size_t)n;
    }
    if (size > XMP_SPEC_MAX_BYTES) {
        xmp_sink_add(ds, path, 0, 0, "the %s is too large (more than %u MiB)", what,
                     XMP_SPEC_MAX_BYTES >> 20);
        return NULL;
    }
    buf[size] = '\0';
    *len = size;
    return steal_pointer(&buf);
}
