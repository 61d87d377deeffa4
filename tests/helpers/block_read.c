/* A worker with symbols that blocks in read() on a pipe nobody writes, called from a function of
 * its own (block_in_read): the stack tests look for that name in its native stack. Prints
 * "ready" once it is about to block. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Not inlined, and with work after the call, so that the read is no tail call: the frame stays. */
__attribute__((noinline)) static int
block_in_read(int fd)
{
    char c;
    ssize_t n = read(fd, &c, 1);
    return n > 0 ? c : (int)n;
}

int
main(void)
{
    int p[2];

    if (pipe(p) < 0)
        return 1;
    puts("ready");
    fflush(stdout);
    return block_in_read(p[0]) == 0 ? 0 : 2;
}
