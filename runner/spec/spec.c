/* Job spec v1 (SPEC.md section 1): reads the file (or builds the spec-less form), lays --set
 * overrides onto the node tree, and validates the tree into struct xmp_spec, collecting every
 * error with its position. Node tree: spec_tree.c; validation: spec_validate.c and spec_check.c. */
#define _GNU_SOURCE /* asprintf */
#include "runner/spec/spec.h"

#include "isolate/cleanup.h"
#include "runner/spec/spec_validate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct xmp_node *
find_value(const struct xmp_node *map, const char *key, size_t *index)
{
    for (size_t i = 0; i < map->n_pairs; i++) {
        if (strcmp(map->pairs[i].key->text, key) == 0) {
            *index = i;
            return map->pairs[i].value;
        }
    }
    return NULL;
}

/* The value of one --set, parsed as YAML so that lists, numbers and quoting work as in the file.
 * An empty VALUE is the empty string, which is what `--set logs.dir=` means. */
static struct xmp_node *
parse_set_value(struct xmp_tree *t, struct xmp_diag_sink *ds, const char *key, const char *value,
                int line, int col_base)
{
    struct xmp_node *node = NULL;

    if (value[0] == '\0')
        return xmp_tree_new_scalar(t, "--set", line, col_base + 1, "", 0, true);
    if (xmp_tree_parse(t, ds, "--set", value, strlen(value), line, col_base, key, &node) < 0)
        return NULL;
    if (node == NULL)
        node = xmp_tree_new_scalar(t, "--set", line, col_base + 1, "", 0, false);
    return node;
}

/* Lays one KEY=VALUE onto the tree. Mappings on the way are copied before they change, because
 * an alias may share them with another part of the spec. */
static void
apply_set(struct xmp_tree *t, struct xmp_diag_sink *ds, struct xmp_node *root, const char *set,
          int line)
{
    const char *eq = strchr(set, '=');
    const struct xmp_keydef *keys = xmp_spec_keys;
    size_t n_keys = xmp_spec_n_keys, start = 0;
    bool any_keys = false, leaf = false;
    char key[256], path[256] = "", parent[256] = "", clipped[80];
    struct xmp_node *map = root, *value;

    if (eq == NULL || eq == set || (size_t)(eq - set) >= sizeof(key)) {
        xmp_clip(set, clipped, sizeof(clipped));
        xmp_sink_add(ds, "--set", line, 1,
                     "\"%s\": expected KEY=VALUE (e.g. resources.worker.memory=4Gi)", clipped);
        return;
    }
    memcpy(key, set, (size_t)(eq - set));
    key[eq - set] = '\0';
    xmp_clip(key, clipped, sizeof(clipped)); /* before the loop cuts key into segments */
    value = parse_set_value(t, ds, key, eq + 1, line, (int)(eq - set) + 1);
    for (;;) {
        size_t end = start + strcspn(key + start, ".");
        bool last = key[end] == '\0';
        const struct xmp_keydef *def = NULL;
        struct xmp_node *child;
        size_t idx;
        int col = (int)start + 1;
        key[end] = '\0';
        snprintf(parent, sizeof(parent), "%s", path);
        xmp_join_path(path, sizeof(path), parent, key + start);
        if (key[start] == '\0') {
            xmp_sink_add(ds, "--set", line, col, "\"%s\": empty key in the path", clipped);
            return;
        }
        if (leaf) {
            xmp_sink_add(ds, "--set", line, col, "%s: unknown key (%s is not a mapping)", path,
                         parent);
            return;
        }
        if (!any_keys && (def = xmp_find_key(keys, n_keys, key + start, &idx)) == NULL) {
            xmp_unknown_key(ds, "--set", line, col, path, key + start, keys, n_keys, xmp_spec_keys,
                            xmp_spec_n_keys);
            return;
        }
        if (last) {
            if (value == NULL)
                return;
            if (find_value(map, key + start, &idx) != NULL)
                map->pairs[idx].value = value;
            else
                xmp_node_push_pair(
                    t, map,
                    xmp_tree_new_scalar(t, "--set", line, col, key + start, end - start, false),
                    value);
            return;
        }
        leaf = any_keys || (def->sub == NULL && !def->any_keys);
        if (!leaf) {
            child = find_value(map, key + start, &idx);
            if (child != NULL && child->kind == XMP_NODE_MAP) {
                map->pairs[idx].value = xmp_tree_clone_map(t, child);
            } else if (child != NULL) {
                map->pairs[idx].value = xmp_tree_new_node(t, XMP_NODE_MAP, "--set", line, col);
            } else {
                child = xmp_tree_new_node(t, XMP_NODE_MAP, "--set", line, col);
                xmp_node_push_pair(
                    t, map,
                    xmp_tree_new_scalar(t, "--set", line, col, key + start, end - start, false),
                    child);
                idx = map->n_pairs - 1;
            }
            map = map->pairs[idx].value;
            keys = def->sub;
            n_keys = def->n_sub;
            any_keys = def->any_keys;
        }
        start = end + 1;
    }
}

/* `xmprun -n N -- CMD ARGS`: the spec a user would have written, as a tree, so that --set and
 * validation treat both forms alike. */
