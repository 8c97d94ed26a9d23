/* Staging segments: sealed, pre-faulted memfds (DESIGN.md, "stagingd owns the
 * memory"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/hugepages.h"
#include "pool_internal.h"

#define SD_SEGMENT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
#ifndef MFD_HUGE_2MB /* linux/memfd.h: log2 of the page size, shifted by MFD_HUGE_SHIFT */
#define MFD_HUGE_2MB (21U << 26)
#endif

struct leasec__prefault_job {
    pthread_t thread;
    int started;
    int touch;
    unsigned char *base;
    uint64_t len;
    size_t page;
    int err; /* positive errno */
};

static void leasec__prefault_run(struct leasec__prefault_job *job)
{
    if (job->touch) {
        /* The segment is brand new, so storing zero changes nothing but
         * makes the kernel allocate and map every page now. */
        volatile unsigned char *p = job->base;
        for (uint64_t off = 0; off < job->len; off += job->page)
            p[off] = 0;
        return;
    }
    while (madvise(job->base, job->len, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINTR) {
            job->err = errno;
            return;
        }
    }
}

static void *leasec__prefault_thread(void *arg)
{
    leasec__prefault_run(arg);
    return NULL;
}

/* Whether MADV_POPULATE_WRITE works here (Linux 5.14+): tried on the first
 * page. Returns 1 (populated it), 0 (EINVAL: not supported), or -errno. */
static int leasec__populate_probe(unsigned char *base, size_t page)
{
    if (madvise(base, page, MADV_POPULATE_WRITE) == 0)
        return 1;
    return errno == EINVAL ? 0 : -errno;
}

int leasec__segment_prefault(struct leasec__pool_ctx *ctx, int fd, unsigned char *base,
                             uint64_t len)
{
    int touch = (ctx->flags & LEASEC_POOL_PREFAULT_TOUCH) != 0;
    if (!touch) {
        int rc = leasec__populate_probe(base, ctx->page);
        if (rc < 0) {
            leasec__ctx_log(ctx, "pre-faulting segment fd %d: MADV_POPULATE_WRITE: %s", fd,
                            strerror(-rc));
            return rc;
        }
        if (rc == 0) {
            touch = 1;
            if (!ctx->touch_noted)
                leasec__ctx_log(ctx, "MADV_POPULATE_WRITE not supported by this kernel (EINVAL, "
                                     "needs Linux 5.14): pre-faulting by touching every page");
            ctx->touch_noted = 1;
        }
    }
    if (touch) {
        /* Touching cannot report a failed page allocation except by
         * SIGBUS; reserving the pages first turns that into an error. */
        if (fallocate(fd, 0, 0, (off_t)len) != 0 && errno != EOPNOTSUPP) {
            int err = errno;
            leasec__ctx_log(ctx, "reserving %llu bytes for segment fd %d: fallocate: %s",
                            (unsigned long long)len, fd, strerror(err));
            return -err;
        }
    }

    /* Slices on 2 MiB boundaries, so a huge page is never split between
     * two threads. */
    uint64_t units = len / LEASEC_POOL_SEGMENT_ALIGN;
    unsigned n = ctx->prefault_threads;
    if (n > units)
        n = units ? (unsigned)units : 1;
    struct leasec__prefault_job jobs[64];
    if (n > sizeof(jobs) / sizeof(jobs[0]))
        n = sizeof(jobs) / sizeof(jobs[0]);
    uint64_t done = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t share = units ? (units / n + (i < units % n)) * LEASEC_POOL_SEGMENT_ALIGN : len;
        if (i == n - 1)
            share = len - done;
        jobs[i] = (struct leasec__prefault_job){
            .touch = touch, .base = base + done, .len = share, .page = ctx->page};
        done += share;
        /* The calling thread takes the last slice; a thread that cannot be
         * started has its slice run here too. */
        if (i + 1 < n &&
            pthread_create(&jobs[i].thread, NULL, leasec__prefault_thread, &jobs[i]) == 0)
            jobs[i].started = 1;
    }
    for (unsigned i = 0; i < n; i++)
        if (!jobs[i].started)
            leasec__prefault_run(&jobs[i]);
    int err = 0;
    for (unsigned i = 0; i < n; i++) {
        if (jobs[i].started)
            pthread_join(jobs[i].thread, NULL);
        if (jobs[i].err && !err)
            err = jobs[i].err;
    }
    if (err) {
        leasec__ctx_log(ctx, "pre-faulting %llu bytes of segment fd %d: MADV_POPULATE_WRITE: %s",
                        (unsigned long long)len, fd, strerror(err));
        return -err;
    }
    return 0;
}

