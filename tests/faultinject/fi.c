/* The wrapped calls of fi.h, and the before/after checks. */
#include "fi.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned fi__mask;   /* armed set; 0: off */
static uint64_t fi__nth;    /* the call that fails; 0: none */
static uint64_t fi__count;  /* counted since fi_arm */
static int fi__fired_flag;
static __thread int fi__exempt_flag;

const char *fi_call_name(unsigned calls)
{
    switch (calls) {
    case FI_ALLOC:
        return "alloc";
    case FI_MMAP:
        return "mmap";
    case FI_MEMFD:
        return "memfd_create";
    case FI_FCNTL:
        return "fcntl";
    case FI_MSG:
        return "sendmsg/recvmsg";
    case FI_URING:
        return "io_uring";
    default:
        return "calls";
    }
}

void fi_arm(unsigned calls, uint64_t nth)
{
    __atomic_store_n(&fi__count, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fi__fired_flag, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fi__nth, nth, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fi__mask, calls, __ATOMIC_SEQ_CST);
}

uint64_t fi_disarm(void)
{
    __atomic_store_n(&fi__mask, 0, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&fi__count, __ATOMIC_SEQ_CST);
}

bool fi_fired(void)
{
    return __atomic_load_n(&fi__fired_flag, __ATOMIC_SEQ_CST) != 0;
}

void fi_exempt(bool on)
{
    fi__exempt_flag = on;
}

/* True when this call of @kind is the one to fail. */
static bool fi__hit(unsigned kind)
{
    if (!(__atomic_load_n(&fi__mask, __ATOMIC_RELAXED) & kind) || fi__exempt_flag)
        return false;
    uint64_t n = __atomic_add_fetch(&fi__count, 1, __ATOMIC_SEQ_CST);
    if (n != __atomic_load_n(&fi__nth, __ATOMIC_RELAXED))
        return false;
    __atomic_store_n(&fi__fired_flag, 1, __ATOMIC_SEQ_CST);
    return true;
}

/* For fi_uring.c. */
bool fi__uring_hit(void);
bool fi__uring_hit(void)
{
    return fi__hit(FI_URING);
}

/* ---- the wrapped calls (ld --wrap) ---- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_memfd_create(const char *name, unsigned flags);
int __real_fcntl(int fd, int cmd, ...);
ssize_t __real_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t __real_recvmsg(int fd, struct msghdr *msg, int flags);
ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
int __real_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_memfd_create(const char *name, unsigned flags);
int __wrap_fcntl(int fd, int cmd, ...);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t __wrap_recvmsg(int fd, struct msghdr *msg, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);
int __wrap_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags);

void *__wrap_malloc(size_t size)
{
    if (fi__hit(FI_ALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (fi__hit(FI_ALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    if (fi__hit(FI_ALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
    if (fi__hit(FI_ALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_strdup(s);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (fi__hit(FI_MMAP)) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_memfd_create(const char *name, unsigned flags)
{
    if (fi__hit(FI_MEMFD)) {
        errno = EMFILE;
        return -1;
    }
    return __real_memfd_create(name, flags);
}

int __wrap_fcntl(int fd, int cmd, ...)
{
    /* Every fcntl the project makes takes an int or no third argument; the
     * ABI passes both in the same register as a pointer would be. */
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (fi__hit(FI_FCNTL)) {
        errno = EINVAL;
        return -1;
    }
    return __real_fcntl(fd, cmd, arg);
}

ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (fi__hit(FI_MSG)) {
        errno = ENOBUFS;
        return -1;
    }
    return __real_sendmsg(fd, msg, flags);
}

ssize_t __wrap_recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (fi__hit(FI_MSG)) {
        errno = ENOMEM;
        return -1;
    }
    return __real_recvmsg(fd, msg, flags);
}

ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags)
{
    if (fi__hit(FI_MSG)) {
        errno = ENOBUFS;
        return -1;
    }
    return __real_send(fd, buf, len, flags);
}

int __wrap_sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
    if (fi__hit(FI_MSG)) {
        errno = ENOBUFS;
        return -1;
    }
    return __real_sendmmsg(fd, v, n, flags);
}

/* ---- snapshots and leaks ---- */

static int fi__count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

/* Lines of /proc/self/maps, and of those the memfd mappings (segments). */
static void fi__count_maps(int *all_p, int *memfd_p)
{
    FILE *f = fopen("/proc/self/maps", "re");
    *all_p = *memfd_p = -1;
    if (!f)
        return;
    char line[512];
    int all = 0, memfd = 0;
    while (fgets(line, sizeof line, f)) {
        all++;
        memfd += strstr(line, "/memfd:") != NULL;
    }
    fclose(f);
    *all_p = all;
    *memfd_p = memfd;
}

void fi_snapshot_take(struct fi_snapshot *s)
{
    s->fds = fi__count_dir("/proc/self/fd");
    fi__count_maps(&s->maps, &s->memfd_maps);
}

int fi_snapshot_cmp(const struct fi_snapshot *before, int maps_slack, char *msg, size_t len)
{
    struct fi_snapshot now;
    fi_snapshot_take(&now);
    if (now.fds != before->fds) {
        snprintf(msg, len, "%d fds open, %d before: %d leaked", now.fds, before->fds,
                 now.fds - before->fds);
        return -1;
    }
    if (now.memfd_maps != before->memfd_maps) {
        snprintf(msg, len, "%d memfd mappings, %d before", now.memfd_maps, before->memfd_maps);
        return -1;
    }
    /* ASan maps its own allocator's memory as it goes: there only the
     * segments (memfd mappings) are compared. */
    if (!fi_have_leak_check() && now.maps > before->maps + maps_slack) {
        snprintf(msg, len, "%d mappings, %d before", now.maps, before->maps);
        return -1;
    }
    return 0;
}

int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

int fi_have_leak_check(void)
{
    return __lsan_do_recoverable_leak_check != NULL;
}

int fi_leak_check(void)
{
    return fi_have_leak_check() ? __lsan_do_recoverable_leak_check() : 0;
}
