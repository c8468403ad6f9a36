#define _DEFAULT_SOURCE
#include "mem.h"

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE (2u << 20)

void *fr_alloc_large(size_t n) {
    if (n < FR_HUGE_MIN) return malloc(n ? n : 1);
    size_t rounded = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, rounded);
#if defined(MADV_HUGEPAGE)
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

int fr_grow_large(void **p, size_t old_n, size_t new_n) {
    if (new_n < FR_HUGE_MIN) {
        void *q = realloc(*p, new_n ? new_n : 1);
        if (!q) return -1;
        *p = q;
        return 0;
    }
    void *q = fr_alloc_large(new_n);
    if (!q) return -1;
    if (*p && old_n) memcpy(q, *p, old_n < new_n ? old_n : new_n);
    free(*p);
    *p = q;
    return 0;
}