/* Maps @fd at a 2 MiB-aligned address, so shmem huge pages (when the
 * system enables them) line up with the mapping. */
static int leasec__segment_map(int fd, uint64_t size, unsigned char **base_p)
{
    size_t span = size + LEASEC_POOL_SEGMENT_ALIGN;
    unsigned char *area =
        mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED)
        return -errno;
    uintptr_t start =
        ((uintptr_t)area + LEASEC_POOL_SEGMENT_ALIGN - 1) & ~(LEASEC_POOL_SEGMENT_ALIGN - 1);
    unsigned char *base =
        mmap((void *)start, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (base == MAP_FAILED) {
        int err = errno;
        munmap(area, span);
        return -err;
    }
    size_t head = start - (uintptr_t)area;
    if (head)
        munmap(area, head);
    if (span - head - size)
        munmap(base + size, span - head - size);
    *base_p = base;
    return 0;
}

/* The system's shmem THP policy, the bracketed word of shmem_enabled
 * ("never" when it cannot be read). */
static void leasec__shmem_thp_policy(char *buf, size_t len)
{
    snprintf(buf, len, "never");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
    if (!f)
        return;
    char line[160];
    if (fgets(line, sizeof(line), f)) {
        char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
        if (open && close)
            snprintf(buf, len, "%.*s", (int)(close - open - 1), open + 1);
    }
    fclose(f);
}

/* Whether that policy gives 2 MiB folios to a mapping that asks for them
 * with MADV_HUGEPAGE. */
static int leasec__shmem_thp_allowed(const char *policy)
{
    return strcmp(policy, "advise") == 0 || strcmp(policy, "always") == 0 ||
           strcmp(policy, "within_size") == 0 || strcmp(policy, "force") == 0;
}

/* Bytes of the mapping starting at @base that this process maps with PMD
 * entries on shmem folios (smaps ShmemPmdMapped); 0 when unknown. */
