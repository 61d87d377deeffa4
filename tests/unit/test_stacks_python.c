/* The CPython line-table decoder of the stack capture (runner/report/stacks_python.c), on real
 * co_linetable bytes: Debian's Python 3.11.2 compiled each function below, and co_lines() gave
 * the line of each instruction range (None: no location). */
#include "runner/report/stacks_internal.h"

#include <criterion/criterion.h>

struct range {
    int start, end, line; /* bytes [start, end) of the code; line 0: none */
};

static void
check(const unsigned char *table, size_t size, int first, const struct range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (int at = r[i].start; at < r[i].end; at += 2)
            cr_assert_eq(xmp_stacks_py_line(table, size, first, at), r[i].line,
                         "instruction at %d: line %d, want %d", at,
                         xmp_stacks_py_line(table, size, first, at), r[i].line);
}

/* def f(x):               # line 3
 *     y = x + 1
 *     if y:
 *         return y * 2
 *
 *     return [i for i in range(y)]
 * Short forms (codes 0-9), one-line forms (10-12), the long form (14). */
Test(stacks_python, line_table_short_and_long_forms)
{
    static const unsigned char table[] = {
        128, 0,   216, 8,   9,   136, 65,  137, 5,   128, 65,  216, 7,   8,   240, 0,   1,   5,
        21,  216, 15,  16,  144, 49,  137, 117, 136, 12,  224, 11,  32,  208, 11,  32,  149, 117,
        152, 81,  145, 120, 148, 120, 208, 11,  32,  209, 11,  32,  212, 11,  32,  208, 4,   32};
    static const struct range lines[] = {
        {0, 2, 3}, {2, 12, 4}, {12, 16, 5}, {16, 26, 6}, {26, 76, 8}, /* the comprehension's line */
    };
    check(table, sizeof(table), 3, lines, sizeof(lines) / sizeof(lines[0]));
    /* Past the table's end: none. */
    cr_assert_eq(xmp_stacks_py_line(table, sizeof(table), 3, 76), 0);
}

/* def g(path):            # line 1
 *     with open(path) as fh:
 *         data = fh.read()
 *     return data
 * The exception table's cleanup has no location (code 15). */
Test(stacks_python, line_table_no_location)
{
    static const unsigned char table[] = {
        128, 0,  221, 9,   13,  136, 100, 137, 26,  140, 26,  240, 0,   1,   5,   25, 144, 114, 216,
        15,  17, 143, 119, 138, 119, 137, 121, 140, 121, 136, 4,   240, 3,   1,   5,  25,  240, 0,
        1,   5,  25,  240, 0,   1,   5,   25,  241, 0,   1,   5,   25,  244, 0,   1,  5,   25,  240,
        0,   1,  5,   25,  240, 0,   1,   5,   25,  240, 0,   1,   5,   25,  240, 0,  1,   5,   25,
        240, 0,  1,   5,   25,  240, 0,   1,   5,   25,  248, 248, 248, 240, 0,   1,  5,   25,  240,
        0,   1,  5,   25,  240, 0,   1,   5,   25,  240, 0,   1,   5,   25,  224, 11, 15,  128, 75};
    static const struct range lines[] = {
        {0, 2, 1},     {2, 34, 2},    {34, 74, 3},   {74, 106, 2},
        {106, 112, 0}, {112, 120, 2}, {120, 124, 4},
    };
    check(table, sizeof(table), 1, lines, sizeof(lines) / sizeof(lines[0]));
}

/* What is not a table gives no line, never a wrong one or a read past its end. */
Test(stacks_python, line_table_garbage)
{
    static const unsigned char not_a_start[] = {0x05, 0x01};
    static const unsigned char cut[] = {0xf0}; /* a long form with nothing after it */

    cr_assert_eq(xmp_stacks_py_line(not_a_start, sizeof(not_a_start), 10, 0), 0);
    cr_assert_eq(xmp_stacks_py_line(cut, sizeof(cut), 10, 4), 0);
    cr_assert_eq(xmp_stacks_py_line(cut, 0, 10, 0), 0);
    /* Before the first instruction (a frame that has not started): its first line. */
    cr_assert_eq(xmp_stacks_py_line(cut, sizeof(cut), 10, -2), 10);
}
