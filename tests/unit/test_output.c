/* Workers' output handling: the stderr tail ring, "[rank] line" assembly across reads, long
 * lines split at 64 KiB, partial last lines flushed at close, and log files. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "runner/run/output.h"

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

/* A 64 KiB line (a progress bar without newlines, a dumped tensor) is kept cut at
 * XMP_TAIL_LINE_MAX in the tail, and so in every report: its start, whole up to there. */
Test(output, tail_cuts_a_long_line)
{
    struct xmp_tail t;
    char **lines;
    size_t n, len = 64 * 1024;
    char *line = malloc(len);

    cr_assert_not_null(line);
    for (size_t i = 0; i < len; i++)
        line[i] = (char)('a' + i % 26);
    xmp_tail_init(&t, 2);
    xmp_tail_push(&t, line, len);
    xmp_tail_push(&t, "short", 5);
    lines = xmp_tail_take(&t, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(strlen(lines[0]), XMP_TAIL_LINE_MAX);
    cr_assert(memcmp(lines[0], line, XMP_TAIL_LINE_MAX) == 0);
    cr_assert_str_eq(lines[1], "short");
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    free(line);
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
    struct xmp_console console;

    cr_assert_eq(asprintf(&con_path, "%s/console", dir) > 0, 1);
    con = open(con_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log_path != NULL)
        logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_eq(pipe2(p, O_NONBLOCK), 0);
    xmp_console_init(&console, con, true);
    cr_assert_eq(xmp_stream_init(&s, p[0], 3, &console, prefix, logfd, tail), 0);
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
    xmp_console_drain(&console, 1000);
    xmp_console_free(&console);
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

/* A console on a pipe nobody reads: lines are queued, flushing never blocks, and everything
 * arrives, in order, once the reader catches up. */
Test(output, slow_console_queues_without_blocking, .timeout = 10)
{
    struct xmp_console c;
    struct xmp_stream s;
    int con[2], p[2];
    char line[128], *got = malloc(8 << 20);
    size_t got_len = 0, lines = 20000;

    cr_assert_eq(pipe2(con, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    xmp_console_init(&c, con[1], false);
    cr_assert_eq(xmp_stream_init(&s, p[0], 7, &c, true, -1, NULL), 0);
    for (size_t i = 0; i < lines; i++) {
        int n = snprintf(line, sizeof(line), "line %zu of a console nobody reads yet\n", i);
        cr_assert_eq(write(p[1], line, (size_t)n), n);
        cr_assert_eq(xmp_stream_read(&s, 1 << 20), 0);
    }
    /* Far more than a pipe holds (64 KiB): the flush returns with the rest still queued. */
    size_t left = xmp_console_flush(&c);
    cr_assert_gt(left, 0);
    cr_assert_gt(left + 65536, (size_t)700000);
    fcntl(con[0], F_SETFL, O_NONBLOCK);
    while (left > 0 || got_len == 0) {
        ssize_t n = read(con[0], got + got_len, (8 << 20) - got_len);
        if (n > 0)
            got_len += (size_t)n;
        left = xmp_console_flush(&c);
        if (n <= 0 && left == 0)
            break;
    }
    ssize_t n;
    while ((n = read(con[0], got + got_len, (8 << 20) - got_len)) > 0)
        got_len += (size_t)n;
    got[got_len] = '\0';
    cr_assert_eq(strncmp(got, "[7] line 0 of", 13), 0);
    snprintf(line, sizeof(line), "[7] line %zu of a console nobody reads yet\n", lines - 1);
    cr_assert_not_null(strstr(got, line));
    size_t count = 0;
    for (char *q = got; (q = strchr(q, '\n')) != NULL; q++)
        count++;
    cr_assert_eq(count, lines);
    close(p[1]);
    xmp_stream_close(&s);
    xmp_console_free(&c);
    close(con[0]);
    close(con[1]);
    free(got);
}