static uint64_t leasec__segment_thp_bytes(const unsigned char *base)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return 0;
    char line[256];
    int inside = 0;
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (inside)
                break;
            inside = lo == (unsigned long)(uintptr_t)base;
        } else if (inside && sscanf(line, "ShmemPmdMapped: %" SCNu64, &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

/* Why a hugetlb segment could not be made, with the system's numbers:
 * free pages less those already promised to other mappings (resv) are what
 * a new mapping can have. */
static void leasec__huge_reason(const char *step, int rc, uint64_t size, char *buf, size_t len)
{
    long total = base_hugepages_counter("nr_hugepages"),
         free_pages = base_hugepages_counter("free_hugepages"),
         resv = base_hugepages_counter("resv_hugepages");
    long avail = free_pages >= 0 && resv >= 0 ? free_pages - resv : -1;
    unsigned long long need = (unsigned long long)(size / LEASEC_POOL_HUGE_PAGE);
    if (strcmp(step, "mmap") == 0 && rc == -ENOMEM)
        snprintf(buf, len,
                 "expected %llu available 2 MiB huge pages, found %ld (%ld free, %ld promised, "
                 "%ld reserved in " BASE_HUGE_SYSFS ")",
                 need, avail, free_pages, resv, total);
    else
        snprintf(buf, len,
                 "%s of a 2 MiB hugetlb memfd failed: %s (%llu pages needed, %ld available)", step,
                 strerror(-rc), need, avail);
}

/* AUTO: hugetlb pages gave out at segment @name; this and every later
 * segment use base pages (with THP where allowed). Said once, with what it
 * costs on this system. */
static void leasec__huge_give_up(struct leasec__pool_ctx *ctx, const char *name, const char *why)
{
    ctx->huge_given_up = 1;
    char policy[32];
    leasec__shmem_thp_policy(policy, sizeof(policy));
    if (leasec__shmem_thp_allowed(policy))
        leasec__ctx_log(
            ctx,
            "segment %s and any after it: no hugetlb pages (%s); they use shmem pages "
            "with MADV_HUGEPAGE instead, which shmem THP ('%s') backs with 2 MiB folios "
            "where memory is not too fragmented",
            name, why, policy);
    else
        leasec__ctx_log(
            ctx,
            "segment %s and any after it use %zu-byte pages, which the GPU agent "
            "registers several times slower than 2 MiB ones: %s, and shmem THP is '%s'; "
            "reserve 2 MiB pages (`echo N > " BASE_HUGE_SYSFS "/nr_hugepages`) or allow "
            "shmem THP (`echo advise > /sys/kernel/mm/transparent_hugepage/"
            "shmem_enabled`), or set pages = small to say nothing",
            name, ctx->page, why, policy);
}

/* A memfd of @size bytes on hugetlb (@huge) or base pages, mapped at a
 * 2 MiB-aligned address. Returns 0 with the fd and mapping, or -errno with
 * *step_p naming the call that failed; on failure nothing is left open.
 * A hugetlb mapping reserves its pages when it is made, so a shortage of
 * huge pages shows up here as ENOMEM, never as a later SIGBUS. */
static int leasec__segment_open(const char *name, uint64_t size, int huge, int *fd_p,
                                unsigned char **base_p, const char **step_p)
{
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    if (huge)
        flags |= MFD_HUGETLB | MFD_HUGE_2MB;
    *step_p = "memfd_create";
    int fd = memfd_create(name, flags);
    if (fd < 0)
        return -errno;
    *step_p = "ftruncate";
    int rc = ftruncate(fd, (off_t)size) == 0 ? 0 : -errno;
    if (rc == 0) {
        *step_p = "mmap";
        rc = leasec__segment_map(fd, size, base_p);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fd_p = fd;
    return 0;
}

/* Opens the segment on the pages the pool asks for: hugetlb for pages =
 * huge, and for auto while they last (never for STAGED, which the agent does
 * not register); else base pages asking for THP (pages = small: refusing
 * it). -errno when none could be had. */
static int leasec__segment_open_paged(struct leasec__pool_ctx *ctx, const char *name,
                                      enum lt_class mem_class, uint64_t size, int *fd_p,
                                      unsigned char **base_p, uint64_t *page_p, const char **step_p)
{
    int want_huge = ctx->pages == LEASEC_POOL_PAGES_HUGE ||
                    (ctx->pages == LEASEC_POOL_PAGES_AUTO && !ctx->huge_given_up &&
                     mem_class != LT_CLASS_STAGED);
    if (want_huge) {
        int rc = leasec__segment_open(name, size, 1, fd_p, base_p, step_p);
        if (rc == 0) {
            *page_p = LEASEC_POOL_HUGE_PAGE;
            return 0;
        }
        char why[320];
        leasec__huge_reason(*step_p, rc, size, why, sizeof(why));
        if (ctx->pages == LEASEC_POOL_PAGES_HUGE) {
            leasec__ctx_log(ctx,
                            "creating segment %s of %llu bytes on huge pages (pages = huge): %s; "
                            "reserve more (`echo N > " BASE_HUGE_SYSFS "/nr_hugepages`) or use "
                            "pages = auto",
                            name, (unsigned long long)size, why);
            *step_p = NULL;
            return rc;
        }
        leasec__huge_give_up(ctx, name, why);
    }
    if (ctx->pages == LEASEC_POOL_PAGES_THP && !ctx->thp_noted) {
        ctx->thp_noted = 1;
        char policy[32];
        leasec__shmem_thp_policy(policy, sizeof(policy));
        if (!leasec__shmem_thp_allowed(policy))
            leasec__ctx_log(ctx,
                            "pages = thp, but shmem THP is '%s': segments get %zu-byte pages, "
                            "which the GPU agent registers several times slower (`echo advise > "
                            "/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows THP)",
                            policy, ctx->page);
    }
    int rc = leasec__segment_open(name, size, 0, fd_p, base_p, step_p);
    if (rc < 0)
        return rc;
    /* Before pre-faulting: where the shmem THP policy allows it (advise,
     * always, within_size) MADV_HUGEPAGE makes the pages 2 MiB folios,
     * which the agent maps and pins as fast as hugetlb pages; small asks
     * for base pages outright. */
    (void)madvise(*base_p, (size_t)size,
                  ctx->pages == LEASEC_POOL_PAGES_SMALL ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
    *page_p = ctx->page;
    return 0;
}

int leasec__segment_create(struct leasec__pool_ctx *ctx, struct leasec__segment *seg, uint32_t id,
                           enum lt_class mem_class, uint64_t size)
{
    /* "sd-pool-pinned-7": shows up as /memfd:sd-pool-pinned-7 in maps and fd links. */
    char name[64];
    int len = snprintf(name, sizeof(name), "sd-pool-%s-%u", lt_class_name(mem_class), id);
    for (int i = 8; i < len && i < (int)sizeof(name); i++)
        if (name[i] >= 'A' && name[i] <= 'Z')
            name[i] = (char)(name[i] - 'A' + 'a');

    int fd = -1;
    unsigned char *base = NULL;
    uint64_t page_size = 0;
    int rc = -EIO;
    const char *step = "memfd_create";

    if (leasec__ctx_fault(ctx))
        goto fail;
    rc = leasec__segment_open_paged(ctx, name, mem_class, size, &fd, &base, &page_size, &step);
    if (rc < 0)
        goto fail;
    step = "mapping";
    if (leasec__ctx_fault(ctx)) {
        rc = -EIO;
        goto fail;
    }
    step = "pre-faulting";
    if (leasec__ctx_fault(ctx)) {
        rc = -EIO;
        goto fail;
    }
    rc = leasec__segment_prefault(ctx, fd, base, size);
    if (rc < 0 && page_size == LEASEC_POOL_HUGE_PAGE && ctx->pages == LEASEC_POOL_PAGES_AUTO) {
        /* The mapping's reservation held but the pages would not fault in:
         * a hugetlb cgroup limit, or reserved pages outside this cpuset's
         * memory nodes. Base pages instead, as for a failed reservation. */
        munmap(base, size);
        close(fd);
        base = NULL;
        fd = -1;
        char why[160];
        snprintf(why, sizeof(why),
                 "pre-faulting a 2 MiB hugetlb memfd failed: %s (a hugetlb cgroup limit, or "
                 "reserved pages outside this cpuset's nodes?)",
                 strerror(-rc));
        leasec__huge_give_up(ctx, name, why);
        rc = leasec__segment_open_paged(ctx, name, mem_class, size, &fd, &base, &page_size, &step);
        if (rc < 0)
            goto fail;
        rc = leasec__segment_prefault(ctx, fd, base, size);
    }
    if (rc < 0) {
        step = NULL; /* leasec__segment_prefault said why */
        goto fail;
    }
    uint64_t thp_bytes = page_size == LEASEC_POOL_HUGE_PAGE ? 0 : leasec__segment_thp_bytes(base);
    step = "sealing (F_ADD_SEALS)";
    if (leasec__ctx_fault(ctx)) {
        rc = -EIO;
        goto fail;
    }
    /* F_SEAL_FUTURE_WRITE last and after our own mapping and pre-fault:
     * that mapping stays writable, every later one (the agent's) can only
     * read, and nobody can free the pages any more (no PUNCH_HOLE, no
     * MADV_REMOVE: docs/lease-service.md). A kernel before 5.1 refuses it
     * (EINVAL); the agent then wants the other three only. */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0 ||
        (!(ctx->flags & LEASEC_POOL_AGENT_WRITES) &&
         !(mem_class == LT_CLASS_MAPPED && (ctx->flags & LEASEC_POOL_MAPPED_WRITABLE)) &&
         fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0 && errno != EINVAL) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) != 0) {
        rc = -errno;
        goto fail;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SD_SEGMENT_SEALS) != SD_SEGMENT_SEALS) {
        leasec__ctx_log(ctx,
                        "segment %s: expected seals SHRINK|GROW|SEAL (0x%x) after sealing, "
                        "found 0x%x",
                        name, SD_SEGMENT_SEALS, seals);
        rc = -ENOTRECOVERABLE;
        step = NULL;
        goto fail;
    }

    *seg = (struct leasec__segment){.id = id,
                                    .mem_class = mem_class,
                                    .fd = fd,
                                    .base = base,
                                    .size = size,
                                    .page_size = page_size,
                                    .thp_bytes = thp_bytes,
                                    .carved = 0};
    return 0;

fail:
    if (step)
        leasec__ctx_log(ctx, "creating segment %s of %llu bytes: %s: %s", name,
                        (unsigned long long)size, step, strerror(-rc));
    if (base)
        munmap(base, size);
    if (fd >= 0)
        close(fd);
    return rc;
}

void leasec__segment_destroy(struct leasec__segment *seg)
{
    if (seg->base)
        munmap(seg->base, seg->size);
    if (seg->fd >= 0)
        close(seg->fd);
    seg->base = NULL;
    seg->fd = -1;
}
