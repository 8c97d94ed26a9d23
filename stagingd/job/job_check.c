/* The CPU re-check of --cpu-verify (docs/streaming.md, "The CPU check").
 * With cpu-verify-threads N > 0 every shard goes to a pool of N threads
 * that read it again from its file into a small reused buffer and check
 * each block against the shard's table, off the staging path: the staging
 * threads and the GPU never wait for it, and the report gives its rate on
 * its own line. With 0 the staging thread checks what it just read. Either
 * way a bad block names the shard and the block and makes the shard bad,
 * whatever the GPU said. sd_job__check_blocks is the one call of the block
 * hash for it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_internal.h"
#include "kernels/blockhash_ref.h"

#define SD_JOB__CHECK_BUF (4ull << 20) /* read per pass: stays in L2/L3 while it is hashed */

struct sd_job__check {
    struct sd_job *job;
    pthread_t *threads;
    unsigned n, started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *q;
    size_t qhead, qlen, qcap;
    int stop;
};

int sd_job__check_blocks(const unsigned char *buf, uint64_t off, uint64_t len, uint32_t block_size,
                         const uint64_t *table, struct sd_shard_fault *fault)
{
    const uint64_t first = off / block_size;
    /* The scalar reference hash; a faster bit-identical one goes here. */
    long bad = kr_block_verify(buf, (size_t)len, block_size, table + first);
    if (bad == -1)
        return 0;
    if (bad < 0)
        return (int)bad;
    const uint64_t at = (uint64_t)bad * block_size;
    const size_t n = (size_t)(len - at < block_size ? len - at : block_size);
    *fault = (struct sd_shard_fault){
        .block = first + (uint64_t)bad,
        .expected = table[first + (uint64_t)bad],
        .found = kr_block_checksum(buf + at, n),
    };
    return -EBADMSG;
}

/* Checks shard @idx from its file; fills @ev. */
static void sd_job__check_one(struct sd_job *job, size_t idx, unsigned char *buf,
                              struct sd_job__ev *ev)
{
    char err[SD_ERR_LEN];
    struct sd_shard *sh = NULL;
    *ev = (struct sd_job__ev){.kind = SD_JOB__EV_CHECKED, .shard = idx};
    if ((ev->rc = sd_store_shard_open(job->st, idx, err, sizeof err, &sh)) < 0)
        return;
    const uint64_t *table = NULL;
    uint64_t nblocks = 0;
    if ((ev->rc = sd_shard_table(sh, err, sizeof err, &table, &nblocks)) < 0) {
        sd_shard_close(sh);
        return;
    }
    const struct sd_shard_header *h = sd_shard_header_get(sh);
    const uint64_t bs = h->block_size;
    const uint64_t step = bs >= SD_JOB__CHECK_BUF ? bs : SD_JOB__CHECK_BUF / bs * bs;
    const uint64_t base = sd_shard_payload_offset(sh);
    for (uint64_t off = 0; off < h->payload_len && ev->rc == 0; off += step) {
        const uint64_t len = h->payload_len - off < step ? h->payload_len - off : step;
        uint64_t got = 0;
        while (got < len) {
            ssize_t n =
                pread(sd_shard_fd(sh), buf + got, (size_t)(len - got), (off_t)(base + off + got));
            if (n > 0)
                got += (uint64_t)n;
            else if (n < 0 && errno == EINTR)
                continue;
            else {
                ev->rc = n < 0 ? -errno : -ENODATA;
                break;
            }
        }
        if (ev->rc == 0)
            ev->rc = sd_job__check_blocks(buf, off, len, (uint32_t)bs, table, &ev->fault);
    }
    sd_shard_close(sh);
}

