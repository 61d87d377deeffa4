/* The smallest start: fork zygote, for bench/run.py: it preloads nothing and forks every worker
 * with xmprun_spawn(); each returns at once. What it measures is xmprun's and the kernel's part
 * of a fork-mode launch, not a model's load. */
#include "xmprun.h"

#include <stdio.h>

static int
work(int rank, void *arg)
{
    (void)rank;
    (void)arg;
    return 0;
}

int
main(void)
{
    int r = xmprun_spawn(work, NULL);

    if (r < 0) {
        fprintf(stderr, "bench_zygote: %s\n", xmprun_last_error());
        return 1;
    }
    return r;
}
