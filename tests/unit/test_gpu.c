/* The GPU failure patterns, each against a real worker's stderr tail (tests/fixtures/gpu, whose
 * SOURCES.md names the PyTorch, CUDA, NCCL and driver versions), and the ones a non-GPU failure
 * or a peer loss must not match. */
#define _GNU_SOURCE
#include "helpers/testlib.h"
#include "runner/report/gpu.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tail {
    char *text;
    char *lines[64];
    size_t n;
};

static void
load_tail(const char *path, struct tail *t)
{
    t->text = xt_read_file(path);
    cr_assert_not_null(t->text, "%s", path);
    t->n = xt_split_lines(t->text, t->lines, 64);
}

static void
find(const char *name, struct xmp_gpu_failure *f)
{
    char path[4096];
    struct tail t;

    snprintf(path, sizeof(path), "%s/gpu/%s.tail", xt_fixtures(), name);
    load_tail(path, &t);
    cr_assert(xmp_gpu_failure_find(t.lines, t.n, f), "%s: no GPU failure found", name);
    free(t.text);
}

#define GIB (INT64_C(1) << 30)

Test(gpu, pytorch_oom_with_its_numbers)
{
    struct xmp_gpu_failure f;

    find("gpu_oom", &f);
    cr_expect_eq(f.kind, XMP_GPU_OOM);
    cr_expect_str_eq(xmp_gpu_failure_reason(f.kind), "gpu_oom");
    cr_expect_eq(f.tried, 200 * GIB);
    cr_expect_eq(f.in_use, 518 << 20);
    cr_expect_eq(f.capacity, (int64_t)(139.80 * GIB));
    find("gpu_oom_after_use", &f);
    cr_expect_eq(f.tried, 60 * GIB);
    cr_expect_eq(f.in_use, (int64_t)(100.51 * GIB));
}

Test(gpu, cuda_errors_name_the_error_and_the_assertion)
{
    struct xmp_gpu_failure f;

    find("device_assert", &f);
    cr_expect_eq(f.kind, XMP_GPU_CUDA_ERROR);
    cr_expect_str_eq(f.error, "device-side assert triggered");
    cr_expect_str_eq(f.detail, "IndexKernel.cu:111: index out of bounds");
    find("illegal_access", &f);
    cr_expect_eq(f.kind, XMP_GPU_CUDA_ERROR);
    cr_expect_str_eq(xmp_gpu_failure_reason(f.kind), "cuda_error");
    cr_expect_str_eq(f.error, "an illegal memory access was encountered");
    cr_expect_str_eq(f.detail, "");
}

Test(gpu, nccl_error_with_its_last_error)
{
    struct xmp_gpu_failure f;

    find("nccl_duplicate", &f);
    cr_expect_eq(f.kind, XMP_GPU_NCCL_ERROR);
    cr_expect_str_eq(xmp_gpu_failure_reason(f.kind), "nccl_error");
    cr_expect_str_eq(f.error, "invalid usage");
    cr_expect_str_eq(f.detail, "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60");
}

/* XLA's and the CUDA libraries' allocation failures, as they print them (one line each). */
Test(gpu, other_libraries_out_of_memory)
{
    char xla[] = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
                 "trying to allocate 17179869184 bytes.";
    char cublas[] = "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
                    "`cublasCreate(handle)`";
    char *a[] = {xla}, *b[] = {cublas};
    struct xmp_gpu_failure f;

    cr_assert(xmp_gpu_failure_find(a, 1, &f));
    cr_expect_eq(f.kind, XMP_GPU_OOM);
    cr_expect_eq(f.tried, 16 * GIB);
    cr_expect_eq(f.capacity, -1);
    cr_assert(xmp_gpu_failure_find(b, 1, &f));
    cr_expect_eq(f.kind, XMP_GPU_OOM);
    cr_expect_eq(f.tried, -1);
}

/* A plain Python failure and every peer-loss tail (tests/fixtures/peer) are not GPU failures. */
Test(gpu, other_failures_are_not_gpu_failures)
{
    char l1[] = "Traceback (most recent call last):", l2[] = "ValueError: bad learning rate";
    char *plain[] = {l1, l2};
    struct xmp_gpu_failure f;
    static const char *const peers[] = {"gloo-closed", "gloo-reset", "nccl-closed", "store-connect",
                                        "store-clients"};

    cr_expect_not(xmp_gpu_failure_find(plain, 2, &f));
    cr_expect_eq(f.kind, XMP_GPU_NONE);
    for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
        char path[4096];
        struct tail t;
        snprintf(path, sizeof(path), "%s/peer/%s.txt", xt_fixtures(), peers[i]);
        load_tail(path, &t);
        cr_expect_not(xmp_gpu_failure_find(t.lines, t.n, &f), "%s matched as kind %d", peers[i],
                      f.kind);
        free(t.text);
    }
}

/* The driver's Xid lines as the kernel logged them on the H200 (tests/fixtures/gpu/kmsg-xid.txt),
 * and the names of the Xids that mean failing hardware. */
Test(gpu, xid_lines_of_the_driver)
{
    char path[4096], pci[32];
    struct tail t;
    int xid;
    const char *rest;

    snprintf(path, sizeof(path), "%s/gpu/kmsg-xid.txt", xt_fixtures());
    load_tail(path, &t);
    cr_assert_eq(t.n, 2);
    cr_assert(xmp_gpu_xid_parse(t.lines[0], pci, sizeof(pci), &xid, &rest));
    cr_expect_str_eq(pci, "0000:00:06");
    cr_expect_eq(xid, 43);
    cr_expect(strncmp(rest, "pid=804, name=python3", 21) == 0, "%s", rest);
    cr_assert(xmp_gpu_xid_parse(t.lines[1], pci, sizeof(pci), &xid, &rest));
    cr_expect_eq(xid, 31);
    cr_expect_not_null(strstr(rest, "MMU Fault"), "%s", rest);
    free(t.text);
    cr_expect_str_eq(xmp_gpu_xid_name(79), "GPU has fallen off the bus");
    cr_expect_str_eq(xmp_gpu_xid_name(43), "GPU stopped processing");
    cr_expect_null(xmp_gpu_xid_name(999));
    char other[] = "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04";
    cr_expect_not(xmp_gpu_xid_parse(other, pci, sizeof(pci), &xid, &rest));
}
