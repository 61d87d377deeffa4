/* Typed checks of single spec values (integers, booleans, enums, strings, quantities, CPU lists)
 * with the key path and position of the offending node in every message. spec_validate.c walks
 * the mappings and calls these; each reports its own problem and returns false. */
#include "runner/spec/spec_check.h"

#include "runner/spec/quantity.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void
xmp_check_error(struct xmp_check *c, const struct xmp_node *n, const char *path, const char *fmt,
                ...)
{
    char msg[448];
    va_list ap;

    /* Past the cap an error is only counted; formatting it would be wasted work. */
    if (c->ds->n >= XMP_SPEC_MAX_COLLECTED) {
        c->ds->dropped++;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    xmp_sink_add(c->ds, n->file, n->line, n->col, "%s: %s", path, msg);
}

void
xmp_clip(const char *text, char *buf, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; text[i] != '\0' && o + 5 < size; i++) {
        unsigned char ch = (unsigned char)text[i];
        /* Cut only between UTF-8 characters, so that the message stays valid text. */
        if (i >= 60 && (ch & 0xc0) != 0x80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        buf[o++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
    }
    buf[o] = '\0';
}

void
xmp_describe(const struct xmp_node *n, char *buf, size_t size)
{
    char clipped[80];

    if (n->kind == XMP_NODE_MAP) {
        snprintf(buf, size, "a mapping");
    } else if (n->kind == XMP_NODE_SEQ) {
        snprintf(buf, size, "a list");
    } else if (xmp_node_is_null(n)) {
        snprintf(buf, size, "null");
    } else {
        xmp_clip(n->text, clipped, sizeof(clipped));
        snprintf(buf, size, "%s\"%s\"", n->quoted ? "the string " : "", clipped);
    }
}

const char *
xmp_suggest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    size_t len = strlen(word);

    for (size_t i = 0; i < n; i++) {
        size_t d = strcasecmp(word, names[i]) == 0 ? 0 : xmp_edit_distance(word, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    /* Short words are one edit away from many keys; only hint when the edit is a small part of
     * what was written. */
    if (best_d <= 2 && best_d * 2 <= len)
        return best;
    return NULL;
}

static bool
is_scalar(const struct xmp_node *n)
{
    return n->kind == XMP_NODE_SCALAR && !xmp_node_is_null(n);
}

/* A plain decimal integer: optional sign, digits; "0x10" is not one. Leading zeros are refused
 * by the caller: YAML 1.1 tools (PyYAML) read "010" as octal 8 and YAML 1.2 ones as 10, so
 * either reading would surprise someone. */
static bool
looks_int(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    return *s != '\0' && strspn(s, "0123456789") == strlen(s);
}

bool
xmp_check_int(struct xmp_check *c, const struct xmp_node *n, const char *path, long min, long max,
              bool allow_auto, long auto_value, long *out)
{
    char expect[96], got[128];
    const char *digits;
    long long v = 0;
    bool overflow = false;

    if (max == INT_MAX)
        snprintf(expect, sizeof(expect), "an integer >= %ld%s", min,
                 allow_auto ? " or \"auto\"" : "");
    else
        snprintf(expect, sizeof(expect), "an integer from %ld to %ld%s", min, max,
                 allow_auto ? " or \"auto\"" : "");
    if (allow_auto && n->kind == XMP_NODE_SCALAR && strcmp(n->text, "auto") == 0) {
        *out = auto_value;
        return true;
    }
    xmp_describe(n, got, sizeof(got));
    if (!is_scalar(n) || !looks_int(n->text)) {
        xmp_check_error(c, n, path, "expected %s, got %s", expect, got);
        return false;
    }
    if (n->quoted) {
        xmp_check_error(c, n, path, "expected %s, got %s (remove the quotes)", expect, got);
        return false;
    }
    digits = n->text + (n->text[0] == '-' || n->text[0] == '+');
    if (digits[0] == '0' && digits[1] != '\0') {
        xmp_check_error(c, n, path, "expected %s, got %s (leading zeros are not allowed)", expect,
                        got);
        return false;
    }
    for (const char *p = digits; *p; p++) {
        if (v > (LLONG_MAX - 9) / 10) {
            overflow = true;
            break;
        }
        v = v * 10 + (*p - '0');
    }
    if (n->text[0] == '-')
        v = -v;
    if (overflow || v > max) {
        char clipped[80];
        xmp_clip(n->text, clipped, sizeof(clipped));
        if (n->text[0] == '-')
            xmp_check_error(c, n, path, "expected %s, got %s", expect, got);
        else
            xmp_check_error(c, n, path, "%s is too large (maximum %ld)", clipped, max);
        return false;
    }
    if (v < min) {
        xmp_check_error(c, n, path, "expected %s, got %s", expect, got);
        return false;
    }
    *out = (long)v;
    return true;
}

bool
xmp_check_bool(struct xmp_check *c, const struct xmp_node *n, const char *path, bool *out)
{
    static const char *const yes[] = {"yes", "Yes", "YES", "on", "On", "ON", "y", "Y"};
    static const char *const no[] = {"no", "No", "NO", "off", "Off", "OFF", "n", "N"};
    char got[128];
    bool t, f;

    xmp_describe(n, got, sizeof(got));
    if (!is_scalar(n)) {
        xmp_check_error(c, n, path, "expected true or false, got %s", got);
        return false;
    }
    t = strcmp(n->text, "true") == 0 || strcmp(n->text, "True") == 0 ||
        strcmp(n->text, "TRUE") == 0;
    f = strcmp(n->text, "false") == 0 || strcmp(n->text, "False") == 0 ||
        strcmp(n->text, "FALSE") == 0;
    if ((t || f) && n->quoted) {
        xmp_check_error(c, n, path, "expected true or false, got %s (remove the quotes)", got);
        return false;
    }
    if (t || f) {
        *out = t;
        return true;
    }
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(n->text, yes[i]) == 0 || strcmp(n->text, no[i]) == 0) {
            xmp_check_error(c, n, path, "expected true or false, got %s (write %s)", got,
                            strcmp(n->text, yes[i]) == 0 ? "true" : "false");
            return false;
        }
    }
    xmp_check_error(c, n, path, "expected true or false, got %s", got);
    return false;
}

static bool
is_false_word(const char *s)
{
    static const char *const words[] = {"false", "False", "FALSE", "no", "No", "NO", "n", "N"};

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(s, words[i]) == 0)
            return true;
    return false;
}

