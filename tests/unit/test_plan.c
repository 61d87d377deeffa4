/* The plan against fixture hosts and fixture environments: device selection and narrowing,
 * worker counts, cpusets, limits, paths and the JSON form. Specs are built in memory with
 * SPEC.md's defaults (the YAML parser has its own tests). */
#define _GNU_SOURCE
#include "unit/plan_helpers.h"

TestSuite(plan, .fini = fini);

Test(plan, one_worker_per_gpu)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    build(&s, NULL, &p);
    cr_assert_eq(p.kind, XMP_DEVICE_CUDA);
    cr_assert_eq(p.n_workers, 8);
    cr_assert_eq(p.local_world_size, 8);
    cr_assert_eq(p.world_size, 8);
    cr_assert_str_eq(p.master_addr, "127.0.0.1");
    for (size_t i = 0; i < 8; i++) {
        const struct xmp_plan_worker *w = &p.workers[i];
        char dev[16];

        snprintf(dev, sizeof(dev), "cuda:%zu", i);
        cr_assert_eq(w->rank, (int)i);
        cr_assert_eq(w->local_rank, (int)i);
        cr_assert_eq(w->n_devices, 1);
        cr_assert_str_eq(w->devices[0], dev);
        cr_assert_null(w->devices[1]);
        assert_env_int(w, "CUDA_VISIBLE_DEVICES", (long)i);
        assert_env(w, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        assert_env_int(w, "RANK", (long)i);
        assert_env_int(w, "LOCAL_RANK", (long)i);
        assert_env(w, "WORLD_SIZE", "8");
        assert_env(w, "LOCAL_WORLD_SIZE", "8");
        assert_env(w, "GROUP_RANK", "0");
        assert_env(w, "NODE_RANK", "0");
        assert_env(w, "GROUP_WORLD_SIZE", "1");
        assert_env(w, "MASTER_ADDR", "127.0.0.1");
        assert_env(w, "MASTER_PORT", "29500");
        assert_env_int(w, "PJRT_LOCAL_PROCESS_RANK", (long)i);
        assert_env(w, "PJRT_LOCAL_PROCESS_COUNT", "8");
        assert_env(w, "XMPRUN_JOB_NAME", "train");
        assert_env(w, "XMPRUN_JOB_ID", p.job_id);
        assert_env(w, "XMPRUN_RESTART_COUNT", "0");
        assert_env(w, "TORCHELASTIC_ERROR_FILE", w->error_file);
        assert_env(w, "TPU_VISIBLE_CHIPS", NULL);
        cr_assert_str_eq(w->argv[0], "python3");
        cr_assert_str_eq(w->argv[1], "train.py");
        cr_assert_null(w->argv[2]);
        cr_assert_null(w->stdout_path);
        /* env is sorted by name */
        for (size_t e = 1; e < w->env_len; e++)
            cr_assert_lt(strcmp(w->env[e - 1].name, w->env[e].name), 0);
    }
    xmp_plan_free(&p);
}

/* Four GPUs per NUMA node, 16 CPUs per node: 4 CPUs each, local and disjoint. */
Test(plan, numa_local_disjoint_cpusets)
{
    struct xmp_spec s;
    struct xmp_plan p;
    const char *want[] = {"0-3", "4-7", "8-11", "12-15", "16-19", "20-23", "24-27", "28-31"};
    cpu_set_t seen;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    build(&s, NULL, &p);
    CPU_ZERO(&seen);
    for (size_t i = 0; i < 8; i++) {
        const struct xmp_plan_worker *w = &p.workers[i];
        cpu_set_t both;

        cr_assert_str_eq(w->cpuset, want[i], "worker %zu", i);
        cr_assert(w->limits.has_cpus);
        CPU_AND(&both, &seen, &w->limits.cpus);
        cr_assert_eq(CPU_COUNT(&both), 0, "worker %zu overlaps another", i);
        CPU_OR(&seen, &seen, &w->limits.cpus);
        cr_assert(CPU_COUNT(&w->limits.cpus) == 4);
        assert_env(w, "OMP_NUM_THREADS", "4");
    }
    xmp_plan_free(&p);
}

