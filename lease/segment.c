/* What a segment fd must be before the agent maps it: a read-write memfd of
 * the claimed size whose seals stop any peer from truncating it under us
 * and, where the kernel has F_SEAL_FUTURE_WRITE, from freeing its pages
 * (docs/lease-service.md, "What a peer can and cannot do to shared
 * memory"). A segment so sealed is mapped read-only: the seal leaves no
 * other choice, and the agent writes only memory it owns. */
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
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1; older headers lack it */
#endif

static pthread_once_t future_write_once = PTHREAD_ONCE_INIT;
static bool future_write_ok;

/* Whether this kernel has F_SEAL_FUTURE_WRITE: a memfd takes it or not. */
static void future_write_probe(void)
{
    int fd = memfd_create("lease-seal-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    future_write_ok = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
    close(fd);
}

bool lease__future_write_supported(void)
{
    pthread_once(&future_write_once, future_write_probe);
    return future_write_ok;
}

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
        {F_SEAL_FUTURE_WRITE, "F_SEAL_FUTURE_WRITE"},
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

/* Everything short of mapping: kind, access mode, seals, size. Fills
 * *kind_p: the size of the pages backing the fd (the base page for a shmem
 * memfd, the huge page size for a hugetlb one, MFD_HUGETLB), and what the
 * seals allow (lease__fd_map). The words name no fd number: the agent's fd
 * means nothing to the peer that offered it. */
static int check_fd(int fd, uint64_t claimed_size, enum lt_class cls, uint32_t policy,
                    struct lease__fd_kind *kind_p, struct lt_failure *why_p)
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
                                  "segment fd: expected a memfd, found a regular file '%s'",
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
    if (seals & F_SEAL_WRITE) {
        return lt_failure_set(why_p, unsealed, -EPERM,
                              "segment fd: found a write seal (F_SEAL_WRITE): the daemon must "
                              "write its staging memory");
    }
    if ((seals & REQUIRED_SEALS) != REQUIRED_SEALS) {
        char missing[128];
        seal_names(REQUIRED_SEALS & ~seals, missing, sizeof(missing));
        seal_names(seals, found, sizeof(found));
        return lt_failure_set(why_p, unsealed, -EPERM,
                              "segment fd: missing seals %s (found %s)",
                              missing, found);
    }
    /* Without F_SEAL_FUTURE_WRITE anyone holding the fd may free its pages
     * (fallocate PUNCH_HOLE, MADV_REMOVE) under a lease. Where the kernel
     * has the seal, a leasable segment must carry it; a MAPPED segment
     * without it is taken for its doorbell and done words only. */
    struct lease__fd_kind k = {.read_only = (seals & F_SEAL_FUTURE_WRITE) != 0, .leasable = true};
    if (!k.read_only && policy == LEASE_SEALS_STRICT && lease__future_write_supported()) {
        if (cls != LT_CLASS_MAPPED)
            return lt_failure_set(why_p, unsealed, -EPERM,
                                  "segment fd: missing F_SEAL_FUTURE_WRITE: add it after mmap, "
                                  "or run --seals legacy");
        k.leasable = false;
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
    k.page = page;
    *kind_p = k;
    return 0;
}

/* mmap of the whole fd at an @align-aligned address: a PROT_NONE
 * reservation one alignment larger, the fd mapped over its aligned part,
 * the rest given back. */
static void *map_aligned(int fd, size_t size, size_t align, int prot)
{
    if (size < align)
        return mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    size_t span = size + align;
    char *area = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t start = ((uintptr_t)area + align - 1) & ~(uintptr_t)(align - 1);
    char *base = mmap((void *)start, size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
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

/* Maps @size bytes of @fd (@prot) at @align and marks the mapping
 * MADV_DONTFORK. A refusal is explained in *why_p: an mmap ENOMEM is the
 * address space (or, for hugetlb, the pages to reserve), never RLIMIT_MEMLOCK. */
static int map_segment(int fd, uint64_t size, uint64_t page, int prot, void **base_p,
                       struct lt_failure *why_p)
{
    /* hugetlb files map only at their own page's alignment (1 GiB pages
     * too); 2 MiB at least lets shmem THP folios map whole. */
    void *base = map_aligned(fd, (size_t)size, (size_t)(page > MAP_ALIGN ? page : MAP_ALIGN), prot);
    if (base == MAP_FAILED) {
        int rc = -errno;
        bool huge = page > (uint64_t)sysconf(_SC_PAGESIZE);
        if (rc == -ENOMEM)
            return lt_failure_set(why_p, huge ? LT_E_SYSTEM : LT_E_LIMIT, rc,
                                  huge ? "segment fd: mmap of %" PRIu64
                                         " bytes failed: no free huge pages to reserve"
                                       : "segment fd: mmap of %" PRIu64
                                         " bytes failed: the agent's address space is full "
                                         "(or vm.max_map_count reached)",
                                  size);
        return lt_failure_set(why_p, LT_E_SYSTEM, rc,
                              "segment fd: mmap of %" PRIu64 " bytes failed: %s", size,
                              strerror(-rc));
    }
    /* A fork would otherwise make the pinned pages copy-on-write in the parent. */
    if (madvise(base, (size_t)size, MADV_DONTFORK) < 0) {
        int rc = -errno;
        munmap(base, (size_t)size);
        return lt_failure_set(why_p, LT_E_SYSTEM, rc,
                              "segment fd: madvise(MADV_DONTFORK) failed: %s", strerror(-rc));
    }
    *base_p = base;
    return 0;
}

int lease__fd_map(int fd, uint64_t claimed_size, enum lt_class cls, uint32_t policy,
                  void **base_p, struct lease__fd_kind *kind_p, struct lt_failure *why_p)
{
    struct lease__fd_kind k;
    int rc = check_fd(fd, claimed_size, cls, policy, &k, why_p);
    if (rc < 0)
        return rc;
    void *base = NULL;
    rc = map_segment(fd, claimed_size, k.page, k.read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                     &base, why_p);
    if (rc < 0)
        return rc;
    *base_p = base;
    *kind_p = k;
    return 0;
}

int lease__words_map(int fd, uint64_t size, void **base_p, struct lease__fd_kind *kind_p,
                     struct lt_failure *why_p)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != size || size == 0 ||
        size % (uint64_t)sysconf(_SC_PAGESIZE) != 0)
        return lt_failure_set(why_p, LT_E_SYSTEM, -EINVAL,
                              "words area: expected a memfd of %" PRIu64 " bytes", size);
    void *base = NULL;
    int rc = map_segment(fd, size, (uint64_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, &base,
                         why_p);
    if (rc < 0)
        return rc;
    /* Sealed after the agent's own mapping: it keeps writing, while the
     * client can only map it read-only and nobody can free its pages. */
    int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL |
               (lease__future_write_supported() ? F_SEAL_FUTURE_WRITE : 0);
    if (fcntl(fd, F_ADD_SEALS, want) < 0 || (fcntl(fd, F_GET_SEALS) & want) != want) {
        rc = -errno ? -errno : -EPERM;
        munmap(base, (size_t)size);
        return lt_failure_set(why_p, LT_E_SYSTEM, rc, "words area: sealing failed: %s",
                              strerror(-rc));
    }
    *base_p = base;
    *kind_p = (struct lease__fd_kind){.page = (uint64_t)sysconf(_SC_PAGESIZE)};
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

static void populate_range(struct lease__populate *job, char *base, uint64_t len)
{
    /* EINTR: try again; EINVAL: a kernel before 5.14; EFAULT or ENOMEM:
     * pages that cannot be faulted in (where the fault would be a SIGBUS:
     * MADV_POPULATE_READ reports it instead), kept for the caller; anything
     * else: the registration faults what is left in itself. */
    int rc;
    while ((rc = madvise(base, (size_t)len, MADV_POPULATE_READ)) != 0 && errno == EINTR)
        ;
    if (rc != 0 && (errno == EFAULT || errno == ENOMEM)) {
        int expected = 0;
        __atomic_compare_exchange_n(&job->err, &expected, -errno, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
}

/* Stripes index, index + count, index + 2 count, ... of the range. */
static void *populate_stripes(void *arg)
{
    struct lease__populate_thread *t = arg;
    for (uint64_t off = t->index * POPULATE_STRIPE; off < t->job->len;
         off += (uint64_t)LEASE__POPULATE_THREADS * POPULATE_STRIPE) {
        uint64_t n = t->job->len - off < POPULATE_STRIPE ? t->job->len - off : POPULATE_STRIPE;
        populate_range(t->job, t->job->base + off, n);
    }
    return NULL;
}

void lease__populate_start(struct lease__populate *job, void *base, uint64_t len)
{
    *job = (struct lease__populate){.base = base, .len = len};
    if (len < LEASE__POPULATE_SPLIT_MIN) {
        populate_range(job, base, len);
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
