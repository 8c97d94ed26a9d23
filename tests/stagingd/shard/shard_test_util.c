#include "shard_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagingd/shard.h"

static char st_root[4096];

void st_root_setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(st_root, sizeof(st_root), "%s/test_shard.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(st_root)) {
        fprintf(stderr, "test_shard: mkdtemp(%s): %s\n", st_root, strerror(errno));
        abort();
    }
}

static int st_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void st_root_teardown(void)
{
    if (st_root[0])
        nftw(st_root, st_rm, 16, FTW_DEPTH | FTW_PHYS);
    st_root[0] = '\0';
}

const char *st_dir_new(void)
{
    static char dir[4096 + 16];
    ck_assert_msg(st_root[0], "no temporary root");
    snprintf(dir, sizeof(dir), "%s/t.XXXXXX", st_root);
    ck_assert_msg(mkdtemp(dir), "mkdtemp(%s): %s", dir, strerror(errno));
    return dir;
}

const char *st_join(const char *dir, const char *name)
{
    static char path[8192];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

uint64_t st_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

unsigned char *st_write_shard(const char *path, uint32_t type, uint32_t dim, uint64_t records,
                              uint32_t block_size, uint64_t seed, uint64_t *len_p)
{
    uint64_t len = records * dim * sd_record_elem_size(type);
    unsigned char *data = malloc(len);
    ck_assert_ptr_nonnull(data);
    uint64_t rng = seed;
    /* Random floats in [-1, 1); f16 through the converter under test. */
    for (uint64_t i = 0; i < records * dim; i++) {
        float f = (float)(int32_t)(st_rand(&rng) >> 40) * 0x1p-23f - 1.0f;
        if (type == SD_RECORD_F32) {
            memcpy(data + 4 * i, &f, 4);
        } else {
            uint16_t h = sd_f16_from_f32(f);
            memcpy(data + 2 * i, &h, 2);
        }
    }
    char err[SD_ERR_LEN];
    struct sd_shard_writer *w;
    int rc = sd_shard_writer_create(path, type, dim, records, block_size, err, sizeof(err), &w);
    ck_assert_msg(rc == 0, "writer_create: %d %s", rc, err);
    for (uint64_t off = 0; off < len;) {
        uint64_t n = st_rand(&rng) % (3 * (uint64_t)block_size) + 1;
        if (n > len - off)
            n = len - off;
        rc = sd_shard_writer_append(w, data + off, n, err, sizeof(err));
        ck_assert_msg(rc == 0, "append: %d %s", rc, err);
        off += n;
    }
    ck_assert_uint_eq(sd_shard_writer_written(w), len);
    rc = sd_shard_writer_finish(w, 0, err, sizeof(err), NULL);
    ck_assert_msg(rc == 0, "finish: %d %s", rc, err);
    *len_p = len;
    return data;
}

unsigned char *st_read_file(const char *path, size_t *len_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    size_t len = (size_t)st.st_size;
    unsigned char *buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, buf + done, len - done);
        ck_assert_msg(n > 0, "read %s: %s", path, n < 0 ? strerror(errno) : "EOF");
        done += (size_t)n;
    }
    close(fd);
    *len_p = len;
    return buf;
}

void st_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
}

void st_patch(const char *path, uint64_t off, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_int_eq(pwrite(fd, data, len, (off_t)off), (ssize_t)len);
    close(fd);
}

void st_flip_bit(const char *path, uint64_t off, unsigned bit)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= (unsigned char)(1u << bit);
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

void st_truncate(const char *path, uint64_t len)
{
    ck_assert_msg(truncate(path, (off_t)len) == 0, "truncate %s: %s", path, strerror(errno));
}

void st_header_read(const char *path, struct sd_shard_header *h)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_int_eq(pread(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
    close(fd);
}

void st_header_write(const char *path, const struct sd_shard_header *h, int reseal)
{
    struct sd_shard_header c = *h;
    if (reseal)
        sd_shard_header_seal(&c);
    st_patch(path, 0, &c, sizeof(c));
}

int st_files_equal(const char *a, const char *b)
{
    size_t la, lb;
    unsigned char *da = st_read_file(a, &la), *db = st_read_file(b, &lb);
    int eq = la == lb && memcmp(da, db, la) == 0;
    free(da);
    free(db);
    return eq;
}
