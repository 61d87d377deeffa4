/* Workers' output handling: the stderr tail ring, "[rank] line" assembly across reads, long
 * lines split at 64 KiB, partial last lines flushed at close, and log files. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "runner/output.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(output, tail_keeps_last_lines)
{
    struct xmp_tail t;
    char **lines;
    size_t n;
    char buf[16];

    xmp_tail_init(&t, 3);
    for (int i = 0; i < 10; i++) {
        snprintf(buf, sizeof(buf), "line %d", i);
        xmp_tail_push(&t, buf, strlen(buf));
    }
    lines = xmp_tail_take(&t, &n);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(lines[0], "line 7");
    cr_assert_str_eq(lines[2], "line 9");
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    xmp_tail_free(&t);
}

/* Feeds text through a pipe into a stream whose console is a temp file; returns the console. */
static char *
run_stream(const char *const *chunks, size_t n_chunks, bool prefix, struct xmp_tail *tail,
           const char *log_path)
{
    char *dir = xt_tmpdir(), *con_path = NULL, *text;
    int p[2], con, logfd = -1;
    struct xmp_stream s;

    cr_assert_eq(asprintf(&con_path, "%s/console", dir) > 0, 1);
    con = open(con_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log_path != NULL)
        logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_eq(pipe2(p, O_NONBLOCK), 0);
    cr_assert_eq(xmp_stream_init(&s, p[0], 3, con, prefix, logfd, tail), 0);
    for (size_t i = 0; i < n_chunks; i++) {
        size_t len = strlen(chunks[i]), off = 0;
        while (off < len) {
            ssize_t w = write(p[1], chunks[i] + off, len - off);
            if (w > 0)
                off += (size_t)w;
            cr_assert_eq(xmp_stream_read(&s, 1 << 20), 0);
        }
    }
    close(p[1]);
    cr_assert_eq(xmp_stream_read(&s, 1 << 20), 1); /* EOF */
    xmp_stream_close(&s);
    close(con);
    text = xt_read_file(con_path);
    xt_tmpdir_remove(dir);
    free(dir);
    free(con_path);
    return text;
}

Test(output, prefixes_whole_lines_across_reads)
{
    const char *chunks[] = {"hel", "lo\nwor", "ld\n", "no newline at end"};
    struct xmp_tail t;
    char **lines;
    size_t n;
    char *text;

    xmp_tail_init(&t, 2);
    text = run_stream(chunks, 4, true, &t, NULL);
    cr_assert_str_eq(text, "[3] hello\n[3] world\n[3] no newline at end\n");
    lines = xmp_tail_take(&t, &n);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(lines[0], "world");
    cr_assert_str_eq(lines[1], "no newline at end");
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    xmp_tail_free(&t);
    free(text);
}

Test(output, raw_mode_and_log_file)
{
    const char *chunks[] = {"a\nb\n"};
    char *dir = xt_tmpdir(), *log = NULL, *text, *logged;

    cr_assert_eq(asprintf(&log, "%s/rank-3.out", dir) > 0, 1);
    text = run_stream(chunks, 1, false, NULL, log);
    cr_assert_str_eq(text, "a\nb\n");
    logged = xt_read_file(log);
    cr_assert_str_eq(logged, "a\nb\n");
    free(text);
    free(logged);
    free(log);
    xt_tmpdir_remove(dir);
    free(dir);
}

Test(output, long_lines_are_split)
{
    size_t len = XMP_LINE_MAX + 100;
    char *big = malloc(len + 2);
    const char *chunks[1];
    char *text, *nl;

    memset(big, 'x', len);
    big[len] = '\n';
    big[len + 1] = '\0';
    chunks[0] = big;
    text = run_stream(chunks, 1, false, NULL, NULL);
    nl = strchr(text, '\n');
    cr_assert_not_null(nl);
    cr_assert_eq((size_t)(nl - text), (size_t)XMP_LINE_MAX);
    cr_assert_eq(strlen(nl + 1), 101);
    free(text);
    free(big);
}
