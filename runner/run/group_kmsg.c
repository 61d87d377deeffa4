/* One run of the worker group: the GPUs' faults. While GPU workers run, the kernel's log
 * (/dev/kmsg, below XMPRUN_HOST_ROOT for tests, which stand a FIFO in for it) is read for the
 * NVIDIA driver's Xid events; one for the PCI address of a worker's GPU is kept in that worker's
 * report, where the root cause names it first. Unreadable (no root, dmesg_restrict): no faults. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/group_internal.h"

#include "runner/report/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

void
xmp_grp_kmsg_open(struct xmp_supervisor *sv)
{
    const char *root = getenv("XMPRUN_HOST_ROOT");
    char path[4096];

    if (sv->kmsg_fd >= 0 || sv->plan.kind != XMP_DEVICE_CUDA || sv->host.n_gpus == 0)
        return;
    snprintf(path, sizeof(path), "%s/dev/kmsg", root != NULL ? root : "");
    sv->kmsg_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (sv->kmsg_fd < 0)
        return;
    /* Only what is logged from now on (a FIFO cannot seek, and has nothing older). */
    lseek(sv->kmsg_fd, 0, SEEK_END);
    if (xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, sv->kmsg_fd, EPOLLIN, XMP_EV_KMSG, 0) < 0)
        xmp_grp_kmsg_close(sv);
}

void
xmp_grp_kmsg_close(struct xmp_supervisor *sv)
{
    xmp_grp_ep_close(sv, &sv->kmsg_fd);
}

/* The workers whose GPU has that PCI address (as the driver prints it: "0000:41:00", without
 * the function) get the fault. */
static void
record(struct xmp_supervisor *sv, const char *pci, int xid, const char *rest)
{
    size_t len = strlen(pci);

    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker_report *rep = sv->workers[i].rep;
        for (size_t d = 0; rep != NULL && rep->devices != NULL && rep->devices[d] != NULL; d++) {
            int index;
            if (sscanf(rep->devices[d], "cuda:%d", &index) != 1)
                continue;
            for (size_t g = 0; g < sv->host.n_gpus; g++) {
                const char *gp = sv->host.gpus[g].pci;
                if (sv->host.gpus[g].index != index || strncasecmp(gp, pci, len) != 0 ||
                    (gp[len] != '\0' && gp[len] != '.') ||
                    rep->n_faults >= sizeof(rep->faults) / sizeof(rep->faults[0]))
                    continue;
                struct xmp_gpu_fault *f = &rep->faults[rep->n_faults++];
                f->xid = xid;
                snprintf(f->device, sizeof(f->device), "%s", rep->devices[d]);
                snprintf(f->pci, sizeof(f->pci), "%s", gp);
                snprintf(f->text, sizeof(f->text), "%.*s", (int)strcspn(rest, "\n"), rest);
                clock_gettime(CLOCK_REALTIME, &f->at);
            }
        }
    }
}

void
xmp_grp_kmsg_read(struct xmp_supervisor *sv)
{
    char buf[8192];

    /* /dev/kmsg gives one record a read ("6,1234,75840350,-;NVRM: Xid ..."); a FIFO lines. A
     * bound per call keeps a flood of kernel messages from starving the loop. */
    for (int reads = 0; sv->kmsg_fd >= 0 && reads < 64; reads++) {
        ssize_t n = read(sv->kmsg_fd, buf, sizeof(buf) - 1);
        if (n < 0 && errno == EPIPE)
            continue; /* records were overwritten before this read: go on from the next */
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            /* A stand-in whose writer is gone, or an error: nothing more will come. */
            xmp_grp_kmsg_close(sv);
            return;
        }
        buf[n] = '\0';
        char *save = NULL;
        for (char *line = strtok_r(buf, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            char pci[32];
            int xid;
            const char *rest;
            if (xmp_gpu_xid_parse(line, pci, sizeof(pci), &xid, &rest))
                record(sv, pci, xid, rest);
        }
    }
}
