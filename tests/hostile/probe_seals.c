/* probe-seals: what F_SEAL_FUTURE_WRITE stops on this kernel, for shmem and
 * hugetlb memfds, seen from the sealer (stagingd: it maps and writes first,
 * then seals) and from a second process (the agent: it maps what it was
 * given). Prints one line per question and a verdict; the lease service's
 * seal policy (docs/lease-service.md, "What a peer can and cannot do to
 * shared memory") rests on the answers marked [needed].
 *
 * Exit status: 0 when every [needed] answer is what the policy assumes, 1
 * when one is not, 77 when the kernel has no F_SEAL_FUTURE_WRITE at all.
 * The hugetlb half is skipped (said so, not failed) without free huge pages:
 * scripts/probe-seals.sh reserves a few for it and gives them back. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26)
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static int failures;

/* "allowed", or the errno's name (a negative @err: the signal's), for one
 * line of the table. */
static const char *outcome(int rc, int err)
{
    static char buf[64];
    if (rc == 0)
        return "allowed";
    if (err < 0)
        snprintf(buf, sizeof buf, "refused (SIG%s)", sigabbrev_np(-err) ? sigabbrev_np(-err) : "?");
    else
        snprintf(buf, sizeof buf, "refused (%s)", strerrorname_np(err) ? strerrorname_np(err) : "?");
    return buf;
}

/* One answer: @what, what happened, and whether the policy needs it so. */
static void report(const char *kind, const char *what, int rc, int err, int want_refused,
                   int needed)
{
    int as_expected = want_refused ? rc != 0 : rc == 0;
    if (needed && !as_expected)
        failures++;
    printf("  %-7s %-62s %-22s %s\n", kind, what, outcome(rc, err),
           as_expected ? (needed ? "[needed: as assumed]" : "[as expected]")
                       : (needed ? "[needed: NOT AS ASSUMED]" : "[differs]"));
}

static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_sig;

static void on_fault(int sig)
{
    fault_sig = sig;
    siglongjmp(fault_jmp, 1);
}

/* A one-byte store into @p: 0, or the signal that stopped it. */
static int try_store(volatile unsigned char *p, unsigned char v)
{
    struct sigaction sa = {.sa_handler = on_fault}, old_segv, old_bus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    fault_sig = 0;
    if (sigsetjmp(fault_jmp, 1) == 0)
        *p = v;
    sigaction(SIGSEGV, &old_segv, NULL);
    sigaction(SIGBUS, &old_bus, NULL);
    return fault_sig;
}

