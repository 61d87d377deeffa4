/* Growing arrays (isolate/array.h): room doubles from the first size until it holds what is
 * asked for; a request that cannot be met leaves the array and its size as they were, so that
 * a caller that goes on after a failure never writes past what it has. */
#include "isolate/array.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

Test(array, grows_by_doubling_from_the_first_size)
{
    long *v = NULL;
    size_t cap = 0, reallocs = 0;

    for (size_t n = 1; n <= 1000; n++) {
        long *before = v;
        size_t cap_before = cap;
        cr_assert(xmp_array_reserve(v, cap, n, 8));
        cr_assert_geq(cap, n);
        if (cap != cap_before)
            reallocs++;
        else
            cr_assert_eq(v, before, "n %zu: moved without growing", n);
        v[n - 1] = (long)n;
    }
    /* 8, 16, ... 1024: eight sizes, each once. */
    cr_assert_eq(cap, 1024);
    cr_assert_eq(reallocs, 8);
    for (size_t i = 0; i < 1000; i++)
        cr_assert_eq(v[i], (long)i + 1);
    /* A request for many at once takes the first power that holds them. */
    cr_assert(xmp_array_reserve(v, cap, 5000, 8));
    cr_assert_eq(cap, 8192);
    cr_assert_eq(v[999], 1000);
    free(v);
}

Test(array, a_first_size_of_zero_still_grows)
{
    char *b = NULL;
    size_t cap = 0;

    cr_assert(xmp_array_reserve(b, cap, 3, 0));
    cr_assert_eq(cap, 4);
    free(b);
}

/* In the sanitizer build, an allocation larger than memory is an error that aborts unless the
 * allocator may return NULL, as the C library's does. */
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

Test(array, a_request_that_cannot_be_met_leaves_the_array_as_it_was)
{
    struct {
        char bytes[64];
    } *v = NULL;
    size_t cap = 0;
    /* Not constants: the compiler would see what cannot be allocated and refuse to build the
     * call. 2^55 items of 64 bytes: more than any address space; then more than a size_t can
     * count in bytes; then more than it can count in items. */
    volatile size_t requests[] = {(size_t)1 << 55, SIZE_MAX / 32, SIZE_MAX};

    cr_assert(xmp_array_reserve(v, cap, 4, 4));
    v[3].bytes[0] = 'x';
    void *before = v;
    for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
        errno = 0;
        cr_assert_not(xmp_array_reserve(v, cap, requests[i], 4), "request %zu met", i);
        cr_assert_eq(errno, ENOMEM, "request %zu", i);
        cr_assert_eq(cap, 4, "request %zu: the size changed to %zu without the memory", i, cap);
        cr_assert_eq((void *)v, before, "request %zu", i);
    }
    cr_assert_eq(v[3].bytes[0], 'x');
    free(v);
}
