/* A seccomp profile file (SPEC.md section 7), read with the spec's YAML tree and checks, so that
 * its errors have the spec's quality (file:line:col, hints, all at once, exit 2):
 *   {default_action: allow|errno|kill|log,
 *    syscalls: [{names: [..], action: allow|errno|kill|log, errno: EPERM}]}
 * Names are resolved here; isolate/seccomp.c gets plain numbers. */
#define _GNU_SOURCE /* strerrorname_np */
#include "runner/spec/seccomp_profile.h"

#include "isolate/cleanup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct xmp_keydef rule_keys[] = {{"names"}, {"action"}, {"errno"}};
static const struct xmp_keydef profile_keys[] = {{"default_action"}, {"syscalls"}};
static const char *const action_names[] = {"allow", "errno", "kill", "log"};
static const enum xmp_scmp_action actions[] = {XMP_SCMP_ALLOW, XMP_SCMP_ERRNO, XMP_SCMP_KILL,
                                               XMP_SCMP_LOG};

/* An errno by name ("EPERM") or number (1-4095, what seccomp can return). */
static bool
check_errno(struct xmp_check *c, const struct xmp_node *n, const char *path, int *out)
{
    char got[128];
    long v;

    if (n->kind == XMP_NODE_SCALAR && n->text[0] >= '0' && n->text[0] <= '9') {
        if (!xmp_check_int(c, n, path, 1, 4095, false, 0, &v))
            return false;
        *out = (int)v;
        return true;
    }
    if (n->kind == XMP_NODE_SCALAR) {
        const char *names[134];
        size_t count = 0;
        for (int e = 1; e < 134; e++) {
            const char *name = strerrorname_np(e);
            if (name == NULL)
                continue;
            if (strcmp(name, n->text) == 0) {
                *out = e;
                return true;
            }
            names[count++] = name;
        }
        const char *hint = xmp_suggest(n->text, names, count);
        xmp_describe(n, got, sizeof(got));
        if (hint != NULL) {
            xmp_check_error(c, n, path, "unknown errno %s (did you mean \"%s\"?)", got, hint);
            return false;
        }
    }
    xmp_describe(n, got, sizeof(got));
    xmp_check_error(c, n, path, "expected an errno name (EPERM) or number, got %s", got);
    return false;
}

static void
unknown_syscall(struct xmp_check *c, const struct xmp_node *n, const char *path)
{
    size_t count = 0;
    char **names = xmp_seccomp_names(&count);
    const char *hint =
        names != NULL ? xmp_suggest(n->text, (const char *const *)names, count) : NULL;
    char clipped[80];

    xmp_clip(n->text, clipped, sizeof(clipped));
    if (hint != NULL)
        xmp_check_error(c, n, path, "unknown syscall \"%s\" (did you mean \"%s\"?)", clipped, hint);
    else
        xmp_check_error(c, n, path, "unknown syscall \"%s\"", clipped);
    xmp_seccomp_names_free(names);
}

struct seen {
    int nr;
    size_t rule;
};

static void
check_rule(struct xmp_check *c, const struct xmp_node *n, size_t index, struct xmp_scmp_profile *p,
           struct seen *seen, size_t *n_seen)
{
    const struct xmp_node *v[3];
    char path[64], ipath[96], got[128];
    enum xmp_scmp_action action = XMP_SCMP_ALLOW;
    int idx, errnum = EPERM;
    bool ok = true;

