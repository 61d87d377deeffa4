/* Worker environments and multi-node resolution: torch_xla's TPU topology values, torchrun's
 * variables under Slurm and Kubernetes, OMP_NUM_THREADS, the spec's env, the full environ, and
 * Slurm hostlists. */
#define _GNU_SOURCE
#include "runner/plan/hostlist.h"
#include "runner/spec/spec_validate.h"
#include "runner/util/strv.h"
#include "unit/plan_helpers.h"

TestSuite(plan_env, .fini = fini);

/* The values torch_xla's configure_topology gives xmp.spawn's 4 processes on a v4-8 host. */
Test(plan_env, tpu_v4_8_matches_torch_xla)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("tpu-v4");
    spec_defaults(&s);
    build(&s, NULL, &p);
    cr_assert_eq(p.kind, XMP_DEVICE_TPU);
    cr_assert_eq(p.n_workers, 4);
    for (int i = 0; i < 4; i++) {
        const struct xmp_plan_worker *w = &p.workers[i];
        char dev[16];

        snprintf(dev, sizeof(dev), "tpu:%d", i);
        cr_assert_str_eq(w->devices[0], dev);
        assert_env(w, "PJRT_DEVICE", "TPU");
        assert_env_int(w, "TPU_VISIBLE_CHIPS", i);
        assert_env(w, "TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1");
        assert_env(w, "TPU_PROCESS_BOUNDS", "2,2,1");
        assert_env(w, "TPU_PROCESS_ADDRESSES",
                   "localhost:8476,localhost:8477,localhost:8478,localhost:8479");
        assert_env_int(w, "TPU_PROCESS_PORT", 8476 + i);
        assert_env_int(w, "CLOUD_TPU_TASK_ID", i);
        assert_env_int(w, "PJRT_LOCAL_PROCESS_RANK", i);
        assert_env(w, "PJRT_LOCAL_PROCESS_COUNT", "4");
        assert_env(w, "CUDA_VISIBLE_DEVICES", NULL);
        assert_env(w, "CUDA_DEVICE_ORDER", NULL);
    }
    /* Two chips per NUMA node (120 CPUs, cores 0-59 with siblings 120-179): each worker gets
     * half of the cores with their sibling threads. */
    cr_assert_str_eq(p.workers[0].cpuset, "0-29,120-149");
    cr_assert_str_eq(p.workers[1].cpuset, "30-59,150-179");
    cr_assert_str_eq(p.workers[2].cpuset, "60-89,180-209");
    cr_assert_str_eq(p.workers[3].cpuset, "90-119,210-239");
    assert_env(&p.workers[3], "OMP_NUM_THREADS", "60");
    xmp_plan_free(&p);

    /* Second host of a v4-16 (2 hosts): task ids continue, addresses list both hosts. */
    char *env[] = {"TPU_WORKER_HOSTNAMES=t1v-w-0,t1v-w-1", NULL};
    s.nnodes = 2;
    s.master_addr = "t1v-w-0";
    s.node_rank = 1;
    build(&s, env, &p);
    assert_env(&p.workers[2], "CLOUD_TPU_TASK_ID", "6");
    assert_env(&p.workers[2], "TPU_PROCESS_BOUNDS", "2,2,2");
    assert_env(&p.workers[2], "TPU_PROCESS_ADDRESSES",
               "t1v-w-0:8476,t1v-w-0:8477,t1v-w-0:8478,t1v-w-0:8479,"
               "t1v-w-1:8476,t1v-w-1:8477,t1v-w-1:8478,t1v-w-1:8479");
    assert_env(&p.workers[2], "RANK", "6");
    assert_env(&p.workers[2], "WORLD_SIZE", "8");
    xmp_plan_free(&p);
    build_fails(&s, NULL, "TPU_WORKER_HOSTNAMES");

    /* The second and third host of three (a v4-24): every per-process value is the local
     * rank's (ports, chips, local ranks), every global one continues across the hosts. On the
     * first host the two agree, so only these tell them apart. */
    char *env3[] = {"TPU_WORKER_HOSTNAMES=h0,h1,h2", NULL};
    s.nnodes = 3;
    s.master_addr = "h0";
    for (int node = 1; node <= 2; node++) {
        s.node_rank = node;
        build(&s, env3, &p);
        for (int i = 0; i < 4; i++) {
            const struct xmp_plan_worker *w = &p.workers[i];
            assert_env_int(w, "TPU_PROCESS_PORT", 8476 + i);
            assert_env_int(w, "TPU_VISIBLE_CHIPS", i);
            assert_env_int(w, "PJRT_LOCAL_PROCESS_RANK", i);
            assert_env_int(w, "LOCAL_RANK", i);
            assert_env_int(w, "CLOUD_TPU_TASK_ID", node * 4 + i);
            assert_env_int(w, "RANK", node * 4 + i);
            assert_env(w, "WORLD_SIZE", "12");
            assert_env(w, "TPU_PROCESS_BOUNDS", "2,2,3");
            assert_env(w, "TPU_PROCESS_ADDRESSES",
                       "h0:8476,h0:8477,h0:8478,h0:8479,h1:8476,h1:8477,h1:8478,h1:8479,"
                       "h2:8476,h2:8477,h2:8478,h2:8479");
        }
        xmp_plan_free(&p);
    }

    /* Two processes of two chips each (libtpu's 1,2,1 per-process mesh). */
    s.nnodes = 1;
    s.node_rank = 0;
    s.per_worker = 2;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 2);
    assert_env(&p.workers[1], "TPU_VISIBLE_CHIPS", "2,3");
    assert_env(&p.workers[1], "TPU_CHIPS_PER_PROCESS_BOUNDS", "1,2,1");
    assert_env(&p.workers[1], "TPU_PROCESS_BOUNDS", "2,1,1");
    assert_env(&p.workers[1], "TPU_PROCESS_ADDRESSES", "localhost:8476,localhost:8477");
    xmp_plan_free(&p);
}

