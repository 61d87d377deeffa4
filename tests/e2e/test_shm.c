/* End to end: /dev/shm as a container gives it (Docker's and Kubernetes' default is 64 MiB), in
 * a private mount namespace with a small tmpfs there. A cuda job is warned before it starts that
 * its workers need more; a worker that dies of SIGBUS writing to a full /dev/shm is named so. */
#include "e2e/e2e.h"

/* Runs xmprun on job.yaml with a tmpfs of `size` over /dev/shm, and env before it. */
static int
run_small_shm(struct e2e *e, const char *size, const char *env)
{
    char script[1024];

    snprintf(script, sizeof(script),
             "exec unshare -m sh -c 'mount -t tmpfs -o size=%s tmpfs /dev/shm || exit 99; "
             "exec env %s \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"'",
             size, env);
    return e2e_sh(e, 120, script);
}

static void
need_unshare(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to mount a tmpfs over /dev/shm in a private mount namespace");
}

Test(shm, a_small_dev_shm_is_named_before_a_cuda_job_starts, .timeout = 120)
{
    struct e2e e;
    need_unshare();
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: shmwarn\n"
                 "devices: {kind: cuda}\n"
                 "command: [/bin/true]\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "isolation: {devices: off}\n");
    char env[512];
    snprintf(env, sizeof(env), "XMPRUN_HOST_ROOT=%s/hosts/gpu4", xt_fixtures());
    cr_assert_eq(run_small_shm(&e, "64m", env), 0, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "xmprun: warning: /dev/shm holds 64 MiB, less than the "
                                       "1024 MiB that 4 cuda workers need (256 MiB each"),
                       "stderr:\n%s", e.r.err);
    /* The rule of thumb is the user's to change. */
    strncat(env, " XMPRUN_SHM_PER_WORKER=16Mi", sizeof(env) - strlen(env) - 1);
    cr_assert_eq(run_small_shm(&e, "64m", env), 0, "stderr:\n%s", e.r.err);
    cr_assert_null(strstr(e.r.err, "/dev/shm holds"), "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(shm, sigbus_with_dev_shm_full_is_named, .timeout = 120)
{
    struct e2e e;
    need_unshare();
    if (access("/usr/bin/python3", X_OK) != 0)
        cr_skip_test("/usr/bin/python3 is not installed");
    e2e_init(&e);
    /* Shared memory beyond what /dev/shm holds: the write that finds no page gets SIGBUS. */
    e2e_spec(&e, "version: 1\n"
                 "name: shmfull\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [/usr/bin/python3, -c, 'import mmap, os; "
                 "f = os.open(\"/dev/shm/xmp-fill\", os.O_RDWR | os.O_CREAT); "
                 "os.ftruncate(f, 32 << 20); m = mmap.mmap(f, 32 << 20); m[:] = b\"x\" * (32 << "
                 "20)']\n");
    cr_assert_eq(run_small_shm(&e, "8m", ""), 128 + SIGBUS, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_str_eq(msg, "worker 0 (cpu) was killed by signal SIGBUS (bus error): /dev/shm (8.0 "
                          "MiB) is full, and writing to shared memory there kills with SIGBUS "
                          "(give the container a larger --shm-size)");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