Test(plan, per_worker_two_groups_consecutive_gpus)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.per_worker = 2;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 4);
    cr_assert_eq(p.world_size, 4);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "0,1");
    assert_env(&p.workers[3], "CUDA_VISIBLE_DEVICES", "6,7");
    cr_assert_eq(p.workers[1].n_devices, 2);
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:2");
    cr_assert_str_eq(p.workers[1].devices[1], "cuda:3");
    cr_assert_str_eq(p.workers[0].cpuset, "0-7");
    cr_assert_str_eq(p.workers[1].cpuset, "8-15");
    cr_assert_str_eq(p.workers[2].cpuset, "16-23");
    xmp_plan_free(&p);

    /* 8 GPUs do not split into groups of 3. */
    s.per_worker = 3;
    build_fails(&s, NULL, "per_worker 3");
    /* but 2 workers of 3 fit */
    s.workers = 2;
    build(&s, NULL, &p);
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "3,4,5");
    xmp_plan_free(&p);
}

Test(plan, inherited_cuda_visible_devices_narrows)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *env[] = {"CUDA_VISIBLE_DEVICES=3,5", "PATH=/usr/bin", NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    build(&s, env, &p);
    cr_assert_eq(p.n_workers, 2);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "3");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "5");
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:3");
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:5");
    /* GPU 3 is alone on node 0 and GPU 5 alone on node 1: each gets its whole node. */
    cr_assert_str_eq(p.workers[0].cpuset, "0-15");
    cr_assert_str_eq(p.workers[1].cpuset, "16-31");
    assert_env(&p.workers[1], "OMP_NUM_THREADS", "16");
    xmp_plan_free(&p);
}

Test(plan, inherited_uuids_and_cuda_stop_rules)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *uuids[] = {"CUDA_VISIBLE_DEVICES=GPU-61b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c56,GPU-11b2",
                     NULL};
    char *stop[] = {"CUDA_VISIBLE_DEVICES=2,9,4", NULL};
    char *none[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    char *nodev[] = {"CUDA_VISIBLE_DEVICES=NoDevFiles", NULL};
    char *minus[] = {"CUDA_VISIBLE_DEVICES=-1", NULL};
    char *slurm[] = {"SLURM_STEP_GPUS=6,7", "SLURM_JOB_GPUS=0,1,2", NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    build(&s, uuids, &p);
    cr_assert_eq(p.n_workers, 2);
    /* the form given is kept: a full UUID, and a unique UUID prefix as CUDA accepts it */
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "GPU-61b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c56");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "GPU-11b2");
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:6");
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:1");
    xmp_plan_free(&p);

    /* CUDA ignores everything after the first invalid entry. */
    build(&s, stop, &p);
    cr_assert_eq(p.n_workers, 1);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "2");
    xmp_plan_free(&p);

    /* No GPU visible: auto falls back to cpu (32 CPUs). */
    char **hidden[] = {none, nodev, minus};
    for (size_t i = 0; i < 3; i++) {
        build(&s, hidden[i], &p);
        cr_assert_eq(p.kind, XMP_DEVICE_CPU, "%s", hidden[i][0]);
        cr_assert_eq(p.n_workers, 32);
        assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "");
        xmp_plan_free(&p);
    }
    s.device_kind = XMP_DEVICE_CUDA;
    build_fails(&s, none, "no cuda device visible (narrowed by CUDA_VISIBLE_DEVICES=)");
    char *mig[] = {"CUDA_VISIBLE_DEVICES=MIG-5c89852c-d268-c3f3-b3ab-1d7ed7a07e8c", NULL};
    build_fails(&s, mig, "MIG devices are not supported");
    s.device_kind = XMP_DEVICE_AUTO;

    /* Slurm's step allocation wins over the job's. */
    build(&s, slurm, &p);
    cr_assert_eq(p.n_workers, 2);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "6");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "7");
    xmp_plan_free(&p);
}

