/* Job spec parser on its other inputs: --set overrides (values, positions, unknown keys), the
 * spec-less `-n N -- CMD` form, and hostile text (10 MB, size and node caps, alias bombs, deep
 * nesting, unterminated buffers, unreadable files). */
#include "runner/spec/spec.h"
#include "unit/spec_helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- --set ---- */

Test(set, overrides_apply)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *sets[] = {"workers=4",       "command=[a, b]", "resources.worker.memory=4Gi",
                    "env.FOO=bar baz", "logs.dir=",      "distributed.master_port=1234",
                    "name=renamed",    "workers=2"};

    cr_assert_eq(load_sets(BASE "resources: {worker: {memory: 1Gi, cpus: 2}}\n", sets, 8, &s, &d),
                 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(s.workers, 2);
    cr_assert_eq(s.command_len, 2);
    cr_expect_str_eq(s.command[1], "b");
    cr_expect_eq(s.worker.memory, INT64_C(4) << 30);
    cr_expect_eq(s.worker.cpus_milli, 2000);
    cr_assert_eq(s.env_len, 1);
    cr_expect_str_eq(s.env[0].value, "bar baz");
    cr_expect_null(s.log_dir);
    cr_expect_eq(s.master_port, 1234);
    cr_expect_str_eq(s.name, "renamed");
    xmp_spec_free(&s);
}

Test(set, shared_alias_is_copied)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *sets[] = {"resources.worker.memory=3Gi"};

    /* worker and job share one mapping through an alias; overriding one must not change the
     * other. */
    cr_assert_eq(
        load_sets(BASE "resources:\n  worker: &m {memory: 1Gi}\n  job: *m\n", sets, 1, &s, &d), 0,
        "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(s.worker.memory, INT64_C(3) << 30);
    cr_expect_eq(s.job_memory, INT64_C(1) << 30);
    xmp_spec_free(&s);
}

static void
check_set_bad(char *set, int col, const char *msg)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *sets[] = {"workers=1", set};

    cr_assert_eq(load_sets(BASE, sets, 2, &s, &d), -1, "accepted --set %s", set);
    expect_first(&d, "--set", 2, col, msg);
}

Test(set, bad_value_position)
{
    check_set_bad("resources.worker.memory=8GB", 25,
                  "resources.worker.memory: \"8GB\" is not a memory quantity (use 8Gi or 8G)");
}

Test(set, unknown_key_did_you_mean)
{
    check_set_bad("resources.worker.memroy=1Gi", 18,
                  "resources.worker.memroy: unknown key (did you mean \"memory\"?)");
}

Test(set, unknown_top_key)
{
    check_set_bad("wrokers=2", 1, "wrokers: unknown key (did you mean \"workers\"?)");
}

Test(set, path_into_leaf)
{
    check_set_bad("name.first=x", 6, "name.first: unknown key (name is not a mapping)");
}

Test(set, no_equals)
{
    check_set_bad("workers", 1,
                  "\"workers\": expected KEY=VALUE (e.g. resources.worker.memory=4Gi)");
}

Test(set, empty_segment)
{
    check_set_bad("resources..memory=1", 11, "\"resources..memory\": empty key in the path");
}

Test(set, bad_yaml_value)
{
    check_set_bad("command=[a, b", 14,
                  "command: invalid YAML: did not find expected ',' or ']' (while parsing a flow "
                  "sequence)");
}

Test(set, reserved_env)
{
    check_set_bad("env.RANK=3", 5,
                  "env.RANK: RANK is set by xmprun for each worker and cannot be set in the spec");
}

Test(set, bad_int)
{
    check_set_bad("workers=-1", 9, "workers: expected an integer >= 1 or \"auto\", got \"-1\"");
}

