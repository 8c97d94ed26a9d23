/* Sizing the daemon's staging pool: from the settings, or (a one-shot job
 * with pinned-pool 0) from the largest buffer the store's shards need. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon_internal.h"
#include "stagingd/reader.h"
#include "stagingd/shard.h"

#define SD_DAEMON__RUN_PINNED_DEFAULT (512ull << 20)
#define SD_DAEMON__RUN_SEGMENT_DEFAULT (128ull << 20)

/* The jemalloc size class a request of @s bytes lands in: four classes per
 * power of two above 16 KiB. */
static uint64_t sd_daemon__size_class(uint64_t s)
{
    uint64_t p = 1;
    while (p * 2 <= s)
        p *= 2;
    uint64_t step = p / 4 < 4096 ? 4096 : p / 4;
    return sd_daemon__round_up(s, step);
}

/* The largest staging buffer any shard of @store needs in a job of @op
 * (sd_job_buffer_size: payload, checksum table, queries and their hits),
 * or 0 and a message. */
uint64_t sd_daemon__largest_buffer(const char *store, const struct sd_job_config *job,
                                   enum sd_job_op op, const struct base_log_sink *log)
{
    char err[SD_ERR_LEN];
    struct sd_store *st = NULL;
    if (sd_store_open(store, err, sizeof err, &st) < 0) {
        base_log(log, BASE_LOG_ERROR, "daemon", "%s", err);
        return 0;
    }
    uint64_t most = 0;
    for (size_t i = 0; i < sd_store_count(st); i++) {
        const struct sd_store_entry *e = sd_store_entry_get(st, i);
        uint64_t need = sd_job_buffer_size(job, op, e);
        if (need > most)
            most = need;
    }
    sd_store_close(st);
    return most;
}

int sd_daemon__pool_create(const struct sd_config *cfg, enum sd_daemon_mode mode,
                           unsigned words_slots, uint64_t largest, struct leasec_pool **pool_p)
{
    struct leasec_pool *pool = NULL;
    const uint64_t align = LEASEC_POOL_SEGMENT_ALIGN;
    uint64_t seg = cfg->segment_size ? sd_daemon__round_up(cfg->segment_size, align)
                   : largest ? sd_daemon__round_up(sd_daemon__size_class(largest) + 4096, align)
                             : SD_DAEMON__RUN_SEGMENT_DEFAULT;
    uint64_t mapped = sd_daemon__round_up(cfg->mapped_pool ? cfg->mapped_pool : align, align);
    uint64_t words = sd_daemon__round_up(64ull * words_slots, LEASEC_POOL_BUF_ALIGN);
    if (mapped < sd_daemon__round_up(words, align))
        mapped = sd_daemon__round_up(words, align);
    /* Streaming: one ring of slots per staging thread (docs/streaming.md). */
    uint64_t rings = cfg->job.rings ? cfg->job.rings
                     : cfg->threads ? cfg->threads
                                    : (uint64_t)sd_reader_threads_default();
    uint64_t ring =
        (uint64_t)(cfg->job.ring_slots ? cfg->job.ring_slots : SD_JOB_RING_SLOTS_DEFAULT) *
        (cfg->job.chunk_size ? cfg->job.chunk_size : SD_JOB_CHUNK_DEFAULT);
    /* A ring's buffer as the allocator carves it (its size class and a
     * page of padding), then a segment each, as the whole path gives each
     * in-flight shard its own: a segment of several rings leaves a tail no
     * ring fits in. */
    const uint64_t ring_seg = sd_daemon__round_up(sd_daemon__size_class(ring) + 4096, align);
    const uint64_t ring_bytes = rings * ring_seg;
    /* Streamed, the pool holds rings. Under auto the segments fit the
     * largest shard: where that is smaller than a ring (1 MiB shards against
     * 4 x 2 MiB slots) no ring fits and the job stages whole shards, which
     * keeps the pool within small pin budgets; --path stream sizes for
     * rings (docs/streaming.md, "Which path wins at which shard size"). */
    if (cfg->job.path == SD_JOB_PATH_STREAM && !cfg->segment_size)
        seg = ring_seg;
    int rc = -ENOMEM;
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t whole = seg * cfg->job.inflight;
        uint64_t oneshot = cfg->job.path == SD_JOB_PATH_STREAM  ? ring_bytes
                           : cfg->job.path == SD_JOB_PATH_WHOLE ? whole
                           : whole > ring_bytes                 ? whole
                                                                : ring_bytes;
        uint64_t pinned = cfg->pinned_pool            ? sd_daemon__round_up(cfg->pinned_pool, align)
                          : mode == SD_DAEMON_ONESHOT ? oneshot
                                                      : SD_DAEMON__RUN_PINNED_DEFAULT;
        struct leasec_pool_config pc;
        if (leasec_pool_config_default(&pc) < 0) {
            memset(&pc, 0, sizeof pc);
            pc.prefault_threads = 1;
        }
        memset(pc.class_bytes, 0, sizeof pc.class_bytes);
        pc.class_bytes[LT_CLASS_PINNED] = pinned;
        pc.class_bytes[LT_CLASS_MAPPED] = mapped;
        pc.segment_bytes = seg < pinned ? seg : pinned;
        pc.pages = cfg->pages;
        /* Doorbells, done words and rings' words live in MAPPED buffers the
         * agent and the GPU write: those segments stay writable to it. */
        pc.flags |= LEASEC_POOL_MAPPED_WRITABLE;
        pc.log = sd_daemon__leasec_log(&cfg->log);
        rc = leasec_pool_create(&pc, &pool);
        if (rc < 0) {
            char p[32];
            sd_daemon__bytes(pinned, p, sizeof p);
            base_log(&cfg->log, BASE_LOG_ERROR, "daemon",
                     "staging pool of %s PINNED in %" PRIu64 "-byte segments: %s", p,
                     pc.segment_bytes, strerror(-rc));
            return rc;
        }
        /* The stream path holds rings, not whole shards: probe one of those. */
        const uint64_t probe_size = cfg->job.path == SD_JOB_PATH_STREAM ? ring : largest;
        if (!probe_size || cfg->segment_size)
            break;
        struct leasec_pool_buf probe;
        if (leasec_pool_alloc(pool, LT_CLASS_PINNED, (size_t)probe_size, &probe) == 0) {
            leasec_pool_free(pool, &probe);
            break;
        }
        /* jemalloc's classes and padding did not fit: larger segments. */
        leasec_pool_destroy(pool);
        pool = NULL;
        seg = sd_daemon__round_up(seg + seg / 4, align);
        rc = -ENOMEM;
    }
    if (!pool) {
        base_log(&cfg->log, BASE_LOG_ERROR, "daemon",
                 "no pool segment size fits a %" PRIu64 "-byte buffer", largest);
        return rc;
    }
    *pool_p = pool;
    return 0;
}