Test(plan, explicit_ids)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *ids[] = {"6", "GPU-21b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c52", NULL};
    char *narrowed_ids[] = {"1", NULL};
    char *missing[] = {"0", "8", NULL};
    char *twice[] = {"2", "GPU-21b2", NULL};
    char *cvd[] = {"CUDA_VISIBLE_DEVICES=3,5", NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.device_ids = ids;
    s.device_ids_len = 2;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 2);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "6");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "GPU-21b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c52");
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:2");
    /* GPU 6 alone on node 1, GPU 2 alone on node 0 */
    cr_assert_str_eq(p.workers[0].cpuset, "16-31");
    cr_assert_str_eq(p.workers[1].cpuset, "0-15");
    xmp_plan_free(&p);

    /* Under CUDA_VISIBLE_DEVICES=3,5, index 1 is the second visible GPU, physical 5. */
    s.device_ids = narrowed_ids;
    s.device_ids_len = 1;
    build(&s, cvd, &p);
    cr_assert_eq(p.n_workers, 1);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "5");
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:5");
    xmp_plan_free(&p);

    s.device_ids = missing;
    s.device_ids_len = 2;
    build_fails(&s, NULL, "no cuda device 8; visible: 0 (0 GPU-01b2c3d4");
    build_fails(&s, cvd, "no cuda device 8; visible (narrowed by CUDA_VISIBLE_DEVICES=3,5): 0 (3");
    s.device_ids = twice;
    build_fails(&s, NULL, "GPU-21b2 is listed twice");
}

Test(plan, workers_must_fit_devices)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.workers = 9;
    build_fails(&s, NULL, "workers 9 x devices.per_worker 1 need 9 cuda devices, but only 8");
    s.workers = 5;
    s.per_worker = 2;
    build_fails(&s, NULL, "need 10 cuda devices");
    s.workers = 3;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 3);
    cr_assert_eq(p.world_size, 3);
    xmp_plan_free(&p);
}

Test(plan, cpu_only_host)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("cpu-only");
    spec_defaults(&s);
    build(&s, NULL, &p);
    cr_assert_eq(p.kind, XMP_DEVICE_CPU);
    cr_assert_eq(p.n_workers, 8);
    for (int i = 0; i < 8; i++) {
        char cpu[8];
        snprintf(cpu, sizeof(cpu), "%d", i);
        cr_assert_str_eq(p.workers[i].devices[0], "cpu");
        cr_assert_str_eq(p.workers[i].cpuset, cpu);
        assert_env(&p.workers[i], "OMP_NUM_THREADS", "1");
        /* no GPU on the host: nothing to hide */
        assert_env(&p.workers[i], "CUDA_VISIBLE_DEVICES", NULL);
    }
    xmp_plan_free(&p);

    s.workers = 3; /* 8 CPUs in 3: 3, 3, 2 */
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[0].cpuset, "0-2");
    cr_assert_str_eq(p.workers[1].cpuset, "3-5");
    cr_assert_str_eq(p.workers[2].cpuset, "6-7");
    xmp_plan_free(&p);

    s.workers = 10; /* more workers than CPUs: shared round-robin, at least one each */
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[7].cpuset, "7");
    cr_assert_str_eq(p.workers[8].cpuset, "0");
    cr_assert_str_eq(p.workers[9].cpuset, "1");
    xmp_plan_free(&p);

    s.device_kind = XMP_DEVICE_TPU;
    build_fails(&s, NULL, "no tpu device visible");
}

Test(plan, cpu_kind_on_gpu_host_hides_gpus)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.device_kind = XMP_DEVICE_CPU;
    s.workers = 2;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 2);
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "");
    assert_env(&p.workers[0], "CUDA_DEVICE_ORDER", NULL);
    cr_assert_str_eq(p.workers[0].cpuset, "0-15");
    cr_assert_str_eq(p.workers[1].cpuset, "16-31");
    xmp_plan_free(&p);
}