    snprintf(path, sizeof(path), "syscalls[%zu]", index);
    if (!xmp_check_map(c, n, path, rule_keys, 3, v))
        return;
    snprintf(ipath, sizeof(ipath), "%s.action", path);
    if (v[1] == NULL) {
        xmp_check_error(c, n, path, "action is missing (allow, errno, kill or log)");
        ok = false;
    } else if (xmp_check_enum(c, v[1], ipath, action_names, 4, &idx)) {
        action = actions[idx];
    } else {
        ok = false;
    }
    if (v[2] != NULL) {
        snprintf(ipath, sizeof(ipath), "%s.errno", path);
        if (ok && action != XMP_SCMP_ERRNO) {
            xmp_check_error(c, v[2], ipath, "only valid with action: errno");
            ok = false;
        } else if (!check_errno(c, v[2], ipath, &errnum)) {
            ok = false;
        }
    }
    snprintf(ipath, sizeof(ipath), "%s.names", path);
    if (v[0] == NULL) {
        xmp_check_error(c, n, path, "names is missing (a list of syscall names)");
        return;
    }
    if (v[0]->kind != XMP_NODE_SEQ || v[0]->n_items == 0) {
        xmp_describe(v[0], got, sizeof(got));
        xmp_check_error(c, v[0], ipath, "expected a non-empty list of syscall names, got %s", got);
        return;
    }
    for (size_t i = 0; i < v[0]->n_items; i++) {
        const struct xmp_node *item = v[0]->items[i];
        const char *name;
        char npath[160];
        int nr;
        snprintf(npath, sizeof(npath), "%s[%zu]", ipath, i);
        if (!xmp_check_string(c, item, npath, false, &name))
            continue;
        nr = xmp_seccomp_resolve(name);
        if (nr == -1) {
            unknown_syscall(c, item, npath);
            continue;
        }
        for (size_t k = 0; k < *n_seen; k++) {
            if (seen[k].nr == nr) {
                xmp_check_error(c, item, npath, "%s is already listed in syscalls[%zu]", name,
                                seen[k].rule);
                nr = -1;
                break;
            }
        }
        if (nr == -1)
            continue;
        seen[(*n_seen)++] = (struct seen){nr, index};
        if (ok)
            p->rules[p->n_rules++] = (struct xmp_scmp_rule){nr, action, errnum};
    }
}

void
xmp_seccomp_profile_check(struct xmp_check *c, const struct xmp_node *at, const char *path,
                          struct xmp_scmp_profile *out)
{
    struct xmp_tree t = {0};
    struct xmp_check pc = {c->ds, true};
    cleanup_free char *text = NULL;
    cleanup_free struct seen *seen = NULL;
    const struct xmp_node *root = NULL, *v[2];
    size_t len = 0, total = 0, n_seen = 0;
    struct stat st;
    char got[128];
    int idx;

    memset(out, 0, sizeof(*out));
    out->default_errnum = EPERM;
    /* A missing file is the spec's error, at the line that names it. */
    bool found = stat(path, &st) == 0;
    if (!found || S_ISDIR(st.st_mode)) {
        xmp_clip(path, got, sizeof(got));
        xmp_check_error(c, at, "isolation.seccomp", "cannot read the profile \"%s\": %s", got,
                        found ? "it is a directory" : strerror(errno));
        return;
    }
    text = xmp_spec_read_file(c->ds, path, "seccomp profile", &len);
    if (text == NULL)
        return;
    if (xmp_tree_parse(&t, c->ds, path, text, len, 0, 0, NULL, (struct xmp_node **)&root) < 0)
        goto done;
    if (root == NULL || root->kind != XMP_NODE_MAP) {
        if (root != NULL)
            xmp_describe(root, got, sizeof(got));
        xmp_sink_add(c->ds, path, root ? root->line : 1, root ? root->col : 1,
                     "a seccomp profile is a mapping {default_action, syscalls}, got %s",
                     root ? got : "an empty file");
        goto done;
    }
    if (!xmp_check_map(&pc, root, "", profile_keys, 2, v))
        goto done;
    if (v[0] == NULL)
        xmp_sink_add(c->ds, path, root->line, root->col,
                     "default_action: required key is missing (allow, errno, kill or log)");
    else if (xmp_check_enum(&pc, v[0], "default_action", action_names, 4, &idx))
        out->default_action = actions[idx];
    if (v[1] == NULL || xmp_node_is_null(v[1]))
        goto done;
    if (v[1]->kind != XMP_NODE_SEQ) {
        xmp_describe(v[1], got, sizeof(got));
        xmp_check_error(&pc, v[1], "syscalls", "expected a list of rules, got %s", got);
        goto done;
    }
    for (size_t i = 0; i < v[1]->n_items; i++)
        if (v[1]->items[i]->kind == XMP_NODE_MAP)
            for (size_t k = 0; k < v[1]->items[i]->n_pairs; k++)
                if (v[1]->items[i]->pairs[k].value->kind == XMP_NODE_SEQ)
                    total += v[1]->items[i]->pairs[k].value->n_items;
    out->rules = xmp_xcalloc(total + 1, sizeof(*out->rules));
    seen = xmp_xcalloc(total + 1, sizeof(*seen));
    for (size_t i = 0; i < v[1]->n_items; i++)
        check_rule(&pc, v[1]->items[i], i, out, seen, &n_seen);
done:
    xmp_tree_free(&t);
}
