/* reg-bench: how fast the lease service makes a stagingd segment GPU-ready,
 * against a plain cuMemHostRegister of the same bytes, in one run, for
 * segments on 4 KiB pages, on 2 MiB hugetlb pages (stagingd's default
 * where huge pages are reserved) and (--pages thp) on base-page memfds that
 * ask for shmem THP.
 *
 *   same map  a memfd pre-faulted through a mapping, then
 *             cuMemHostRegister(PORTABLE [| DEVICEMAP]) of that mapping:
 *             its page tables are already built (the ceiling)
 *   fresh map the same pre-faulted memfd mapped again and registered: what
 *             the agent pays without the lease service, since it always
 *             maps a segment stagingd faulted in (new page tables)
 *   ours      the daemon's flow: a sealed, pre-faulted memfd is handed to
 *             lease_segment_add, which checks it, maps it again, populates
 *             the page tables and registers it through the CUDA backend
 *             (device pointer too for MAPPED)
 *
 * The last column compares ours with the plain register of pre-faulted
 * 4 KiB memory ("same map" on the 4k row), the baseline issue #3 names.
 *
 * Teardown is timed as unregister + unmap on both sides.
 *
 * Each figure is the median of --repeat runs; the order of the two paths
 * alternates so neither always runs on a warmer system. */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"

#include "base/time.h"
#include "bench_huge.h"
#include "gpu/ga.h"
#include "gpu/lease_backend.h"
#include "lease/lease.h"

/* Which pages back a segment: what stagingd's pool can get. */
enum backing {
    BACKING_4K,      /* base pages */
    BACKING_HUGETLB, /* 2 MiB hugetlb pages (MFD_HUGETLB), reserved by the admin */
    BACKING_THP,     /* base-page memfd asking for 2 MiB shmem folios (MADV_HUGEPAGE) */
    BACKING_COUNT,
};
static const char *const backing_names[BACKING_COUNT] = {"4k", "huge", "thp"};

/* A memfd of @size bytes on @backing pages, pre-faulted through its own
 * mapping (as stagingd does) and optionally sealed. Returns the fd; *map_p
 * keeps the mapping. */
static int make_segment(uint64_t size, int seal, enum backing backing, void **map_p)
{
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    if (backing == BACKING_HUGETLB)
        flags |= MFD_HUGETLB | MFD_HUGE_2MB;
    int fd = memfd_create("reg-bench", flags);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)size) < 0)
        goto fail;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto fail;
    if (backing == BACKING_THP)
        (void)madvise(p, size, MADV_HUGEPAGE); /* as stagingd does on base pages */
    if (madvise(p, size, MADV_POPULATE_WRITE) < 0) {
        for (uint64_t off = 0; off < size; off += 4096)
            ((volatile char *)p)[off] = 1;
    }
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        munmap(p, size);
        goto fail;
    }
    *map_p = p;
    return fd;
fail:;
    int rc = -errno;
    close(fd);
    return rc;
}

/* @fresh 0: register the mapping that pre-faulted the pages (its page
 * tables are built). @fresh 1: map the pre-faulted memfd again and register
 * that, as an agent would without the lease service: the pages exist, the
 * page tables of the new mapping do not. */
static int baseline_once(uint64_t size, unsigned flags, enum backing backing, int fresh,
                         double *reg_s_p, double *unreg_s_p)
{
    void *daemon_map = NULL;
    int fd = make_segment(size, 0, backing, &daemon_map);
    if (fd < 0)
        return fd;
    double tm = base_now_s();
    void *p = daemon_map;
    if (fresh) {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int rc = -errno;
            munmap(daemon_map, size);
            close(fd);
            return rc;
        }
    }
    CUresult r = cuMemHostRegister(p, size, flags);
    CUdeviceptr dptr = 0;
    if (r == CUDA_SUCCESS && (flags & CU_MEMHOSTREGISTER_DEVICEMAP))
        r = cuMemHostGetDevicePointer(&dptr, p, 0);
    double t2 = base_now_s();
    if (r == CUDA_SUCCESS)
        r = cuMemHostUnregister(p);
    munmap(p, size); /* ours unmaps too: compare whole teardowns */
    double t3 = base_now_s();
    if (fresh)
        munmap(daemon_map, size);
    close(fd);
    if (r != CUDA_SUCCESS) {
        const char *n = NULL;
        cuGetErrorName(r, &n);
        fprintf(stderr, "reg-bench: baseline registration failed: %s\n", n ? n : "?");
        return -EIO;
    }
    *reg_s_p = t2 - tm;
    *unreg_s_p = t3 - t2;
    return 0;
}