bool
xmp_check_enum(struct xmp_check *c, const struct xmp_node *n, const char *path,
               const char *const *names, size_t count, int *out)
{
    char expect[160] = "", got[128];
    const char *hint = NULL;
    size_t o = 0;

    if (is_scalar(n)) {
        for (size_t i = 0; i < count; i++) {
            if (strcmp(n->text, names[i]) == 0) {
                *out = (int)i;
                return true;
            }
        }
        hint = xmp_suggest(n->text, names, count);
        /* "cgroups: false" or "seccomp: no" mean the value spelled "off". */
        for (size_t i = 0; hint == NULL && i < count; i++)
            if (strcmp(names[i], "off") == 0 && is_false_word(n->text))
                hint = names[i];
    }
    for (size_t i = 0; i < count && o < sizeof(expect); i++) {
        int w = snprintf(expect + o, sizeof(expect) - o, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
    xmp_describe(n, got, sizeof(got));
    if (hint != NULL)
        xmp_check_error(c, n, path, "expected one of %s, got %s (did you mean \"%s\"?)", expect,
                        got, hint);
    else
        xmp_check_error(c, n, path, "expected one of %s, got %s", expect, got);
    return false;
}

bool
xmp_check_string(struct xmp_check *c, const struct xmp_node *n, const char *path, bool allow_empty,
                 const char **out)
{
    char got[128];

    if (!is_scalar(n)) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, path, "expected a string, got %s", got);
        return false;
    }
    if (strlen(n->text) != n->len) {
        xmp_check_error(c, n, path, "must not contain NUL characters");
        return false;
    }
    if (!allow_empty && n->len == 0) {
        xmp_check_error(c, n, path, "must not be empty");
        return false;
    }
    *out = n->text;
    return true;
}

