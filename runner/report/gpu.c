/* The messages by which PyTorch, JAX/XLA, cuBLAS/cuDNN, the CUDA runtime and NCCL say why a GPU
 * worker failed, and the numbers they carry (see gpu.h). */
#define _GNU_SOURCE
#include "runner/report/gpu.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line without torch.distributed's "[rank3]: " prefix. */
static const char *
unprefixed(const char *line)
{
    const char *p = line;

    if (strncmp(p, "[rank", 5) != 0)
        return line;
    p += 5;
    while (isdigit((unsigned char)*p))
        p++;
    if (p[0] == ']' && p[1] == ':')
        return p[2] == ' ' ? p + 3 : p + 2;
    return line;
}

/* "8.00 GiB" (PyTorch's units: B, bytes, KiB, MiB, GiB, TiB) at p, in bytes; -1 if not one. */
static int64_t
parse_size(const char *p)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0},
                 {"KiB", 1024.0},          {"bytes", 1.0},        {"B", 1.0}};
    char *end;
    double v;

    if (p == NULL)
        return -1;
    v = strtod(p, &end);
    if (end == p || v < 0)
        return -1;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strncmp(end, units[i].unit, strlen(units[i].unit)) == 0)
            return (int64_t)(v * units[i].scale);
    return -1;
}

/* The number after `after` in line, as a size; -1 when the line lacks either. */
static int64_t
size_after(const char *line, const char *after)
{
    const char *p = strstr(line, after);
    return p != NULL ? parse_size(p + strlen(after)) : -1;
}

static void
copy_until(char *out, size_t size, const char *from, const char *stop)
{
    size_t len = strcspn(from, stop);
    while (len > 0 && isspace((unsigned char)from[len - 1]))
        len--;
    snprintf(out, size, "%.*s", (int)len, from);
}

static bool
gpu_oom(const char *line, struct xmp_gpu_failure *f)
{
    const char *p;

    if ((p = strstr(line, "CUDA out of memory. Tried to allocate ")) != NULL) {
        /* PyTorch: "Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.18 GiB of
         * which 6.66 GiB is free. Including non-PyTorch memory, this process has 72.51 GiB
         * memory in use." */
        f->tried = parse_size(p + strlen("CUDA out of memory. Tried to allocate "));
        f->capacity = size_after(p, "has a total capacity of ");
        f->in_use = size_after(p, "this process has ");
        return true;
    }
    if ((p = strstr(line, "Out of memory while trying to allocate ")) != NULL &&
        strstr(line, "RESOURCE_EXHAUSTED") != NULL) {
        /* XLA: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes." */
        f->tried = parse_size(p + strlen("Out of memory while trying to allocate "));
        return true;
    }
    return strstr(line, "CUDA error: out of memory") != NULL ||
           strstr(line, "CUBLAS_STATUS_ALLOC_FAILED") != NULL ||
           strstr(line, "CUDNN_STATUS_ALLOC_FAILED") != NULL;
}

/* The assertion that a device-side assert names: "IndexKernel.cu:111: index out of bounds". */
static void
find_assertion(char *const *lines, size_t n, struct xmp_gpu_failure *f)
{
    for (size_t i = n; i-- > 0;) {
        const char *line = unprefixed(lines[i]), *a = strstr(line, "Assertion `");
        const char *cu = strstr(line, ".cu:");
        if (a == NULL || cu == NULL || cu > a)
            continue;
        const char *file = cu;
        while (file > line && file[-1] != '/' && file[-1] != ' ')
            file--;
        size_t len = strspn(cu + 4, "0123456789");
        /* The assertion's own message, where it has one in quotes ("index out of bounds"). */
        const char *q = strchr(a, '"'), *q2 = q != NULL ? strchr(q + 1, '"') : NULL;
        if (q2 != NULL && q2 - q > 1)
            snprintf(f->detail, sizeof(f->detail), "%.*s: %.*s", (int)(cu + 4 + len - file), file,
                     (int)(q2 - q - 1), q + 1);
        else
            snprintf(f->detail, sizeof(f->detail), "%.*s", (int)(cu + 4 + len - file), file);
        return;
    }
}

