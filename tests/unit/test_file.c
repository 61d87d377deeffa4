/* isolate/file.c: output paths are checked and written without following or replacing what is
 * planted there, reads are bounded and never block on a FIFO, and a full descriptor table is
 * named as such. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "isolate/file.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *
join(const char *dir, const char *name)
{
    char *p = NULL;
    cr_assert_eq(asprintf(&p, "%s/%s", dir, name) > 0, 1);
    return p;
}

static size_t
count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n = 0;

    cr_assert_not_null(d);
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

Test(file, check_target)
{
    struct xmp_error err = {0};
    char *dir = xt_tmpdir();
    char *ok = join(dir, "new.json"), *fifo = join(dir, "fifo"), *link = join(dir, "link");
    char *missing = join(dir, "no/such.json");

    cr_assert_eq(xmp_file_check_target(ok, &err), 0, "%s", err.msg);
    free(xt_write_file(dir, "new.json", "old\n"));
    cr_assert_eq(xmp_file_check_target(ok, &err), 0, "%s", err.msg);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(xmp_file_check_target(fifo, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a FIFO, not a regular file"), "%s", err.msg);
    cr_assert_eq(symlink(ok, link), 0);
    cr_assert_eq(xmp_file_check_target(link, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a symbolic link"), "%s", err.msg);
    cr_assert_eq(xmp_file_check_target(dir, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a directory"), "%s", err.msg);
    cr_assert_eq(xmp_file_check_target(missing, &err), -1);
    cr_assert_eq(err.errnum, ENOENT);
    cr_assert_eq(xmp_file_check_target("", &err), -1);
    /* The probe file is gone again: new.json, fifo, link. */
    cr_assert_eq(count_entries(dir), 3);
    xt_tmpdir_remove(dir);
}

