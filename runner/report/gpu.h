/* Recognising why a GPU worker died from its stderr tail: out of GPU memory (PyTorch, JAX/XLA,
 * cuBLAS/cuDNN allocations), a CUDA error (device-side assert, illegal memory access, launch
 * failure, ECC), an NCCL error. Each pattern is tested on a real run's text
 * (tests/fixtures/gpu/SOURCES.md names the versions). */
#ifndef XMP_GPU_H
#define XMP_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum xmp_gpu_failure_kind {
    XMP_GPU_NONE = 0,
    XMP_GPU_OOM,        /* root_cause.reason gpu_oom */
    XMP_GPU_CUDA_ERROR, /* cuda_error */
    XMP_GPU_NCCL_ERROR, /* nccl_error */
};

struct xmp_gpu_failure {
    enum xmp_gpu_failure_kind kind;
    /* GPU OOM: bytes, -1 where the message does not say. */
    int64_t tried, in_use, capacity;
    /* CUDA or NCCL: the error in the library's words ("device-side assert triggered",
     * "invalid usage"), and what it adds: the assertion's file:line, NCCL's "Last error". */
    char error[160];
    char detail[200];
};

/* The newest failure the tail's lines name (a "[rankN]: " prefix is skipped); false if none. */
bool xmp_gpu_failure_find(char *const *lines, size_t n, struct xmp_gpu_failure *out);
/* An Xid line of the NVIDIA driver's ("NVRM: Xid (PCI:0000:41:00): 79, pid=..., GPU has fallen
 * off the bus."): the PCI address as printed, the Xid, and what follows it. False otherwise. */
bool xmp_gpu_xid_parse(const char *line, char *pci, size_t pci_size, int *xid, const char **rest);
/* What an Xid means, in NVIDIA's words ("GPU has fallen off the bus"), or NULL. */
const char *xmp_gpu_xid_name(int xid);

/* "root_cause.reason" for a kind: "gpu_oom", "cuda_error", "nccl_error". */
const char *xmp_gpu_failure_reason(enum xmp_gpu_failure_kind kind);

#endif
