/* LAUNCH (protocol 1.2, docs/launch.md): a validated LAUNCH from a client
 * granted LT_CAP_LAUNCH is resolved against the lease service (each range
 * inside a live lease of the client's), every lease pinned for the work
 * (record_allocation: lease_work_pin now, lease_work_done after the
 * LAUNCH_COMPLETION), and handed to the executor as a GA_EXEC_OP_LAUNCH
 * submit. Every outcome after validation is one LAUNCH_COMPLETION: the
 * lease service's refusals, the executor's (an unknown kernel, a bad
 * argument with its index, a limit), a failed launch, a fault. Depends on
 * conn.h and jobs.h; used by dispatch.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "conn.h"
#include "dispatch_launch.h"
#include "jobs.h"
#include "work.h"

/* What a launch job holds beyond struct ga_server__job. */
struct ga_server__launch {
    struct ga_exec_launch x;
    struct lease_ticket tickets[LT_LAUNCH_MAX_LEASES];
    uint32_t ntickets;
};

/* Sends the LAUNCH_COMPLETION for request @rid: @status with @words (LT_OK:
 * the result of @l), @l's argument index and CUresult name when given. */
static void ga_launch__answer(struct ga_server__conn *c, uint64_t rid, uint32_t status,
                              uint32_t detail, uint64_t elapsed_ns, const struct ga_exec_launch *l,
                              const char *words)
{
    struct lt_msg_launch_completion r;
    lt_msg_init(&r, sizeof r, LT_MSG_LAUNCH_COMPLETION, rid);
    r.status = lt_error_is_known(status) ? status : LT_E_GPU_FAULT;
    r.elapsed_ns = elapsed_ns;
    r.arg_index = LT_INDEX_NONE;
    if (l && r.status != LT_OK && l->arg_index < LT_LAUNCH_PARAMS_MAX)
        r.arg_index = l->arg_index;
    if (detail && l && lt_name_check(l->cu_error, sizeof l->cu_error) == LT_OK) {
        r.detail = detail;
        memcpy(r.cu_error, l->cu_error, sizeof r.cu_error);
    }
    if (r.status == LT_OK) {
        r.result_bytes = l->result_bytes;
        memcpy(r.result, l->result, l->result_bytes);
    } else {
        /* The wire has LT_ERROR_MSG_LEN bytes: cut at a word. */
        char wire[LT_ERROR_MSG_LEN];
        base_fmt(wire, sizeof wire, "%s", words && words[0] ? words : lt_error_describe(r.status));
        if (lt_name_set(r.message, sizeof r.message, wire) == 0)
            lt_name_set(r.message, sizeof r.message, lt_error_describe(r.status));
        base_log(&c->srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
                 "client %" PRIu32 ": LAUNCH %s%s%s: %s", c->id, lt_error_name(r.status),
                 r.detail ? " " : "", r.detail ? r.cu_error : "",
                 words && words[0] ? words : lt_error_describe(r.status));
    }
    ga_server__send(c, &r, sizeof r);
}

/* Undoes the pins of a launch that will not run (or has run). */
static void ga_launch__unpin(struct ga_server *srv, struct ga_server__launch *jl)
{
    for (uint32_t i = 0; i < jl->ntickets; i++)
        lease_work_done(srv->svc, jl->tickets[i], NULL);
    jl->ntickets = 0;
}

static void ga_launch__done(void *arg, const struct ga_exec_result *res)
{
    struct ga_server__job *j = arg;
    j->res = *res;
    ga_server__post(j->conn->srv, j);
}

/* The ranges: each inside a live lease of @c's, its pages there (as a
 * SUBMIT's), pinned. Fills @jl's ranges; on a refusal the pins taken are
 * undone and *@why says why; *@gone_p: a lease's page was gone. */
static int ga_launch__ranges(struct ga_server__conn *c, const struct lt_msg_launch *m,
                             struct ga_server__launch *jl, struct lt_failure *why, bool *gone_p)
{
    struct ga_server *srv = c->srv;
    for (uint32_t i = 0; i < m->lease_count; i++) {
        const struct lt_launch_lease *e = &m->leases[i];
        struct lease_info li;
        int rc = lease_query(srv->svc, c->client, e->lease, &li, why);
        /* A kernel reads (or writes) every range it is given as data. */
        char what[32];
        snprintf(what, sizeof what, "lease range %" PRIu32, i);
        if (rc == 0)
            rc = ga_server__lease_as_data(what, &li, why);
        if (rc == 0 && li.released)
            rc = lt_failure_set(why, LT_E_STALE_ID, 0,
                                "lease range %u: lease {%" PRIu32 ",%" PRIu32
                                "} was released; no new work on it",
                                i, e->lease.slot, e->lease.gen);
        enum lt_error re = rc == 0 ? lt_range_check(e->offset, e->length, li.length) : LT_OK;
        if (re != LT_OK)
            rc = lt_failure_set(why, re, 0,
                                "lease range %u: [%" PRIu64 ", +%" PRIu64
                                "): expected it within the lease's %" PRIu64 " bytes",
                                i, e->offset, e->length, li.length);
        /* A sealed segment is registered read-only: a kernel's store or the
         * write-back copy into it would fault the device for every client. */
        if (rc == 0 && (e->flags & LT_LAUNCH_LEASE_F_WRITE) && !li.writable)
            rc = lt_failure_set(why, LT_E_UNSUPPORTED, -EPERM,
                                "lease range %u: sealed F_SEAL_FUTURE_WRITE (read-only), so no "
                                "LT_LAUNCH_LEASE_F_WRITE",
                                i);
        /* The copies and the kernel read the pages; the driver's own CPU
         * reads of a freed page would fault outside any guard. */
        if (rc == 0 && ga_server__lease_gone(&li, why)) {
            *gone_p = true;
            rc = -EFAULT;
        }
        if (rc == 0)
            rc = lease_work_pin(srv->svc, c->client, e->lease, &jl->tickets[jl->ntickets], why);
        if (rc < 0) {
            ga_launch__unpin(srv, jl);
            return rc;
        }
        jl->ntickets++;
        jl->x.ranges[i] = (struct ga_exec_launch_range){
            .host = (unsigned char *)li.host_addr + e->offset,
            .dev = li.dev_ptr ? li.dev_ptr + e->offset : 0,
            .length = e->length,
            .mem_class = li.cls,
            .write = (e->flags & LT_LAUNCH_LEASE_F_WRITE) != 0,
        };
    }
    return 0;
}

