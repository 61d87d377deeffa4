/* Shared helpers for the Criterion tests (see testlib.h). */
#define _GNU_SOURCE
#include "helpers/testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *
need_env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') {
        fprintf(stderr, "testlib: %s is not set; run the tests through ctest\n", name);
        abort();
    }
    return v;
}

const char *
xt_bin(void)
{
    return need_env("XMPRUN_BIN");
}

const char *
xt_probe(void)
{
    return need_env("XMPRUN_PROBE");
}

const char *
xt_source_dir(void)
{
    return need_env("XMPRUN_SOURCE_DIR");
}

const char *
xt_fixtures(void)
{
    return need_env("XMPRUN_FIXTURES");
}

struct buf {
    char *data;
    size_t len;
    size_t cap;
};

static void
buf_read(struct buf *b, int fd, int *open_fd)
{
    char tmp[8192];
    ssize_t n = read(fd, tmp, sizeof(tmp));
    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            close(fd);
            *open_fd = -1;
        }
        return;
    }
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->data = realloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, tmp, (size_t)n);
    b->len += (size_t)n;
    b->data[b->len] = '\0';
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
xt_run(struct xt_result *r, char *const argv[], char *const envp[], const char *cwd, int timeout_s)
{
    int out[2], err[2], status = 0;
    struct buf bo = {calloc(1, 1), 0, 1}, be = {calloc(1, 1), 0, 1};
    pid_t pid;
    double deadline = now_s() + (timeout_s > 0 ? timeout_s : 60);

    memset(r, 0, sizeof(*r));
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        if (cwd != NULL && chdir(cwd) < 0)
            _exit(126);
        for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
            putenv(envp[i]);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    int fo = out[0], fe = err[0];
    while (fo >= 0 || fe >= 0) {
        struct pollfd p[2] = {{fo, POLLIN, 0}, {fe, POLLIN, 0}};
        double left = deadline - now_s();
        if (left <= 0) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            deadline = now_s() + 3600;
        }
        if (poll(p, 2, left > 0 ? (int)(left * 1000) + 1 : 100) < 0 && errno != EINTR)
            break;
        if (fo >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            buf_read(&bo, fo, &fo);
        if (fe >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            buf_read(&be, fe, &fe);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = bo.data;
    r->err = be.data;
    return 0;
}

void
xt_result_free(struct xt_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* Where the tests' directories go: /tmp, or XMPRUN_TEST_TMPDIR (the mutation check gives each
 * run one of its own, removed at its end, so that what a test killed by a planted bug could not
 * remove goes with it). */
static const char *
tmp_base(void)
{
    const char *base = getenv("XMPRUN_TEST_TMPDIR");
    return base != NULL && base[0] == '/' ? base : "/tmp";
}

char *
xt_tmpdir(void)
{
    char *tmpl = NULL;
    if (asprintf(&tmpl, "%s/xmprun-test-XXXXXX", tmp_base()) < 0 || mkdtemp(tmpl) == NULL) {
        perror("mkdtemp");
        abort();
    }
    return tmpl;
}

char *
xt_write_file(const char *dir, const char *name, const char *text)
{
    char *path = NULL;
    FILE *f;
    if (asprintf(&path, "%s/%s", dir, name) < 0)
        abort();
    f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        abort();
    }
    fputs(text, f);
    fclose(f);
    return path;
}

char *
xt_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *data = NULL;
    size_t len = 0;
    if (f == NULL)
        return NULL;
    FILE *m = open_memstream(&data, &len);
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        fwrite(tmp, 1, n, m);
    fclose(m);
    fclose(f);
    return data;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void
xt_tmpdir_remove(const char *dir)
{
    const char *base = tmp_base();
    size_t n = strlen(base);
    if (dir != NULL && strncmp(dir, base, n) == 0 && strncmp(dir + n, "/xmprun-test-", 13) == 0)
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int
xt_validate_json(const char *schema, const char *json_path, char *msg, size_t msg_size)
{
    char *schema_path = NULL;
    struct xt_result r;
    int ret;
    if (asprintf(&schema_path, "%s/schemas/%s", xt_source_dir(), schema) < 0)
        abort();
    char *argv[] = {"/usr/bin/python3",
                    "-c",
                    "import json,sys,jsonschema\n"
                    "s=json.load(open(sys.argv[1]));d=json.load(open(sys.argv[2]))\n"
                    "jsonschema.validators.validator_for(s)(s).validate(d)\n",
                    schema_path,
                    (char *)json_path,
                    NULL};
    if (xt_run(&r, argv, NULL, NULL, 60) < 0)
        abort();
    ret = r.status == 0 ? 0 : -1;
    if (msg != NULL)
        snprintf(msg, msg_size, "%s", r.err);
    xt_result_free(&r);
    free(schema_path);
    return ret;
}

size_t
xt_split_lines(char *text, char **lines, size_t max)
{
    char *save = NULL;
    size_t n = 0;

    for (char *l = strtok_r(text, "\n", &save); l != NULL && n < max;
         l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    return n;
}
