/* End to end: isolation.devices, the device filter (SPEC.md section 1), on fake device nodes of
 * the 4-GPU fixture host: job mode (every worker the job's GPUs and the RDMA nodes) and worker
 * mode, on this host's cgroup mode and on legacy v1, and how the filter composes with what
 * encloses xmprun: a v1 devices cgroup (v1 and hybrid) and a cgroup2 device program. */
#include "e2e/e2e.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <regex.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

static bool
matches(const char *text, const char *pattern)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0);
    bool found = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return found;
}

/* The worker's output line "[0] syscall NAME=RESULT" carries RESULT. */
static void
expect_line(const struct e2e *e, const char *line)
{
    cr_expect_not_null(strstr(e->r.out, line), "expected \"%s\" in:\n%s\nstderr:\n%s", line,
                       e->r.out, e->r.err);
}

/* The gpu4 fixture's device nodes in DIR/dev, for a test that runs as root. Device nodes only
 * work on a filesystem mounted without nodev, which /tmp often is not (the v2 guest's): a tmpfs
 * of the test's own, in a mount namespace of its own, which xmprun and its workers inherit and
 * which goes away with the test process. cuda:0..3 are /dev/nvidia2, 0, 3, 1 (the driver's
 * "Device Minor"); nvidia-uvm is 509:0; the RDMA nodes are the fixture's /dev/infiniband/uverbs0
 * and 1 (231:192, 193), rdma_cm (misc 10:58) and gdrdrv (238:0). */
static char *
make_gpu_nodes(struct e2e *e)
{
    char *devdir = e2e_path(e, "dev");
    cr_assert_eq(mkdir(devdir, 0755), 0);
    cr_assert_eq(unshare(CLONE_NEWNS), 0, "unshare: %s", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
    cr_assert_eq(mount("xmprun-test-dev", devdir, "tmpfs", 0, "mode=0755"), 0, "mount: %s",
                 strerror(errno));
    static const struct {
        const char *name;
        int major, minor;
    } nodes[] = {{"nvidia0", 195, 0},
                 {"nvidia1", 195, 1},
                 {"nvidia2", 195, 2},
                 {"nvidia3", 195, 3},
                 {"nvidiactl", 195, 255},
                 {"nvidia-uvm", 509, 0},
                 {"nvidia-uvm-tools", 509, 1},
                 {"infiniband/uverbs0", 231, 192},
                 {"infiniband/uverbs1", 231, 193},
                 {"infiniband/rdma_cm", 10, 58},
                 {"gdrdrv", 238, 0}};
    char ib[4200];
    snprintf(ib, sizeof(ib), "%s/infiniband", devdir);
    cr_assert_eq(mkdir(ib, 0755), 0, "mkdir %s: %s", ib, strerror(errno));
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", devdir, nodes[i].name);
        cr_assert_eq(mknod(p, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)), 0,
                     "mknod %s: %s", p, strerror(errno));
    }
    return devdir;
}

/* isolation.devices: worker on a 4-GPU fixture host whose GPUs' device minors are not their CUDA
 * indices (cuda:0..3 are /dev/nvidia2, 0, 3, 1, as the driver's "Device Minor" says). Fake nodes
 * stand in for /dev: without a driver an allowed node opens with ENXIO (a misc one with ENODEV),
 * a filtered one fails with EPERM. Worker 1 (cuda:1, minor 0) may open its own node, the shared
 * ones and the RDMA ones, not worker 2's (cuda:2, minor 3); with isolation.devices: false it
 * may. */