static struct xmp_node *
build_specless(struct xmp_tree *t, const struct xmp_spec_source *src)
{
    const char *file = "<command line>";
    struct xmp_node *root = xmp_tree_new_node(t, XMP_NODE_MAP, file, 0, 0);
    struct xmp_node *cmd = xmp_tree_new_node(t, XMP_NODE_SEQ, file, 0, 0);
    const char *base = src->argc > 0 && src->argv[0] ? strrchr(src->argv[0], '/') : NULL;
    char name[64], num[32];
    size_t o = 0;

    base = base ? base + 1 : (src->argc > 0 && src->argv[0] ? src->argv[0] : "");
    if (!((base[0] >= 'A' && base[0] <= 'Z') || (base[0] >= 'a' && base[0] <= 'z') ||
          (base[0] >= '0' && base[0] <= '9'))) {
        memcpy(name, "job", 3);
        o = 3;
    }
    for (; *base && o < sizeof(name) - 1; base++) {
        bool ok = strchr("._-", *base) != NULL || (*base >= 'A' && *base <= 'Z') ||
                  (*base >= 'a' && *base <= 'z') || (*base >= '0' && *base <= '9');
        name[o++] = ok ? *base : '-';
    }
    name[o] = '\0';
    for (size_t i = 0; i < src->argc; i++)
        xmp_node_push_item(t, cmd,
                           xmp_tree_new_scalar(t, file, 0, 0, src->argv[i] ? src->argv[i] : "",
                                               src->argv[i] ? strlen(src->argv[i]) : 0, true));
    if (src->workers != 0)
        snprintf(num, sizeof(num), "%ld", src->workers);
    else
        snprintf(num, sizeof(num), "auto");
#define PAIR(k, v)                                                                                 \
    xmp_node_push_pair(t, root, xmp_tree_new_scalar(t, file, 0, 0, k, strlen(k), false), v)
    PAIR("version", xmp_tree_new_scalar(t, file, 0, 0, "1", 1, false));
    PAIR("name", xmp_tree_new_scalar(t, file, 0, 0, name, strlen(name), true));
    PAIR("command", cmd);
    PAIR("workers", xmp_tree_new_scalar(t, file, 0, 0, num, strlen(num), false));
#undef PAIR
    return root;
}

/* Reads and parses the spec file into a tree whose root is a mapping, or reports why not. */
static struct xmp_node *
load_file(struct xmp_tree *t, struct xmp_diag_sink *ds, const struct xmp_spec_source *src,
          const char *file)
{
    cleanup_free char *owned = NULL;
    const char *text = src->text;
    size_t len = src->text_len;
    struct xmp_node *root = NULL;
    char got[128];

    if (text == NULL && src->path == NULL) {
        xmp_sink_add(ds, file, 0, 0, "no spec file or command given");
        return NULL;
    }
    if (text == NULL) {
        owned = xmp_spec_read_file(ds, src->path, "spec", &len);
        if (owned == NULL)
            return NULL;
        text = owned;
    }
    if (len > XMP_SPEC_MAX_BYTES) {
        xmp_sink_add(ds, file, 0, 0, "the spec is too large (more than %u MiB)",
                     XMP_SPEC_MAX_BYTES >> 20);
        return NULL;
    }
    if (xmp_tree_parse(t, ds, file, text, len, 0, 0, NULL, &root) < 0)
        return NULL;
    if (root == NULL || xmp_node_is_null(root)) {
        xmp_sink_add(ds, file, 1, 1,
                     "empty spec: a job spec is a mapping with at least version, name and command");
        return NULL;
    }
    if (root->kind != XMP_NODE_MAP) {
        xmp_describe(root, got, sizeof(got));
        xmp_sink_add(ds, file, root->line, root->col,
                     "the spec must be a mapping of keys (version, name, command, ...), got %s",
                     got);
        return NULL;
    }
    return root;
}

int
xmp_spec_load(const struct xmp_spec_source *src, struct xmp_spec *out, struct xmp_diags *diags)
{
    struct xmp_tree t = {0};
    struct xmp_diag_sink ds = {0};
    struct xmp_check c = {&ds, false, xmp_spec_keys, xmp_spec_n_keys};
    const char *file = src->argv != NULL ? "<command line>" : src->path ? src->path : "<input>";
    struct xmp_node *root;
    bool file_ok;
    char cwd[PATH_MAX];

    memset(out, 0, sizeof(*out));
    if (src->argv != NULL)
        root = build_specless(&t, src);
    else
        root = load_file(&t, &ds, src, file);
    /* --set errors are worth reporting even when the file is broken, so they go onto a scratch
     * mapping then. */
    file_ok = root != NULL;
    if (root == NULL)
        root = xmp_tree_new_node(&t, XMP_NODE_MAP, "--set", 0, 0);
    for (size_t i = 0; i < src->n_sets; i++)
        apply_set(&t, &ds, root, src->sets[i], (int)i + 1);
    if (file_ok) {
        snprintf(out->file, sizeof(out->file), "%s", file);
        if (src->cwd != NULL)
            snprintf(cwd, sizeof(cwd), "%s", src->cwd);
        else if (getcwd(cwd, sizeof(cwd)) == NULL)
            snprintf(cwd, sizeof(cwd), "/");
        xmp_spec_validate(&c, root, cwd, out);
    }
    xmp_tree_free(&t);
    if (ds.n > 0 || ds.dropped > 0) {
        xmp_sink_finish(&ds, diags);
        xmp_spec_free(out);
        return -1;
    }
    xmp_sink_finish(&ds, diags);
    return 0;
}

static void
free_strv(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

void
xmp_spec_free(struct xmp_spec *spec)
{
    if (spec == NULL)
        return;
    free(spec->name);
    free_strv(spec->command);
    free(spec->workdir);
    for (size_t i = 0; i < spec->env_len; i++) {
        free(spec->env[i].name);
        free(spec->env[i].value);
    }
    free(spec->env);
    free_strv(spec->device_ids);
    free(spec->worker.cpuset);
    free(spec->seccomp_profile);
    free(spec->seccomp_rules.rules);
    free(spec->user);
    free(spec->log_dir);
    free(spec->report);
    free(spec->master_addr);
    free(spec->run_id);
    memset(spec, 0, sizeof(*spec));
}
