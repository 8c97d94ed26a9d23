/* Queries from a vector file (stagingd/import.h): the row list ("0,5-9"),
 * and the rows it names read as f32. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "import_internal.h"
#include "stagingd/shard.h"

/* One "A" or "A-B" of a row list. */
struct vq_range {
    uint64_t lo, hi;
};

static int vq_uint(const char **s, uint64_t *v_p)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *s = p;
    *v_p = v;
    return 0;
}

/* Parses @select against a file of @rows rows into a new array of ranges. */
static int vq_ranges(const char *path, const char *select, uint64_t rows, size_t max, char *err,
                     size_t err_len, struct vq_range **r_p, size_t *nr_p, size_t *total_p)
{
    if (!select || strcmp(select, "all") == 0) {
        if (rows > max)
            return base_errf(err, err_len, -EINVAL,
                             "%s holds %" PRIu64 " vectors; a job takes at most %zu queries: "
                             "pick rows with --query-index (e.g. 0-%zu)",
                             path, rows, max, max - 1);
        struct vq_range *r = malloc(sizeof *r);
        if (!r)
            return base_errf(err, err_len, -ENOMEM, "out of memory");
        r->lo = 0;
        r->hi = rows - 1;
        *r_p = r;
        *nr_p = 1;
        *total_p = (size_t)rows;
        return 0;
    }
    size_t cap = 1;
    for (const char *c = select; *c; c++)
        cap += *c == ',';
    struct vq_range *r = calloc(cap, sizeof *r);
    if (!r)
        return base_errf(err, err_len, -ENOMEM, "out of memory");
    size_t n = 0;
    uint64_t total = 0;
    const char *p = select;
    for (;;) {
        const char *at = p;
        uint64_t lo, hi;
        if (vq_uint(&p, &lo) < 0)
            goto bad;
        hi = lo;
        if (*p == '-') {
            p++;
            if (vq_uint(&p, &hi) < 0 || hi < lo)
                goto bad;
        }
        if (*p != ',' && *p != '\0')
            goto bad;
        if (hi >= rows) {
            free(r);
            return base_errf(err, err_len, -EINVAL,
                             "--query-index '%.*s': row %" PRIu64 " is past the end: %s holds "
                             "%" PRIu64 " vectors (rows 0..%" PRIu64 ")",
                             (int)(p - at), at, hi, path, rows, rows - 1);
        }
        total += hi - lo + 1;
        if (total > max) {
            free(r);
            return base_errf(err, err_len, -EINVAL,
                             "--query-index '%s' picks more than %zu queries, the most a job "
                             "takes",
                             select, max);
        }
        r[n].lo = lo;
        r[n].hi = hi;
        n++;
        if (*p == '\0')
            break;
        p++;
        continue;
    bad:
        free(r);
        return base_errf(err, err_len, -EINVAL,
                         "--query-index '%s': expected row numbers and ranges A-B separated by "
                         "',' (e.g. 0,5-9), or 'all'; found '%s' at character %zu",
                         select, at, (size_t)(at - select));
    }
    *r_p = r;
    *nr_p = n;
    *total_p = (size_t)total;
    return 0;
}

void sd_vec_queries_free(struct sd_vec_queries *q)
{
    free(q->v);
    free(q->ids);
    memset(q, 0, sizeof *q);
}

int sd_vec_queries_load(const char *path, uint32_t format, const char *select, size_t max,
                        char *err, size_t err_len, struct sd_vec_queries *q_p)
{
    if (max == 0 || max > SD_VEC_QUERIES_MAX)
        max = SD_VEC_QUERIES_MAX;
    struct sd_vec_file *f = NULL;
    int rc = sd_vec_open(path, format, err, err_len, &f);
    if (rc < 0)
        return rc;
    const struct sd_vec_info *in = sd_vec_info_get(f);
    if (in->elem == SD_VEC_I32) {
        sd_vec_close(f);
        return sd_vec__errf(path, 0, err, err_len, -EINVAL,
                            ".ivecs holds int32 neighbour ids (ground truth), not queries: "
                            "expected .npy, .fvecs or .bvecs");
    }
    struct vq_range *ranges = NULL;
    size_t nr = 0, total = 0;
    rc = vq_ranges(path, select, in->rows, max, err, err_len, &ranges, &nr, &total);
    if (rc < 0) {
        sd_vec_close(f);
        return rc;
    }
    struct sd_vec_queries q = {.n = total, .dim = in->dim};
    q.v = malloc(total * (size_t)in->dim * sizeof(float));
    q.ids = malloc(total * sizeof *q.ids);
    if (!q.v || !q.ids) {
        rc = base_errf(err, err_len, -ENOMEM, "%s: out of memory for %zu queries of dim %u", path,
                       total, in->dim);
        goto out;
    }
    size_t at = 0;
    for (size_t i = 0; i < nr && rc == 0; i++) {
        const uint64_t n = ranges[i].hi - ranges[i].lo + 1;
        rc = sd_vec_read(f, ranges[i].lo, n, SD_RECORD_F32, err, err_len, q.v + at * in->dim);
        for (uint64_t j = 0; j < n; j++)
            q.ids[at + j] = ranges[i].lo + j;
        at += (size_t)n;
    }
    if (rc == 0) {
        *q_p = q;
        q.v = NULL;
        q.ids = NULL;
    }
out:
    free(q.v);
    free(q.ids);
    free(ranges);
    sd_vec_close(f);
    return rc;
}
