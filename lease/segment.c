/* What a segment fd must be before the agent maps it: a read-write memfd of
 * the claimed size whose seals stop any peer from truncating it under us. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6 /* linux/magic.h */
#endif
/* The agent maps segments at this alignment, so 2 MiB pages (hugetlb, or
 * shmem THP) can be mapped by one page-table entry each. */
#define MAP_ALIGN ((uint64_t)2 << 20)

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

/* Everything short of mapping: kind, access mode, seals, size. Writes the
 * size of the pages backing the fd to *page_p: the base page for a shmem
 * memfd, the huge page size for a hugetlb one (MFD_HUGETLB). The words name
 * no fd number: the agent's fd means nothing to the peer that offered it. */
static int check_fd(int fd, uint64_t claimed_size, uint64_t *page_p, struct lt_failure *why_p)
{
    const uint32_t unsealed = LT_E_SEGMENT_UNSEALED; /* not a sealed memfd, in any way */
    char path[256];
    if (fd < 0)
        return lt_failure_set(why_p, unsealed, -EBADF,
                              "segment fd: expected an open descriptor, found %d", fd);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return lt_failure_set(why_p, unsealed, -EBADF,
                              "segment fd: expected an open descriptor, found none (%s)",
                              strerror(errno));
    if (fl & O_PATH)
        return lt_failure_set(why_p, unsealed, -EINVAL,
                              "segment fd: expected a memfd, found an O_PATH descriptor");
    struct stat st;
    if (fstat(fd, &st) < 0)
        return lt_failure_set(why_p, unsealed, -EBADF, "segment fd: fstat failed: %s",
                              strerror(errno));
    const char *kind = kind_of(st.st_mode);
    if (kind)
        return lt_failure_set(why_p, unsealed, -EINVAL, "segment fd: expected a memfd, found %s",
                              kind);
    if (!S_ISREG(st.st_mode))
        return lt_failure_set(why_p, unsealed, -EINVAL,
                              "segment fd: expected a memfd, found file mode 0%o",
                              (unsigned)st.st_mode);

    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        int e = errno;
        fd_path(fd, path, sizeof(path));
        if (e == EINVAL)
            return lt_failure_set(why_p, unsealed, -EINVAL,
                                  "segment fd: expected a memfd, found a regular file "
                                  "that cannot be sealed ('%s')",
                                  path);
        return lt_failure_set(why_p, unsealed, -EBADF, "segment fd: F_GET_SEALS failed: %s",
                              strerror(e));
    }
    /* tmpfs files opened by path answer F_GET_SEALS too; /proc tells them apart. */
    fd_path(fd, path, sizeof(path));
    if (path[0] != '\0' && strncmp(path, "/memfd:", 7) != 0)
        return lt_failure_set(why_p, unsealed, -EINVAL,
                              "segment fd: expected a memfd, found a regular file '%s'", path);
    if ((fl & O_ACCMODE) != O_RDWR)
        return lt_failure_set(why_p, unsealed, -EACCES,
                              "segment fd: expected a read-write descriptor, found %s",
                              (fl & O_ACCMODE) == O_RDONLY ? "read-only" : "write-only");

    char found[128];
    if (seals & WRITE_SEALS) {
        seal_names(seals, found, sizeof(found));
        return lt_failure_set(why_p, unsealed, -EPERM,
                              "segment fd: found a write seal (seals %s); the daemon must be "
                              "able to write its staging memory",
                              found);
    }
    if ((seals & REQUIRED_SEALS) != REQUIRED_SEALS) {
        char missing[128];
        seal_names(REQUIRED_SEALS & ~seals, missing, sizeof(missing));
        seal_names(seals, found, sizeof(found));
        return lt_failure_set(why_p, unsealed, -EPERM,
                              "segment fd: missing seals %s (expected "
                              "F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, found %s)",
                              missing, found);
    }

    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const char *page_kind = "base";
    struct statfs sfs;
    if (fstatfs(fd, &sfs) == 0 && (unsigned long)sfs.f_type == HUGETLBFS_MAGIC && sfs.f_bsize > 0) {
        page = (uint64_t)sfs.f_bsize;
        page_kind = "hugetlb";
    }
    if (claimed_size == 0)
        return lt_failure_set(why_p, LT_E_SEGMENT_SIZE, -EINVAL,
                              "segment fd: expected a size above 0, claimed 0");
    if ((uint64_t)st.st_size != claimed_size)
        return lt_failure_set(why_p, LT_E_SEGMENT_SIZE, -EINVAL,
                              "segment fd: claimed size %" PRIu64 " bytes, found %jd", claimed_size,
                              (intmax_t)st.st_size);
    if (claimed_size % page != 0)
        return lt_failure_set(why_p, LT_E_MISALIGNED, -EINVAL,
                              "segment fd: expected a size that is a multiple of its %" PRIu64
                              "-byte %s page, found %" PRIu64,
                              page, page_kind, claimed_size);
    if (claimed_size > SIZE_MAX)
        return lt_failure_set(why_p, LT_E_SEGMENT_SIZE, -EINVAL,
                              "segment fd: size %" PRIu64 " exceeds the address space",
                              claimed_size);
    *page_p = page;
    return 0;
}

