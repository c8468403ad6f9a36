/* Allocation of large, randomly accessed arrays (sum-tree levels, key index,
 * item slots).  Above FR_HUGE_MIN bytes they are mapped on their own, 2 MiB
 * aligned, and marked for transparent huge pages where the OS supports it,
 * which removes most TLB misses from random lookups in million-item
 * tables.  They never come from malloc's heap: advising huge pages on a
 * heap range would leave that range advised after the array is freed, and
 * every later small allocation there would fault (and zero) 2 MiB at a time
 * (the threads benchmark ran at 2/3 speed after the 1e6-item workloads). */
#ifndef FASTREPLAY_MEM_H
#define FASTREPLAY_MEM_H

#include <stddef.h>

#define FR_HUGE_MIN (4u << 20)

/* Uninitialised block of n bytes; NULL on failure.  Free it with
 * fr_free_large(p, n), passing the same n. */
void *fr_alloc_large(size_t n);

/* Free a block of fr_alloc_large or fr_grow_large (NULL is fine). */
void fr_free_large(void *p, size_t n);

/* Grow *p from old_n to new_n bytes keeping the contents (like realloc, but
 * through fr_alloc_large).  0 on success, -1 on failure (*p unchanged). */
int fr_grow_large(void **p, size_t old_n, size_t new_n);

#endif /* FASTREPLAY_MEM_H */
