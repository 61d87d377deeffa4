/* The README's first command runs examples/quickstart.yaml: it must succeed on this machine with
 * one cgroup per worker, print each rank's line with the prefix, and leave nothing behind. */
#include "e2e/e2e.h"

Test(quickstart, runs_two_pinned_workers_in_their_own_cgroups, .timeout = 120)
{
    struct e2e e;
    char *spec = NULL;

    /* Without cgroups the limits below could not be checked: a loud skip, not a quiet pass. */
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    cr_assert_eq(asprintf(&spec, "%s/examples/quickstart.yaml", xt_source_dir()) > 0, 1);
    e.spec = spec;
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    cr_assert_eq(json_array_size(json_object_get(e.rep, "workers")), 2);
    cr_assert_not_null(strstr(e.r.out, "[0] rank 0 of 2: CPUs "), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "[1] rank 1 of 2: CPUs "), "%s", e.r.out);
    /* The summary table goes to stderr, one row per rank. */
    cr_assert_not_null(strstr(e.r.err, "succeeded"), "%s", e.r.err);
    for (size_t i = 0; i < 2; i++) {
        json_t *w = e2e_worker(&e, i);
        cr_assert_str_eq(e2e_str(w, "state"), "exited");
        json_t *mem = json_object_get(w, "memory");
        cr_assert_eq(json_integer_value(json_object_get(mem, "limit_bytes")), 256 << 20);
        cr_assert_gt(json_integer_value(json_object_get(mem, "peak_bytes")), 0);
        json_t *cpu = json_object_get(w, "cpu");
        cr_assert(json_is_number(json_object_get(cpu, "user_s")));
        cr_assert(json_is_number(json_object_get(cpu, "system_s")));
        cr_assert_geq(json_number_value(json_object_get(cpu, "user_s")), 0.0);
        cr_assert_geq(json_number_value(json_object_get(cpu, "system_s")), 0.0);
    }
    /* The report names the xmprun that wrote it, as --version does. */
    char *argv[] = {(char *)xt_bin(), "--version", NULL};
    struct xt_result v;
    cr_assert_eq(xt_run(&v, argv, NULL, e.dir, 10), 0);
    const char *version = e2e_str(e.rep, "xmprun_version");
    cr_assert_neq(version[0], '\0', "no xmprun_version");
    cr_assert_not_null(strstr(v.out, version), "--version says %s, the report %s", v.out, version);
    xt_result_free(&v);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
