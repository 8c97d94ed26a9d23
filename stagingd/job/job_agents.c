/* Spreading a job over several agents (docs/multi-gpu.md): each new lease
 * (whole shards) and each streamed task goes to the ready agent with the
 * fewest bytes in flight, ties round robin, so a slower or busier GPU gets
 * less; and each agent's share of the work, for the summary and --json.
 * A lost agent's work moves by the paths that already handle a loss
 * (job_batch.c, job_stream.c): this file only decides where it goes next. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "job_internal.h"

int sd_job__agent_pick(struct sd_job *job, const uint64_t *load, uint32_t caps)
{
    const unsigned n = job->env.nagents;
    int best = -ENOTCONN;
    for (unsigned k = 0; k < n; k++) {
        unsigned a = (job->rr + k) % n;
        const struct sd_job__agent *ag = &job->agents[a];
        if (!ag->ready || (ag->caps & caps) != caps)
            continue;
        /* strictly fewer: of equals, the first from rr on wins */
        if (best < 0 || load[a] < load[best])
            best = (int)a;
    }
    if (best >= 0)
        job->rr = ((unsigned)best + 1) % n;
    return best;
}

void sd_job__agent_load_slots(const struct sd_job *job, uint64_t *load)
{
    for (unsigned a = 0; a < job->env.nagents; a++)
        load[a] = 0;
    for (unsigned i = 0; i < job->nslots; i++) {
        const struct sd_job__slot *s = &job->slots[i];
        if (!s->active)
            continue;
        if (s->lease == SD_JOB__L_REQUESTED && s->lease_agent < job->env.nagents)
            load[s->lease_agent] += s->lease_len;
        else if (s->lease == SD_JOB__L_HELD && s->l.agent < job->env.nagents)
            load[s->l.agent] += s->lease_len;
    }
}

void sd_job__agent_load_rings(const struct sd_job *job, uint64_t *load)
{
    for (unsigned a = 0; a < job->env.nagents; a++)
        load[a] = 0;
    const struct sd_job__stream *st = job->stream;
    for (unsigned i = 0; st && i < st->nrings; i++) {
        const struct sd_job__ring *r = &st->rings[i];
        if (r->agent >= job->env.nagents || r->state == SD_JOB__R_LOST)
            continue;
        for (unsigned k = 0; k < r->nout; k++)
            load[r->agent] += r->out[k]->image_len;
    }
}

void sd_job__agent_done(struct sd_job *job, unsigned a, uint64_t bytes)
{
    if (a >= job->env.nagents)
        return;
    job->agents[a].shards_done++;
    job->agents[a].bytes_done += bytes;
}

void sd_job__rings_feed(struct sd_job *job, int (*may_feed)(const struct sd_job *, uint64_t, int *),
                        uint64_t now, int *timeout_ms_p)
{
    struct sd_job__stream *st = job->stream;
    const unsigned n = job->env.nagents;
    uint64_t *load = calloc(n, sizeof *load);
    if (!load) {
        /* No room to weigh them: each ring takes what it can, in order. */
        for (unsigned i = 0; i < st->nrings; i++) {
            struct sd_job__ring *r = &st->rings[i];
            while (r->state == SD_JOB__R_OPEN && !r->broken && r->nout < r->ring.depth &&
                   may_feed(job, now, timeout_ms_p) && sd_job__ring_feed(job, r))
                ;
        }
        return;
    }
    sd_job__agent_load_rings(job, load);
    for (unsigned i = 0; i < st->nrings; i++)
        st->rings[i].feed_full = 0;
    for (;;) {
        /* The open ring with room whose agent has the fewest bytes out;
         * of equals, agents round robin from rr, then the ring with the
         * fewest shards out, then the ring's order. So at the start every
         * ring gets its first shard before any gets its second: the agent
         * queues a ring's chunks in the order the shards arrive, and on the
         * H200 queueing one took about 0.3 ms, all the workers' driver calls
         * together, so depth-first feeding left the last ring's first
         * chunks unqueued for up to 13 ms. */
        struct sd_job__ring *best = NULL;
        unsigned best_rank = 0;
        for (unsigned i = 0; i < st->nrings; i++) {
            struct sd_job__ring *r = &st->rings[i];
            if (r->state != SD_JOB__R_OPEN || r->broken || r->feed_full ||
                r->nout >= r->ring.depth || r->agent >= n)
                continue;
            unsigned rank = (r->agent + n - job->rr % n) % n;
            if (!best || load[r->agent] < load[best->agent] ||
                (load[r->agent] == load[best->agent] &&
                 (rank < best_rank || (rank == best_rank && r->nout < best->nout)))) {
                best = r;
                best_rank = rank;
            }
        }
        if (!best || !may_feed(job, now, timeout_ms_p))
            break;
        unsigned before = best->nout;
        if (!sd_job__ring_feed(job, best)) {
            best->feed_full = 1;
            continue;
        }
        if (best->nout > before)
            load[best->agent] += best->out[best->nout - 1]->image_len;
        job->rr = (best->agent + 1) % n;
    }
    free(load);
}