/* Cores are never cut between workers when the topology is known. */
Test(plan, cpusets_keep_cores_whole)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *root = load_smt_host();

    spec_defaults(&s);
    s.workers = 2;
    build(&s, NULL, &p);
    cr_assert_eq(p.kind, XMP_DEVICE_CPU);
    cr_assert_str_eq(p.workers[0].cpuset, "0-1,4-5");
    cr_assert_str_eq(p.workers[1].cpuset, "2-3,6-7");
    assert_env(&p.workers[1], "OMP_NUM_THREADS", "4");
    xmp_plan_free(&p);

    s.workers = 3; /* 4 cores in 3: 2, 1, 1 */
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[0].cpuset, "0-1,4-5");
    cr_assert_str_eq(p.workers[1].cpuset, "2,6");
    cr_assert_str_eq(p.workers[2].cpuset, "3,7");
    xmp_plan_free(&p);

    s.workers = 4; /* as many workers as cores: one core (both its threads) each */
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[0].cpuset, "0,4");
    cr_assert_str_eq(p.workers[1].cpuset, "1,5");
    cr_assert_str_eq(p.workers[2].cpuset, "2,6");
    cr_assert_str_eq(p.workers[3].cpuset, "3,7");
    xmp_plan_free(&p);

    s.workers = 0; /* auto: one per CPU, fewer cores than workers: one thread each */
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 8);
    for (int i = 0; i < 8; i++) {
        char want[4];
        snprintf(want, sizeof(want), "%d", i);
        cr_assert_str_eq(p.workers[i].cpuset, want);
    }
    xmp_plan_free(&p);
    xt_tmpdir_remove(root);
    free(root);
}

Test(plan, cpuset_none_and_list)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.per_worker = 4;
    s.worker.cpuset_mode = XMP_CPUSET_NONE;
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[0].cpuset, "");
    cr_assert_not(p.workers[0].limits.has_cpus);
    assert_env(&p.workers[0], "OMP_NUM_THREADS", "16"); /* 32 CPUs, 2 workers */
    xmp_plan_free(&p);

    s.worker.cpuset_mode = XMP_CPUSET_LIST;
    s.worker.cpuset = "4-7,30-40";
    build(&s, NULL, &p);
    cr_assert_str_eq(p.workers[1].cpuset, "4-7,30-31");
    assert_env(&p.workers[1], "OMP_NUM_THREADS", "6");
    xmp_plan_free(&p);

    s.worker.cpuset = "64-70";
    build_fails(&s, NULL, "has no CPU xmprun may run on (allowed: 0-31)");
}

Test(plan, paths_and_names)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *env[] = {"TMPDIR=/scratch", NULL};

    load_host("cpu-only");
    spec_defaults(&s);
    s.workers = 2;
    s.log_dir = "/logs";
    s.worker.memory = 8LL << 30;
    s.worker.pids = 100;
    s.job_memory = 64LL << 30;
    build(&s, env, &p);
    cr_assert(strncmp(p.job_id, "4242-", 5) == 0, "%s", p.job_id);
    cr_assert_eq(strlen(p.job_id), 11);
    for (const char *c = p.job_id + 5; *c; c++)
        cr_assert(strchr("0123456789abcdef", *c) != NULL, "%s", p.job_id);
    {
        char want[128];
        snprintf(want, sizeof(want), "xmprun-train-%s", p.job_id);
        cr_assert_str_eq(p.cgroup_name, want);
        snprintf(want, sizeof(want), "/scratch/xmprun-train-%s", p.job_id);
        cr_assert_str_eq(p.run_dir, want);
        snprintf(want, sizeof(want), "/scratch/xmprun-train-%s/error-1.json", p.job_id);
        cr_assert_str_eq(p.workers[1].error_file, want);
    }
    cr_assert_str_eq(p.report_path, "train.report.json");
    cr_assert_str_eq(p.workdir, "/work/job");
    cr_assert_str_eq(p.workers[1].stdout_path, "/logs/rank-1.out");
    cr_assert_str_eq(p.workers[1].stderr_path, "/logs/rank-1.err");
    cr_assert_eq(p.workers[1].limits.memory, 8LL << 30);
    cr_assert_eq(p.workers[1].limits.pids, 100);
    cr_assert_eq(p.workers[1].limits.memory_high, -1);
    cr_assert_eq(p.job_limits.memory, 64LL << 30);
    xmp_plan_free(&p);

    s.report = "out/r.json";
    build(&s, NULL, &p);
    cr_assert_str_eq(p.report_path, "out/r.json");
    cr_assert(strncmp(p.run_dir, "/tmp/xmprun-train-", 18) == 0, "%s", p.run_dir);
    xmp_plan_free(&p);
}

