#define _DEFAULT_SOURCE
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int name_ok(const char *name) {
    size_t n = strnlen(name, FR_SHM_NAME_MAX);
    if (n == 0 || n >= FR_SHM_NAME_MAX || name[0] != '/') return 0;
    for (size_t i = 1; i < n; i++)
        if (name[i] == '/') return 0;
    return 1;
}

static void *map(int fd, size_t size, int writable) {
    void *p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *fr_shm_create(const char *name, size_t size, int writable) {
    if (!name_ok(name) || size == 0) {
        errno = EINVAL;
        return NULL;
    }
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return NULL;
    void *p = NULL;
    /* posix_fallocate reserves the pages now: a /dev/shm smaller than the
     * segment (a container's 64 MB default) fails here with ENOSPC instead
     * of raising SIGBUS at the first write past its end. */
    int rc = ftruncate(fd, (off_t)size) == 0 ? posix_fallocate(fd, 0, (off_t)size) : errno;
    if (rc == 0) p = map(fd, size, writable);
    else errno = rc;
    int saved = errno;
    close(fd);
    if (!p) {
        shm_unlink(name);
        errno = saved;
    }
    return p;
}

void *fr_shm_attach(const char *name, size_t size, int writable) {
    if (!name_ok(name) || size == 0) {
        errno = EINVAL;
        return NULL;
    }
    int fd = shm_open(name, writable ? O_RDWR : O_RDONLY, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = NULL;
    if (fstat(fd, &st) != 0) {
        /* errno set by fstat */
    } else if (!S_ISREG(st.st_mode) || (size_t)st.st_size != size) {
        errno = EINVAL; /* not what the peer declared: never map past its end */
    } else {
        p = map(fd, size, writable);
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return p;
}

int fr_shm_unlink(const char *name) {
    if (!name_ok(name)) {
        errno = EINVAL;
        return -1;
    }
    return shm_unlink(name);
}

void fr_shm_unmap(void *p, size_t size) {
    if (p) munmap(p, size);
}