Test(plan_env, omp_num_threads_rules)
{
    struct xmp_spec s;
    struct xmp_plan p;
    struct xmp_env_var user[] = {{"OMP_NUM_THREADS", "7"}};
    char *inherited[] = {"OMP_NUM_THREADS=3", "CUDA_DEVICE_ORDER=FASTEST_FIRST", NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.worker.cpus_milli = 2500; /* quota 2.5 CPUs < 4 in the cpuset: ceil -> 3 */
    build(&s, NULL, &p);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", "3");
    cr_assert_eq(p.workers[0].limits.cpus_milli, 2500);
    xmp_plan_free(&p);

    s.worker.cpus_milli = 100; /* 0.1 CPU: at least one thread */
    build(&s, NULL, &p);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", "1");
    xmp_plan_free(&p);

    /* inherited: left alone (the worker inherits it), as is CUDA_DEVICE_ORDER */
    build(&s, inherited, &p);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", NULL);
    assert_env(&p.workers[0], "CUDA_DEVICE_ORDER", NULL);
    xmp_plan_free(&p);

    /* ... unless nothing is inherited */
    s.inherit_env = false;
    build(&s, inherited, &p);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", "1");
    assert_env(&p.workers[0], "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    xmp_plan_free(&p);

    /* spec env */
    s.env = user;
    s.env_len = 1;
    build(&s, NULL, &p);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", "7");
    xmp_plan_free(&p);
}

Test(plan_env, spec_env_overrides_but_not_ranks)
{
    struct xmp_spec s;
    struct xmp_plan p;
    struct xmp_env_var env[] = {{"CUDA_VISIBLE_DEVICES", "0"},
                                {"CUDA_DEVICE_ORDER", "FASTEST_FIRST"},
                                {"NCCL_DEBUG", "INFO"}};
    struct xmp_env_var bad[] = {{"NCCL_DEBUG", "INFO"}, {"WORLD_SIZE", "3"}};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.env = env;
    s.env_len = 3;
    build(&s, NULL, &p);
    assert_env(&p.workers[5], "CUDA_VISIBLE_DEVICES", "0");
    assert_env(&p.workers[5], "CUDA_DEVICE_ORDER", "FASTEST_FIRST");
    assert_env(&p.workers[5], "NCCL_DEBUG", "INFO");
    assert_env(&p.workers[5], "RANK", "5");
    xmp_plan_free(&p);

    s.env = bad;
    s.env_len = 2;
    build_fails(&s, NULL, "WORLD_SIZE is set by xmprun");
    cr_assert(xmp_spec_env_reserved("MASTER_PORT"));
    cr_assert(xmp_spec_env_reserved("XMPRUN_JOB_ID"));
    cr_assert_not(xmp_spec_env_reserved("OMP_NUM_THREADS"));
}

Test(plan_env, slurm_multi_node)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *env[] = {"SLURM_NNODES=4", "SLURM_NODEID=2", "SLURM_JOB_NODELIST=gpu[01-04,07],login1",
                   "NODE_RANK=0", NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.nnodes = -1;
    s.node_rank = -1;
    build(&s, env, &p);
    cr_assert_eq(p.nnodes, 4);
    cr_assert_eq(p.node_rank, 2);
    cr_assert_eq(p.world_size, 32);
    cr_assert_str_eq(p.master_addr, "gpu01");
    cr_assert_eq(p.workers[3].rank, 19);
    assert_env(&p.workers[3], "RANK", "19");
    assert_env(&p.workers[3], "LOCAL_RANK", "3");
    assert_env(&p.workers[3], "WORLD_SIZE", "32");
    assert_env(&p.workers[3], "GROUP_RANK", "2");
    assert_env(&p.workers[3], "NODE_RANK", "2");
    assert_env(&p.workers[3], "GROUP_WORLD_SIZE", "4");
    assert_env(&p.workers[3], "MASTER_ADDR", "gpu01");
    cr_assert(strstr(p.workers[3].error_file, "/error-19.json") != NULL);
    xmp_plan_free(&p);

    /* an explicit master address and port win */
    s.master_addr = "10.0.0.1";
    s.master_port = 1234;
    build(&s, env, &p);
    assert_env(&p.workers[0], "MASTER_ADDR", "10.0.0.1");
    assert_env(&p.workers[0], "MASTER_PORT", "1234");
    xmp_plan_free(&p);

    char *beyond[] = {"SLURM_NNODES=2", "SLURM_NODEID=2", NULL};
    build_fails(&s, beyond, "node rank 2 (from SLURM_NODEID) is not below nnodes 2");
    char *garbage[] = {"SLURM_NNODES=two", NULL};
    build_fails(&s, garbage, "distributed.nnodes: SLURM_NNODES=\"two\" is not a non-negative");
    char *zero[] = {"SLURM_NNODES=0", NULL};
    build_fails(&s, zero, "SLURM_NNODES=\"0\" must be >= 1");
}

Test(plan_env, kubernetes_and_node_rank_env)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *k8s[] = {"JOB_COMPLETION_INDEX=1", "NODE_RANK=0", "MASTER_ADDR=train-0.train", NULL};
    char *plain[] = {"NODE_RANK=1", NULL};

    load_host("cpu-only");
    spec_defaults(&s);
    s.nnodes = 3;
    s.node_rank = -1;
    s.workers = 2;
    build(&s, k8s, &p);
    cr_assert_eq(p.node_rank, 1);
    cr_assert_eq(p.world_size, 6);
    cr_assert_eq(p.workers[1].rank, 3);
    /* Kubeflow's PyTorchJob (or a launcher script) names the master by MASTER_ADDR. */
    cr_assert_str_eq(p.master_addr, "train-0.train");
    xmp_plan_free(&p);

    /* Nothing names the master: refused, not a rendezvous on 127.0.0.1 that never completes. */
    build_fails(&s, plain,
                "distributed.nnodes is 3 and master_addr is auto, but no SLURM_JOB_NODELIST or "
                "MASTER_ADDR names the master: set distributed.master_addr to node 0's address "
                "on every node");
    s.master_addr = "10.0.0.1";
    build(&s, plain, &p);
    cr_assert_eq(p.node_rank, 1);
    xmp_plan_free(&p);

    build(&s, NULL, &p);
    cr_assert_eq(p.node_rank, 0);
    xmp_plan_free(&p);

    char *bad[] = {"JOB_COMPLETION_INDEX=-1", NULL};
    build_fails(&s, bad, "JOB_COMPLETION_INDEX=\"-1\"");
    s.node_rank = 3;
    build_fails(&s, NULL, "node rank 3");
}

Test(plan_env, worker_environ)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *env[] = {"PATH=/usr/bin", "RANK=99", "HOME=/root", NULL};
    char **we;
    bool path = false, rank = false;

    load_host("cpu-only");
    spec_defaults(&s);
    s.workers = 2;
    build(&s, env, &p);
    we = xmp_plan_worker_environ(&p, &p.workers[1], env);
    cr_assert_not_null(we);
    for (char **e = we; *e; e++) {
        cr_assert_neq(strcmp(*e, "RANK=99"), 0, "an inherited RANK must not survive");
        path |= strcmp(*e, "PATH=/usr/bin") == 0;
        rank |= strcmp(*e, "RANK=1") == 0;
    }
    cr_assert(path && rank);
    xmp_strv_free(we);

    s.inherit_env = false;
    xmp_plan_free(&p);
    build(&s, env, &p);
    we = xmp_plan_worker_environ(&p, &p.workers[0], env);
    size_t n = 0;
    for (char **e = we; *e; e++, n++)
        cr_assert_neq(strncmp(*e, "PATH=", 5), 0, "nothing inherited");
    cr_assert_eq(n, p.workers[0].env_len);
    xmp_strv_free(we);
    xmp_plan_free(&p);
}

