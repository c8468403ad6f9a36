/* Shared-memory segments for batches sampled by a learner in another
 * process of the same host (fastreplay/net).  A client creates a segment
 * (shm_open + ftruncate), maps it read-only and has the server attach it
 * read-write by name; once the server has attached, the client unlinks the
 * name, so a crash of either side leaves nothing behind in /dev/shm (the
 * memory goes away with the last mapping).
 *
 * Ownership: the caller owns each mapping returned and unmaps it with
 * fr_shm_unmap.  Thread safety: the functions keep no state; a mapping's
 * bytes are synchronised by the caller (the transport's request/reply). */
#ifndef FASTREPLAY_SHM_H
#define FASTREPLAY_SHM_H

#include <stddef.h>

/* Longest segment name, with its terminating NUL. */
#define FR_SHM_NAME_MAX 64

/* Create segment `name` ("/fastreplay-...", which must not exist) of `size`
 * bytes and map it (read-only unless `writable`).  The mapping, or NULL
 * with errno set (the segment is unlinked again on failure). */
void *fr_shm_create(const char *name, size_t size, int writable);

/* Map existing segment `name`, which must hold exactly `size` bytes and be
 * a regular shared-memory object.  The mapping, or NULL with errno set. */
void *fr_shm_attach(const char *name, size_t size, int writable);

/* Remove the name (mappings stay valid).  0, or -1 with errno set. */
int fr_shm_unlink(const char *name);

/* Unmap a mapping of `size` bytes (NULL is fine). */
void fr_shm_unmap(void *p, size_t size);

#endif /* FASTREPLAY_SHM_H */