/* mmap of the whole fd at an @align-aligned address: a PROT_NONE
 * reservation one alignment larger, the fd mapped over its aligned part,
 * the rest given back. */
static void *map_aligned(int fd, size_t size, size_t align)
{
    if (size < align)
        return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    size_t span = size + align;
    char *area = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t start = ((uintptr_t)area + align - 1) & ~(uintptr_t)(align - 1);
    char *base = mmap((void *)start, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        munmap(area, span);
        errno = e;
        return MAP_FAILED;
    }
    size_t head = start - (uintptr_t)area;
    if (head)
        munmap(area, head);
    if (span - head - size)
        munmap(base + size, span - head - size);
    return base;
}

int lease__fd_map(int fd, uint64_t claimed_size, void **base_p, uint64_t *page_p,
                  struct lt_failure *why_p)
{
    uint64_t page = 0;
    int rc = check_fd(fd, claimed_size, &page, why_p);
    if (rc < 0)
        return rc;
    /* hugetlb files map only at their own page's alignment (1 GiB pages
     * too); 2 MiB at least lets shmem THP folios map whole. */
    void *base =
        map_aligned(fd, (size_t)claimed_size, (size_t)(page > MAP_ALIGN ? page : MAP_ALIGN));
    if (base == MAP_FAILED) {
        rc = -errno;
        return lt_failure_set(why_p, LT_E_SYSTEM, rc,
                              "segment fd: mmap of %" PRIu64 " bytes failed: %s", claimed_size,
                              strerror(-rc));
    }
    /* A fork would otherwise make the pinned pages copy-on-write in the parent. */
    if (madvise(base, (size_t)claimed_size, MADV_DONTFORK) < 0) {
        rc = -errno;
        munmap(base, (size_t)claimed_size);
        return lt_failure_set(why_p, LT_E_SYSTEM, rc,
                              "segment fd: madvise(MADV_DONTFORK) failed: %s", strerror(-rc));
    }
    *base_p = base;
    *page_p = page;
    return 0;
}

/* ---- pre-population before registration --------------------------------- */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* The agent maps each segment afresh, so its page tables start empty even
 * though stagingd pre-faulted the pages, and building them is most of what
 * registering 4 KiB pages costs. Three things make that cheap:
 *  - populate by read: a read fault on a shared shmem mapping maps the
 *    pages around it too (fault-around) and, with no dirty tracking on
 *    shmem, maps them writable, so the pin finds nothing left to do;
 *  - on 4 threads: read faults scale over a few threads, write faults
 *    barely do;
 *  - alongside the registration: the threads take 32 MiB stripes in
 *    address order, so the front they advance stays ahead of the pin that
 *    walks in behind them.
 * populate-bench, H200, 4 GiB of 4 KiB pages, populate + register against
 * registering the mapping that pre-faulted the pages: read on 4 threads
 * alongside 1.18x (one run), read on 4 threads first 0.64-0.86x, read on 1
 * thread 0.46-0.59x, write on 1 thread 0.28-0.36x, registration alone
 * 0.24-0.45x. (reg-bench still finds the whole lease_segment_add of 4 KiB
 * pages at about 0.5x; the cause is open.) On 2 MiB pages (hugetlb, or
 * shmem THP folios) there are 512 times fewer entries to build, which is
 * why stagingd asks for them. The pages already exist: populating allocates
 * nothing and changes no byte. */
#define POPULATE_STRIPE ((uint64_t)32 << 20)

static void populate_range(char *base, uint64_t len)
{
    /* EINTR: try again; EINVAL: a kernel before 5.14; anything else: the
     * registration faults what is left in itself, slower, still correct. */
    while (madvise(base, (size_t)len, MADV_POPULATE_READ) != 0 && errno == EINTR)
        ;
}

/* Stripes index, index + count, index + 2 count, ... of the range. */
static void *populate_stripes(void *arg)
{
    struct lease__populate_thread *t = arg;
    for (uint64_t off = t->index * POPULATE_STRIPE; off < t->job->len;
         off += (uint64_t)LEASE__POPULATE_THREADS * POPULATE_STRIPE) {
        uint64_t n = t->job->len - off < POPULATE_STRIPE ? t->job->len - off : POPULATE_STRIPE;
        populate_range(t->job->base + off, n);
    }
    return NULL;
}

void lease__populate_start(struct lease__populate *job, void *base, uint64_t len)
{
    *job = (struct lease__populate){.base = base, .len = len};
    if (len < LEASE__POPULATE_SPLIT_MIN) {
        populate_range(base, len);
        return;
    }
    for (unsigned i = 0; i < LEASE__POPULATE_THREADS; i++) {
        struct lease__populate_thread *t = &job->threads[i];
        t->job = job;
        t->index = i;
        /* A thread that cannot start leaves its stripes to the registration. */
        t->started = pthread_create(&t->thread, NULL, populate_stripes, t) == 0;
    }
}

void lease__populate_wait(struct lease__populate *job)
{
    for (unsigned i = 0; i < LEASE__POPULATE_THREADS; i++) {
        if (job->threads[i].started)
            pthread_join(job->threads[i].thread, NULL);
        job->threads[i].started = false;
    }
}