struct hl_case {
    const char *in;
    const char *out; /* expansion joined with ' ', or NULL when it must fail */
};

Test(hostlist, expansion_table)
{
    const struct hl_case cases[] = {
        {"gpu[01-04,07],login1", "gpu01 gpu02 gpu03 gpu04 gpu07 login1"},
        {"node1", "node1"},
        {"a,b,c", "a b c"},
        {"n[8-11]", "n8 n9 n10 n11"},
        {"n[08-11]", "n08 n09 n10 n11"},
        {"n[098-101]", "n098 n099 n100 n101"},
        {"rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02"},
        {"x[3]", "x3"},
        {"[1-2]x", "1x 2x"},
        {"h[1-2].ib,h9", "h1.ib h2.ib h9"},
        {"", NULL},
        {"gpu[01-04", NULL},
        {"gpu01-04]", NULL},
        {"gpu[]", NULL},
        {"gpu[4-1]", NULL},
        {"gpu[a-b]", NULL},
        {"gpu[1-]", NULL},
        {"gpu[1,]", NULL},
        {"a,,b", NULL},
        {"a,", NULL},
        {",a", NULL},
        {"g[[1-2]]", NULL},
        {"n[0-99999999]", NULL},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char **hosts = NULL;
        struct xmp_error err = {0};
        char joined[512] = "";
        int rc = xmp_hostlist_expand(cases[i].in, &hosts, &err);

        if (cases[i].out == NULL) {
            cr_assert_eq(rc, -1, "\"%s\" must be refused", cases[i].in);
            cr_assert_neq(err.msg[0], '\0');
            continue;
        }
        cr_assert_eq(rc, 0, "\"%s\": %s", cases[i].in, err.msg);
        for (char **h = hosts; *h; h++)
            snprintf(joined + strlen(joined), sizeof(joined) - strlen(joined), "%s%s",
                     h == hosts ? "" : " ", *h);
        cr_assert_str_eq(joined, cases[i].out, "\"%s\"", cases[i].in);
        xmp_strv_free(hosts);
    }
}