void ga_server__launch(struct ga_server__conn *c, const struct lt_msg_launch *m)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = m->hdr.request_id;
    if (!(c->caps & LT_CAP_LAUNCH)) {
        /* Not in this client's protocol: an ERROR, as for any refused message. */
        ga_server__send_error(c, rid, LT_MSG_LAUNCH, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "LAUNCH needs the LAUNCH capability, not granted at HELLO%s",
                              (ga_executor_info(srv->ex)->caps & LT_CAP_LAUNCH)
                                  ? ""
                                  : " (no launchable kernels)");
        return;
    }
    char words[LT_FAILURE_MSG_LEN];
    if (!ga_server__inflight_room(c, words, sizeof words)) {
        ga_launch__answer(c, rid, LT_E_LIMIT, 0, 0, NULL, words);
        return;
    }
    struct ga_server__job *j = calloc(1, sizeof(*j));
    struct ga_server__launch *jl = calloc(1, sizeof(*jl));
    if (!j || !jl) {
        free(j);
        free(jl);
        ga_launch__answer(c, rid, LT_E_SYSTEM, 0, 0, NULL, "agent out of memory");
        return;
    }
    struct ga_exec_launch *l = &jl->x;
    memcpy(l->image, m->image, sizeof l->image);
    memcpy(l->kernel, m->kernel, sizeof l->kernel);
    memcpy(l->grid, m->grid, sizeof l->grid);
    memcpy(l->block, m->block, sizeof l->block);
    l->shared_bytes = m->shared_bytes;
    l->result_bytes = m->result_bytes;
    l->nranges = m->lease_count;
    l->arg_bytes = m->arg_words * 8;
    memcpy(l->args, m->args, l->arg_bytes);
    l->arg_index = LT_INDEX_NONE;
    struct lt_failure why = {0};
    bool gone = false;
    if (ga_launch__ranges(c, m, jl, &why, &gone) < 0) {
        ga_launch__answer(c, rid, why.code, 0, 0, l, why.message);
        free(jl);
        free(j);
        if (gone)
            ga_server__drop_gone(c, &why);
        return;
    }
    j->kind = GA_JOB_LAUNCH;
    j->conn = c;
    j->request_id = rid;
    j->launch = jl;
    struct ga_exec_work w = {
        .owner = c->client.value,
        .stream = m->stream,
        .op = GA_EXEC_OP_LAUNCH,
        .host = l->ranges[0].host,
        .dev = l->ranges[0].dev,
        .length = l->ranges[0].length,
        .mem_class = l->ranges[0].mem_class,
        .accepted_ns = base_now_ns(),
        .done_cb = ga_launch__done,
        .arg = j,
        .launch = l,
    };
    c->inflight++; /* before: the answer may be posted before the verb returns */
    why = (struct lt_failure){0};
    if (ga_exec_submit(srv->ex, &w, &why) < 0) {
        c->inflight--;
        ga_launch__unpin(srv, jl);
        ga_launch__answer(c, rid, why.code, 0, 0, l, why.message);
        free(jl);
        free(j);
        return;
    }
    c->submits++;
}

void ga_server__launch_complete(struct ga_server *srv, struct ga_server__job *j)
{
    struct ga_server__conn *c = j->conn;
    struct ga_server__launch *jl = j->launch;
    if (!c->closed) {
        const char *words = NULL;
        char buf[LT_FAILURE_MSG_LEN]; /* cut to the wire's room by ga_launch__answer */
        if (j->res.status == LT_E_GPU_FAULT) {
            snprintf(buf, sizeof buf,
                     "the GPU faulted%s%s: the device is unusable until the "
                     "agent restarts",
                     jl->x.cu_error[0] ? ": " : "", jl->x.cu_error);
            words = buf;
        } else if (j->res.status == LT_E_LAUNCH_FAILED) {
            snprintf(buf, sizeof buf, "cuLaunchKernel refused %s: %s", jl->x.kernel,
                     jl->x.cu_error[0] ? jl->x.cu_error : "no CUresult");
            words = buf;
        } else if (j->res.status == LT_E_SYSTEM) {
            snprintf(buf, sizeof buf, "the agent could not queue the launch of %s%s%s",
                     jl->x.kernel, jl->x.cu_error[0] ? ": " : "", jl->x.cu_error);
            words = buf;
        } else if (j->res.status == LT_E_SHUTTING_DOWN) {
            words = "cancelled: the client or the agent is going away";
        }
        ga_launch__answer(c, j->request_id, j->res.status, j->res.detail, j->res.elapsed_ns, &jl->x,
                          words);
    }
    /* After the LAUNCH_COMPLETION: a release waiting on this launch
     * completes now, and its RELEASE_COMPLETE follows on the wire. */
    ga_launch__unpin(srv, jl);
    free(jl);
    j->launch = NULL;
}