static int ours_once(struct lease_service *svc, struct lease_client_id client, uint64_t size,
                     enum lt_class cls, enum backing backing, double *reg_s_p, double *unreg_s_p)
{
    void *daemon_map = NULL;
    int fd = make_segment(size, 1, backing, &daemon_map);
    if (fd < 0)
        return fd;
    struct lt_segment_id seg = {0, 0};
    struct lt_failure why;
    double t0 = base_now_s();
    int rc = lease_segment_add(svc, client, fd, size, cls, &seg, &why);
    double t1 = base_now_s();
    if (rc < 0) {
        fprintf(stderr, "reg-bench: lease_segment_add: %s\n", why.message);
        close(fd);
        munmap(daemon_map, size);
        return rc;
    }
    rc = lease_segment_remove(svc, client, seg, &why); /* unregisters, unmaps, closes fd */
    double t2 = base_now_s();
    munmap(daemon_map, size);
    if (rc < 0) {
        fprintf(stderr, "reg-bench: lease_segment_remove: %s\n", why.message);
        return rc;
    }
    *reg_s_p = t1 - t0;
    *unreg_s_p = t2 - t1;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (bench_help_wanted(argc, argv)) {
        printf("usage: reg-bench [--size-gib N] [--repeat N] [--pages 4k,huge,thp]\n");
        return 0;
    }
    uint64_t size = 4ull << 30;
    int repeat = 3;
    int want[BACKING_COUNT] = {1, 1, 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size-gib") == 0 && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 10) << 30;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc) {
            /* A comma-separated list of backings. */
            char list[64];
            snprintf(list, sizeof(list), "%s", argv[++i]);
            memset(want, 0, sizeof(want));
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                int b = 0;
                while (b < BACKING_COUNT && strcmp(t, backing_names[b]) != 0)
                    b++;
                if (b == BACKING_COUNT) {
                    fprintf(stderr,
                            "reg-bench: --pages: expected a list of 4k, huge, thp, found '%s'\n",
                            t);
                    return 2;
                }
                want[b] = 1;
            }
        } else {
            fprintf(stderr, "usage: reg-bench [--size-gib N] [--repeat N] [--pages 4k,huge,thp]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > 64 || size == 0) {
        fprintf(stderr, "reg-bench: expected 1..64 repeats and a size > 0\n");
        return 2;
    }
    bench_cuda_require("reg-bench");
    uint64_t huge_need = size / (2ull << 20);
    long huge_free = bench_huge_pages_free();
    if (want[BACKING_HUGETLB] && (size % (2ull << 20) || huge_free < (long)huge_need)) {
        fprintf(stderr,
                "reg-bench: hugetlb rows skipped: %" PRIu64 " free 2 MiB huge pages needed, %ld "
                "available (reserve them: `echo %" PRIu64 " > " BENCH_HUGE_SYSFS
                "/nr_hugepages`)\n",
                huge_need, huge_free, huge_need);
        want[BACKING_HUGETLB] = 0;
    }
    char thp_policy[128] = "";
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
    if (thp) {
        if (!fgets(thp_policy, sizeof(thp_policy), thp))
            thp_policy[0] = '\0';
        fclose(thp);
    }
    if (want[BACKING_THP] && (strstr(thp_policy, "[never]") || strstr(thp_policy, "[deny]") ||
                              !strchr(thp_policy, '['))) {
        fprintf(stderr,
                "reg-bench: thp rows skipped: shmem THP is off (shmem_enabled: %s); "
                "`echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled` allows it\n",
                thp_policy[0] ? strtok(thp_policy, "\n") : "unreadable");
        want[BACKING_THP] = 0;
    }
    if (!want[BACKING_4K] && !want[BACKING_HUGETLB] && !want[BACKING_THP])
        return 1;

    struct ga_device *dev = NULL;
    struct ga_device_opts opts = {0};
    if (ga_device_open(&opts, &dev) < 0)
        return 1;
    CUcontext ctx = NULL;
    if (ga_device_make_current(dev) < 0 || cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
        fprintf(stderr, "reg-bench: no current primary context\n");
        ga_device_close(dev);
        return 1;
    }

    struct lease_backend backend;
    struct lease_service *svc = NULL;
    struct lease_client_id client = {0};
    struct lease_service_config cfg = {.budget_pinned = 2 * size, .budget_mapped = 2 * size};
    struct lt_failure why;
    int rc = ga_cuda_lease_backend_init(ctx, 0, &backend, &why);
    if (rc == 0)
        rc = lease_service_create(&cfg, &backend, &svc, &why);
    if (rc == 0)
        rc = lease_client_add(svc, NULL, &client, &why);
    if (rc < 0) {
        fprintf(stderr, "reg-bench: lease service: %s\n", why.message);
        ga_device_close(dev);
        return 1;
    }

    static const struct {
        const char *name;
        enum lt_class cls;
        unsigned flags;
    } kinds[] = {
        {"PINNED", LT_CLASS_PINNED, CU_MEMHOSTREGISTER_PORTABLE},
        {"MAPPED", LT_CLASS_MAPPED, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP},
    };
    double gib = (double)size / (double)(1ull << 30);
    char table[2048];
    int used = snprintf(table, sizeof(table),
                        "class  pages  GiB | register GB/s: same map  fresh map   ours | ours/same "
                        " ours/fresh  ours/4k-same | teardown GB/s: fresh   ours\n");
    int failed = 0;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && !failed; k++) {
        double small_same = 0; /* GB/s of the 4k same-map register: the baseline */
        for (int b = 0; b < BACKING_COUNT && !failed; b++) {
            if (!want[b])
                continue;
            enum backing backing = (enum backing)b;
            const char *pages = backing_names[b];
            double same_reg[64], same_unreg[64], fresh_reg[64], fresh_unreg[64], ours_reg[64],
                ours_unreg[64];
            for (int r = 0; r < repeat && !failed; r++) {
                /* Rotate the order so no path always runs first. */
                for (int step = 0; step < 3 && !failed; step++) {
                    switch ((step + r) % 3) {
                    case 0:
                        rc = ours_once(svc, client, size, kinds[k].cls, backing, &ours_reg[r],
                                       &ours_unreg[r]);
                        break;
                    case 1:
                        rc = baseline_once(size, kinds[k].flags, backing, 1, &fresh_reg[r],
                                           &fresh_unreg[r]);
                        break;
                    default:
                        rc = baseline_once(size, kinds[k].flags, backing, 0, &same_reg[r],
                                           &same_unreg[r]);
                        break;
                    }
                    failed = rc < 0;
                }
                if (!failed)
                    fprintf(stderr,
                            "reg-bench: %s %s run %d/%d: same map %.3f s, fresh map %.3f s, "
                            "ours %.3f s\n",
                            kinds[k].name, pages, r + 1, repeat, same_reg[r], fresh_reg[r],
                            ours_reg[r]);
            }
            if (failed)
                break;
            double gb = (double)size / 1e9;
            double sr = gb / median(same_reg, repeat), fr = gb / median(fresh_reg, repeat);
            double orr = gb / median(ours_reg, repeat);
            double fu = gb / median(fresh_unreg, repeat), ou = gb / median(ours_unreg, repeat);
            (void)same_unreg;
            if (backing == BACKING_4K)
                small_same = sr;
            char vs_small[16] = "      -";
            if (small_same > 0)
                snprintf(vs_small, sizeof(vs_small), "%7.2fx", orr / small_same);
            used += snprintf(table + used, sizeof(table) - (size_t)used,
                             "%-6s %-5s %4.1f | %23.1f %10.1f %6.1f | %8.2fx %10.2fx %13s | "
                             "%19.1f %6.1f\n",
                             kinds[k].name, pages, gib, sr, fr, orr, orr / sr, orr / fr, vs_small,
                             fu, ou);
        }
    }

    struct lease_stats st;
    if (!failed && lease_service_stats(svc, &st) == 0)
        fprintf(stderr,
                "reg-bench: lease service counted %" PRIu64 " PINNED and %" PRIu64
                " MAPPED registrations, %.1f ms each inside the service (populate + register)\n",
                st.cls[LT_CLASS_PINNED].registrations, st.cls[LT_CLASS_MAPPED].registrations,
                st.cls[LT_CLASS_PINNED].registrations
                    ? (double)st.cls[LT_CLASS_PINNED].registration_ns / 1e6 /
                          (double)st.cls[LT_CLASS_PINNED].registrations
                    : 0.0);
    lease_client_drop(svc, client, NULL);
    lease_service_destroy(svc);
    lease_backend_fini(&backend);
    ga_device_close(dev);
    if (failed)
        return 1;
    fputs(table, stdout);
    return 0;
}