bool
xmp_check_memory(struct xmp_check *c, const struct xmp_node *n, const char *path, bool allow_zero,
                 int64_t *out)
{
    char got[128], msg[256];

    if (!is_scalar(n)) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, path, "expected a memory quantity (e.g. 8Gi), got %s", got);
        return false;
    }
    if (xmp_parse_memory(n->text, out, msg, sizeof(msg)) < 0) {
        xmp_check_error(c, n, path, "%s", msg);
        return false;
    }
    if (!allow_zero && *out == 0) {
        xmp_check_error(c, n, path, "must be greater than 0");
        return false;
    }
    return true;
}

bool
xmp_check_cpus(struct xmp_check *c, const struct xmp_node *n, const char *path, int64_t *out)
{
    char got[128], msg[256];

    if (!is_scalar(n)) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, path, "expected a CPU quantity (e.g. 4, 0.5 or 500m), got %s", got);
        return false;
    }
    if (xmp_parse_cpus(n->text, out, msg, sizeof(msg)) < 0) {
        xmp_check_error(c, n, path, "%s", msg);
        return false;
    }
    return true;
}

bool
xmp_check_duration(struct xmp_check *c, const struct xmp_node *n, const char *path, int64_t *out)
{
    char got[128], msg[256];

    if (!is_scalar(n)) {
        xmp_describe(n, got, sizeof(got));
        xmp_check_error(c, n, path, "expected a duration (e.g. 90s, 1h30m), got %s", got);
        return false;
    }
    if (xmp_parse_duration(n->text, out, msg, sizeof(msg)) < 0) {
        xmp_check_error(c, n, path, "%s", msg);
        return false;
    }
    return true;
}

/* Linux list format as the kernel's cpuset.cpus accepts it, within cpu_set_t's range. */
bool
xmp_check_cpulist(struct xmp_check *c, const struct xmp_node *n, const char *path)
{
    char clipped[80];
    const char *s = n->text;

    xmp_clip(n->text, clipped, sizeof(clipped));
    for (;;) {
        long lo, hi;
        char *end;
        if (*s < '0' || *s > '9')
            goto bad;
        lo = strtol(s, &end, 10);
        s = end;
        hi = lo;
        if (*s == '-') {
            s++;
            if (*s < '0' || *s > '9')
                goto bad;
            hi = strtol(s, &end, 10);
            s = end;
        }
        if (lo >= XMP_MAX_CPUS || hi >= XMP_MAX_CPUS) {
            xmp_check_error(c, n, path, "CPU %ld is out of range (at most %d)",
                            lo >= XMP_MAX_CPUS ? lo : hi, XMP_MAX_CPUS - 1);
            return false;
        }
        if (hi < lo) {
            xmp_check_error(c, n, path, "\"%s\" is not a CPU list (range %ld-%ld is descending)",
                            clipped, lo, hi);
            return false;
        }
        if (*s == '\0')
            return true;
        if (*s != ',')
            goto bad;
        s++;
    }
bad:
    xmp_check_error(c, n, path,
                    "\"%s\" is not a CPU list (expected auto, none or a list like \"0-7,16\")",
                    clipped);
    return false;
}

/* ---- mappings and their keys ---- */

/* The most keys a "did you mean" hint looks among (the spec's top level has 16). */
#define MAX_HINT_KEYS 16

void
xmp_join_path(char *buf, size_t size, const char *prefix, const char *key)
{
    char clipped[80];

    xmp_clip(key, clipped, sizeof(clipped));
    /* An empty key (YAML allows "": x) would vanish from the path. */
    snprintf(buf, size, "%s%s%s", prefix, prefix[0] ? "." : "", clipped[0] ? clipped : "\"\"");
}

