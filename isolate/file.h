/* Files xmprun writes or reads on the user's behalf (the report, the state file, logs.dir, the
 * workers' error files), opened so that nothing planted at those paths (a symbolic link, a FIFO,
 * a device node) is written through, blocked on or replaced; and xmprun's own descriptor limit. */
#ifndef XMP_FILE_H
#define XMP_FILE_H

#include "isolate/error.h"
#include "isolate/thread.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Checks, before anything is started, that path can be written: its directory exists and
 * accepts a new file, and path is absent or a regular file (never a link, FIFO, device node
 * or directory, which the write would replace or write through). */
int xmp_file_check_target(const char *path, struct xmp_error *err);

/* Writes text and a newline to a temp file next to path, then renames it over path; with
 * durable, fsyncs the file and the directory. Messages name path, never the temp file, which is
 * removed on failure. */
int xmp_file_write_atomic(const char *path, const char *text, bool durable, struct xmp_error *err);

/* xmp_file_write_atomic in two halves, for a caller with other work to do while the disk
 * syncs: _start writes the temp file (failing at once if it cannot) and leaves the fsyncs and
 * the rename to a thread; _finish waits for them and says how they went. Every _start that
 * returned 0 needs its _finish, and path must live until then. */
struct xmp_file_commit {
    const char *path, *base;
    char *base_copy;
    int dfd, fd;
    char tmp[512];
    bool durable;
    struct xmp_thread thread;
    int ret;
    struct xmp_error err;
};
int xmp_file_write_atomic_start(const char *path, const char *text, bool durable,
                                struct xmp_file_commit *c, struct xmp_error *err);
int xmp_file_write_atomic_finish(struct xmp_file_commit *c, struct xmp_error *err);

/* Opens path (O_WRONLY/O_RDONLY plus O_CREAT, O_TRUNC, O_APPEND as given) with openat() on its
 * directory and O_NOFOLLOW | O_CLOEXEC, without blocking on a FIFO; refuses anything but a
 * regular file. dir is that directory already open, or -1 to open it (following links on the
 * way, which are the user's choice). Returns the fd, or -1. */
int xmp_file_open_below(int dir, const char *path, int flags, mode_t mode, struct xmp_error *err);

/* Reads at most max bytes of the regular file at path (opened as xmp_file_open_below does, dir
 * likewise) into a NUL-terminated *text (free it). *size is the file's size: more than *len
 * means it was cut. Fails with errnum ENOENT when there is no file. */
int xmp_file_read_bounded(int dir, const char *path, size_t max, char **text, size_t *len,
                          int64_t *size, struct xmp_error *err);

/* Takes an exclusive lock on the lock file at path (created if need be; never through a link),
 * without waiting: 0 and *fd holding it (the lock lasts while *fd is open, and the kernel drops it
 * when this process dies, however it dies), 1 when a live process holds it (*holder: its pid when
 * it wrote it there, else 0), -1 on error. */
int xmp_file_lock_take(const char *path, int *fd, pid_t *holder, struct xmp_error *err);
/* Removes the lock file at path and releases the lock fd holds (nothing when fd is -1). */
void xmp_file_lock_drop(const char *path, int fd);

/* Removes everything in the open directory dir: files and links (never followed) with unlinkat,
 * and subdirectories that are empty. The directory itself stays, for the caller to rmdir. */
void xmp_file_clear_dir(int dir);

/* Raises the soft RLIMIT_NOFILE to the hard one (a job of many workers holds several descriptors
 * each) and stores the limit xmprun inherited in *inherited, for the workers to get back. */
int xmp_file_raise_nofile(struct rlimit *inherited, struct xmp_error *err);
/* The number of descriptors this process has open now. */
size_t xmp_file_count_open(void);
/* If the descriptor table is full right now, replaces err's message with "out of file
 * descriptors (RLIMIT_NOFILE N)" and returns true: libraries report EMFILE in their own words
 * (libcgroup's "Cgroup is not mounted"), so the check is made on the table itself, at the
 * failure, before anything is closed. */
bool xmp_file_explain_emfile(struct xmp_error *err);

#endif
