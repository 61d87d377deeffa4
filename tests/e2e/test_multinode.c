/* End to end: two nodes on one machine. Two network namespaces joined by a veth pair
 * (10.231.77.1 and .2/24), one xmprun in each, entered with `nsenter --net` so that the host's
 * cgroup mounts stay; real gloo DDP (Debian's python3-torch) with 2 workers per node. A job
 * passes across them, a failure on one node ends both with the peer-loss root cause on the
 * other, and a multi-node job with nothing naming its master is refused before it starts. */
#include "e2e/e2e.h"

#include <sys/stat.h>

#define PYTHON "/usr/bin/python3"

struct nodes {
    char ns[2][32];
    char veth[2][16];
    bool made;
};

static struct nodes nodes;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
sh(const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return -1;
    rc = system(cmd);
    free(cmd);
    return rc;
}

/* Removes both namespaces (which takes the veth ends moved into them) and a veth end that was
 * never moved. Runs on every exit path of the tests that made them (Criterion's .fini). */
static void
nodes_remove(void)
{
    if (!nodes.made)
        return;
    for (int i = 0; i < 2; i++) {
        sh("ip netns del %s 2>/dev/null", nodes.ns[i]);
        sh("ip link del %s 2>/dev/null", nodes.veth[i]);
    }
    nodes.made = false;
}

/* Both nodes, or a loud skip where they cannot be made (no root or CAP_SYS_ADMIN, no iproute2,
 * a kernel without veth such as the cgroup v2 guest's, which loads no modules), or where
 * Debian's torch is missing. With veth false, only the namespaces. The cheap checks come first:
 * importing torch takes minutes under the guest's emulation. */
static void
nodes_make(bool veth)
{
    int pid = (int)getpid();
    char why[256] = "";

    for (int i = 0; i < 2; i++) {
        snprintf(nodes.ns[i], sizeof(nodes.ns[i]), "xmpt-%d-%c", pid, 'a' + i);
        snprintf(nodes.veth[i], sizeof(nodes.veth[i]), "xv%d%c", pid % 10000000, 'a' + i);
    }
    nodes.made = true;
    if (sh("ip netns add %s && ip netns add %s", nodes.ns[0], nodes.ns[1]) != 0)
        snprintf(why, sizeof(why), "`ip netns add` failed (root and CAP_SYS_ADMIN are needed)");
    else if (veth && sh("ip link add %s type veth peer name %s", nodes.veth[0], nodes.veth[1]) != 0)
        snprintf(why, sizeof(why), "`ip link add ... type veth` failed (no veth driver)");
    else if (veth && (access(PYTHON, X_OK) != 0 ||
                      sh(PYTHON " -c 'import torch.distributed' 2>/dev/null") != 0))
        snprintf(why, sizeof(why), "%s with torch is needed (scripts/install-deps.sh)", PYTHON);
    if (why[0] != '\0') {
        nodes_remove();
        fprintf(stderr, "SKIPPED multinode: %s\n", why);
        cr_skip_test("SKIPPED: cannot make two nodes here: %s", why);
    }
    /* The same interface name on both sides, so one spec (GLOO_SOCKET_IFNAME) fits both. */
    for (int i = 0; veth && i < 2; i++)
        cr_assert_eq(sh("ip link set %s netns %s && ip -n %s link set %s name xmp0 && "
                        "ip -n %s addr add 10.231.77.%d/24 dev xmp0 && "
                        "ip -n %s link set xmp0 up && ip -n %s link set lo up",
                        nodes.veth[i], nodes.ns[i], nodes.ns[i], nodes.veth[i], nodes.ns[i], i + 1,
                        nodes.ns[i], nodes.ns[i]),
                     0, "setting up %s", nodes.ns[i]);
}

TestSuite(multinode, .fini = nodes_remove);

static void
ddp_spec(struct e2e *e)
{
    char *text = NULL;

    cr_assert_eq(
        asprintf(&text,
                 "version: 1\n"
                 "name: ddp2\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: [" PYTHON ", %s/tests/helpers/ddp_tiny.py]\n"
                 "env: {GLOO_SOCKET_IFNAME: xmp0, OMP_NUM_THREADS: 1}\n"
                 "isolation: {cgroups: required}\n"
                 "on_failure: {grace: 5s}\n"
                 "timeout: 50s\n"
                 "distributed: {nnodes: 2, master_addr: 10.231.77.1, master_port: 29533}\n",
                 xt_source_dir()) > 0,
        1);
    e2e_set_spec(e, text);
}

