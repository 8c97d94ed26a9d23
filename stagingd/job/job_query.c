/* What a running job is doing, for the daemon's control commands and its
 * metrics: counters so far and each slot's shard and lease (job.h,
 * "introspection"). Reads only; the loop thread calls it between steps. */
#include <errno.h>
#include <string.h>

#include "job_internal.h"

void sd_job_counters_get(const struct sd_job *job, struct sd_job_counters *c_p)
{
    struct sd_job__tally t;
    sd_job__tally(job->res, job->nshards, job->ops, &t);
    *c_p = (struct sd_job_counters){
        .shards = job->nshards,
        .shards_clean = t.clean,
        .shards_bad = t.bad,
        .shards_failed = t.failed,
        .shards_not_run = t.skipped,
        .bytes_total = job->bytes_total,
        .bytes_staged = job->bytes_staged,
        .leases_granted = job->leases_granted,
        .leases_released = job->leases_released,
        .leases_lost = job->leases_lost,
        .leases_refused = job->leases_refused,
        .lease_batches = job->lease_batches,
        .release_batches = job->release_batches,
        .submits = job->submits,
        .bell_submits = job->bell_submits,
        .completions = job->completions,
        .resubmits = job->resubmits,
        .staged_fallback = job->staged_fallback,
        .bad_blocks = job->bad_blocks,
    };
}

unsigned sd_job_slot_count(const struct sd_job *job)
{
    return job->nslots;
}

int sd_job_slot_get(const struct sd_job *job, unsigned slot, struct sd_job_slot_info *info_p)
{
    static const char *const leases[] = {"none", "wanted",         "requested",
                                         "held", "release-wanted", "releasing"};
    static const char *const reads[] = {"none", "running", "done"};
    if (slot >= job->nslots)
        return -ENOENT;
    const struct sd_job__slot *s = &job->slots[slot];
    struct sd_job_slot_info i = {0};
    i.active = s->active;
    if (s->active && s->sh) {
        const char *path = sd_shard_path(s->sh);
        const char *slash = path ? strrchr(path, '/') : NULL;
        i.shard = slash ? slash + 1 : path;
    }
    i.lease_state = (unsigned)s->lease < sizeof leases / sizeof leases[0] ? leases[s->lease] : "?";
    i.has_lease = s->active && (s->lease == SD_JOB__L_HELD || s->lease == SD_JOB__L_RELEASE_WANT ||
                                s->lease == SD_JOB__L_RELEASING);
    if (i.has_lease)
        i.lease = s->l;
    i.read = (unsigned)s->read < sizeof reads / sizeof reads[0] ? reads[s->read] : "?";
    /* Both are masks of op bits in the slot: count them. */
    i.ops_todo = (unsigned)__builtin_popcount(s->ops_todo);
    i.ops_inflight = (unsigned)__builtin_popcount(s->ops_inflight);
    *info_p = i;
    return 0;
}