int sd_job__agents_settled(struct sd_job *job, unsigned nready, uint64_t now, int *timeout_ms_p)
{
    if (nready == 0 || nready >= job->env.nagents)
        return 1;
    if (!job->first_ready_ns)
        job->first_ready_ns = now;
    /* An agent in its handshake or segment offers is on its way (a loaded
     * machine may take seconds): wait longer for it than for one that is
     * not connected at all. */
    uint64_t grace = SD_JOB__AGENTS_GRACE_NS;
    for (unsigned a = 0; a < job->env.nagents; a++) {
        struct leasec_client_agent_info info;
        if (!job->agents[a].ready && leasec_client_agent_info(job->env.client, a, &info) == 0 &&
            (info.state == LEASEC_CLIENT_HANDSHAKE || info.state == LEASEC_CLIENT_OFFERING))
            grace = SD_JOB__AGENTS_COMING_NS;
    }
    const uint64_t waited = now - job->first_ready_ns;
    if (waited >= grace)
        return 1;
    const uint64_t ms = (grace - waited + 999999) / 1000000;
    if (ms < (uint64_t)*timeout_ms_p)
        *timeout_ms_p = (int)ms;
    return 0;
}

/* Agent @a's placement, decided (and logged) the first time. */
static const struct base_numa_place *sd_job__agent_place(struct sd_job *job, unsigned a)
{
    struct sd_job__agent *ag = &job->agents[a];
    if (!ag->placed) {
        struct leasec_client_agent_info info;
        const char *name =
            leasec_client_agent_info(job->env.client, a, &info) == 0 ? info.hello.agent_name : "";
        base_numa_decide(base_numa_root(), name, &ag->place);
        ag->placed = 1;
        if (ag->place.nodes > 1)
            sd_job__log(job, ag->place.node >= 0 ? BASE_LOG_INFO : BASE_LOG_WARN,
                        "job %u: agent %u: %s%s", job->env.id, a, ag->place.why,
                        ag->place.node >= 0 ? ": its rings' threads and slots go there" : "");
    }
    return &ag->place;
}

void sd_job__ring_place(struct sd_job *job, struct sd_job__ring *r, unsigned a)
{
    const struct base_numa_place *p = sd_job__agent_place(job, a);
    if (p->node < 0)
        return;
    if (r->thread_started) {
        int rc = base_numa_thread_bind(r->thread, p);
        if (rc < 0)
            sd_job__log(job, BASE_LOG_WARN, "job %u: ring %u: not bound to node %d's CPUs: %s",
                        job->env.id, r->idx, p->node, strerror(-rc));
    }
    if (r->have_slots) {
        /* Pages a registration pinned may stay where they are (EIO). */
        int rc = base_numa_mem_bind(r->slots_buf.base, r->slots_buf.len, p);
        if (rc < 0)
            sd_job__log(job, BASE_LOG_DEBUG, "job %u: ring %u: slots not moved to node %d: %s",
                        job->env.id, r->idx, p->node, strerror(-rc));
    }
}

/* The job's seconds so far (or in all). */
static double sd_job__agents_secs(const struct sd_job *job)
{
    const uint64_t end = job->t_end ? job->t_end : base_now_ns();
    return end > job->t_start ? (double)(end - job->t_start) / 1e9 : 0.0;
}

void sd_job__agents_report(const struct sd_job *job, FILE *out)
{
    const double secs = sd_job__agents_secs(job);
    for (unsigned a = 0; a < job->env.nagents; a++) {
        const struct sd_job__agent *ag = &job->agents[a];
        char b[32];
        sd_job__bytes_fmt(ag->bytes_done, b, sizeof b);
        fprintf(out,
                "  %-14s %u: %" PRIu64 " shard(s), %s, %.2f GB/s over the job, %" PRIu64
                " in flight at its loss sent to the others\n",
                "per agent", a, ag->shards_done, b,
                secs > 0 ? (double)ag->bytes_done / secs / 1e9 : 0.0, ag->moved);
    }
}

int sd_job_agent_figures_get(const struct sd_job *job, unsigned agent,
                             struct sd_job_agent_figures *f_p)
{
    if (agent >= job->env.nagents)
        return -ENOENT;
    const struct sd_job__agent *ag = &job->agents[agent];
    const double secs = sd_job__agents_secs(job);
    *f_p = (struct sd_job_agent_figures){
        .shards = ag->shards_done,
        .bytes = ag->bytes_done,
        .moved = ag->moved,
        .gb_per_s = secs > 0 ? (double)ag->bytes_done / secs / 1e9 : 0.0,
    };
    return 0;
}

struct json_t *sd_job__agents_json(const struct sd_job *job)
{
    const double secs = sd_job__agents_secs(job);
    json_t *arr = json_array();
    for (unsigned a = 0; arr && a < job->env.nagents; a++) {
        const struct sd_job__agent *ag = &job->agents[a];
        json_t *o = json_object();
        json_object_set_new(o, "agent", json_integer(a));
        json_object_set_new(o, "name", json_string(ag->name));
        json_object_set_new(o, "shards", json_integer((json_int_t)ag->shards_done));
        json_object_set_new(o, "bytes", json_integer((json_int_t)ag->bytes_done));
        json_object_set_new(o, "gb_per_s",
                            json_real(secs > 0 ? (double)ag->bytes_done / secs / 1e9 : 0.0));
        json_object_set_new(o, "moved", json_integer((json_int_t)ag->moved));
        json_array_append_new(arr, o);
    }
    return arr;
}
