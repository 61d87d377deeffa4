/* End to end: real Python work under the seccomp profiles and the device filter. A PyTorch DDP
 * job (Debian's python3-torch, gloo, a DataLoader with worker processes) trains with 2 workers
 * under `default` and under `strict`, and sees the denied calls fail with EPERM from inside; the
 * hang watchdog names the DDP rank that stopped stepping, not the one waiting for it.
 * (CPython's multiprocessing suite: test_python_multiprocessing.c.) Host only: tests/run-v2.sh
 * leaves it out, since `import torch` alone takes minutes in the emulated guest. */
#include "e2e/e2e.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define PYTHON "/usr/bin/python3"

static const char ddp_script[] =
    "import ctypes, os\n"
    "import torch, torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()\n"
    "torch.manual_seed(rank)\n"
    "x = torch.randn(256, 8)\n"
    "data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=32, num_workers=2)\n"
    "model = DDP(torch.nn.Linear(8, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
    "for epoch in range(3):\n"
    "    for xb, yb in data:\n"
    "        opt.zero_grad()\n"
    "        loss = ((model(xb) - yb) ** 2).mean()\n"
    "        loss.backward()\n"
    "        opt.step()\n"
    "w = model.module.weight.detach().clone()\n"
    "w0 = w.clone()\n"
    "dist.broadcast(w0, 0)\n"
    "assert torch.equal(w, w0), 'DDP replicas diverged'\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "rc = libc.unshare(0x10000000)\n"
    "print(f'rank {rank} trained loss={loss.item():.4f} unshare={rc}/'\n"
    "      f'{os.strerror(ctypes.get_errno())}', flush=True)\n"
    "dist.destroy_process_group()\n";

/* A TCP port nothing listens on now, for the job's rendezvous: other tests (and other users of
 * this machine) may hold the default 29500. */
static int
free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static bool
have_torch(void)
{
    char *argv[] = {PYTHON, "-c", "import torch.distributed", NULL};
    struct xt_result r = {0};
    bool ok = access(PYTHON, X_OK) == 0 && xt_run(&r, argv, NULL, "/", 120) == 0 && r.status == 0;
    xt_result_free(&r);
    return ok;
}

static void
ddp_under(const char *profile)
{
    struct e2e e;
    char port[64], set[64];

    if (!have_torch())
        cr_assert_fail("Debian's python3-torch is missing (scripts/install-deps.sh installs it)");
    e2e_init(&e);
    free(xt_write_file(e.dir, "train.py", ddp_script));
    e2e_spec(&e, "version: 1\n"
                 "name: ddp-gloo\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: [" PYTHON ", train.py]\n"
                 "env: {OMP_NUM_THREADS: '1'}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "timeout: 5m\n");
    snprintf(port, sizeof(port), "distributed.master_port=%d", free_port());
    snprintf(set, sizeof(set), "isolation.seccomp=%s", profile);
    cr_assert_eq(e2e_run(&e, 400, "--set", port, "--set", set, NULL), 0, "stdout:\n%s\nstderr:\n%s",
                 e.r.out, e.r.err);
    for (int r = 0; r < 2; r++) {
        char want[64];
        snprintf(want, sizeof(want), "[%d] rank %d trained loss=", r, r);
        cr_assert_not_null(strstr(e.r.out, want), "%s", e.r.out);
    }
    /* Under default the call fails with EPERM; under strict it would have killed the job. */
    if (strcmp(profile, "default") == 0)
        cr_assert_not_null(strstr(e.r.out, "unshare=-1/Operation not permitted"), "%s", e.r.out);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(isolation_python, ddp_gloo_trains_under_default, .timeout = 600)
{
    ddp_under("default");
}

/* The same script without the unshare probe, under the strict allowlist. */
Test(isolation_python, ddp_gloo_trains_under_strict, .timeout = 600)
{
    struct e2e e;
    char port[64];

    if (!have_torch())
        cr_assert_fail("Debian's python3-torch is missing (scripts/install-deps.sh installs it)");
    e2e_init(&e);
    char *script = strdup(ddp_script);
    char *cut = strstr(script, "libc = ctypes.CDLL");
    strcpy(cut, "print(f'rank {rank} trained loss={loss.item():.4f}', flush=True)\n"
                "dist.destroy_process_group()\n");
    free(xt_write_file(e.dir, "train.py", script));
    free(script);
    e2e_spec(&e, "version: 1\n"
                 "name: ddp-strict\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: [" PYTHON ", train.py]\n"
                 "env: {OMP_NUM_THREADS: '1'}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "isolation: {seccomp: strict}\n"
                 "timeout: 5m\n");
    snprintf(port, sizeof(port), "distributed.master_port=%d", free_port());
    cr_assert_eq(e2e_run(&e, 400, "--set", port, NULL), 0, "stdout:\n%s\nstderr:\n%s", e.r.out,
                 e.r.err);
    cr_assert_not_null(strstr(e.r.out, "[1] rank 1 trained loss="), "%s", e.r.out);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The case: two gloo DDP ranks, rank 1 stops stepping (sleeps) while rank 0 computes
 * its step and then blocks in the gradients' all_reduce, waiting for it. Both go idle; the one
 * that stopped first is named. */
Test(isolation_python, hang_names_the_ddp_rank_that_stopped_stepping, .timeout = 180)
{
    struct e2e e;
    char *text = NULL, want[4400];
    json_t *cause;

    if (access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") != 0)
        cr_skip_test("no python3-torch");
    e2e_init(&e);
    cr_assert_gt(asprintf(&text,
                          "version: 1\n"
                          "name: ddphang\n"
                          "workers: 2\n"
                          "devices: {kind: cpu}\n"
                          "command: [/usr/bin/python3, %s/tests/helpers/ddp_tiny.py]\n"
                          "env: {HANG_RANK: '1', GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: '1'}\n"
                          "distributed: {master_port: 29617}\n"
                          "on_failure: {hang_timeout: 5s, grace: 2s}\n"
                          "timeout: 100s\n",
                          xt_source_dir()),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 150, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cause = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(cause, "reason"), "hung", "%s", e2e_str(cause, "message"));
    /* The sleeping rank's own line, from its Python stack taken before the stop; the other
     * rank's native stack shows it waiting for a collective (c10d::Work::wait, under DDP's
     * bucket sync at the start of its next step). */
    snprintf(want, sizeof(want),
             "worker 1 (cpu) hung: no output and no CPU time for 5s, in `<module>` "
             "(%s/tests/helpers/ddp_tiny.py:27)",
             xt_source_dir());
    cr_assert_str_eq(e2e_str(cause, "message"), want);
    char *rank0 = json_dumps(json_object_get(e2e_worker(&e, 0), "stacks"), 0);
    cr_assert(rank0 != NULL && strstr(rank0, "c10d4Work4wait") != NULL, "rank 0: %s", rank0);
    free(rank0);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "hung");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