Test(file, write_atomic_replaces_files_only)
{
    struct xmp_error err = {0};
    char *dir = xt_tmpdir();
    char *path = join(dir, "r.json"), *victim = join(dir, "victim"), *link = join(dir, "l.json");
    char *text;
    struct stat st;

    umask(022);
    cr_assert_eq(xmp_file_write_atomic(path, "{}", true, &err), 0, "%s", err.msg);
    text = xt_read_file(path);
    cr_assert_str_eq(text, "{}\n");
    free(text);
    cr_assert_eq(xmp_file_write_atomic(path, "[1]", false, &err), 0, "%s", err.msg);
    text = xt_read_file(path);
    cr_assert_str_eq(text, "[1]\n");
    free(text);
    /* Not the default 0600 of mkstemp: as readable as other files the user writes. */
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644);

    free(xt_write_file(dir, "victim", "precious\n"));
    cr_assert_eq(symlink(victim, link), 0);
    cr_assert_eq(xmp_file_write_atomic(link, "{}", true, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a symbolic link"), "%s", err.msg);
    text = xt_read_file(victim);
    cr_assert_str_eq(text, "precious\n");
    free(text);
    /* No temp file is left after a refusal: r.json, victim, l.json. */
    cr_assert_eq(count_entries(dir), 3);
    xt_tmpdir_remove(dir);
}

Test(file, open_below_refuses_links_and_fifos, .timeout = 10)
{
    struct xmp_error err = {0};
    char *dir = xt_tmpdir();
    char *victim = join(dir, "victim"), *link = join(dir, "rank-0.out"), *fifo = join(dir, "f");
    int fd;

    free(xt_write_file(dir, "victim", "precious\n"));
    cr_assert_eq(symlink(victim, link), 0);
    cr_assert_eq(xmp_file_open_below(-1, link, O_WRONLY | O_APPEND, 0644, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a symbolic link; xmprun does not follow it"), "%s",
                       err.msg);
    /* A FIFO with no reader: without O_NONBLOCK the open would wait for good. */
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(xmp_file_open_below(-1, fifo, O_RDONLY, 0, &err), -1);
    cr_assert_not_null(strstr(err.msg, "is a FIFO, not a regular file"), "%s", err.msg);
    cr_assert_eq(xmp_file_open_below(-1, fifo, O_WRONLY, 0, &err), -1);

    fd = xmp_file_open_below(-1, victim, O_WRONLY | O_APPEND, 0644, &err);
    cr_assert_geq(fd, 0, "%s", err.msg);
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    cr_assert_neq(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    close(fd);
    xt_tmpdir_remove(dir);
}

Test(file, read_bounded)
{
    struct xmp_error err = {0};
    char *dir = xt_tmpdir();
    char *path = join(dir, "e.json"), *text = NULL;
    size_t len;
    int64_t size;

    free(xt_write_file(dir, "e.json", "0123456789"));
    cr_assert_eq(xmp_file_read_bounded(-1, path, 4, &text, &len, &size, &err), 0, "%s", err.msg);
    cr_assert_str_eq(text, "0123");
    cr_assert_eq(len, 4);
    cr_assert_eq(size, 10);
    free(text);
    cr_assert_eq(xmp_file_read_bounded(-1, path, 64, &text, &len, &size, &err), 0, "%s", err.msg);
    cr_assert_str_eq(text, "0123456789");
    cr_assert_eq(len, 10);
    cr_assert_eq(size, 10);
    free(text);
    free(path);
    path = join(dir, "missing");
    cr_assert_eq(xmp_file_read_bounded(-1, path, 64, &text, &len, &size, &err), -1);
    cr_assert_eq(err.errnum, ENOENT);
    cr_assert_null(text);
    xt_tmpdir_remove(dir);
}

Test(file, raise_nofile_and_a_full_table)
{
    struct xmp_error err = {0};
    struct rlimit inherited, now, low = {32, 32};
    int fds[64];
    size_t n = 0;

    cr_assert_eq(xmp_file_raise_nofile(&inherited, &err), 0, "%s", err.msg);
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &now), 0);
    cr_assert_eq(now.rlim_max, inherited.rlim_max);
    cr_assert(now.rlim_cur >= inherited.rlim_cur);

    /* Criterion runs each test in its own process, so the limit and the fds are this test's. */
    cr_assert_geq(xmp_file_count_open(), 3);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    cr_assert_not(xmp_file_explain_emfile(&err));
    while (n < 64 && (fds[n] = open("/", O_PATH | O_CLOEXEC)) >= 0)
        n++;
    cr_assert_eq(errno, EMFILE);
    xmp_error_set(&err, ENODEV, "create cgroup `x` (libcgroup: Cgroup is not mounted)");
    cr_assert(xmp_file_explain_emfile(&err));
    cr_assert_str_eq(err.msg, "out of file descriptors (RLIMIT_NOFILE 32)");
    cr_assert_eq(err.errnum, EMFILE);
    while (n > 0)
        close(fds[--n]);
}

/* A lock file: taken once (its holder's pid written in it), refused to a second open file while
 * held, removed when dropped; one left by a holder that is gone (no lock on it) is taken again,
 * and a link planted at its name is not followed. */
Test(file, lock_take_and_drop, .timeout = 10)
{
    char *dir = xt_tmpdir();
    char *path = join(dir, ".r.json.lock"), *target = join(dir, "target");
    struct xmp_error err = {0};
    int fd = -1, fd2 = -1;
    pid_t holder = 0;

    cr_assert_eq(xmp_file_lock_take(path, &fd, &holder, &err), 0, "%s", err.msg);
    cr_assert_geq(fd, 0);
    cr_assert_eq(xmp_file_lock_take(path, &fd2, &holder, &err), 1);
    cr_assert_eq(fd2, -1);
    cr_assert_eq(holder, getpid());
    xmp_file_lock_drop(path, fd);
    cr_assert_neq(access(path, F_OK), 0, "the lock file is left");
    /* What a holder killed with SIGKILL leaves: the file, its pid, no lock. */
    free(xt_write_file(dir, ".r.json.lock", "1\n"));
    cr_assert_eq(xmp_file_lock_take(path, &fd, &holder, &err), 0, "%s", err.msg);
    xmp_file_lock_drop(path, fd);
    free(xt_write_file(dir, "target", ""));
    cr_assert_eq(symlink(target, path), 0);
    cr_assert_eq(xmp_file_lock_take(path, &fd, &holder, &err), -1);
    cr_assert_eq(fd, -1);
    unlink(path);
    free(path);
    free(target);
    xt_tmpdir_remove(dir);
    free(dir);
}

/* Processes that take and drop one lock file as fast as they can never hold it two at a time:
 * a holder removes the file before it lets go, so whoever locked the removed file must see that
 * it is no longer at the path and take the new one (the check after flock). */
Test(file, lock_is_held_by_one_process_at_a_time, .timeout = 30)
{
    enum { PROCS = 4, ROUNDS = 50000 };
    char *dir = xt_tmpdir();
    char *path = join(dir, ".r.json.lock");
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[PROCS];

    cr_assert_neq(shared, MAP_FAILED);
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        cr_assert_geq(pids[p], 0);
        if (pids[p] > 0)
            continue;
        for (int i = 0; i < ROUNDS; i++) {
            struct xmp_error err = {0};
            pid_t holder;
            int fd = -1;
            if (xmp_file_lock_take(path, &fd, &holder, &err) != 0)
                continue;
            if (__atomic_add_fetch(&shared[0], 1, __ATOMIC_SEQ_CST) > 1)
                __atomic_store_n(&shared[1], 1, __ATOMIC_SEQ_CST);
            shared[2]++;
            /* Held a moment, so that a second holder would overlap it. */
            for (volatile int spin = 0; spin < 2000; spin++)
                ;
            __atomic_sub_fetch(&shared[0], 1, __ATOMIC_SEQ_CST);
            xmp_file_lock_drop(path, fd);
        }
        _exit(0);
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        cr_assert_eq(waitpid(pids[p], &status, 0), pids[p]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    cr_assert_gt(shared[2], 0, "nobody ever took the lock");
    cr_assert_eq(shared[1], 0, "two processes held the lock at once");
    munmap(shared, 4096);
    free(path);
    xt_tmpdir_remove(dir);
    free(dir);
}
