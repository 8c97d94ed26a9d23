#include "reader_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char rt_root[4096];

int rt_root_make(const char *base)
{
    snprintf(rt_root, sizeof(rt_root), "%s/test_reader.XXXXXX", base);
    if (!mkdtemp(rt_root)) {
        int e = errno;
        rt_root[0] = '\0';
        return -e;
    }
    return 0;
}

void rt_root_setup(void)
{
    const char *base = getenv("TMPDIR");
    if (rt_root_make(base && *base ? base : "/tmp") < 0) {
        fprintf(stderr, "test_reader: mkdtemp under %s: %s\n", base ? base : "/tmp",
                strerror(errno));
        abort();
    }
}

static int rt_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void rt_root_teardown(void)
{
    if (rt_root[0])
        nftw(rt_root, rt_rm, 16, FTW_DEPTH | FTW_PHYS);
    rt_root[0] = '\0';
}

const char *rt_path(const char *name)
{
    static char path[8192];
    ck_assert_msg(rt_root[0], "no temporary root");
    snprintf(path, sizeof(path), "%s/%s", rt_root, name);
    return path;
}

uint64_t rt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rt_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t s = seed;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = rt_rand(&s);
        memcpy(p + i, &v, 8);
    }
    uint64_t v = rt_rand(&s);
    memcpy(p + i, &v, len - i);
}

unsigned char *rt_write_file(const char *name, size_t len, uint64_t seed)
{
    unsigned char *data = NULL;
    if (len) {
        data = malloc(len);
        ck_assert_ptr_nonnull(data);
        rt_fill(data, len, seed);
    }
    const char *path = rt_path(name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "open(%s): %s", path, strerror(errno));
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        ck_assert_msg(w > 0, "write(%s): %s", path, strerror(errno));
        done += (size_t)w;
    }
    ck_assert_int_eq(close(fd), 0);
    return data;
}

int rt_open(const char *name, int extra_flags)
{
    const char *path = rt_path(name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | extra_flags);
    ck_assert_msg(fd >= 0, "open(%s): %s", path, strerror(errno));
    return fd;
}

unsigned char *rt_pread_all(int fd, uint64_t off, size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    for (size_t done = 0; done < len;) {
        ssize_t got = pread(fd, buf + done, len - done, (off_t)(off + done));
        ck_assert_msg(got > 0, "pread at %llu: %s", (unsigned long long)(off + done),
                      got < 0 ? strerror(errno) : "end of file");
        done += (size_t)got;
    }
    return buf;
}

struct leasec_pool *rt_pool_make(uint64_t pinned, uint64_t segment)
{
    struct leasec_pool_config c;
    memset(&c, 0, sizeof(c));
    c.class_bytes[LT_CLASS_PINNED] = pinned;
    c.segment_bytes = segment;
    c.prefault_threads = 1;
    c.pages = LEASEC_POOL_PAGES_SMALL; /* leaves reserved huge pages to test_hugepages */
    c.log = (struct leasec_log){rt_log_fn, NULL, LEASEC_LOG_DEBUG};
    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(&c, &pool);
    ck_assert_msg(rc == 0, "leasec_pool_create: %s; log:\n%s", strerror(-rc), rt_log.all);
    return pool;
}

struct rt_log rt_log;
static pthread_mutex_t rt_log_lock = PTHREAD_MUTEX_INITIALIZER;

void rt_log_fn(void *ctx, int level, const char *subsys, const char *line)
{
    (void)level, (void)subsys;
    (void)ctx;
    pthread_mutex_lock(&rt_log_lock);
    rt_log.lines++;
    size_t used = strlen(rt_log.all);
    snprintf(rt_log.all + used, sizeof(rt_log.all) - used, "%s\n", line);
    pthread_mutex_unlock(&rt_log_lock);
}

void rt_log_reset(void)
{
    pthread_mutex_lock(&rt_log_lock);
    memset(&rt_log, 0, sizeof(rt_log));
    pthread_mutex_unlock(&rt_log_lock);
}

int rt_log_has(const char *needle)
{
    pthread_mutex_lock(&rt_log_lock);
    int has = strstr(rt_log.all, needle) != NULL;
    pthread_mutex_unlock(&rt_log_lock);
    return has;
}

struct sd_reader_config rt_config(unsigned threads, unsigned qd, size_t chunk, unsigned flags)
{
    struct sd_reader_config c;
    memset(&c, 0, sizeof(c));
    c.threads = threads;
    c.queue_depth = qd;
    c.chunk_size = chunk;
    c.flags = flags;
    c.log = (struct base_log_sink){rt_log_fn, NULL, BASE_LOG_DEBUG};
    return c;
}

struct sd_reader *rt_reader_make(const struct sd_reader_config *c)
{
    struct sd_reader *r = NULL;
    int rc = sd_reader_create(c, &r);
    ck_assert_msg(rc == 0, "sd_reader_create: %s; log:\n%s", strerror(-rc), rt_log.all);
    ck_assert_ptr_nonnull(r);
    return r;
}

void rt_done_init(struct rt_done *d)
{
    atomic_init(&d->calls, 0);
    atomic_init(&d->result, 1);
    atomic_init(&d->bytes, 0);
}

void rt_done_fn(void *arg, int result, uint64_t bytes)
{
    struct rt_done *d = arg;
    atomic_store(&d->result, result);
    atomic_store(&d->bytes, bytes);
    atomic_fetch_add(&d->calls, 1);
}

int rt_calls(struct rt_done *d)
{
    return atomic_load(&d->calls);
}

int rt_result(struct rt_done *d)
{
    return atomic_load(&d->result);
}

uint64_t rt_bytes(struct rt_done *d)
{
    return atomic_load(&d->bytes);
}

void rt_submit(struct sd_reader *r, int fd, uint64_t off, uint64_t len, void *buf, const char *path,
               char *err, size_t err_len, struct rt_done *d)
{
    struct sd_read_req q = {
        .fd = fd,
        .offset = off,
        .len = len,
        .buf = buf,
        .buf_len = len,
        .path = path,
        .err = err,
        .err_len = err_len,
        .done = rt_done_fn,
        .arg = d,
    };
    int rc = sd_reader_submit(r, &q);
    ck_assert_msg(rc == 0, "sd_reader_submit(%s, %llu+%llu): %s; log:\n%s", path,
                  (unsigned long long)off, (unsigned long long)len, strerror(-rc), rt_log.all);
}