/* torchrun's torchelastic variables: one run id on every worker (the spec's, else the Slurm job
 * id, else the job name), one role spanning the job, and NCCL's async error handling on unless
 * the user set it. */
Test(plan_env, torchelastic_variables)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *slurm[] = {"SLURM_JOB_ID=8812",
                     "SLURM_NNODES=2",
                     "SLURM_NODEID=1",
                     "SLURM_JOB_NODELIST=gpu[01-02]",
                     "NCCL_ASYNC_ERROR_HANDLING=0",
                     NULL};
    struct xmp_env_var user[] = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
                                 {"TORCHELASTIC_RUN_ID", "mine"}};

    load_host("cpu-only");
    spec_defaults(&s);
    s.workers = 2;
    s.restarts = 3;
    build(&s, NULL, &p);
    cr_assert_str_eq(p.run_id, "train");
    for (size_t i = 0; i < 2; i++) {
        const struct xmp_plan_worker *w = &p.workers[i];
        assert_env(w, "TORCHELASTIC_RUN_ID", "train");
        assert_env(w, "TORCHELASTIC_RESTART_COUNT", "0");
        assert_env(w, "TORCHELASTIC_MAX_RESTARTS", "3");
        assert_env_int(w, "ROLE_RANK", (long)i);
        assert_env(w, "ROLE_WORLD_SIZE", "2");
        assert_env(w, "ROLE_NAME", "default");
        assert_env(w, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        assert_env(w, "NCCL_ASYNC_ERROR_HANDLING", "1");
        assert_env(w, "TORCHELASTIC_USE_AGENT_STORE", NULL);
    }
    xmp_plan_free(&p);

    /* Under Slurm: the job id, on node 1 of 2; an inherited NCCL_ASYNC_ERROR_HANDLING stays. */
    s.nnodes = -1;
    s.node_rank = -1;
    build(&s, slurm, &p);
    cr_assert_str_eq(p.run_id, "8812");
    assert_env(&p.workers[1], "TORCHELASTIC_RUN_ID", "8812");
    assert_env(&p.workers[1], "ROLE_RANK", "3");
    assert_env(&p.workers[1], "ROLE_WORLD_SIZE", "4");
    assert_env(&p.workers[1], "RANK", "3");
    assert_env(&p.workers[1], "NCCL_ASYNC_ERROR_HANDLING", NULL);
    assert_env(&p.workers[1], "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    xmp_plan_free(&p);

    /* distributed.run_id wins over the Slurm job id; the spec's env wins over everything. */
    s.run_id = "exp-7";
    build(&s, slurm, &p);
    cr_assert_str_eq(p.run_id, "exp-7");
    assert_env(&p.workers[0], "TORCHELASTIC_RUN_ID", "exp-7");
    xmp_plan_free(&p);
    s.env = user;
    s.env_len = 2;
    build(&s, slurm, &p);
    assert_env(&p.workers[0], "TORCHELASTIC_RUN_ID", "mine");
    assert_env(&p.workers[0], "TORCH_NCCL_ASYNC_ERROR_HANDLING", "3");
    xmp_plan_free(&p);
}

struct count_case {
    const char *text;
    size_t index;
    long want, max;
    bool uniform;
};

Test(hostlist, slurm_count_lists)
{
    const struct count_case cases[] = {
        {"2", 0, 2, 2, true},         {"2(x3),1", 2, 2, 2, false}, {"2(x3),1", 3, 1, 2, false},
        {"2(x3),1", 4, -1, 2, false}, {"8(x2)", 1, 8, 8, true},    {"72,36(x2)", 2, 36, 72, false},
        {"", 0, -1, -1, true},        {"2(x)", 0, -1, -1, true},   {"two", 0, -1, -1, true},
        {"2(x3", 0, -1, 2, true},     {"1,,2", 0, -1, 1, true},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long max = 0;
        bool uniform = false;
        long got = xmp_slurm_count_at(cases[i].text, cases[i].index, &max, &uniform);

        cr_assert_eq(got, cases[i].want, "\"%s\"[%zu]: %ld", cases[i].text, cases[i].index, got);
        if (got >= 0) {
            cr_assert_eq(max, cases[i].max, "\"%s\" max", cases[i].text);
            cr_assert_eq(uniform, cases[i].uniform, "\"%s\" uniform", cases[i].text);
        }
    }
}
