/* NVML, the NVIDIA driver's management library, loaded through dlopen (no NVML headers or
 * link-time dependency): only for what procfs does not give, the device memory each process
 * uses, so never while a job starts or ends, and never for a job without GPUs. Tests load a
 * stand-in (tests/helpers/nvml_standin.c) through the same path with XMPRUN_NVML_LIB. */
#ifndef XMP_NVML_H
#define XMP_NVML_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct xmp_nvml;

/* One process NVML lists on a device, with the device memory it uses (-1: NVML cannot say,
 * as in a container without access to the host's pids). */
struct xmp_nvml_proc {
    pid_t pid;
    int64_t used;
};

/* Loads and initialises NVML: the library XMPRUN_NVML_LIB names (tests), else
 * libnvidia-ml.so.1 where the driver's control node /dev/nvidiactl exists. NULL when there is
 * none or it fails. There is no close: nvmlShutdown costs milliseconds on the way out of a
 * process that is about to exit anyway. */
struct xmp_nvml *xmp_nvml_open(void);

/* The index of the NVML device with that PCI address (any spelling), or -1. */
int xmp_nvml_find(const struct xmp_nvml *nvml, const char *pci);

/* The device's total memory in bytes, or -1. */
int64_t xmp_nvml_total(const struct xmp_nvml *nvml, int dev);

/* The compute processes on the device, up to max of them into out: how many NVML listed (which
 * may exceed max), or -1 when it failed. */
int xmp_nvml_processes(const struct xmp_nvml *nvml, int dev, struct xmp_nvml_proc *out, size_t max);

#endif
