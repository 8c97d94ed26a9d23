/* What a segment fd must be before the agent maps it: a read-write memfd of
 * the claimed size whose seals stop any peer from truncating it under us. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#ifdef F_SEAL_FUTURE_WRITE
#define WRITE_SEALS (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)
#else
#define WRITE_SEALS F_SEAL_WRITE
#endif

static const char *kind_of(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a pipe or FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return NULL;
}

/* The fd's path as /proc shows it; memfds read "/memfd:<name> (deleted)". */
static void fd_path(int fd, char *buf, size_t len)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, len - 1);
    if (n < 0)
        n = 0;
    buf[n] = '\0';
}

static void seal_names(int seals, char *buf, size_t len)
{
    static const struct {
        int bit;
        const char *name;
    } names[] = {
        {F_SEAL_SHRINK, "F_SEAL_SHRINK"},
        {F_SEAL_GROW, "F_SEAL_GROW"},
        {F_SEAL_SEAL, "F_SEAL_SEAL"},
        {F_SEAL_WRITE, "F_SEAL_WRITE"},
#ifdef F_SEAL_FUTURE_WRITE
        {F_SEAL_FUTURE_WRITE, "F_SEAL_FUTURE_WRITE"},
#endif
    };
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(seals & names[i].bit))
            continue;
        int w = snprintf(buf + off, len - off, "%s%s", off ? "|" : "", names[i].name);
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
    }
    if (off == 0)
        snprintf(buf, len, "none");
}

/* Everything short of mapping: kind, access mode, seals, size. */
static int check_fd(int fd, uint64_t claimed_size)
{
    char path[256];
    if (fd < 0)
        return lease_error_set(-EBADF, "segment fd: expected an open descriptor, found %d", fd);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return lease_error_set(-EBADF,
                               "segment fd %d: expected an open descriptor, found none (%s)", fd,
                               strerror(errno));
    if (fl & O_PATH)
        return lease_error_set(-EINVAL,
                               "segment fd %d: expected a memfd, found an O_PATH descriptor", fd);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return lease_error_set(-EBADF, "segment fd %d: fstat failed: %s", fd, strerror(errno));
    const char *kind = kind_of(st.st_mode);
    if (kind)
        return lease_error_set(-EINVAL, "segment fd %d: expected a memfd, found %s", fd, kind);
    if (!S_ISREG(st.st_mode))
        return lease_error_set(-EINVAL, "segment fd %d: expected a memfd, found file mode 0%o", fd,
                               (unsigned)st.st_mode);

    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        int e = errno;
        fd_path(fd, path, sizeof(path));
        if (e == EINVAL)
            return lease_error_set(-EINVAL,
                                   "segment fd %d: expected a memfd, found a regular file "
                                   "that cannot be sealed ('%s')",
                                   fd, path);
        return lease_error_set(-EBADF, "segment fd %d: F_GET_SEALS failed: %s", fd, strerror(e));
    }
    /* tmpfs files opened by path answer F_GET_SEALS too; /proc tells them apart. */
    fd_path(fd, path, sizeof(path));
    if (path[0] != '\0' && strncmp(path, "/memfd:", 7) != 0)
        return lease_error_set(
            -EINVAL, "segment fd %d: expected a memfd, found a regular file '%s'", fd, path);
    if ((fl & O_ACCMODE) != O_RDWR)
        return lease_error_set(-EACCES, "segment fd %d: expected a read-write descriptor, found %s",
                               fd, (fl & O_ACCMODE) == O_RDONLY ? "read-only" : "write-only");

    char found[128];
    if (seals & WRITE_SEALS) {
        seal_names(seals, found, sizeof(found));
        return lease_error_set(-EPERM,
                               "segment fd %d: found a write seal (seals %s); the daemon must be "
                               "able to write its staging memory",
                               fd, found);
    }
    if ((seals & REQUIRED_SEALS) != REQUIRED_SEALS) {
        char missing[128];
        seal_names(REQUIRED_SEALS & ~seals, missing, sizeof(missing));
        seal_names(seals, found, sizeof(found));
        return lease_error_set(-EPERM,
                               "segment fd %d: missing seals %s (expected "
                               "F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, found %s)",
                               fd, missing, found);
    }

    long page = sysconf(_SC_PAGESIZE);
    if (claimed_size == 0)
        return lease_error_set(-EINVAL, "segment fd %d: expected a size above 0, claimed 0", fd);
    if ((uint64_t)st.st_size != claimed_size)
        return lease_error_set(-EINVAL, "segment fd %d: claimed size %" PRIu64 " bytes, found %jd",
                               fd, claimed_size, (intmax_t)st.st_size);
    if (claimed_size % (uint64_t)page != 0)
        return lease_error_set(-EINVAL,
                               "segment fd %d: expected a size that is a multiple of the %ld-byte "
                               "page, found %" PRIu64,
                               fd, page, claimed_size);
    if (claimed_size > SIZE_MAX)
        return lease_error_set(-EINVAL, "segment fd %d: size %" PRIu64 " exceeds the address space",
                               fd, claimed_size);
    return 0;
}

int lease__fd_map(int fd, uint64_t claimed_size, void **base_p)
{
    int rc = check_fd(fd, claimed_size);
    if (rc < 0)
        return rc;
    void *base = mmap(NULL, (size_t)claimed_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        return lease_error_set(rc, "segment fd %d: mmap of %" PRIu64 " bytes failed: %s", fd,
                               claimed_size, strerror(-rc));
    }
    /* A fork would otherwise make the pinned pages copy-on-write in the parent. */
    if (madvise(base, (size_t)claimed_size, MADV_DONTFORK) < 0) {
        rc = -errno;
        munmap(base, (size_t)claimed_size);
        return lease_error_set(rc, "segment fd %d: madvise(MADV_DONTFORK) failed: %s", fd,
                               strerror(-rc));
    }
    *base_p = base;
    return 0;
}

/* ---- pre-population before registration --------------------------------- */

/* The agent maps each segment afresh, so its page tables start empty even
 * though stagingd pre-faulted the pages. Populating them with one
 * MADV_POPULATE_WRITE before cuMemHostRegister is a little faster than
 * letting registration fault every page in (reg-bench, H200, 4 GiB: 305 ms
 * against 330 ms); more threads did not help (the populate took the same
 * 175 ms on 1 or 8). The pages are shmem pages that already exist:
 * populating allocates nothing and changes no byte. */
int lease__populate(void *base, uint64_t len)
{
    /* EINVAL: a kernel before 5.14. Registration then faults the pages in
     * itself: slower, still correct. */
    return madvise(base, (size_t)len, MADV_POPULATE_WRITE) < 0 ? -errno : 0;
}