Test(plan, json_key_order)
{
    struct xmp_spec s;
    struct xmp_plan p;
    json_t *j;
    char *text;
    const char *job_keys[] = {
        "name",      "id",          "kind",        "world_size", "local_world_size", "nnodes",
        "node_rank", "master_addr", "master_port", "run_id",     "cgroup",           "workdir",
        "report",    "run_dir",     "start",       "limits",     "warnings"};
    const char *worker_keys[] = {"rank", "local_rank", "devices", "cpuset", "limits",
                                 "env",  "argv",       "stdout",  "stderr", "error_file"};
    const char *iter_key;
    json_t *value;
    size_t i;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.worker.cpus_milli = 500;
    build(&s, NULL, &p);
    j = xmp_plan_to_json(&p, &host);
    text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
    {
        const char *head = "{\"job\":{\"name\":\"train\",\"id\":";
        cr_assert(strncmp(text, head, strlen(head)) == 0, "%s", text);
    }
    cr_assert(strstr(text, "},\"host\":{\"hostname\":\"gpu-node-01\",\"cpus\":\"0-31\"") != NULL);
    cr_assert(strstr(text,
                     "{\"kind\":\"cuda\",\"index\":7,\"uuid\":\"GPU-71b2c3d4-e5f6-4a7b-8c9d-"
                     "0e1f2a3b4c57\",\"pci\":\"0000:db:00.0\",\"model\":\"NVIDIA H100 80GB "
                     "HBM3\",\"numa_node\":1,\"local_cpus\":\"16-31\",\"node\":\"195:5\"}") != NULL,
              "%s", text);
    cr_assert(strstr(text,
                     "\"limits\":{\"memory\":null,\"memory_high\":null,\"swap\":null,"
                     "\"cpus\":0.5,\"pids\":null,\"devices\":null,\"device_nodes\":null}") != NULL,
              "%s", text);
    cr_assert(strstr(text, "\"devices\":[\"cuda:3\"],\"cpuset\":\"12-15\"") != NULL, "%s", text);

    i = 0;
    json_object_foreach(json_object_get(j, "job"), iter_key, value)
    {
        cr_assert_lt(i, sizeof(job_keys) / sizeof(job_keys[0]));
        cr_assert_str_eq(iter_key, job_keys[i], "job key %zu", i);
        i++;
    }
    cr_assert_eq(i, sizeof(job_keys) / sizeof(job_keys[0]));
    i = 0;
    json_object_foreach(json_array_get(json_object_get(j, "workers"), 2), iter_key, value)
    {
        cr_assert_str_eq(iter_key, worker_keys[i], "worker key %zu", i);
        i++;
    }
    cr_assert_eq(i, sizeof(worker_keys) / sizeof(worker_keys[0]));
    /* env sorted by name */
    {
        const char *prev = "";
        json_object_foreach(
            json_object_get(json_array_get(json_object_get(j, "workers"), 0), "env"), iter_key,
            value)
        {
            cr_assert_lt(strcmp(prev, iter_key), 0, "%s after %s", iter_key, prev);
            prev = iter_key;
        }
    }
    free(text);
    json_decref(j);
    xmp_plan_free(&p);
}

/* Slurm with ConstrainDevices: SLURM_STEP_GPUS names the GPUs on the node (their identity and
 * NUMA node), CUDA_VISIBLE_DEVICES numbers them inside the step's device cgroup (from 0), and
 * the workers keep that numbering. GPUs 4-7 sit on NUMA node 1 (CPUs 16-31). */
