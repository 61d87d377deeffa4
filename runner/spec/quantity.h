/* Quantity parsers for the job spec (quantity.c), shared by the YAML validator and --set. */
#ifndef XMP_QUANTITY_H
#define XMP_QUANTITY_H

#include <stddef.h>
#include <stdint.h>

/* Memory ("8Gi", "512M", "1073741824"), CPU ("4", "0.5", "500m") and duration ("90s", "1h30m",
 * "250ms") quantities. Return 0, or -1 with a message (no position) in msg. */
int xmp_parse_memory(const char *text, int64_t *bytes, char *msg, size_t msg_size);
int xmp_parse_cpus(const char *text, int64_t *milli, char *msg, size_t msg_size);
int xmp_parse_duration(const char *text, int64_t *ms, char *msg, size_t msg_size);
/* The longest duration: a timeout or grace is added to a CLOCK_MONOTONIC time in nanoseconds,
 * which a value near INT64_MAX milliseconds overflows (a deadline in the past, a skipped grace);
 * a year is beyond any job and far from that edge. */
#define XMP_DURATION_MAX_MS (INT64_C(8760) * 3600 * 1000)

#endif
