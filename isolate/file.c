/* Files written or read on the user's behalf, opened with openat() on their directory and
 * O_NOFOLLOW so that a link, FIFO or device node planted at the path is refused rather than
 * written through, blocked on or replaced; and xmprun's descriptor limit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/file.h"

#include "isolate/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* The commit thread only syncs, renames and formats an error message. */
#define COMMIT_STACK (64 * 1024)

static const char *
file_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFDIR:
        return "a directory";
    case S_IFCHR:
        return "a character device";
    case S_IFBLK:
        return "a block device";
    case S_IFIFO:
        return "a FIFO";
    case S_IFSOCK:
        return "a socket";
    case S_IFLNK:
        return "a symbolic link";
    default:
        return "not a regular file";
    }
}

/* The directory of path, opened, and its last component (pointing into *base_copy). */
static int
open_parent(const char *path, char **base_copy, const char **base, struct xmp_error *err)
{
    cleanup_free char *dir_copy = strdup(path);
    const char *dir;
    int dfd;

    *base_copy = strdup(path);
    if (dir_copy == NULL || *base_copy == NULL)
        return xmp_error_set(err, ENOMEM, "`%s`", path);
    dir = dirname(dir_copy);
    *base = basename(*base_copy);
    if (path[0] == '\0' || strcmp(*base, "/") == 0 || strcmp(*base, ".") == 0 ||
        strcmp(*base, "..") == 0)
        return xmp_error_set(err, EISDIR, "`%s`", path);
    /* The directories on the way are the user's own choice and may be links; only the last
     * component, the one xmprun creates, is opened without following one. */
    dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return xmp_error_set(err, errno, "`%s`: directory `%s`", path, dir);
    return dfd;
}

/* Refuses an existing entry that is not a regular file. */
static int
check_entry(int dfd, const char *base, const char *path, struct xmp_error *err)
{
    struct stat st;

    if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 0;
        return xmp_error_set(err, errno, "`%s`", path);
    }
    if (!S_ISREG(st.st_mode))
        return xmp_error_set(err, 0, "`%s` is %s, not a regular file; xmprun does not replace it",
                             path, file_kind(st.st_mode));
    return 0;
}