static void *sd_job__check_main(void *arg)
{
    struct sd_job__check *ck = arg;
    struct sd_job *job = ck->job;
    unsigned char *buf = NULL;
    pthread_mutex_lock(&ck->mu);
    for (;;) {
        while (!ck->qlen && !ck->stop)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (ck->stop)
            break;
        size_t idx = ck->q[ck->qhead];
        ck->qhead = (ck->qhead + 1) % ck->qcap;
        ck->qlen--;
        pthread_mutex_unlock(&ck->mu);
        const struct sd_store_entry *e = sd_store_entry_get(job->st, idx);
        size_t need = SD_JOB__CHECK_BUF;
        if (e && e->block_size > need)
            need = e->block_size;
        struct sd_job__ev ev = {.kind = SD_JOB__EV_CHECKED, .shard = idx, .rc = -ENOMEM};
        unsigned char *nb = realloc(buf, need);
        if (nb) {
            buf = nb;
            sd_job__check_one(job, idx, buf, &ev);
        }
        sd_job__ev_post(job, &ev);
        pthread_mutex_lock(&ck->mu);
    }
    pthread_mutex_unlock(&ck->mu);
    free(buf);
    return NULL;
}

int sd_job__check_start(struct sd_job *job, unsigned threads)
{
    struct sd_job__check *ck = calloc(1, sizeof(*ck));
    if (!ck)
        return -ENOMEM;
    ck->job = job;
    ck->n = threads;
    ck->qcap = job->nshards ? job->nshards : 1;
    ck->q = calloc(ck->qcap, sizeof(*ck->q));
    ck->threads = calloc(threads, sizeof(*ck->threads));
    if (!ck->q || !ck->threads) {
        free(ck->q);
        free(ck->threads);
        free(ck);
        return -ENOMEM;
    }
    pthread_mutex_init(&ck->mu, NULL);
    pthread_cond_init(&ck->cv, NULL);
    job->check = ck;
    int rc = 0;
    for (; ck->started < threads; ck->started++)
        if ((rc = -pthread_create(&ck->threads[ck->started], NULL, sd_job__check_main, ck)) < 0)
            break;
    if (ck->started == 0) {
        sd_job__check_stop(job);
        return rc;
    }
    return 0;
}

int sd_job__check_queue(struct sd_job *job, size_t idx)
{
    struct sd_job__check *ck = job->check;
    if (!ck)
        return -ENOENT;
    pthread_mutex_lock(&ck->mu);
    /* Each shard is checked once: the queue holds at most every shard. */
    int rc = ck->qlen < ck->qcap ? 0 : -ENOSPC;
    if (rc == 0) {
        ck->q[(ck->qhead + ck->qlen) % ck->qcap] = idx;
        ck->qlen++;
        pthread_cond_signal(&ck->cv);
    }
    pthread_mutex_unlock(&ck->mu);
    if (rc == 0)
        job->checks_pending++;
    return rc;
}

void sd_job__check_take(struct sd_job *job, const struct sd_job__ev *ev)
{
    struct sd_job__result *res = &job->res[ev->shard];
    if (job->checks_pending)
        job->checks_pending--;
    job->t_check_end = base_now_ns();
    if (ev->rc == 0 || ev->rc == -EBADMSG) {
        res->cpu_checked = 1;
        job->check_bytes += sd_store_entry_get(job->st, ev->shard)->payload_len;
    }
    if (ev->rc == -EBADMSG) {
        res->cpu_bad = 1;
        res->cpu_block = ev->fault.block;
        sd_job__log(job, BASE_LOG_WARN,
                    "job %u: %s: the CPU check found block %" PRIu64 " bad (expected %016" PRIx64
                    ", found %016" PRIx64 ")",
                    job->env.id, sd_job__shard_name(job, ev->shard), ev->fault.block,
                    ev->fault.expected, ev->fault.found);
    } else if (ev->rc < 0) {
        sd_job__result_fail(job, ev->shard, SD_JOB__RES_FAILED, "CPU verify: %s",
                            strerror(-ev->rc));
    }
}

void sd_job__check_stop(struct sd_job *job)
{
    struct sd_job__check *ck = job->check;
    if (!ck)
        return;
    pthread_mutex_lock(&ck->mu);
    ck->stop = 1;
    pthread_cond_broadcast(&ck->cv);
    pthread_mutex_unlock(&ck->mu);
    for (unsigned i = 0; i < ck->started; i++)
        pthread_join(ck->threads[i], NULL);
    pthread_cond_destroy(&ck->cv);
    pthread_mutex_destroy(&ck->mu);
    free(ck->threads);
    free(ck->q);
    free(ck);
    job->check = NULL;
}