static bool
cuda_error(char *const *lines, size_t n, const char *line, struct xmp_gpu_failure *f)
{
    const char *p = strstr(line, "CUDA error: ");

    if (p == NULL)
        return false;
    copy_until(f->error, sizeof(f->error), p + strlen("CUDA error: "), "\n");
    if (strstr(f->error, "device-side assert") != NULL)
        find_assertion(lines, n, f);
    return true;
}

/* "NCCL error in: FILE:LINE, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version
 * 2.28.9", and the "Last error:" line that follows it where NCCL says more. */
static bool
nccl_error(char *const *lines, size_t n, size_t at, const char *line, struct xmp_gpu_failure *f)
{
    const char *p = strstr(line, "NCCL error in: ");

    if (p == NULL)
        return false;
    p = strchr(p, ',');
    copy_until(f->error, sizeof(f->error), p != NULL ? p + 2 : "unknown", "(,");
    for (size_t i = at + 1; i + 1 < n; i++)
        if (strcmp(unprefixed(lines[i]), "Last error:") == 0) {
            copy_until(f->detail, sizeof(f->detail), unprefixed(lines[i + 1]), "\n");
            break;
        }
    return true;
}

bool
xmp_gpu_failure_find(char *const *lines, size_t n, struct xmp_gpu_failure *out)
{
    memset(out, 0, sizeof(*out));
    out->tried = out->in_use = out->capacity = -1;
    /* The newest line that names a failure decides: a program reports its fatal error last. */
    for (size_t i = n; i-- > 0;) {
        const char *line = unprefixed(lines[i]);
        if (gpu_oom(line, out))
            out->kind = XMP_GPU_OOM;
        else if (cuda_error(lines, n, line, out))
            out->kind = XMP_GPU_CUDA_ERROR;
        else if (nccl_error(lines, n, i, line, out))
            out->kind = XMP_GPU_NCCL_ERROR;
        if (out->kind != XMP_GPU_NONE)
            return true;
    }
    return false;
}

const char *
xmp_gpu_failure_reason(enum xmp_gpu_failure_kind kind)
{
    switch (kind) {
    case XMP_GPU_OOM:
        return "gpu_oom";
    case XMP_GPU_CUDA_ERROR:
        return "cuda_error";
    case XMP_GPU_NCCL_ERROR:
        return "nccl_error";
    case XMP_GPU_NONE:
        break;
    }
    return NULL;
}

bool
xmp_gpu_xid_parse(const char *line, char *pci, size_t pci_size, int *xid, const char **rest)
{
    const char *p = strstr(line, "NVRM: Xid (PCI:"), *end;
    char *num_end;
    long v;

    if (p == NULL)
        return false;
    p += strlen("NVRM: Xid (PCI:");
    if ((end = strchr(p, ')')) == NULL || end == p || (size_t)(end - p) >= pci_size)
        return false;
    snprintf(pci, pci_size, "%.*s", (int)(end - p), p);
    p = end + 1;
    if (*p == ':')
        p++;
    v = strtol(p, &num_end, 10);
    if (num_end == p || v <= 0)
        return false;
    *xid = (int)v;
    p = num_end;
    while (*p == ',' || *p == ' ')
        p++;
    *rest = p;
    return true;
}

const char *
xmp_gpu_xid_name(int xid)
{
    /* NVIDIA's Xid catalog: the ones that end jobs or mean failing hardware. */
    static const struct {
        int xid;
        const char *name;
    } names[] = {
        {13, "graphics engine exception"},
        {31, "GPU memory page fault"},
        {43, "GPU stopped processing"},
        {45, "preemptive cleanup, due to previous errors"},
        {48, "double-bit ECC error"},
        {61, "internal micro-controller breakpoint"},
        {62, "internal micro-controller halt"},
        {63, "ECC page retirement or row remapping recording event"},
        {64, "ECC page retirement or row remapping failure"},
        {68, "video processor exception"},
        {74, "NVLink error"},
        {79, "GPU has fallen off the bus"},
        {92, "high single-bit ECC error rate"},
        {94, "contained ECC error"},
        {95, "uncontained ECC error"},
        {109, "context switch timeout"},
        {119, "GSP RPC timeout"},
        {120, "GSP error"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].xid == xid)
            return names[i].name;
    return NULL;
}