/* Runs node 0 and node 1 at once, each with `nsenter --net` into its namespace; node 1's
 * environment gets extra (e.g. FAIL_RANK=3). Statuses land in $DIR/status0 and status1. */
static void
run_both(struct e2e *e, const char *extra)
{
    char *script = NULL;

    cr_assert_eq(asprintf(&script,
                          "nsenter --net=/run/netns/%s -- $XMPRUN --report $DIR/node0.json "
                          "--set distributed.node_rank=0 $SPEC >$DIR/out0 2>$DIR/err0 & p0=$!\n"
                          "env %s nsenter --net=/run/netns/%s -- $XMPRUN --report $DIR/node1.json "
                          "--set distributed.node_rank=1 $SPEC >$DIR/out1 2>$DIR/err1 & p1=$!\n"
                          "wait $p0; echo $? >$DIR/status0; wait $p1; echo $? >$DIR/status1\n",
                          nodes.ns[0], extra, nodes.ns[1]) > 0,
                 1);
    cr_assert_eq(e2e_sh(e, 90, script), 0, "%s", e->r.err);
    free(script);
}

static int
node_status(const struct e2e *e, int node)
{
    char name[32];
    char *path, *text;
    int status;

    snprintf(name, sizeof(name), "status%d", node);
    path = e2e_path(e, name);
    text = xt_read_file(path);
    cr_assert_not_null(text, "no %s", path);
    status = atoi(text);
    free(text);
    free(path);
    return status;
}

static char *
node_file(const struct e2e *e, const char *prefix, int node)
{
    char name[32];
    char *path, *text;

    snprintf(name, sizeof(name), "%s%d", prefix, node);
    path = e2e_path(e, name);
    text = xt_read_file(path);
    free(path);
    return text != NULL ? text : strdup("");
}

/* Loads node i's report (schema-checked), and checks nothing of it is left behind. */
static void
load_node(struct e2e *e, int node)
{
    char name[32];

    snprintf(name, sizeof(name), "node%d.json", node);
    free(e->report);
    e->report = e2e_path(e, name);
    e2e_load_report(e);
    e2e_assert_clean(e);
}

Test(multinode, gloo_ddp_across_two_namespaces, .timeout = 120)
{
    struct e2e e;
    char *out[2], *err[2];
    const char *run_id;

    nodes_make(true);
    e2e_init(&e);
    ddp_spec(&e);
    run_both(&e, "XMPRUN_TEST_NODE=1");
    for (int i = 0; i < 2; i++) {
        out[i] = node_file(&e, "out", i);
        err[i] = node_file(&e, "err", i);
    }
    cr_assert_eq(node_status(&e, 0), 0, "node 0:\n%s", err[0]);
    cr_assert_eq(node_status(&e, 1), 0, "node 1:\n%s", err[1]);
    for (int node = 0; node < 2; node++) {
        json_t *job;

        load_node(&e, node);
        job = json_object_get(e.rep, "job");
        cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
        cr_assert_eq(json_integer_value(json_object_get(job, "node_rank")), node);
        cr_assert_eq(json_integer_value(json_object_get(job, "world_size")), 4);
        cr_assert_str_eq(e2e_str(job, "master_addr"), "10.231.77.1");
        cr_assert_eq(json_integer_value(json_object_get(job, "master_port")), 29533);
        run_id = e2e_str(job, "run_id");
        cr_assert_str_eq(run_id, "ddp2");
        /* Both of this node's workers trained with the other node's and agreed on the
         * weights, under the one run id. */
        for (int lr = 0; lr < 2; lr++) {
            char want[128];
            snprintf(want, sizeof(want), "ok rank=%d world=4 run_id=%s", node * 2 + lr, run_id);
            cr_assert_not_null(strstr(out[node], want), "node %d lacks \"%s\":\n%s\n%s", node, want,
                               out[node], err[node]);
        }
    }
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(err[i]);
    }
    e2e_fini(&e);
}

