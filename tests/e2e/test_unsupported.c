/* What this xmprun cannot do yet is refused before anything starts, never silently skipped: a
 * zygote (start: fork). Exit 125, a setup_failed report that says why, and nothing left
 * behind. */
#include "e2e/e2e.h"

static void
refused(const char *extra, const char *why)
{
    struct e2e e;
    char *text = NULL;

    e2e_init(&e);
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: refused\nworkers: 1\ndevices: {kind: cpu}\n"
                          "command: ['%s', exit, '0']\n%s",
                          xt_probe(), extra) > 0,
                 1);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 125, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, why), "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    cr_assert_eq(json_array_size(json_object_get(e.rep, "workers")), 0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(unsupported, start_fork_is_refused, .timeout = 60)
{
    refused("start: fork\n", "start: fork is not supported by this xmprun yet");
}
