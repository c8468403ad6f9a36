/* Allocation of large, randomly accessed arrays (sum-tree levels, key index,
 * item slots).  Above FR_HUGE_MIN bytes they are 2 MiB aligned and marked
 * for transparent huge pages where the OS supports it, which removes most
 * TLB misses from random lookups in million-item tables. */
#ifndef FASTREPLAY_MEM_H
#define FASTREPLAY_MEM_H

#include <stddef.h>

#define FR_HUGE_MIN (4u << 20)

/* Uninitialised block of n bytes (free with free()); NULL on failure. */
void *fr_alloc_large(size_t n);

/* Grow *p from old_n to new_n bytes keeping the contents (like realloc, but
 * through fr_alloc_large).  0 on success, -1 on failure (*p unchanged). */
int fr_grow_large(void **p, size_t old_n, size_t new_n);

#endif /* FASTREPLAY_MEM_H */