Test(device_filter, each_worker_opens_only_its_own_gpu, .timeout = 120)
{
    struct e2e e;
    char *root = NULL;
    if (geteuid() != 0)
        cr_skip_test("mknod and the devices cgroup need root");
    e2e_init(&e);
    /* Device nodes only work on a filesystem mounted without nodev, which /tmp often is not
     * (the v2 guest's): a tmpfs of this test's own, in a mount namespace of its own, which
     * xmprun and its workers inherit and which goes away with the test process. */
    char *devdir = make_gpu_nodes(&e);
    cr_assert(asprintf(&root, "XMPRUN_HOST_ROOT=%s/hosts/gpu4", xt_fixtures()) > 0);
    e2e_spec(&e, "version: 1\n"
                 "name: gpu-filter\n"
                 "devices: {kind: cuda}\n"
                 "isolation: {devices: worker}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then cd %2$s/dev && exec %1$s open nvidia0 "
                 "nvidia3 nvidia2 nvidiactl nvidia-uvm nvidia-uvm-tools infiniband/uverbs1 "
                 "gdrdrv /dev/null; fi'\n");
    char *argv[] = {(char *)xt_bin(), "--report", e.report, e.spec, NULL};
    char *envp[] = {e.state_env, root, NULL};
    cr_assert_eq(xt_run(&e.r, argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    char want[4300];
#define EXPECT_OPEN(node, result)                                                                  \
    do {                                                                                           \
        snprintf(want, sizeof(want), "[1] open %s=%s", node, result);                              \
        expect_line(&e, want);                                                                     \
    } while (0)
    EXPECT_OPEN("nvidia0", "ENXIO"); /* its own */
    EXPECT_OPEN("nvidia3", "EPERM"); /* worker 2's */
    EXPECT_OPEN("nvidia2", "EPERM"); /* worker 0's */
    EXPECT_OPEN("nvidiactl", "ENXIO");
    EXPECT_OPEN("nvidia-uvm", "ENXIO");
    EXPECT_OPEN("nvidia-uvm-tools", "ENXIO");
    EXPECT_OPEN("infiniband/uverbs1", "ENXIO");
    EXPECT_OPEN("gdrdrv", "ENXIO");
    expect_line(&e, "[1] open /dev/null=ok");
    /* Four cuda workers behind per-worker filters: NCCL's loss is said once. */
    cr_expect(matches(e.r.err, "^xmprun: note: isolation.devices: worker hides each worker's GPU "
                               "from the others, so NCCL cannot use CUDA IPC"),
              "stderr:\n%s", e.r.err);
    e2e_load_report(&e);

    /* The same job without the filter: worker 2's node is no longer refused. */
    char *set_argv[] = {(char *)xt_bin(),          "--report", e.report, "--set",
                        "isolation.devices=false", e.spec,     NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, set_argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    EXPECT_OPEN("nvidia3", "ENXIO");
#undef EXPECT_OPEN
    free(root);
    umount(devdir);
    free(devdir);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* What rank r of the job below opened: the job's two GPUs (cuda:0 and cuda:1, /dev/nvidia2 and
 * /dev/nvidia0) as `own` and `peer` say (ENXIO: past the filter, EPERM: refused), the host's
 * other two (cuda:2 and 3) never, the RDMA nodes always. */
static void
expect_job_opens(const struct e2e *e, int r, const char *gpu0, const char *gpu1)
{
    char want[256];
#define EXPECT_RANK(node, result)                                                                  \
    do {                                                                                           \
        snprintf(want, sizeof(want), "[%d] open %s=%s", r, node, result);                          \
        expect_line(e, want);                                                                      \
    } while (0)
    EXPECT_RANK("nvidia2", gpu0);
    EXPECT_RANK("nvidia0", gpu1);
    EXPECT_RANK("nvidia3", "EPERM"); /* cuda:2, outside the plan */
    EXPECT_RANK("nvidia1", "EPERM"); /* cuda:3 */
    EXPECT_RANK("nvidiactl", "ENXIO");
    EXPECT_RANK("nvidia-uvm", "ENXIO");
    EXPECT_RANK("infiniband/uverbs0", "ENXIO");
    EXPECT_RANK("infiniband/uverbs1", "ENXIO");
    EXPECT_RANK("gdrdrv", "ENXIO");
    EXPECT_RANK("/dev/null", "ok");
#undef EXPECT_RANK
    /* A misc node without its driver: ENODEV, or ENXIO where the minor is unknown altogether. */
    snprintf(want, sizeof(want), "^\\[%d\\] open infiniband/rdma_cm=E(NODEV|NXIO)$", r);
    cr_expect(matches(e->r.out, want), "rank %d: rdma_cm refused:\n%s", r, e->r.out);
}

/* isolation.devices: job (the default) on the 4-GPU host, a 2-worker job on cuda:0 and cuda:1:
 * each worker opens both of the job's GPUs past the filter (NCCL's CUDA IPC between them) and
 * gets EPERM on the other two, and opens the RDMA nodes; CUDA_VISIBLE_DEVICES still pins it. With
 * worker, each opens only its own GPU, the RDMA nodes still, and xmprun says what NCCL loses
 * (not under -q). The same on this host's cgroup mode (hybrid here, unified in the v2 guest)
 * and, where the v1 devices controller is mounted, on legacy v1 (fresh mounts, as
 * device_filter_composes_with_an_enclosing_v1_devices_cgroup makes them). `xmprun plan` names
 * the nodes. */
Test(device_filter, job_filter_opens_the_jobs_gpus_and_no_other, .timeout = 240)
{
    struct e2e e;
    char *root = NULL;
    if (geteuid() != 0)
        cr_skip_test("mknod and the device filter need root");
    e2e_init(&e);
    char *devdir = make_gpu_nodes(&e);
    cr_assert(asprintf(&root, "XMPRUN_HOST_ROOT=%s/hosts/gpu4", xt_fixtures()) > 0);
    e2e_spec(&e, "version: 1\n"
                 "name: gpu-job\n"
                 "workers: 2\n"
                 "devices: {kind: cuda}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "command: 'echo \"[cvd] $CUDA_VISIBLE_DEVICES\"; cd %2$s/dev && exec %1$s open "
                 "nvidia2 nvidia0 nvidia3 nvidia1 nvidiactl nvidia-uvm infiniband/uverbs0 "
                 "infiniband/uverbs1 infiniband/rdma_cm gdrdrv /dev/null'\n");
    char *envp[] = {e.state_env, root, NULL};
    char *argv[] = {(char *)xt_bin(), "--report", e.report, e.spec, NULL};
    cr_assert_eq(xt_run(&e.r, argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    expect_job_opens(&e, 0, "ENXIO", "ENXIO");
    expect_job_opens(&e, 1, "ENXIO", "ENXIO");
    expect_line(&e, "[0] [cvd] 0");
    expect_line(&e, "[1] [cvd] 1");
    cr_expect_null(strstr(e.r.err, "NCCL"), "a note in job mode:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *mode = e2e_str(json_object_get(e.rep, "cgroup"), "mode");
    cr_expect(strcmp(mode, "hybrid") == 0 || strcmp(mode, "unified") == 0, "mode %s", mode);

    char *worker_argv[] = {(char *)xt_bin(),           "--report", e.report, "--set",
                           "isolation.devices=worker", e.spec,     NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, worker_argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    expect_job_opens(&e, 0, "ENXIO", "EPERM");
    expect_job_opens(&e, 1, "EPERM", "ENXIO");
    cr_expect(matches(e.r.err, "^xmprun: note: isolation.devices: worker hides each worker's GPU "
                               "from the others, so NCCL cannot use CUDA IPC"),
              "stderr:\n%s", e.r.err);
    char *quiet_argv[] = {(char *)xt_bin(),           "-q",   "--report", e.report, "--set",
                          "isolation.devices=worker", e.spec, NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, quiet_argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    cr_expect_null(strstr(e.r.err, "NCCL"), "a note under -q:\n%s", e.r.err);

    /* The plan says which nodes each worker may open. */
    char *plan_argv[] = {(char *)xt_bin(), "plan", e.spec, NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, plan_argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "stderr:\n%s", e.r.err);
    static const char *const named[] = {
        "\"device_nodes\": [",         "\"cuda:0 (/dev/nvidia2)\"",   "\"cuda:1 (/dev/nvidia0)\"",
        "\"/dev/infiniband/uverbs0\"", "\"/dev/infiniband/rdma_cm\"", "\"/dev/gdrdrv\""};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        cr_expect_not_null(strstr(e.r.out, named[i]), "no %s in the plan:\n%s", named[i], e.r.out);
    cr_expect_null(strstr(e.r.out, "(/dev/nvidia3)"), "a GPU outside the plan:\n%s", e.r.out);

    if (access("/sys/fs/cgroup/devices/devices.list", F_OK) == 0) {
        /* Legacy v1: the devices controller's list, the same nodes. */
        char *prep = NULL;
        cr_assert(asprintf(&prep, "export %s", root) > 0);
        cr_assert_eq(e2e_run_hidden_mounts(&e, "", prep, NULL), 0, "stderr:\n%s", e.r.err);
        expect_job_opens(&e, 0, "ENXIO", "ENXIO");
        expect_job_opens(&e, 1, "ENXIO", "ENXIO");
        e2e_load_report(&e);
        cr_expect_str_eq(e2e_str(json_object_get(e.rep, "cgroup"), "mode"), "legacy");
        free(prep);
    }
    free(root);
    umount(devdir);
    free(devdir);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The device filter under an enclosing v1 devices cgroup, as a Slurm step's under
 * ConstrainDevices (or a container's) encloses it: v1 refuses a child any allow its parent does
 * not hold. xmprun runs in a cgroup namespace whose devices cgroup is the parent set up here,
 * in legacy mode (fresh v1 mounts, as slurmd's task/cgroup gives it). Three parents:
 * - default-allow, denying cuda:0's node and nvidia-uvm-tools with devices.deny (what Slurm
 *   does; devices.list then still reads "a *:* rwm"): with CUDA_VISIBLE_DEVICES=1,2 (the GPUs
 *   the step was given) the job runs, each worker opens the job's two GPUs and nvidia-uvm, not
 *   the denied nodes, and the note names nvidia-uvm-tools as left out; with isolation.devices:
 *   worker each opens only its own GPU;
 * - the same with every GPU: cuda:0 is a setup error (125) that names it, nothing started;
 * - an allowlist without "c *:* m" (as Docker's --device rules): the wildcards are narrowed
 *   to the nodes the parent holds, and the job runs. */
Test(device_filter, device_filter_composes_with_an_enclosing_v1_devices_cgroup, .timeout = 240)
{
    struct e2e e;
    if (geteuid() != 0 || access("/sys/fs/cgroup/devices/devices.list", F_OK) != 0)
        cr_skip_test("needs root and the v1 devices controller (the v2 guest tests the BPF side)");
    e2e_init(&e);
    char *devdir = make_gpu_nodes(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: dev-compose\n"
                 "devices: {kind: cuda}\n"
                 "resources: {worker: {cpuset: none, memory: 256Mi}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia0 nvidia2 nvidia3 nvidiactl "
                 "nvidia-uvm nvidia-uvm-tools /dev/null'\n");
    char *prep = NULL;
    const char *deny = "echo 'c 195:2 rwm' > $d/devices.deny; echo 'c 509:1 rwm' > "
                       "$d/devices.deny";
    /* devices.list is read back by the test: the Slurm-like parent's hides its denies. */
#define PREP(devices_sh, cvd)                                                                      \
    do {                                                                                           \
        free(prep);                                                                                \
        cr_assert(asprintf(&prep,                                                                  \
                           "export XMPRUN_HOST_ROOT=%s/hosts/gpu4 %s; if [ $first = devices ]; "   \
                           "then %s; fi",                                                          \
                           xt_fixtures(), cvd, devices_sh) > 0);                                   \
    } while (0)

    PREP(deny, "CUDA_VISIBLE_DEVICES=1,2");
    cr_assert_eq(e2e_run_hidden_mounts(&e, "", prep, NULL), 0, "stderr:\n%s", e.r.err);
    /* worker 0 is cuda:1 (/dev/nvidia0), worker 1 cuda:2 (/dev/nvidia3): the job's GPUs */
    expect_line(&e, "[0] open nvidia0=ENXIO");
    expect_line(&e, "[0] open nvidia3=ENXIO");
    expect_line(&e, "[1] open nvidia3=ENXIO");
    expect_line(&e, "[1] open nvidia0=ENXIO");
    expect_line(&e, "[0] open nvidia2=EPERM");
    expect_line(&e, "[0] open nvidiactl=ENXIO");
    expect_line(&e, "[0] open nvidia-uvm=ENXIO");
    expect_line(&e, "[0] open nvidia-uvm-tools=EPERM");
    expect_line(&e, "[0] open /dev/null=ok");
    cr_expect(matches(e.r.err, "^xmprun: note: the enclosing devices cgroup / does not allow "
                               "/dev/nvidia-uvm-tools: left out"),
              "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_expect(strstr(e2e_str(json_object_get(e.rep, "cgroup"), "note"),
                     "does not allow /dev/nvidia-uvm-tools") != NULL,
              "report's cgroup.note: %s", e2e_str(json_object_get(e.rep, "cgroup"), "note"));
    cr_expect_str_eq(e2e_str(json_object_get(e.rep, "cgroup"), "mode"), "legacy");

    e2e_spec(&e, "version: 1\n"
                 "name: dev-compose\n"
                 "devices: {kind: cuda}\n"
                 "isolation: {devices: worker}\n"
                 "resources: {worker: {cpuset: none, memory: 256Mi}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia0 nvidia2 nvidia3 nvidiactl "
                 "nvidia-uvm nvidia-uvm-tools /dev/null'\n");
    cr_assert_eq(e2e_run_hidden_mounts(&e, "", prep, NULL), 0, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] open nvidia0=ENXIO");
    expect_line(&e, "[0] open nvidia3=EPERM");
    expect_line(&e, "[1] open nvidia3=ENXIO");
    expect_line(&e, "[1] open nvidia0=EPERM");
    e2e_spec(&e, "version: 1\n"
                 "name: dev-compose\n"
                 "devices: {kind: cuda}\n"
                 "resources: {worker: {cpuset: none, memory: 256Mi}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia0 nvidia2 nvidia3 nvidiactl "
                 "nvidia-uvm nvidia-uvm-tools /dev/null'\n");

    PREP(deny, "");
    cr_assert_eq(e2e_run_hidden_mounts(&e, "", prep, NULL), 125, "stderr:\n%s", e.r.err);
    cr_expect(matches(e.r.err, "cuda:0 \\(/dev/nvidia2\\) is not allowed by the enclosing "
                               "devices cgroup /: the job was not given this device"),
              "stderr:\n%s", e.r.err);
    cr_expect_null(strstr(e.r.out, "open"), "a worker ran:\n%s", e.r.out);
    e2e_load_report(&e);
    cr_expect_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");

    PREP("echo a > $d/devices.deny; for r in 'c 1:3 rwm' 'c 1:5 rwm' 'c 1:7 rwm' 'c 1:8 rwm' "
         "'c 1:9 rwm' 'c 5:0 rwm' 'c 5:2 rwm' 'c 136:* rwm' 'c 195:* rwm' 'c 509:0 rw'; do "
         "echo \"$r\" > $d/devices.allow; done",
         "");
    cr_assert_eq(e2e_run_hidden_mounts(&e, "", prep, NULL), 0, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] open nvidia2=ENXIO"); /* cuda:0 */
    expect_line(&e, "[0] open nvidia0=ENXIO"); /* cuda:1, the job's too */
    expect_line(&e, "[0] open nvidia-uvm-tools=EPERM");
    expect_line(&e, "[2] open nvidia3=ENXIO"); /* cuda:2 */
    expect_line(&e, "[3] open nvidia0=ENXIO"); /* cuda:3 is /dev/nvidia1 */
    cr_expect(matches(e.r.err, "^xmprun: note: the enclosing devices cgroup / does not allow "
                               "/dev/nvidia-uvm-tools"),
              "stderr:\n%s", e.r.err);
#undef PREP
    free(prep);
    umount(devdir);
    free(devdir);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Runs the test's job with xmprun started in the v1 devices cgroup dir (and the test's own
 * cgroups elsewhere); then removes dir, which nothing of the job's is left in. */
static int
run_in_devices_cgroup(struct e2e *e, const char *dir)
{
    char *script = NULL;
    cr_assert(asprintf(&script,
                       "echo $$ > %s/cgroup.procs || exit 90; exec \"$XMPRUN\" --report "
                       "\"$REPORT\" \"$SPEC\"",
                       dir) > 0);
    int status = e2e_sh(e, 90, script);
    free(script);
    return status;
}

/* A hybrid host (v1 controllers, the filter a BPF program in the cgroup2 tree) under an enclosing
 * v1 devices cgroup that holds GPU cuda:1's node (195:0) and the control nodes but not cuda:2's
 * (/dev/nvidia3), as a Slurm step's under ConstrainDevices or a container's device rules: the
 * BPF program does not compose with it, yet it refuses at open. A job on cuda:2 is refused up
 * front (125), naming the device and the cgroup, as on v1; a job on cuda:1 runs, opens its GPU,
 * and the nodes the cgroup denies that it can do without (nvidia-uvm, the RDMA nodes) are a
 * note. The test builds that cgroup below its own in the devices hierarchy and removes it. */
static char devencl[4200];

/* Runs after the test, failed or not: the enclosing cgroup it made goes, whatever is in it. */
static void
remove_devencl(void)
{
    if (devencl[0] != '\0' && access(devencl, F_OK) == 0)
        e2e_purge_cgroup_tree(devencl);
}

Test(device_filter, hybrid_refuses_a_gpu_an_enclosing_v1_devices_cgroup_denies, .timeout = 240,
     .fini = remove_devencl)
{
    struct e2e e;
    char dirs[16][4096], file[4300];
    char *encl = devencl;
    if (geteuid() != 0 || access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) != 0 ||
        access("/sys/fs/cgroup/devices/devices.list", F_OK) != 0)
        cr_skip_test("needs root on a hybrid host with the v1 devices controller");
    size_t n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n && encl[0] == '\0'; i++)
        if (strncmp(dirs[i], "/sys/fs/cgroup/devices", 22) == 0)
            snprintf(encl, sizeof(devencl), "%s/xmp-devencl-%d", dirs[i], (int)getpid());
    cr_assert_neq(encl[0], '\0', "no devices cgroup of the test's own");
    e2e_init(&e);
    char *devdir = make_gpu_nodes(&e);
    char *root = NULL;
    cr_assert(asprintf(&root, "%s/hosts/gpu4", xt_fixtures()) > 0);
    setenv("XMPRUN_HOST_ROOT", root, 1); /* e2e_sh's environment is fixed; xt_run keeps this */

    cr_assert_eq(mkdir(encl, 0755), 0, "mkdir %s: %s", encl, strerror(errno));
    static const char *const allow[] = {"c 1:3 rwm",  "c 1:5 rwm",    "c 1:7 rwm",   "c 1:8 rwm",
                                        "c 1:9 rwm",  "c 5:0 rwm",    "c 5:2 rwm",   "c 136:* rwm",
                                        "c 195:0 rw", "c 195:254 rw", "c 195:255 rw"};
    free(xt_write_file(encl, "devices.deny", "a"));
    for (size_t i = 0; i < sizeof(allow) / sizeof(allow[0]); i++)
        free(xt_write_file(encl, "devices.allow", allow[i]));
    snprintf(file, sizeof(file), "%s/devices.list", encl);
    char *list = xt_read_file(file);
    cr_assert(list != NULL && strstr(list, "c 195:0 rw") != NULL && strstr(list, "a *:*") == NULL,
              "the enclosing cgroup's list: %s", list ? list : "(none)");
    free(list);
    const char *name = strstr(encl, "/xmp-devencl-");

    e2e_spec(&e, "version: 1\n"
                 "name: dev-hybrid\n"
                 "devices: {kind: cuda, ids: [2]}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia3 nvidia0'\n");
    int status = run_in_devices_cgroup(&e, encl);
    char want[512];
    snprintf(want, sizeof(want),
             "cuda:2 \\(/dev/nvidia3\\) is not allowed by the enclosing devices cgroup "
             "[^ ]*%s: the job was not given this device",
             name);
    cr_expect_eq(status, 125, "stderr:\n%s", e.r.err);
    cr_expect(matches(e.r.err, want), "stderr:\n%s", e.r.err);
    cr_expect_null(strstr(e.r.out, "open"), "a worker ran:\n%s", e.r.out);
    e2e_load_report(&e);
    cr_expect_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    e2e_assert_clean(&e);

    e2e_spec(&e, "version: 1\n"
                 "name: dev-hybrid\n"
                 "devices: {kind: cuda, ids: [1]}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia0 nvidia3'\n");
    status = run_in_devices_cgroup(&e, encl);
    cr_expect_eq(status, 0, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] open nvidia0=ENXIO");
    expect_line(&e, "[0] open nvidia3=EPERM");
    snprintf(want, sizeof(want),
             "^xmprun: note: the enclosing devices cgroup [^ ]*%s does not allow /dev/nvidia-uvm, "
             "/dev/nvidia-uvm-tools, /dev/infiniband/uverbs0, /dev/infiniband/uverbs1, "
             "/dev/infiniband/rdma_cm, /dev/gdrdrv: left out",
             name);
    cr_expect(matches(e.r.err, want), "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_expect_str_eq(e2e_str(json_object_get(e.rep, "cgroup"), "mode"), "hybrid");
    e2e_assert_clean(&e);

    cr_assert_eq(rmdir(encl), 0, "rmdir %s: %s", encl, strerror(errno));
    unsetenv("XMPRUN_HOST_ROOT");
    free(root);
    umount(devdir);
    free(devdir);
    e2e_fini(&e);
}

/* Attaches to the cgroup2 directory dir a device program that refuses 195:2 (the gpu4
 * fixture's cuda:0) and allows the rest, with flags: what a container runtime or a systemd unit
 * above xmprun attaches. */
static void
attach_parent_program(const char *dir, unsigned flags)
{
    struct bpf_insn prog[] = {
        /* r4 = major, r5 = minor (struct bpf_cgroup_dev_ctx) */
        {.code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_4, .src_reg = BPF_REG_1, .off = 4},
        {.code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_5, .src_reg = BPF_REG_1, .off = 8},
        {.code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = BPF_REG_4, .off = 3, .imm = 195},
        {.code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = BPF_REG_5, .off = 2, .imm = 2},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
        {.code = BPF_JMP | BPF_EXIT},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1},
        {.code = BPF_JMP | BPF_EXIT},
    };
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    a.insns = (uint64_t)(uintptr_t)prog;
    a.insn_cnt = sizeof(prog) / sizeof(prog[0]);
    a.license = (uint64_t)(uintptr_t) "GPL";
    int pfd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof(a));
    cr_assert_geq(pfd, 0, "BPF_PROG_LOAD: %s", strerror(errno));
    int cfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(cfd, 0, "open %s: %s", dir, strerror(errno));
    memset(&a, 0, sizeof(a));
    a.target_fd = (uint32_t)cfd;
    a.attach_bpf_fd = (uint32_t)pfd;
    a.attach_type = BPF_CGROUP_DEVICE;
    a.attach_flags = flags;
    cr_assert_eq(syscall(SYS_bpf, BPF_PROG_ATTACH, &a, sizeof(a)), 0, "BPF_PROG_ATTACH: %s",
                 strerror(errno));
    close(cfd);
    close(pfd); /* the attachment holds the program until the cgroup goes */
}

/* Runs the test's job with xmprun started in the cgroup2 directory dir; then removes dir (and
 * the leaf xmprun moved itself into on pure v2). */
static int
run_in_cgroup2(struct e2e *e, const char *dir)
{
    char *script = NULL;
    cr_assert(asprintf(&script,
                       "echo $$ > %s/cgroup.procs || exit 90; exec \"$XMPRUN\" --report "
                       "\"$REPORT\" \"$SPEC\"",
                       dir) > 0);
    int status = e2e_sh(e, 90, script);
    free(script);
    cr_assert(asprintf(&script,
                       "for l in %s/xmprun-self-*; do [ -d \"$l\" ] && rmdir \"$l\"; done; "
                       "rmdir %s",
                       dir, dir) > 0);
    struct xt_result r = e->r;
    memset(&e->r, 0, sizeof(e->r));
    cr_assert_eq(e2e_sh(e, 30, script), 0, "cannot remove %s: %s", dir, e->r.err);
    xt_result_free(&e->r);
    e->r = r;
    free(script);
    return status;
}

/* The device filter under an enclosing cgroup2 device program (pure v2, and the cgroup2 tree of
 * this hybrid host, whose programs run for every process too): one attached with
 * BPF_F_ALLOW_MULTI (as runc and systemd attach theirs) keeps running below xmprun's, so a
 * worker is refused what either refuses; one attached without it makes the kernel refuse any
 * program below it, and the setup error names that cgroup and what to do. */
Test(device_filter, device_filter_under_an_enclosing_bpf_program, .timeout = 240)
{
    struct e2e e;
    char dirs[16][4096], parent[4200] = "", probe[4300];
    if (geteuid() != 0)
        cr_skip_test("BPF device programs need root");
    size_t n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n && parent[0] == '\0'; i++) {
        snprintf(probe, sizeof(probe), "%s/cgroup.controllers", dirs[i]);
        if (access(probe, F_OK) == 0)
            snprintf(parent, sizeof(parent), "%s/xmp-devparent-%d", dirs[i], (int)getpid());
    }
    if (parent[0] == '\0')
        cr_skip_test("no cgroup2 tree");
    e2e_init(&e);
    char *devdir = make_gpu_nodes(&e);
    char *root = NULL;
    cr_assert(asprintf(&root, "%s/hosts/gpu4", xt_fixtures()) > 0);
    e2e_spec(&e, "version: 1\n"
                 "name: dev-bpf\n"
                 "workers: 2\n"
                 "devices: {kind: cuda}\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "command: 'cd %2$s/dev && exec %1$s open nvidia0 nvidia2 nvidia3'\n");
    setenv("XMPRUN_HOST_ROOT", root, 1); /* e2e_sh's environment is fixed; xt_run keeps this */

    cr_assert_eq(mkdir(parent, 0755), 0, "mkdir %s: %s", parent, strerror(errno));
    attach_parent_program(parent, BPF_F_ALLOW_MULTI);
    cr_assert_eq(run_in_cgroup2(&e, parent), 0, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] open nvidia2=EPERM"); /* cuda:0's own node, refused by the parent's */
    expect_line(&e, "[1] open nvidia0=ENXIO"); /* cuda:1's own */
    expect_line(&e, "[1] open nvidia2=EPERM");
    expect_line(&e, "[1] open nvidia3=EPERM"); /* cuda:2's, outside the job: xmprun's refuses */

    cr_assert_eq(mkdir(parent, 0755), 0, "mkdir %s: %s", parent, strerror(errno));
    attach_parent_program(parent, 0);
    cr_assert_eq(run_in_cgroup2(&e, parent), 125, "stderr:\n%s", e.r.err);
    cr_expect(matches(e.r.err, "device filter: the enclosing cgroup [^ ]*/xmp-devparent-[0-9]+ has "
                               "a device program attached without BPF_F_ALLOW_MULTI, which bars "
                               "any below it: have it attached with that flag"),
              "stderr:\n%s", e.r.err);
    cr_expect_null(strstr(e.r.out, "open"), "a worker ran:\n%s", e.r.out);
    e2e_load_report(&e);
    cr_expect_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    unsetenv("XMPRUN_HOST_ROOT");
    free(root);
    umount(devdir);
    free(devdir);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
