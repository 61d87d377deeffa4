/* The baselines xmprun is measured against, and the worker the failure-latency benchmark runs:
 *   baseline launch N      fork+exec N children running /bin/true, wait for all
 *   baseline failfast N    fork+exec N `baseline worker` children, wait for the first exit, SIGTERM
 *                          the rest and wait for them (what torch.multiprocessing.spawn does)
 *   baseline worker        RANK 0: sleep BENCH_FAIL_MS, write CLOCK_MONOTONIC ns to
 *                          BENCH_STAMP, exit 1; other ranks: sleep 60 s
 *   baseline cgmove FILE   write our own pid to the cgroup.procs FILE of the cgroup we are
 *                          already in, twice, and print how long each write took (the first move
 *                          into a v1 cgroup after a quiet spell waits for an RCU grace period) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t
spawn(char *const argv[], int rank)
{
    pid_t pid = fork();
    if (pid == 0) {
        char env[32];
        snprintf(env, sizeof(env), "%d", rank);
        setenv("RANK", env, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int
worker(void)
{
    const char *rank = getenv("RANK"), *stamp = getenv("BENCH_STAMP");
    if (rank == NULL || strcmp(rank, "0") != 0) {
        sleep(60);
        return 0;
    }
    long ms = getenv("BENCH_FAIL_MS") ? atol(getenv("BENCH_FAIL_MS")) : 300;
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L}, now;
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (stamp != NULL) {
        FILE *f = fopen(stamp, "w");
        if (f != NULL) {
            fprintf(f, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
            fclose(f);
        }
    }
    return 1;
}

static double
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int
cgmove(const char *procs)
{
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%d", (int)getpid());

    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(procs, "w");
        if (f == NULL)
            return 1;
        double t0 = now_ms();
        int ok = fwrite(pid, 1, (size_t)len, f) == (size_t)len && fflush(f) == 0;
        double t1 = now_ms();
        fclose(f);
        if (!ok)
            return 1;
        printf("%.3f\n", t1 - t0);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "worker") == 0)
        return worker();
    if (argc == 3 && strcmp(argv[1], "cgmove") == 0)
        return cgmove(argv[2]);
    if (argc != 3)
        return 2;
    int n = atoi(argv[2]);
    pid_t *pids = calloc((size_t)n, sizeof(pid_t));
    if (pids == NULL || n < 1)
        return 2;
    if (strcmp(argv[1], "launch") == 0) {
        char *const cmd[] = {"/bin/true", NULL};
        for (int i = 0; i < n; i++)
            pids[i] = spawn(cmd, i);
        for (int i = 0; i < n; i++)
            waitpid(pids[i], NULL, 0);
        return 0;
    }
    if (strcmp(argv[1], "failfast") == 0) {
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (len < 0)
            return 2;
        self[len] = '\0';
        char *const cmd[] = {self, "worker", NULL};
        int status = 0;
        for (int i = 0; i < n; i++)
            pids[i] = spawn(cmd, i);
        pid_t first = wait(&status);
        for (int i = 0; i < n; i++)
            if (pids[i] != first)
                kill(pids[i], SIGTERM);
        while (wait(NULL) > 0)
            ;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return 2;
}