static int probe_kind(const char *kind, unsigned mfd_flags, size_t page)
{
    const size_t size = 4 * page;
    int fd = memfd_create("probe-seals", MFD_CLOEXEC | MFD_ALLOW_SEALING | mfd_flags);
    if (fd < 0) {
        printf("  %-7s memfd_create failed: %s: skipped\n", kind, strerror(errno));
        return 0;
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        printf("  %-7s ftruncate failed: %s: skipped\n", kind, strerror(errno));
        close(fd);
        return 0;
    }
    /* The sealer's own mapping, made and pre-faulted before the seal. */
    unsigned char *w = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED) {
        printf("  %-7s mmap failed: %s (no free huge pages?): skipped\n", kind, strerror(errno));
        close(fd);
        return 0;
    }
    memset(w, 0xa5, size);
    int rc, e;

    /* Today's seals first: the holes the issue found. */
    rc = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    report(kind, "F_ADD_SEALS SHRINK|GROW", rc, errno, 0, 1);
    rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)page);
    e = errno;
    report(kind, "without FUTURE_WRITE: fallocate(PUNCH_HOLE) page 0", rc, e, 0, 0);
    rc = madvise(w + page, page, MADV_REMOVE);
    e = errno;
    report(kind, "without FUTURE_WRITE: madvise(MADV_REMOVE) page 1", rc, e, 0, 0);
    printf("  %-7s   page 0 reads %#x, page 1 reads %#x after those (0 = freed)\n", kind, w[0],
           w[page]);
    memset(w, 0xa5, size); /* faults the freed pages back in */

    rc = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
    e = errno;
    report(kind, "F_ADD_SEALS FUTURE_WRITE|SEAL with a writable mapping", rc, e, 0, 1);
    if (rc < 0) {
        munmap(w, size);
        close(fd);
        return -1;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    printf("  %-7s   F_GET_SEALS = %#x\n", kind, (unsigned)seals);

    rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)page);
    report(kind, "fallocate(PUNCH_HOLE|KEEP_SIZE) on the fd", rc, errno, 1, 1);
    rc = madvise(w + page, page, MADV_REMOVE);
    report(kind, "madvise(MADV_REMOVE) on the sealer's writable mapping", rc, errno, 1, 1);
    rc = fallocate(fd, 0, 0, (off_t)page);
    report(kind, "fallocate(0) (allocate) inside the size", rc, errno, 0, 0);
    rc = fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE);
    report(kind, "F_ADD_SEALS F_SEAL_WRITE (SEAL already set)", rc, errno, 1, 0);
    unsigned char b = 0x5a;
    ssize_t n = pwrite(fd, &b, 1, 0);
    report(kind, "pwrite() on the fd", n == 1 ? 0 : -1, errno, 1, 0);
    int sig = try_store(w + 2 * page, 0x3c);
    report(kind, "store through the sealer's existing writable mapping", sig ? -1 : 0, -sig, 0, 1);

    /* The agent's side: a mapping made after the seal. */
    void *nw = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    report(kind, "new mmap(PROT_READ|PROT_WRITE, MAP_SHARED)", nw == MAP_FAILED ? -1 : 0, errno,
           1, 1);
    if (nw != MAP_FAILED)
        munmap(nw, size);
    unsigned char *ro = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    report(kind, "new mmap(PROT_READ, MAP_SHARED)", ro == MAP_FAILED ? -1 : 0, errno, 0, 1);
    if (ro != MAP_FAILED) {
        rc = madvise(ro, size, MADV_POPULATE_READ);
        report(kind, "madvise(MADV_POPULATE_READ) on the read-only mapping", rc, errno, 0, 0);
        printf("  %-7s   read-only mapping sees the sealer's store: %s\n", kind,
               ro[2 * page] == 0x3c ? "yes" : "NO");
        if (ro[2 * page] != 0x3c)
            failures++;
        rc = mprotect(ro, size, PROT_READ | PROT_WRITE);
        report(kind, "mprotect(PROT_READ|PROT_WRITE) of the read-only mapping", rc, errno, 1, 1);
        rc = madvise(ro, page, MADV_REMOVE);
        report(kind, "madvise(MADV_REMOVE) on the read-only mapping", rc, errno, 1, 1);
        sig = try_store(ro, 1);
        report(kind, "store through the read-only mapping", sig ? -1 : 0, -sig, 1, 1);
        munmap(ro, size);
    }
    void *priv = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    report(kind, "new mmap(PROT_READ|PROT_WRITE, MAP_PRIVATE) (copy-on-write)",
           priv == MAP_FAILED ? -1 : 0, errno, 0, 0);
    if (priv != MAP_FAILED)
        munmap(priv, size);
    /* A second open file description of the same inode: the seals are the inode's. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int fd2 = open(path, O_RDWR | O_CLOEXEC);
    if (fd2 >= 0) {
        rc = fallocate(fd2, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)page);
        report(kind, "fallocate(PUNCH_HOLE) through a reopened /proc/self/fd", rc, errno, 1, 1);
        close(fd2);
    }
    printf("  %-7s   pages still hold the data: %s\n", kind,
           w[0] == 0xa5 && w[page] == 0xa5 ? "yes" : "NO");
    if (w[0] != 0xa5 || w[page] != 0xa5)
        failures++;
    rc = madvise(w, size, MADV_DONTNEED);
    report(kind, "madvise(MADV_DONTNEED) on the writable mapping (zaps PTEs only)", rc, errno, 0,
           0);
    printf("  %-7s   after MADV_DONTNEED the data is %s\n", kind,
           w[0] == 0xa5 ? "still there (the page stays in the file)" : "GONE");
    munmap(w, size);
    close(fd);
    return 1;
}

int main(void)
{
    struct utsname u;
    uname(&u);
    printf("probe-seals: kernel %s %s, F_SEAL_FUTURE_WRITE = %#x\n", u.sysname, u.release,
           F_SEAL_FUTURE_WRITE);
    int fd = memfd_create("probe-seals-support", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0) {
        printf("probe-seals: this kernel has no F_SEAL_FUTURE_WRITE (%s): the agent falls back "
               "to the SIGBUS guard alone\n",
               strerror(errno));
        return 77;
    }
    close(fd);
    long page = sysconf(_SC_PAGESIZE);
    printf("shmem (MFD_ALLOW_SEALING, %ld-byte pages):\n", page);
    probe_kind("shmem", 0, (size_t)page);
    printf("hugetlb (MFD_HUGETLB|MFD_HUGE_2MB, 2 MiB pages):\n");
    int huge = probe_kind("hugetlb", MFD_HUGETLB | MFD_HUGE_2MB, 2u << 20);
    printf("probe-seals: %s%s\n",
           failures ? "some needed answers differ from what the seal policy assumes"
                    : "every needed answer is what the seal policy assumes",
           huge == 0 ? " (hugetlb not probed: no free huge pages)" : "");
    return failures ? 1 : 0;
}