Test(multinode, failure_on_one_node_ends_both, .timeout = 120)
{
    struct e2e e;
    char *err[2];
    json_t *rc;
    const char *msg;

    nodes_make(true);
    e2e_init(&e);
    ddp_spec(&e);
    run_both(&e, "FAIL_RANK=3");
    for (int i = 0; i < 2; i++)
        err[i] = node_file(&e, "err", i);

    /* Node 1: its own worker 3 failed. */
    cr_assert_eq(node_status(&e, 1), 7, "node 1:\n%s", err[1]);
    load_node(&e, 1);
    rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "message"), "worker 3 (cpu) exited with status 7");

    /* Node 0: its workers lost node 1; the cause points there, not at "exited with status 1". */
    cr_assert_neq(node_status(&e, 0), 0, "node 0:\n%s", err[0]);
    cr_assert_neq(node_status(&e, 0), 124, "node 0 waited for its timeout:\n%s", err[0]);
    load_node(&e, 0);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    rc = json_object_get(e.rep, "root_cause");
    msg = e2e_str(rc, "message");
    cr_assert(strncmp(msg, "worker ", 7) == 0 &&
                  strstr(msg, " (cpu) lost its connection to a peer (10.231.77.") != NULL &&
                  strstr(msg, "): the job probably failed on another node first; see that "
                              "node's report") != NULL,
              "node 0's root cause: %s\n%s", msg, err[0]);
    cr_assert_not_null(strstr(err[0], "root cause: worker "), "%s", err[0]);
    for (int i = 0; i < 2; i++)
        free(err[i]);
    e2e_fini(&e);
}

/* Item 1 of issue 11: nothing names the master, so nothing starts. No namespace needed. */
Test(multinode, no_master_is_refused_before_starting, .timeout = 60)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: nomaster\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', 'exit', '0']\n"
                 "distributed: {nnodes: 2, node_rank: 1}\n");
    /* Without --report: the node's own default path, even though no plan was made. */
    cr_assert_eq(e2e_sh(&e, 30, "cd \"$DIR\" && $XMPRUN \"$SPEC\""), 125, "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "distributed.nnodes is 2 and master_addr is auto, but no "
                                       "SLURM_JOB_NODELIST or MASTER_ADDR names the master: set "
                                       "distributed.master_addr to node 0's address on every "
                                       "node"),
                       "%s", e.r.err);
    free(e.report);
    e.report = e2e_path(&e, "nomaster.node1.report.json");
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    cr_assert_eq(json_array_size(json_object_get(e.rep, "workers")), 0);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(e.rep, "job"), "node_rank")),
                 1);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(e.rep, "job"), "nnodes")), 2);
    e2e_fini(&e);
}

/* `ip netns exec` mounts a fresh /sys without cgroup filesystems: a run says so and how to get
 * them, and gc says it cannot clean up rather than "cleaned up 0 orphaned jobs". */
Test(multinode, ip_netns_exec_says_what_is_missing, .timeout = 60)
{
    struct e2e e;
    char *script = NULL;
    const char *advice = "no cgroup filesystem is mounted at `/sys/fs/cgroup` (`ip netns exec` "
                         "mounts a fresh /sys without one); use `nsenter --net=/run/netns/NAME`, "
                         "which keeps the host's mounts";

    nodes_make(false);
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: netnsexec\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', 'exit', '0']\n");
    cr_assert_eq(
        asprintf(&script, "ip netns exec %s $XMPRUN --report $REPORT $SPEC", nodes.ns[0]) > 0, 1);
    cr_assert_eq(e2e_sh(&e, 30, script), 125, "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, advice), "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    free(script);

    cr_assert_eq(asprintf(&script, "ip netns exec %s $XMPRUN gc", nodes.ns[0]) > 0, 1);
    cr_assert_eq(e2e_sh(&e, 30, script), 125, "%s%s", e.r.out, e.r.err);
    cr_assert_not_null(strstr(e.r.err, "gc: cannot see the cgroup filesystems, so nothing was "
                                       "cleaned up"),
                       "%s", e.r.err);
    cr_assert_null(strstr(e.r.out, "cleaned up"), "%s", e.r.out);
    free(script);
    e2e_fini(&e);
}
