#define _DEFAULT_SOURCE
#include "mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE ((size_t)2 << 20)

static size_t rounded(size_t n) { return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }

void *fr_alloc_large(size_t n) {
    if (n < FR_HUGE_MIN) return malloc(n ? n : 1);
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    /* Map one huge page more than needed and trim it to a 2 MiB boundary. */
    size_t want = rounded(n), span = want + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + span > p + want) munmap(p + want, (size_t)(raw + span - (p + want)));
#if defined(MADV_HUGEPAGE)
    madvise(p, want, MADV_HUGEPAGE);
#endif
    return p;
#else
    return aligned_alloc(HUGE_PAGE, rounded(n));
#endif
}

void fr_free_large(void *p, size_t n) {
    if (!p) return;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (n >= FR_HUGE_MIN) {
        munmap(p, rounded(n));
        return;
    }
#endif
    free(p);
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
    fr_free_large(*p, old_n);
    *p = q;
    return 0;
}
