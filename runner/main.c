/* xmprun's command line: parses options, dispatches to validate / plan / run / gc, prints errors
 * and picks the exit status. */
#include <stdio.h>

int
main(void)
{
    fputs("xmprun: not built yet\n", stderr);
    return 125;
}
