/* Helpers for the import suites: see import_test_util.h. */
#include "import_test_util.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagingd/shard.h"

void it_dir_make(char *dir)
{
    strcpy(dir, "/tmp/sd-import-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

void it_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            it_rm_rf(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

int it_dir_count(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

void it_file_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

uint64_t it_npy_at(unsigned major, const char *dict, const char *needle)
{
    const char *p = strstr(dict, needle);
    ck_assert_ptr_nonnull(p);
    return (major == 1 ? 10u : 12u) + (uint64_t)(p - dict);
}

uint64_t it_npy_write(const char *path, unsigned major, const char *dict, const void *data,
                      size_t len)
{
    const size_t pre = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    unsigned char *buf = calloc(1, pre + hlen + len + 1);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    if (major > 1) {
        buf[10] = (unsigned char)(hlen >> 16);
        buf[11] = (unsigned char)(hlen >> 24);
    }
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, strlen(dict));
    buf[pre + hlen - 1] = '\n';
    if (len)
        memcpy(buf + pre + hlen, data, len);
    it_file_write(path, buf, pre + hlen + len);
    free(buf);
    return pre + hlen;
}

void it_xvecs_write(const char *path, uint64_t rows, uint32_t dim, const void *data,
                    size_t elem_size)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const unsigned char *p = data;
    for (uint64_t r = 0; r < rows; r++) {
        int32_t d = (int32_t)dim;
        ck_assert_uint_eq(fwrite(&d, 4, 1, f), 1);
        ck_assert_uint_eq(fwrite(p + r * dim * elem_size, elem_size, dim, f), dim);
    }
    ck_assert_int_eq(fclose(f), 0);
}

float *it_random_f32(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    return v;
}

void *it_store_read(const char *dir, uint64_t *rows_p, uint32_t *dim_p, uint32_t *type_p,
                    uint64_t *shards_p)
{
    char err[SD_ERR_LEN];
    struct sd_store *st = NULL;
    ck_assert_msg(sd_store_open(dir, err, sizeof err, &st) == 0, "%s", err);
    ck_assert_msg(sd_store_verify(st, NULL, NULL, err, sizeof err, NULL) == 0, "%s", err);
    uint64_t rows = 0, bytes = 0;
    for (size_t i = 0; i < sd_store_count(st); i++) {
        rows += sd_store_entry_get(st, i)->records;
        bytes += sd_store_entry_get(st, i)->payload_len;
    }
    unsigned char *out = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(out);
    uint64_t at = 0;
    for (size_t i = 0; i < sd_store_count(st); i++) {
        struct sd_shard *sh = NULL;
        ck_assert_int_eq(sd_store_shard_open(st, i, err, sizeof err, &sh), 0);
        const struct sd_shard_header *h = sd_shard_header_get(sh);
        ck_assert_int_eq(
            pread(sd_shard_fd(sh), out + at, h->payload_len, (off_t)sd_shard_payload_offset(sh)),
            (ssize_t)h->payload_len);
        at += h->payload_len;
        *dim_p = h->dim;
        *type_p = h->record_type;
        sd_shard_close(sh);
    }
    *rows_p = rows;
    *shards_p = sd_store_count(st);
    sd_store_close(st);
    return out;
}