/* Creates ".<base>.XXXXXX" in dfd, exclusively and without following links. */
static int
create_temp(int dfd, const char *base, char *name, size_t size)
{
    for (int tries = 0; tries < 100; tries++) {
        unsigned char r[6];
        static const char chars[] =
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        char suffix[7];
        int fd;

        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
            return -1;
        for (size_t i = 0; i < sizeof(r); i++)
            suffix[i] = chars[r[i] % (sizeof(chars) - 1)];
        suffix[6] = '\0';
        if (snprintf(name, size, ".%s.%s", base, suffix) >= (int)size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        /* 0666 less the umask: as readable as any file the user writes. */
        fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int
xmp_file_check_target(const char *path, struct xmp_error *err)
{
    cleanup_free char *base_copy = NULL;
    cleanup_close int dfd = -1;
    const char *base;
    char tmp[512];
    int fd;

    dfd = open_parent(path, &base_copy, &base, err);
    if (dfd < 0)
        return -1;
    if (check_entry(dfd, base, path, err) < 0)
        return -1;
    /* Creating a file is the only test that sees everything in the way: permissions, a
     * read-only mount, ACLs, an exhausted inode table. */
    fd = create_temp(dfd, base, tmp, sizeof(tmp));
    if (fd < 0)
        return xmp_error_set(err, errno, "`%s`: cannot create a file in its directory", path);
    close(fd);
    unlinkat(dfd, tmp, 0);
    return 0;
}

static int
write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The second half of an atomic write, once the text is in the temp file: fsync, rename, fsync
 * the directory. On a thread of its own when durable (see xmp_file_write_atomic_start). */
static void *
commit(void *arg)
{
    struct xmp_file_commit *c = arg;

    if ((c->durable && fsync(c->fd) < 0) || close(steal_fd(&c->fd)) < 0) {
        int saved = errno;
        unlinkat(c->dfd, c->tmp, 0);
        c->ret = xmp_error_set(&c->err, saved, "write `%s`", c->path);
        return NULL;
    }
    /* rename replaces the directory entry itself: it never writes through a link. */
    if (renameat(c->dfd, c->tmp, c->dfd, c->base) < 0) {
        int saved = errno;
        unlinkat(c->dfd, c->tmp, 0);
        c->ret = xmp_error_set(&c->err, saved, "rename the new `%s` into place", c->path);
        return NULL;
    }
    /* The rename is durable only once the directory entry is on disk too; an O_PATH fd
     * cannot be fsynced. */
    if (c->durable) {
        cleanup_close int sync_fd = openat(c->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sync_fd >= 0)
            fsync(sync_fd);
    }
    c->ret = 0;
    return NULL;
}

static void
commit_free(struct xmp_file_commit *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->dfd >= 0)
        close(c->dfd);
    free(c->base_copy);
    c->fd = c->dfd = -1;
    c->base_copy = NULL;
}

int
xmp_file_write_atomic_start(const char *path, const char *text, bool durable,
                            struct xmp_file_commit *c, struct xmp_error *err)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->path = path;
    c->durable = durable;
    c->dfd = open_parent(path, &c->base_copy, &c->base, err);
    /* Checked again at the end: the path may have been replaced while the job ran. */
    if (c->dfd < 0 || check_entry(c->dfd, c->base, path, err) < 0)
        goto fail;
    c->fd = create_temp(c->dfd, c->base, c->tmp, sizeof(c->tmp));
    if (c->fd < 0) {
        xmp_error_set(err, errno, "`%s`: create a temp file in its directory", path);
        goto fail;
    }
    if (write_all(c->fd, text, strlen(text)) < 0 || write_all(c->fd, "\n", 1) < 0) {
        int saved = errno;
        unlinkat(c->dfd, c->tmp, 0);
        xmp_error_set(err, saved, "write `%s`", path);
        goto fail;
    }
    /* The fsyncs wait for the disk, not the CPU: a thread waits for them while the caller goes
     * on. Without a thread, they are done here. */
    if (!durable || !xmp_thread_start(&c->thread, commit, c, COMMIT_STACK))
        commit(c);
    return 0;
fail:
    commit_free(c);
    c->ret = -1;
    return -1;
}

int
xmp_file_write_atomic_finish(struct xmp_file_commit *c, struct xmp_error *err)
{
    int ret;

    xmp_thread_join(&c->thread);
    ret = c->ret;
    if (ret < 0 && err != NULL && c->err.msg[0] != '\0')
        *err = c->err;
    commit_free(c);
    return ret;
}

int
xmp_file_write_atomic(const char *path, const char *text, bool durable, struct xmp_error *err)
{
    struct xmp_file_commit c;

    if (xmp_file_write_atomic_start(path, text, durable, &c, err) < 0)
        return -1;
    return xmp_file_write_atomic_finish(&c, err);
}

int
xmp_file_open_below(int dir, const char *path, int flags, mode_t mode, struct xmp_error *err)
{
    cleanup_free char *base_copy = NULL;
    cleanup_close int dfd = -1;
    cleanup_close int fd = -1;
    const char *base;
    struct stat st;

    if (dir < 0 && (dfd = open_parent(path, &base_copy, &base, err)) < 0)
        return -1;
    if (dir >= 0)
        base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    /* O_NONBLOCK: opening a FIFO must not wait for its other end. */
    fd = openat(dir >= 0 ? dir : dfd, base, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                mode);
    if (fd < 0 && errno == ELOOP)
        return xmp_error_set(err, 0, "`%s` is a symbolic link; xmprun does not follow it", path);
    if (fd < 0)
        return xmp_error_set(err, errno, "open `%s`", path);
    if (fstat(fd, &st) < 0)
        return xmp_error_set(err, errno, "fstat `%s`", path);
    if (!S_ISREG(st.st_mode))
        return xmp_error_set(err, 0, "`%s` is %s, not a regular file", path, file_kind(st.st_mode));
    if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
        return xmp_error_set(err, errno, "fcntl `%s`", path);
    return steal_fd(&fd);
}

int
xmp_file_read_bounded(int dir, const char *path, size_t max, char **text, size_t *len,
                      int64_t *size, struct xmp_error *err)
{
    cleanup_close int fd = -1;
    cleanup_free char *buf = malloc(max + 1);
    struct stat st;
    size_t got = 0;

    *text = NULL;
    *len = 0;
    *size = 0;
    if (buf == NULL)
        return xmp_error_set(err, ENOMEM, "read `%s`", path);
    fd = xmp_file_open_below(dir, path, O_RDONLY, 0, err);
    if (fd < 0)
        return -1;
    while (got < max) {
        ssize_t n = read(fd, buf + got, max - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return xmp_error_set(err, errno, "read `%s`", path);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    /* The size after reading: a file still growing counts as cut when it outgrew the bound. */
    if (fstat(fd, &st) < 0)
        return xmp_error_set(err, errno, "fstat `%s`", path);
    *size = st.st_size > (off_t)got ? (int64_t)st.st_size : (int64_t)got;
    *len = got;
    *text = steal_pointer(&buf);
    return 0;
}

void
xmp_file_clear_dir(int dir)
{
    int fd = dup(dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;

    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            unlinkat(dir, de->d_name, 0) < 0 && errno == EISDIR)
            unlinkat(dir, de->d_name, AT_REMOVEDIR);
    closedir(d);
}

int
xmp_file_raise_nofile(struct rlimit *inherited, struct xmp_error *err)
{
    struct rlimit raised;

    if (getrlimit(RLIMIT_NOFILE, inherited) < 0)
        return xmp_error_set(err, errno, "getrlimit(RLIMIT_NOFILE)");
    raised = *inherited;
    /* An unlimited hard limit still stops at fs.nr_open, above which setrlimit fails. */
    if (raised.rlim_max == RLIM_INFINITY) {
        cleanup_fclose FILE *f = fopen("/proc/sys/fs/nr_open", "re");
        unsigned long long nr_open = 0;
        if (f == NULL || fscanf(f, "%llu", &nr_open) != 1 || nr_open == 0)
            return 0;
        raised.rlim_max = (rlim_t)nr_open;
    }
    if (raised.rlim_cur >= raised.rlim_max)
        return 0;
    raised.rlim_cur = raised.rlim_max;
    raised.rlim_max = inherited->rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) < 0)
        return xmp_error_set(err, errno, "setrlimit(RLIMIT_NOFILE, %llu)",
                             (unsigned long long)raised.rlim_cur);
    return 0;
}

size_t
xmp_file_count_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    size_t n = 0;

    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    /* Less the one opendir holds. */
    return n > 0 ? n - 1 : 0;
}

bool
xmp_file_explain_emfile(struct xmp_error *err)
{
    struct rlimit rl;
    int fd = open("/", O_PATH | O_CLOEXEC);

    if (fd >= 0) {
        close(fd);
        return false;
    }
    if (errno != EMFILE)
        return false;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        rl.rlim_cur = 0;
    xmp_error_set(err, 0, "out of file descriptors (RLIMIT_NOFILE %llu)",
                  (unsigned long long)rl.rlim_cur);
    err->errnum = EMFILE;
    return true;
}