Test(set, errors_even_when_the_file_is_broken)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *sets[] = {"timeuot=5s"};

    cr_assert_eq(load_sets("", sets, 1, &s, &d), -1);
    cr_assert_eq(d.count, 2);
    cr_expect_str_eq(d.items[0].file, "job.yaml");
    cr_expect_str_eq(d.items[1].file, "--set");
    cr_expect_str_eq(d.items[1].msg, "timeuot: unknown key (did you mean \"timeout\"?)");
}

/* ---- spec-less form ---- */

static int
load_argv(char *const *argv, size_t argc, long workers, char *const *sets, size_t n_sets,
          struct xmp_spec *s, struct xmp_diags *d)
{
    struct xmp_spec_source src = {.argv = argv,
                                  .argc = argc,
                                  .workers = workers,
                                  .sets = sets,
                                  .n_sets = n_sets,
                                  .cwd = "/tmp"};

    return xmp_spec_load(&src, s, d);
}

Test(specless, command_line)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *argv[] = {"/usr/bin/python3", "train.py", "--lr", "0.1"};

    cr_assert_eq(load_argv(argv, 4, 4, NULL, 0, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_str_eq(s.file, "<command line>");
    cr_expect_str_eq(s.name, "python3");
    cr_assert_eq(s.command_len, 4);
    cr_expect_str_eq(s.command[0], "/usr/bin/python3");
    cr_expect_str_eq(s.command[3], "0.1");
    cr_expect_not(s.command_shell);
    cr_expect_eq(s.workers, 4);
    cr_expect_str_eq(s.workdir, "/tmp");
    cr_expect_eq(s.grace_ms, 5000);
    xmp_spec_free(&s);
}

Test(specless, name_sanitized_and_sets_apply)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *argv[] = {"./.my tool@v2"};
    char *sets[] = {"resources.worker.memory=1Gi"};

    cr_assert_eq(load_argv(argv, 1, 0, sets, 1, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_str_eq(s.name, "job.my-tool-v2");
    cr_expect_eq(s.workers, 0);
    cr_expect_eq(s.worker.memory, INT64_C(1) << 30);
    xmp_spec_free(&s);
}

Test(specless, long_name_truncated)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char long_name[200];
    char *argv[] = {long_name};

    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    cr_assert_eq(load_argv(argv, 1, 2, NULL, 0, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(strlen(s.name), 63);
    xmp_spec_free(&s);
}

Test(specless, no_command)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *argv[] = {NULL};

    cr_assert_eq(load_argv(argv, 0, 2, NULL, 0, &s, &d), -1);
    expect_first(&d, "<command line>", 0, 0, "command: must not be an empty list");
}

/* ---- hostile input ---- */

/* CPU time, not wall time: the tests share two cores with other builds, and the limit is about
 * the parser's work. */
static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#if defined(__SANITIZE_ADDRESS__)
#define TIME_LIMIT_S 10.0
#else
#define TIME_LIMIT_S 1.0
#endif

Test(hostile, ten_megabytes_quickly, .timeout = 30)
{
    struct xmp_spec s;
    struct xmp_diags d;
    size_t cap = 11u << 20, o = 0;
    char *yaml = malloc(cap);
    size_t n = 0;
    double t0;

    cr_assert_not_null(yaml);
    o += (size_t)snprintf(yaml, cap, BASE "env:\n");
    for (; o < (10u << 20); n++)
        o += (size_t)snprintf(yaml + o, cap - o, "  V%zu: \"%040zu\"\n", n, n);
    t0 = now_s();
    cr_assert_eq(load_len(yaml, o, NULL, 0, &s, &d), 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_lt(now_s() - t0, TIME_LIMIT_S);
    cr_expect_eq(s.env_len, n);
    xmp_spec_free(&s);
    free(yaml);
}

Test(hostile, over_the_size_cap)
{
    struct xmp_spec s;
    struct xmp_diags d;
    size_t len = (16u << 20) + 1;
    char *yaml = malloc(len);

    cr_assert_not_null(yaml);
    memset(yaml, '#', len);
    cr_assert_eq(load_len(yaml, len, NULL, 0, &s, &d), -1);
    expect_first(&d, "job.yaml", 0, 0, "the spec is too large (more than 16 MiB)");
    free(yaml);
}

Test(hostile, alias_bomb, .timeout = 10)
{
    struct xmp_spec s;
    struct xmp_diags d;
    const char *yaml = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                       "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                       "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                       "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                       "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                       "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";

    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), -1);
    /* a..d stand for 12330 nodes; each *d adds 11111 more, so the 8th *d on line 5 (column
     * 8 + 7 * 4) passes the cap. */
    expect_first(&d, "job.yaml", 5, 36,
                 "aliases expand to more than 100000 nodes (an alias bomb?)");
}

Test(hostile, deep_nesting)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char yaml[2048];
    size_t o = (size_t)snprintf(yaml, sizeof(yaml), "version: ");

    /* The top-level mapping is the first level, so the 256th '[' is one too many. */
    for (int i = 0; i < 300; i++)
        yaml[o++] = '[';
    yaml[o] = '\0';
    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), -1);
    expect_first(&d, "job.yaml", 1, 265, "nesting is too deep (more than 256 levels)");
}

