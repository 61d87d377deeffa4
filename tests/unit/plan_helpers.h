/* Helpers shared by the plan tests: SPEC.md's defaults for an in-memory spec, fixture hosts,
 * building plans that must succeed or fail, and reading a worker's environment. */
#ifndef XMP_TEST_PLAN_HELPERS_H
#define XMP_TEST_PLAN_HELPERS_H

#include "helpers/testlib.h"
#include "runner/plan/plan.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *default_command[] = {"python3", "train.py", NULL};

/* A spec as the parser leaves it for a file with only version, name and command. */
static inline void
spec_defaults(struct xmp_spec *s)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->file, sizeof(s->file), "job.yaml");
    s->version = 1;
    s->name = "train";
    s->command = default_command;
    s->command_len = 2;
    s->workdir = "/work/job";
    s->inherit_env = true;
    s->workers = 0;
    s->device_kind = XMP_DEVICE_AUTO;
    s->per_worker = 1;
    s->worker.memory = s->worker.memory_high = s->worker.swap = -1;
    s->worker.cpus_milli = -1;
    s->worker.pids = -1;
    s->worker.cpuset_mode = XMP_CPUSET_AUTO;
    s->job_memory = s->shared_memory = -1;
    s->no_new_privs = true;
    s->devices = XMP_DEVICES_OFF; /* the tests that want rules say which */
    s->grace_ms = 5000;
    s->log_tail = 40;
    s->nnodes = 1;
    s->node_rank = 0;
    s->master_port = 29500;
}

static struct xmp_host host;

static inline void
load_host(const char *name)
{
    char root[4096];
    struct xmp_error err = {0};

    snprintf(root, sizeof(root), "%s/hosts/%s", xt_fixtures(), name);
    cr_assert_eq(xmp_host_discover(root, &host, &err), 0, "%s", err.msg);
}

/* mkdir -p of the directory part of root/rel, then writes text there. */
static inline void
put(const char *root, const char *rel, const char *text)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
        *p = '/';
    }
    free(xt_write_file(root, rel, text));
}

/* A host of 4 cores with 2 threads each (siblings c and c+4), no accelerators. */
static inline char *
load_smt_host(void)
{
    char *root = xt_tmpdir();
    struct xmp_error err = {0};

    put(root, "sys/devices/system/cpu/online", "0-7\n");
    for (int c = 0; c < 8; c++) {
        char rel[128], list[32];
        snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        snprintf(list, sizeof(list), "%d,%d\n", c % 4, c % 4 + 4);
        put(root, rel, list);
    }
    cr_assert_eq(xmp_host_discover(root, &host, &err), 0, "%s", err.msg);
    return root;
}

static inline void
build(const struct xmp_spec *spec, char **env, struct xmp_plan *plan)
{
    struct xmp_error err = {0};
    char *empty[] = {NULL};

    cr_assert_eq(xmp_plan_build(spec, &host, env ? env : empty, 4242, plan, &err), 0, "%s",
                 err.msg);
}

static inline void
build_fails(const struct xmp_spec *spec, char **env, const char *needle)
{
    struct xmp_error err = {0};
    struct xmp_plan plan;
    char *empty[] = {NULL};

    cr_assert_eq(xmp_plan_build(spec, &host, env ? env : empty, 4242, &plan, &err), -1,
                 "must fail with \"%s\"", needle);
    cr_assert(strstr(err.msg, needle) != NULL, "\"%s\" not in: %s", needle, err.msg);
}

static inline const char *
wenv(const struct xmp_plan_worker *w, const char *name)
{
    for (size_t i = 0; i < w->env_len; i++)
        if (strcmp(w->env[i].name, name) == 0)
            return w->env[i].value;
    return NULL;
}

static inline void
assert_env(const struct xmp_plan_worker *w, const char *name, const char *want)
{
    const char *got = wenv(w, name);

    if (want == NULL) {
        cr_assert_null(got, "rank %d: %s should be unset, is \"%s\"", w->rank, name, got);
        return;
    }
    cr_assert_not_null(got, "rank %d: %s unset", w->rank, name);
    cr_assert_str_eq(got, want, "rank %d: %s", w->rank, name);
}

static inline void
assert_env_int(const struct xmp_plan_worker *w, const char *name, long want)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%ld", want);
    assert_env(w, name, buf);
}

static inline void
fini(void)
{
    xmp_host_free(&host);
}

#endif