Test(plan, slurm_constrained_gpus_keep_their_identity)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *step[] = {"SLURM_STEP_GPUS=4,5", "SLURM_JOB_GPUS=4,5,6", "CUDA_VISIBLE_DEVICES=0,1",
                    NULL};
    char *batch[] = {"SLURM_JOB_GPUS=6,7", "CUDA_VISIBLE_DEVICES=0,1", NULL};
    char *unconstrained[] = {"SLURM_STEP_GPUS=4,5", "CUDA_VISIBLE_DEVICES=4,5", NULL};
    char *narrowed[] = {"SLURM_STEP_GPUS=2,5,6", "CUDA_VISIBLE_DEVICES=2,0", NULL};
    char *beyond[] = {"SLURM_STEP_GPUS=4,5", "CUDA_VISIBLE_DEVICES=0,1,2", NULL};
    char *ids[] = {"1"};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    build(&s, step, &p);
    cr_assert_eq(p.n_workers, 2);
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:4");
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:5");
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "0");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "1");
    cr_assert_str_eq(p.workers[0].cpuset, "16-23");
    cr_assert_str_eq(p.workers[1].cpuset, "24-31");
    xmp_plan_free(&p);

    /* A batch script has the job's GPUs only. */
    build(&s, batch, &p);
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:7");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "1");
    cr_assert_str_eq(p.workers[1].cpuset, "24-31");
    xmp_plan_free(&p);

    /* Without ConstrainDevices Slurm gives the same list twice: global indices. */
    build(&s, unconstrained, &p);
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:5");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "5");
    xmp_plan_free(&p);

    /* A list narrowed further inside the step counts in the step's numbering. */
    build(&s, narrowed, &p);
    cr_assert_eq(p.n_workers, 2);
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:6");
    cr_assert_str_eq(p.workers[1].devices[0], "cuda:2");
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "2");
    assert_env(&p.workers[1], "CUDA_VISIBLE_DEVICES", "0");
    cr_assert_str_eq(p.workers[0].cpuset, "16-31");
    cr_assert_str_eq(p.workers[1].cpuset, "0-15");
    xmp_plan_free(&p);

    /* CUDA stops at an entry beyond the step's GPUs. */
    build(&s, beyond, &p);
    cr_assert_eq(p.n_workers, 2);
    xmp_plan_free(&p);

    /* devices.ids count within what the step sees. */
    s.device_ids = ids;
    s.device_ids_len = 1;
    build(&s, step, &p);
    cr_assert_eq(p.n_workers, 1);
    cr_assert_str_eq(p.workers[0].devices[0], "cuda:5");
    assert_env(&p.workers[0], "CUDA_VISIBLE_DEVICES", "1");
    xmp_plan_free(&p);
    s.device_ids = NULL;
    s.device_ids_len = 0;
    s.workers = 3;
    build_fails(&s, step,
                "only 2 are visible (narrowed by SLURM_STEP_GPUS=4,5, numbered by "
                "CUDA_VISIBLE_DEVICES=0,1)");
}

/* xmprun is one per node: `srun -n2` on one node is refused, a batch script is not. */
Test(plan, slurm_several_tasks_per_node_refused)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *srun_n2[] = {"SLURM_JOB_ID=1",
                       "SLURM_STEP_ID=0",
                       "SLURM_NTASKS=2",
                       "SLURM_STEP_TASKS_PER_NODE=2",
                       "SLURM_TASKS_PER_NODE=2",
                       "SLURM_LOCALID=0",
                       NULL};
    char *uneven[] = {"SLURM_STEP_ID=0", "SLURM_STEP_TASKS_PER_NODE=1(x2),2", "SLURM_LOCALID=0",
                      NULL};
    char *old_slurm[] = {"SLURM_STEP_ID=0", "SLURM_NTASKS_PER_NODE=4", NULL};
    char *second[] = {"SLURM_LOCALID=1", NULL};
    char *one_each[] = {"SLURM_STEP_ID=0", "SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_LOCALID=0",
                        "SLURM_TASKS_PER_NODE=4(x2)", NULL};
    char *batch[] = {"SLURM_JOB_ID=2", "SLURM_TASKS_PER_NODE=2", "SLURM_NTASKS_PER_NODE=2",
                     "SLURM_LOCALID=0", NULL};

    load_host("cpu-only");
    spec_defaults(&s);
    s.workers = 2;
    build_fails(&s, srun_n2,
                "Slurm started 2 tasks of this step on one node (SLURM_STEP_TASKS_PER_NODE=2); "
                "xmprun runs once per node and starts its workers itself: use `srun "
                "--ntasks-per-node=1`");
    build_fails(&s, uneven, "2 tasks of this step on one node (SLURM_STEP_TASKS_PER_NODE=1(x2),2)");
    build_fails(&s, old_slurm, "(SLURM_NTASKS_PER_NODE=4)");
    build_fails(&s, second, "at least 2 tasks of this step on one node (SLURM_LOCALID=1)");
    build(&s, one_each, &p);
    xmp_plan_free(&p);
    build(&s, batch, &p);
    xmp_plan_free(&p);
}