Test(hostile, too_many_device_ids)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *yaml = malloc(64 + 1025 * 6);
    size_t o;

    cr_assert_not_null(yaml);
    o = (size_t)sprintf(yaml, BASE "devices:\n  ids: [");
    for (int i = 0; i < 1025; i++)
        o += (size_t)sprintf(yaml + o, "%d,", i);
    yaml[o - 1] = ']';
    yaml[o] = '\0';
    cr_assert_eq(load_sets(yaml, NULL, 0, &s, &d), -1);
    expect_first(&d, "job.yaml", 5, 8, "devices.ids: lists 1025 devices (at most 1024)");
    free(yaml);
}

/* In-memory text need not be NUL-terminated: only text_len bytes are read (ASan checks it). */
Test(hostile, text_without_terminator)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char *text = malloc(4);

    cr_assert_not_null(text);
    memcpy(text, "vers", 4);
    cr_assert_eq(load_len(text, 0, NULL, 0, &s, &d), -1);
    expect_first(&d, "job.yaml", 1, 1,
                 "empty spec: a job spec is a mapping with at least version, name and command");
    cr_assert_eq(load_len(text, 4, NULL, 0, &s, &d), -1);
    expect_first(&d, "job.yaml", 1, 1,
                 "the spec must be a mapping of keys (version, name, command, ...), got \"vers\"");
    free(text);
}

Test(hostile, unreadable_file)
{
    struct xmp_spec s;
    struct xmp_diags d;
    struct xmp_spec_source src = {.path = "/nonexistent/job.yaml"};

    cr_assert_eq(xmp_spec_load(&src, &s, &d), -1);
    expect_first(&d, "/nonexistent/job.yaml", 0, 0,
                 "cannot read the spec: No such file or directory");
}

Test(hostile, too_many_nodes, .timeout = 30)
{
    struct xmp_spec s;
    struct xmp_diags d;
    size_t items = 1100000, o;
    char *yaml = malloc(64 + 2 * items);
    double t0;

    cr_assert_not_null(yaml);
    o = (size_t)sprintf(yaml, "version: 1\nname: a\ncommand: [");
    for (size_t i = 0; i < items; i++) {
        yaml[o++] = 'x';
        yaml[o++] = ',';
    }
    yaml[o - 1] = ']';
    t0 = now_s();
    cr_assert_eq(load_len(yaml, o, NULL, 0, &s, &d), -1);
    cr_expect_lt(now_s() - t0, TIME_LIMIT_S);
    /* Seven nodes come before the list's items (the mapping, three keys, two values, the list):
     * the 999995th item would be node 1000002, and it is at column 11 + 2 * 999994. */
    expect_first(&d, "job.yaml", 3, 1999999,
                 "the spec has too many YAML nodes (more than 1000000)");
    free(yaml);
}
