/* Quantity parsers for the job spec: memory sizes, CPU amounts and durations (SPEC.md section 1),
 * shared by the YAML validator and --set. They take plain text and report problems in words that
 * name the text, so that spec.c only has to prefix the key path and position. */
#include "runner/spec/quantity.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Above this, numbers are rejected rather than silently wrapped; int64 bytes or ms is the
 * storage type, and nobody needs more. */
#define MAX_FRACTION_DIGITS 24
#define MAX_CPUS_MILLI      (INT64_C(1000000) * 1000)

static int fail(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail(char *msg, size_t msg_size, const char *fmt, ...)
{
    va_list ap;

    if (msg == NULL || msg_size == 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
    return -1;
}

/* The text as it may appear inside a message: quotes and control characters would make the
 * message ambiguous, and a 10 MB scalar would drown it, so both are tamed. */
static void
quote_text(const char *text, char *buf, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; text[i] != '\0' && o + 5 < size; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (i >= 40 && (ch & 0xc0) != 0x80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        buf[o++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
    }
    buf[o] = '\0';
}

/* A decimal number "123" or "1.5": the integer part exactly (up to 2^63) and up to
 * MAX_FRACTION_DIGITS fraction digits. Returns the length consumed, 0 if no digits. */
struct decimal {
    unsigned __int128 ipart;
    unsigned __int128 frac;  /* fraction digits as an integer */
    unsigned __int128 scale; /* 10^(number of fraction digits kept) */
    bool overflow;
    bool has_point;
    size_t frac_digits; /* all fraction digits written, kept or not */
    bool frac_nonzero_dropped;
};

static size_t
parse_decimal(const char *s, struct decimal *d)
{
    size_t i = 0;

    memset(d, 0, sizeof(*d));
    d->scale = 1;
    while (s[i] >= '0' && s[i] <= '9') {
        if (d->ipart > (unsigned __int128)INT64_MAX)
            d->overflow = true;
        else
            d->ipart = d->ipart * 10 + (unsigned)(s[i] - '0');
        i++;
    }
    if (i == 0)
        return 0;
    if (s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
        d->has_point = true;
        i++;
        while (s[i] >= '0' && s[i] <= '9') {
            if (d->frac_digits < MAX_FRACTION_DIGITS) {
                d->frac = d->frac * 10 + (unsigned)(s[i] - '0');
                d->scale *= 10;
            } else if (s[i] != '0') {
                d->frac_nonzero_dropped = true;
            }
            d->frac_digits++;
            i++;
        }
    }
    return i;
}

struct mem_suffix {
    const char *text;
    uint64_t mult;
};

static const struct mem_suffix mem_suffixes[] = {
    {"", 1},
    {"Ki", UINT64_C(1) << 10},
    {"Mi", UINT64_C(1) << 20},
    {"Gi", UINT64_C(1) << 30},
    {"Ti", UINT64_C(1) << 40},
    {"k", UINT64_C(1000)},
    {"M", UINT64_C(1000000)},
    {"G", UINT64_C(1000000000)},
    {"T", UINT64_C(1000000000000)},
};

/* The hint for a suffix that people write but Kubernetes does not accept ("8GB", "8GiB",
 * "512m", "8K"), or NULL. number is the numeric part as written. */
static bool
memory_hint(const char *number, const char *suffix, char *hint, size_t size)
{
    /* binary and decimal: the suffixes to suggest instead, decimal NULL when only one fits. */
    static const struct {
        const char *bad;
        const char *binary;
        const char *decimal;
    } hints[] = {
        {"KB", "Ki", "k"},   {"kB", "Ki", "k"},   {"kb", "Ki", "k"},   {"K", "Ki", "k"},
        {"Kb", "Ki", "k"},   {"MB", "Mi", "M"},   {"mb", "Mi", "M"},   {"Mb", "Mi", "M"},
        {"GB", "Gi", "G"},   {"gb", "Gi", "G"},   {"Gb", "Gi", "G"},   {"g", "Gi", "G"},
        {"TB", "Ti", "T"},   {"tb", "Ti", "T"},   {"Tb", "Ti", "T"},   {"t", "Ti", "T"},
        {"KiB", "Ki", NULL}, {"MiB", "Mi", NULL}, {"GiB", "Gi", NULL}, {"TiB", "Ti", NULL},
        {"ki", "Ki", NULL},  {"mi", "Mi", NULL},  {"gi", "Gi", NULL},  {"ti", "Ti", NULL},
    };

    if (strcmp(suffix, "m") == 0) {
        /* Kubernetes reads "512m" as 0.512 bytes; nobody means that. */
        snprintf(hint, size, "did you mean %sMi?", number);
        return true;
    }
    if (strcmp(suffix, "B") == 0 || strcmp(suffix, "b") == 0) {
        snprintf(hint, size, "a plain number is bytes: %s", number);
        return true;
    }
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++) {
        if (strcmp(suffix, hints[i].bad) != 0)
            continue;
        if (hints[i].decimal != NULL)
            snprintf(hint, size, "use %s%s or %s%s", number, hints[i].binary, number,
                     hints[i].decimal);
        else
            snprintf(hint, size, "use %s%s", number, hints[i].binary);
        return true;
    }
    return false;
}

int
xmp_parse_memory(const char *text, int64_t *bytes, char *msg, size_t msg_size)
{
    char q[64];
    struct decimal d;
    size_t n;

    quote_text(text, q, sizeof(q));
    if (text[0] == '-' && parse_decimal(text + 1, &d) > 0)
        return fail(msg, msg_size, "\"%s\" is not a memory quantity (it must not be negative)", q);
    n = parse_decimal(text, &d);
    if (n == 0)
        return fail(msg, msg_size,
                    "\"%s\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)", q);
    for (size_t i = 0; i < sizeof(mem_suffixes) / sizeof(mem_suffixes[0]); i++) {
        unsigned __int128 v;
        if (strcmp(text + n, mem_suffixes[i].text) != 0)
            continue;
        if (d.has_point && mem_suffixes[i].mult == 1)
            return fail(msg, msg_size,
                        "\"%s\" is not a memory quantity (a plain number is whole bytes; fractions "
                        "need a suffix, e.g. 1.5Gi)",
                        q);
        if (d.overflow)
            return fail(msg, msg_size, "\"%s\" is too large", q);
        /* Rounded down to whole bytes: "1.5Gi" is exact, "0.1k" is 100, "1.0001Ki" is 1024. */
        v = d.ipart * mem_suffixes[i].mult + d.frac * mem_suffixes[i].mult / d.scale;
        if (v > (unsigned __int128)INT64_MAX)
            return fail(msg, msg_size, "\"%s\" is too large", q);
        *bytes = (int64_t)v;
        return 0;
    }
    {
        char number[48];
        char hint[128];
        size_t len = n < sizeof(number) - 1 ? n : sizeof(number) - 1;
        memcpy(number, text, len);
        number[len] = '\0';
        quote_text(number, number, sizeof(number));
        if (memory_hint(number, text + n, hint, sizeof(hint)))
            return fail(msg, msg_size, "\"%s\" is not a memory quantity (%s)", q, hint);
    }
    return fail(msg, msg_size,
                "\"%s\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)", q);
}

int
xmp_parse_cpus(const char *text, int64_t *milli, char *msg, size_t msg_size)
{
    char q[64];
    struct decimal d;
    size_t n;
    unsigned __int128 v;

    quote_text(text, q, sizeof(q));
    if (text[0] == '-' && parse_decimal(text + 1, &d) > 0)
        return fail(msg, msg_size, "\"%s\" is not a CPU quantity (it must be greater than 0)", q);
    n = parse_decimal(text, &d);
    if (n == 0)
        return fail(msg, msg_size, "\"%s\" is not a CPU quantity (examples: 4, 0.5, 500m)", q);
    if (d.overflow)
        return fail(msg, msg_size, "\"%s\" is too large", q);
    if (strcmp(text + n, "m") == 0 && !d.has_point) {
        v = d.ipart;
    } else if (text[n] == '\0') {
        /* A quota finer than 1m cannot be expressed in the cgroup files either, so more than
         * three decimals are refused rather than silently rounded. */
        unsigned __int128 per_milli;
        if (d.frac_nonzero_dropped)
            return fail(msg, msg_size, "\"%s\" is too precise (at most 3 decimals: 0.001 = 1m)", q);
        per_milli = d.scale >= 1000 ? d.scale / 1000 : 1;
        if (d.scale > 1000 && d.frac % per_milli != 0)
            return fail(msg, msg_size, "\"%s\" is too precise (at most 3 decimals: 0.001 = 1m)", q);
        v = d.ipart * 1000 + (d.scale >= 1000 ? d.frac / per_milli : d.frac * (1000 / d.scale));
    } else {
        return fail(msg, msg_size, "\"%s\" is not a CPU quantity (examples: 4, 0.5, 500m)", q);
    }
    if (v == 0)
        return fail(msg, msg_size, "\"%s\" is not a CPU quantity (it must be greater than 0)", q);
    if (v > (unsigned __int128)MAX_CPUS_MILLI)
        return fail(msg, msg_size, "\"%s\" is too large", q);
    *milli = (int64_t)v;
    return 0;
}

int
xmp_parse_duration(const char *text, int64_t *ms, char *msg, size_t msg_size)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
    char q[64];
    unsigned __int128 total = 0;
    const char *s = text;

    quote_text(text, q, sizeof(q));
    if (text[0] == '-')
        return fail(msg, msg_size, "\"%s\" is not a duration (it must not be negative)", q);
    /* A bare number is only unambiguous when it is zero: "90" could mean seconds or ms. */
    if (strspn(text, "0123456789") == strlen(text) && text[0] != '\0') {
        if (strspn(text, "0") == strlen(text)) {
            *ms = 0;
            return 0;
        }
        return fail(msg, msg_size, "\"%s\" has no unit (write %ss)", q, q);
    }
    do {
        struct decimal d;
        size_t n = parse_decimal(s, &d);
        size_t u;

        if (n == 0)
            goto bad;
        if (d.has_point)
            return fail(msg, msg_size,
                        "\"%s\" is not a duration (use whole numbers, e.g. 1500ms or 1m30s)", q);
        if (d.overflow)
            goto too_long;
        s += n;
        for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
            size_t ul = strlen(units[u].unit);
            if (strncmp(s, units[u].unit, ul) == 0) {
                s += ul;
                break;
            }
        }
        if (u == sizeof(units) / sizeof(units[0]))
            goto bad;
        /* ipart is below 2^68 and a unit below 2^22: the sum cannot wrap before the check. */
        total += d.ipart * (unsigned __int128)units[u].ms;
        if (total > (unsigned __int128)XMP_DURATION_MAX_MS)
            goto too_long;
    } while (*s != '\0');
    *ms = (int64_t)total;
    return 0;
too_long:
    return fail(msg, msg_size, "\"%s\" is too long (at most 8760h, 365 days)", q);
bad:
    return fail(msg, msg_size, "\"%s\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)", q);
}
