/* End to end: the start: fork examples, run from the repository root as the README says. */
#include "e2e/fork.h"

/* Runs an example from the repository root, as the README says, with extra options. */
static int
run_example(struct e2e *e, const char *name, const char *options)
{
    char *script = NULL;
    cr_assert_eq(asprintf(&script,
                          "cd '%s' && exec \"$XMPRUN\" --report \"$REPORT\" %s examples/%s.yaml",
                          xt_source_dir(), options, name) > 0,
                 1);
    int status = e2e_sh(e, 280, script);
    free(script);
    return status;
}

/* examples/fork-c.yaml: a C zygote linked with -lxmprun. */
Test(fork, example_fork_c, .timeout = 300)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    cr_assert_eq(run_example(&e, "fork-c", ""), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e.r.out, "worker 1 (RANK=1): read 256 MiB, sum 268435456"), "%s",
                       e.r.out);
    for (size_t i = 0; i < 2; i++)
        cr_assert_lt(mem_of(e2e_worker(&e, i), "peak_bytes"), 16 << 20);
    cr_assert_geq(mem_of(json_object_get(e.rep, "zygote"), "peak_bytes"), 256LL << 20);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* examples/fork-torch.yaml, a torch_xla-style script (module-level MpModelWrapper, _mp_fn(index,
 * flags), xmp.spawn(_mp_fn, args=(FLAGS,), start_method='fork')) that differs from one only by
 * `import xmprun as xmp`; with a 128 MiB model here to keep the suite short. */
Test(fork, example_fork_torch, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    cr_assert_eq(run_example(&e, "fork-torch",
                             "--set 'command=[/usr/bin/python3,examples/fork-torch.py,128]'"),
                 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e.r.out, "zygote: built a 128 MiB model"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "[3] rank 3: 5 forward passes, output (8, 4096)"), "%s",
                       e.r.out);
    cr_assert_not_null(strstr(e.r.out, "zygote: results by rank: ["), "%s", e.r.out);
    for (size_t i = 0; i < 4; i++)
        cr_assert_lt(mem_of(e2e_worker(&e, i), "peak_bytes"), 64 << 20);
    cr_assert_geq(mem_of(json_object_get(e.rep, "zygote"), "peak_bytes"), 128LL << 20);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
