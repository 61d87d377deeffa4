/* End to end: the GPU memory each worker used, from NVML, on a fixture GPU host with the
 * stand-in NVML (tests/helpers/nvml_standin.c, loaded through XMPRUN_NVML_LIB). Each worker
 * starts a child that registers with the stand-in, under its own pid, the bytes it "uses" on
 * the worker's GPU; a process outside the job uses the same GPUs. The report must give each
 * worker its own child's bytes, not its GPU's, and the GPU's total; NVML is never loaded for a
 * job without GPUs or for `xmprun gc`. */
#include "e2e/e2e.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define GIB (1LL << 30)

struct gpumem {
    struct e2e e;
    char *root;     /* the fixture host */
    char *nvml_dir; /* NVML_STANDIN_DIR */
    char *env[4];   /* the variables xmprun runs with */
    pid_t outsider; /* a process of no worker's, on every GPU */
};

static void
gpumem_init(struct gpumem *g)
{
    char *cmd = NULL;

    e2e_init(&g->e);
    cr_assert(asprintf(&g->root, "%s/host", g->e.dir) > 0);
    cr_assert(asprintf(&g->nvml_dir, "%s/nvml", g->e.dir) > 0);
    cr_assert(asprintf(&cmd, "cp -r %s/hosts/gpu4 %s && mkdir -p %s/procs", xt_fixtures(), g->root,
                       g->nvml_dir) > 0);
    cr_assert_eq(e2e_sh(&g->e, 30, cmd), 0, "%s", g->e.r.err);
    free(cmd);
    cr_assert_not_null(getenv("XMPRUN_NVML_STANDIN"), "run by ctest: no XMPRUN_NVML_STANDIN");
    g->env[0] = g->e.state_env;
    cr_assert(asprintf(&g->env[1], "XMPRUN_HOST_ROOT=%s", g->root) > 0);
    cr_assert(asprintf(&g->env[2], "XMPRUN_NVML_LIB=%s", getenv("XMPRUN_NVML_STANDIN")) > 0);
    cr_assert(asprintf(&g->env[3], "NVML_STANDIN_DIR=%s", g->nvml_dir) > 0);

    /* 5 GiB on each of the four GPUs, for as long as the test runs. */
    g->outsider = fork();
    cr_assert(g->outsider >= 0);
    if (g->outsider == 0) {
        /* Gone with the test, also one that fails an assertion; not holding ctest's pipes. */
        int null = open("/dev/null", O_RDWR);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execl("/bin/sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    char name[32];
    snprintf(name, sizeof(name), "procs/%d", (int)g->outsider);
    free(xt_write_file(g->nvml_dir, name,
                       "0 5368709120\n1 5368709120\n2 5368709120\n3 5368709120\n"));
}

static void
gpumem_fini(struct gpumem *g)
{
    kill(g->outsider, SIGKILL);
    waitpid(g->outsider, NULL, 0);
    for (int i = 1; i < 4; i++)
        free(g->env[i]);
    free(g->root);
    free(g->nvml_dir);
    e2e_fini(&g->e);
}

static int
gpumem_run(struct gpumem *g, const char *verb)
{
    char *argv[] = {(char *)xt_bin(), "--report", g->e.report, g->e.spec, NULL};
    char *gc_argv[] = {(char *)xt_bin(), "gc", NULL};
    char *envp[] = {g->env[0], g->env[1], g->env[2], g->env[3], NULL};

    xt_result_free(&g->e.r);
    cr_assert_eq(xt_run(&g->e.r, verb != NULL ? gc_argv : argv, envp, g->e.dir, 60), 0);
    return g->e.r.status;
}

/* The stand-in's log of nvmlInit and nvmlShutdown calls, or "" when NVML was never loaded. */
static char *
nvml_calls(const struct gpumem *g)
{
    char *path = NULL, *text = NULL;
    size_t len = 0;

    cr_assert(asprintf(&path, "%s/calls", g->nvml_dir) > 0);
    FILE *f = fopen(path, "re");
    free(path);
    if (f == NULL)
        return strdup("");
    if (getdelim(&text, &len, '\0', f) < 0) {
        free(text);
        text = strdup("");
    }
    fclose(f);
    return text;
}

/* Two workers, each on its own GPU: worker r's child registers (r + 1) GiB on the GPU that
 * CUDA_VISIBLE_DEVICES gives it, and lives 4 - r s, long enough for the 1 s samples; worker 0
 * outlives worker 1, so that every sample of worker 1's child is taken while worker 0's cgroup
 * is there to be confused with its own. */
static void
two_workers_show_their_own_peaks(const char *isolation)
{
    struct gpumem g;
    char *text = NULL;

    gpumem_init(&g);
    cr_assert(
        asprintf(
            &text,
            "version: 1\nname: gpumem\nworkers: 2\ndevices: {kind: cuda}\n"
            "resources: {worker: {cpuset: none}}\n%s"
            "command: 'sleep $((4 - RANK)) & echo \"$CUDA_VISIBLE_DEVICES $(( (RANK + 1) << 30 "
            "))\" > %s/procs/$!; wait'\n",
            isolation, g.nvml_dir) > 0);
    e2e_set_spec(&g.e, text);
    cr_assert_eq(gpumem_run(&g, NULL), 0, "stderr:\n%s", g.e.r.err);
    e2e_load_report(&g.e);
    for (size_t r = 0; r < 2; r++) {
        json_t *w = e2e_worker(&g.e, r);
        json_t *mem = json_object_get(w, "gpu_memory");
        const char *device = json_string_value(json_array_get(json_object_get(w, "devices"), 0));
        json_t *m = json_array_get(mem, 0);
        cr_assert_eq(json_array_size(mem), 1, "worker %zu: no gpu_memory in the report", r);
        cr_expect_str_eq(e2e_str(m, "device"), device);
        cr_expect_eq(json_integer_value(json_object_get(m, "peak_bytes")),
                     (json_int_t)(r + 1) * GIB, "worker %zu: peak %lld, not its own child's %lld",
                     r, (long long)json_integer_value(json_object_get(m, "peak_bytes")),
                     (long long)(r + 1) * GIB);
        cr_expect_eq(json_integer_value(json_object_get(m, "total_bytes")), 80 * GIB);
    }
    /* Loaded once, after the start; never shut down on the way out. */
    char *calls = nvml_calls(&g);
    cr_expect(strncmp(calls, "nvmlInit ", 9) == 0 &&
                  strchr(calls, '\n') == calls + strlen(calls) - 1,
              "NVML calls:\n%s", calls);
    free(calls);
    e2e_assert_clean(&g.e);
    gpumem_fini(&g);
}

Test(gpu_memory, two_workers_show_their_own_peaks_by_cgroup, .timeout = 60)
{
    two_workers_show_their_own_peaks("");
}

Test(gpu_memory, two_workers_show_their_own_peaks_by_process_tree, .timeout = 60)
{
    two_workers_show_their_own_peaks("isolation: {cgroups: off}\n");
}

/* A job without GPUs, even on a GPU host, and `xmprun gc`: NVML is not loaded at all. */
Test(gpu_memory, cpu_jobs_and_gc_never_load_nvml, .timeout = 60)
{
    struct gpumem g;

    gpumem_init(&g);
    e2e_spec(&g.e, "version: 1\nname: cpujob\nworkers: 2\ndevices: {kind: cpu}\n"
                   "resources: {worker: {cpuset: none}}\ncommand: 'sleep 1.5'\n");
    cr_assert_eq(gpumem_run(&g, NULL), 0, "stderr:\n%s", g.e.r.err);
    e2e_load_report(&g.e);
    cr_expect_null(json_object_get(e2e_worker(&g.e, 0), "gpu_memory"));
    cr_assert_eq(gpumem_run(&g, "gc"), 0, "stderr:\n%s", g.e.r.err);
    char *calls = nvml_calls(&g);
    cr_expect_str_eq(calls, "", "NVML was loaded:\n%s", calls);
    free(calls);
    e2e_assert_clean(&g.e);
    gpumem_fini(&g);
}
