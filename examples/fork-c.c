/* A C zygote for start: fork (examples/fork-c.yaml): preloads 256 MiB once, then forks every
 * planned worker with xmprun_spawn(). Each worker reads all of the preload (charged to the
 * zygote, not to it) and prints its sum under the job-wide serial lock.
 *
 *     cc fork-c.c -lxmprun       (in this tree: built as build/examples/fork-c-zygote) */
#include <xmprun.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRELOAD (256u << 20)

static unsigned char *preload;

static int
work(int rank, void *arg)
{
    unsigned long sum = 0;

    (void)arg;
    for (size_t i = 0; i < PRELOAD; i++)
        sum += preload[i];
    if (xmprun_serial_lock() < 0)
        fprintf(stderr, "serial lock: %s\n", xmprun_last_error());
    printf("worker %d (RANK=%s): read %u MiB, sum %lu\n", rank, getenv("RANK"), PRELOAD >> 20, sum);
    fflush(stdout);
    xmprun_serial_unlock();
    return 0;
}

int
main(void)
{
    preload = malloc(PRELOAD);
    if (preload == NULL)
        return 1;
    memset(preload, 1, PRELOAD); /* touched here, so the pages are charged to the zygote */
    printf("zygote: preloaded %u MiB\n", PRELOAD >> 20);
    int r = xmprun_spawn(work, NULL);
    if (r < 0) {
        fprintf(stderr, "fork-c-zygote: %s\n", xmprun_last_error());
        return 1;
    }
    printf("zygote: the job %s\n", r == 0 ? "succeeded" : "failed");
    return r;
}