/* On a shared filesystem every node writes its own report. */
Test(plan, report_path_per_node)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("cpu-only");
    spec_defaults(&s);
    s.workers = 1;
    s.nnodes = 3;
    s.node_rank = 2;
    s.master_addr = "10.0.0.1";
    build(&s, NULL, &p);
    cr_assert_str_eq(p.report_path, "train.node2.report.json");
    xmp_plan_free(&p);
    s.report = "r.json";
    build(&s, NULL, &p);
    cr_assert_str_eq(p.report_path, "r.json");
    xmp_plan_free(&p);
}

static bool
has_warning(const struct xmp_plan *p, const char *needle)
{
    for (char **w = p->warnings; w != NULL && *w != NULL; w++)
        if (strstr(*w, needle) != NULL)
            return true;
    return false;
}

/* The worker count compared with Slurm's allocation of this node. */
Test(plan, slurm_allocation_mismatch_warns)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char *gpus[] = {"SLURM_GPUS_ON_NODE=4", "SLURM_STEP_GPUS=0,1,2,3",   "SLURM_NNODES=2",
                    "SLURM_NODEID=0",       "SLURM_JOB_NODELIST=n[1-2]", NULL};
    char *tasks[] = {"SLURM_NTASKS_PER_NODE=4", NULL};
    char *cpus[] = {"SLURM_NNODES=2", "SLURM_NODEID=1", "SLURM_JOB_NODELIST=n[1-2]",
                    "SLURM_JOB_CPUS_PER_NODE=32,16", NULL};
    char *cpus_here[] = {"SLURM_JOB_CPUS_PER_NODE=12", NULL};
    char *fits[] = {"SLURM_NNODES=2",
                    "SLURM_NODEID=1",
                    "SLURM_JOB_NODELIST=n[1-2]",
                    "SLURM_JOB_CPUS_PER_NODE=8(x2)",
                    "SLURM_GPUS_ON_NODE=4",
                    "SLURM_NTASKS_PER_NODE=1",
                    NULL};

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.nnodes = -1;
    build(&s, gpus, &p);
    cr_assert_null(p.warnings);
    xmp_plan_free(&p);
    s.workers = 3;
    build(&s, gpus, &p);
    cr_assert(has_warning(&p, "this node plans 3 workers x 1 GPU, but Slurm allocated 4 GPUs on "
                              "it (SLURM_GPUS_ON_NODE=4); every node must plan the same number "
                              "of workers"));
    xmp_plan_free(&p);
    /* One node: no rendezvous to hang, but the allocation is still off. */
    s.nnodes = 1;
    build(&s, tasks, &p);
    cr_assert(has_warning(&p, "this node plans 3 workers, but the Slurm job asked for 4 tasks "
                              "per node (SLURM_NTASKS_PER_NODE=4)"));
    cr_assert_null(strstr(p.warnings[0], "every node"), "%s", p.warnings[0]);
    xmp_plan_free(&p);

    load_host("cpu-only");
    s.workers = 0;
    s.nnodes = -1;
    s.node_rank = -1;
    build(&s, cpus, &p);
    cr_assert(has_warning(&p, "Slurm gave the nodes different CPU counts "
                              "(SLURM_JOB_CPUS_PER_NODE=32,16)"));
    xmp_plan_free(&p);
    build(&s, cpus_here, &p);
    cr_assert(has_warning(&p, "workers: auto plans 8 workers (one per CPU xmprun may run on), but "
                              "Slurm allocated 12 CPUs on this node"),
              "%s", p.warnings ? p.warnings[0] : "none");
    xmp_plan_free(&p);
    build(&s, fits, &p);
    cr_assert_null(p.warnings, "%s", p.warnings ? p.warnings[0] : "");
    xmp_plan_free(&p);
}

/* The device nodes worker w may open beyond the ordinary ones, by name, joined with "; ". */
static void
device_nodes(const struct xmp_plan_worker *w, char *buf, size_t size)
{
    buf[0] = '\0';
    for (size_t i = 0; i < w->limits.devices.n; i++) {
        const struct xmp_dev_rule *r = &w->limits.devices.r[i];
        size_t len = strlen(buf);
        if (r->what[0] != '\0')
            snprintf(buf + len, size - len, "%s%s%s", len > 0 ? "; " : "", r->what,
                     r->required ? " (required)" : "");
    }
}

