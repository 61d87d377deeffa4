/* Quantity parsers of the job spec: memory sizes, CPU amounts and durations, good and bad, with
 * the exact message for each rejected text. */
#include "runner/spec/spec.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

struct qcase {
    const char *text;
    int64_t value; /* -1: rejected */
    const char *msg;
};

typedef int (*parse_fn)(const char *text, int64_t *value, char *msg, size_t msg_size);

static void
check_table(parse_fn parse, const struct qcase *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = -7;
        char msg[256] = "";
        int rc = parse(cases[i].text, &v, msg, sizeof(msg));
        if (cases[i].value >= 0) {
            cr_expect_eq(rc, 0, "%s: %s", cases[i].text, msg);
            cr_expect_eq(v, cases[i].value, "%s: %lld", cases[i].text, (long long)v);
        } else {
            cr_expect_eq(rc, -1, "%s accepted", cases[i].text);
            cr_expect_eq(v, -7, "%s: output written on failure", cases[i].text);
            cr_expect_str_eq(msg, cases[i].msg);
        }
    }
}

Test(quantity, memory)
{
    static const struct qcase cases[] = {
        {"0", 0, NULL},
        {"1", 1, NULL},
        {"1073741824", 1073741824, NULL},
        {"1Ki", 1024, NULL},
        {"1.5Gi", 1610612736, NULL},
        {"0.5Mi", 524288, NULL},
        {"8G", 8000000000, NULL},
        {"1500M", 1500000000, NULL},
        {"3Mi", 3145728, NULL},
        {"2Gi", INT64_C(2147483648), NULL},
        {"1k", 1000, NULL},
        {"2T", 2000000000000, NULL},
        {"1Ti", INT64_C(1) << 40, NULL},
        {"0.1k", 100, NULL},
        {"1.0001Ki", 1024, NULL},
        {"9223372036854775807", INT64_MAX, NULL},
        {"8GB", -1, "\"8GB\" is not a memory quantity (use 8Gi or 8G)"},
        {"1.5", -1,
         "\"1.5\" is not a memory quantity (a plain number is whole bytes; fractions need a "
         "suffix, "
         "e.g. 1.5Gi)"},
        {"1.5MB", -1, "\"1.5MB\" is not a memory quantity (use 1.5Mi or 1.5M)"},
        {"8K", -1, "\"8K\" is not a memory quantity (use 8Ki or 8k)"},
        {"512m", -1, "\"512m\" is not a memory quantity (did you mean 512Mi?)"},
        {"100B", -1, "\"100B\" is not a memory quantity (a plain number is bytes: 100)"},
        {"-1", -1, "\"-1\" is not a memory quantity (it must not be negative)"},
        {"9223372036854775808", -1, "\"9223372036854775808\" is too large"},
        {"8388608Ti", -1, "\"8388608Ti\" is too large"},
        {"", -1, "\"\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
        {"1e9", -1, "\"1e9\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
        {"8 Gi", -1, "\"8 Gi\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
        {"Gi", -1, "\"Gi\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
        {"1.Gi", -1, "\"1.Gi\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
        {"0x10", -1, "\"0x10\" is not a memory quantity (examples: 8Gi, 512Mi, 2G, 1073741824)"},
    };

    check_table(xmp_parse_memory, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(quantity, cpus)
{
    static const struct qcase cases[] = {
        {"4", 4000, NULL},
        {"0.5", 500, NULL},
        {"500m", 500, NULL},
        {"0.001", 1, NULL},
        {"1.25", 1250, NULL},
        {"0.5000", 500, NULL},
        {"2.0", 2000, NULL},
        {"1m", 1, NULL},
        {"1000000", 1000000000, NULL},
        {"0", -1, "\"0\" is not a CPU quantity (it must be greater than 0)"},
        {"0m", -1, "\"0m\" is not a CPU quantity (it must be greater than 0)"},
        {"0.0001", -1, "\"0.0001\" is too precise (at most 3 decimals: 0.001 = 1m)"},
        {"1.0005", -1, "\"1.0005\" is too precise (at most 3 decimals: 0.001 = 1m)"},
        {"-1", -1, "\"-1\" is not a CPU quantity (it must be greater than 0)"},
        {"1.5m", -1, "\"1.5m\" is not a CPU quantity (examples: 4, 0.5, 500m)"},
        {"4c", -1, "\"4c\" is not a CPU quantity (examples: 4, 0.5, 500m)"},
        {"", -1, "\"\" is not a CPU quantity (examples: 4, 0.5, 500m)"},
        {"1000001", -1, "\"1000001\" is too large"},
        {"99999999999999999999999", -1, "\"99999999999999999999999\" is too large"},
    };

    check_table(xmp_parse_cpus, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(quantity, durations)
{
    static const struct qcase cases[] = {
        {"0", 0, NULL},
        {"0s", 0, NULL},
        {"90s", 90000, NULL},
        {"250ms", 250, NULL},
        {"30m", 1800000, NULL},
        {"2h", 7200000, NULL},
        {"1h30m", 5400000, NULL},
        {"1m30s", 90000, NULL},
        {"1s500ms", 1500, NULL},
        {"90", -1, "\"90\" has no unit (write 90s)"},
        {"1.5s", -1, "\"1.5s\" is not a duration (use whole numbers, e.g. 1500ms or 1m30s)"},
        {"-5s", -1, "\"-5s\" is not a duration (it must not be negative)"},
        {"", -1, "\"\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)"},
        {"1x", -1, "\"1x\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)"},
        {"h", -1, "\"h\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)"},
        {"1hh", -1, "\"1hh\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)"},
        {"1 h", -1, "\"1 h\" is not a duration (examples: 90s, 30m, 1h30m, 250ms)"},
        {"9999999999999999h", -1, "\"9999999999999999h\" is too long (at most 8760h, 365 days)"},
        /* Bounded so that the timeout or grace in nanoseconds cannot overflow: the first
         * wrapped to a 10 ms deadline before. */
        {"8760h", INT64_C(8760) * 3600000, NULL},
        {"8759h59m59s999ms", INT64_C(8760) * 3600000 - 1, NULL},
        {"8760h1ms", -1, "\"8760h1ms\" is too long (at most 8760h, 365 days)"},
        {"18446744073710ms", -1, "\"18446744073710ms\" is too long (at most 8760h, 365 days)"},
        {"9223372036854775807ms", -1,
         "\"9223372036854775807ms\" is too long (at most 8760h, 365 days)"},
        {"99999999999999999999999s", -1,
         "\"99999999999999999999999s\" is too long (at most 8760h, 365 days)"},
    };

    check_table(xmp_parse_duration, cases, sizeof(cases) / sizeof(cases[0]));
}

Test(quantity, message_buffer_may_be_null)
{
    int64_t v;

    cr_expect_eq(xmp_parse_memory("8GB", &v, NULL, 0), -1);
    cr_expect_eq(xmp_parse_cpus("x", &v, NULL, 0), -1);
    cr_expect_eq(xmp_parse_duration("x", &v, NULL, 0), -1);
}

Test(quantity, long_text_is_clipped_in_messages)
{
    char text[300], msg[256];
    int64_t v;

    memset(text, '9', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    cr_assert_eq(xmp_parse_memory(text, &v, msg, sizeof(msg)), -1);
    cr_expect_str_eq(msg, "\"9999999999999999999999999999999999999999...\" is too large");
}