const struct xmp_keydef *
xmp_find_key(const struct xmp_keydef *keys, size_t n, const char *name, size_t *index)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i].name, name) == 0) {
            *index = i;
            return &keys[i];
        }
    }
    return NULL;
}

/* The full path of the first key named word anywhere in the spec ("memory" ->
 * "resources.worker.memory"), for a key written at the wrong level. */
static bool
find_elsewhere(const struct xmp_keydef *keys, size_t n, const char *word, const char *prefix,
               char *out, size_t size)
{
    char path[128];

    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", keys[i].name);
        if (strcmp(keys[i].name, word) == 0) {
            snprintf(out, size, "%s", path);
            return true;
        }
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", keys[i].name);
        if (keys[i].sub != NULL &&
            find_elsewhere(keys[i].sub, keys[i].n_sub, word, path, out, size))
            return true;
    }
    return false;
}

void
xmp_unknown_key(struct xmp_diag_sink *ds, const char *file, int line, int col, const char *path,
                const char *word, const struct xmp_keydef *keys, size_t n,
                const struct xmp_keydef *root, size_t n_root)
{
    const char *names[MAX_HINT_KEYS];
    const char *hint;
    char where[128];

    for (size_t i = 0; i < n && i < MAX_HINT_KEYS; i++)
        names[i] = keys[i].name;
    hint = xmp_suggest(word, names, n < MAX_HINT_KEYS ? n : MAX_HINT_KEYS);
    if (hint != NULL)
        xmp_sink_add(ds, file, line, col, "%s: unknown key (did you mean \"%s\"?)", path, hint);
    else if (find_elsewhere(root, n_root, word, "", where, sizeof(where)))
        xmp_sink_add(ds, file, line, col, "%s: unknown key here (did you mean \"%s\"?)", path,
                     where);
    else
        xmp_sink_add(ds, file, line, col, "%s: unknown key", path);
}

static void
unknown_key(struct xmp_check *c, const struct xmp_node *key, const char *kpath,
            const struct xmp_keydef *keys, size_t n)
{
    const char *names[MAX_HINT_KEYS];
    const char *hint;

    if (!c->profile) {
        xmp_unknown_key(c->ds, key->file, key->line, key->col, kpath, key->text, keys, n,
                        c->spec_keys, c->n_spec_keys);
        return;
    }
    /* A profile's keys are few; a hint from the job spec's keys would mislead. */
    for (size_t i = 0; i < n && i < MAX_HINT_KEYS; i++)
        names[i] = keys[i].name;
    hint = xmp_suggest(key->text, names, n < MAX_HINT_KEYS ? n : MAX_HINT_KEYS);
    if (hint != NULL)
        xmp_check_error(c, key, kpath, "unknown key (did you mean \"%s\"?)", hint);
    else
        xmp_check_error(c, key, kpath, "unknown key");
}

bool
xmp_check_map(struct xmp_check *c, const struct xmp_node *node, const char *path,
              const struct xmp_keydef *keys, size_t n, const struct xmp_node **vals)
{
    char got[128], kpath[256];

    memset(vals, 0, n * sizeof(*vals));
    if (node->kind != XMP_NODE_MAP) {
        xmp_describe(node, got, sizeof(got));
        xmp_check_error(c, node, path, "expected a mapping, got %s", got);
        return false;
    }
    for (size_t i = 0; i < node->n_pairs; i++) {
        const struct xmp_node *key = node->pairs[i].key;
        size_t idx;
        xmp_join_path(kpath, sizeof(kpath), path, key->text);
        if (xmp_find_key(keys, n, key->text, &idx) == NULL)
            unknown_key(c, key, kpath, keys, n);
        else if (vals[idx] == NULL)
            vals[idx] = node->pairs[i].value;
    }
    return true;
}