/* isolation.devices: job (the default) gives each worker of a 2-worker job on the 4-GPU host
 * both of the job's GPUs (cuda:0 and cuda:1, nodes 2 and 0), required, and neither GPU outside
 * the plan; worker gives each only its own; both give the shared and the RDMA nodes, which the
 * job can do without. CUDA_VISIBLE_DEVICES pins each worker in both. */
Test(plan, device_rules_job_and_worker)
{
    struct xmp_spec s;
    struct xmp_plan p;
    char got[1024];
    const char *shared = "/dev/nvidiactl; /dev/nvidia-modeset; /dev/nvidia-uvm; "
                         "/dev/nvidia-uvm-tools";
    const char *rdma = "/dev/infiniband/uverbs0; /dev/infiniband/uverbs1; "
                       "/dev/infiniband/rdma_cm; /dev/gdrdrv";
    char want[1024];

    load_host("gpu4");
    spec_defaults(&s);
    s.workers = 2;
    s.devices = XMP_DEVICES_JOB;
    build(&s, NULL, &p);
    snprintf(want, sizeof(want),
             "%s; cuda:0 (/dev/nvidia2) (required); cuda:1 (/dev/nvidia0) (required); %s", shared,
             rdma);
    for (size_t i = 0; i < 2; i++) {
        cr_assert(p.workers[i].limits.has_devices);
        device_nodes(&p.workers[i], got, sizeof(got));
        cr_expect_str_eq(got, want, "worker %zu", i);
        assert_env_int(&p.workers[i], "CUDA_VISIBLE_DEVICES", (long)i);
    }
    json_t *j = xmp_plan_to_json(&p, &host);
    json_t *nodes =
        json_object_get(json_object_get(json_array_get(json_object_get(j, "workers"), 1), "limits"),
                        "device_nodes");
    cr_assert(json_is_array(nodes));
    cr_expect_str_eq(json_string_value(json_array_get(nodes, 4)), "cuda:0 (/dev/nvidia2)");
    cr_expect_str_eq(json_string_value(json_array_get(nodes, 5)), "cuda:1 (/dev/nvidia0)");
    json_decref(j);
    xmp_plan_free(&p);

    s.devices = XMP_DEVICES_WORKER;
    build(&s, NULL, &p);
    snprintf(want, sizeof(want), "%s; cuda:0 (/dev/nvidia2) (required); %s", shared, rdma);
    device_nodes(&p.workers[0], got, sizeof(got));
    cr_expect_str_eq(got, want);
    snprintf(want, sizeof(want), "%s; cuda:1 (/dev/nvidia0) (required); %s", shared, rdma);
    device_nodes(&p.workers[1], got, sizeof(got));
    cr_expect_str_eq(got, want);
    xmp_plan_free(&p);

    /* A CPU job has no accelerator to open; the RDMA nodes stay. */
    s.devices = XMP_DEVICES_JOB;
    s.device_kind = XMP_DEVICE_CPU;
    build(&s, NULL, &p);
    device_nodes(&p.workers[0], got, sizeof(got));
    cr_expect_str_eq(got, rdma);
    xmp_plan_free(&p);

    s.devices = XMP_DEVICES_OFF;
    build(&s, NULL, &p);
    cr_expect_not(p.workers[0].limits.has_devices);
    cr_expect_eq(p.workers[0].limits.devices.n, 0);
    xmp_plan_free(&p);
}

/* Job mode on the 8-GPU host: each of the 8 workers may open all 8 GPUs, and all of them have
 * the same rules (so the job loads one BPF program for all of them). */
Test(plan, device_rules_job_on_eight_gpus)
{
    struct xmp_spec s;
    struct xmp_plan p;

    load_host("gpu8-2numa");
    spec_defaults(&s);
    s.devices = XMP_DEVICES_JOB;
    build(&s, NULL, &p);
    cr_assert_eq(p.n_workers, 8);
    for (size_t i = 0; i < 8; i++) {
        const struct xmp_dev_rules *r = &p.workers[i].limits.devices;
        size_t gpus = 0;
        for (size_t k = 0; k < r->n; k++)
            gpus += r->r[k].required;
        cr_expect_eq(gpus, 8, "worker %zu may open %zu GPUs", i, gpus);
        cr_expect_eq(r->n, p.workers[0].limits.devices.n);
    }
    xmp_plan_free(&p);
}
