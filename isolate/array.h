/* Growing arrays: one way to make room, used by every list that grows an item at a time. */
#ifndef XMP_ARRAY_H
#define XMP_ARRAY_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* items (of *cap items of size bytes each, or NULL) with room for n items: doubled from first
 * until it holds them, so that adding n items one at a time costs log n reallocations. NULL
 * when out of memory (errno ENOMEM), with items and *cap as they were. */
static inline void *
xmp_array_grow(void *items, size_t *cap, size_t n, size_t size, size_t first)
{
    size_t c = *cap > 0 ? *cap : first;
    void *grown;

    if (items != NULL && n <= *cap)
        return items;
    if (c == 0)
        c = 1;
    while (c < n) {
        if (c > SIZE_MAX / 2) {
            errno = ENOMEM;
            return NULL;
        }
        c *= 2;
    }
    /* Said here, not left to reallocarray: the sanitizers' abort at an overflow there. */
    if (size > 0 && c > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    grown = reallocarray(items, c, size);
    if (grown != NULL)
        *cap = c;
    return grown;
}

/* Room for n items in the array arr of cap items (lvalues, updated), as xmp_array_grow: false
 * when out of memory, with both as they were. */
#define xmp_array_reserve(arr, cap, n, first)                                                      \
    __extension__({                                                                                \
        void *xmp_grown_ = xmp_array_grow((arr), &(cap), (n), sizeof(*(arr)), (first));            \
        if (xmp_grown_ != NULL)                                                                    \
            (arr) = xmp_grown_;                                                                    \
        xmp_grown_ != NULL;                                                                        \
    })

#endif
