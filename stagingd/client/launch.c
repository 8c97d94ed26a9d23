/* The lease client's LAUNCH (protocol 1.2, docs/launch.md): the public
 * launch built into a lease-types LAUNCH (its leases checked as a submit's:
 * held on this connection, not being released), sent through the raw path
 * (msg.c) or waited for (client.c), and the LAUNCH_COMPLETION turned into
 * its public form for on_launch or the blocking call. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

#define LEASEC__SAME(a, b) LT_STATIC_ASSERT((long long)(a) == (long long)(b), #a " == " #b)
LEASEC__SAME(LEASEC_CAP_LAUNCH, LT_CAP_LAUNCH);
LEASEC__SAME(LEASEC_LAUNCH_MAX_RANGES, LT_LAUNCH_MAX_LEASES);
LEASEC__SAME(LEASEC_LAUNCH_ARGS_MAX, LT_LAUNCH_ARGS_MAX);
LEASEC__SAME(LEASEC_LAUNCH_RESULT_MAX, LT_LAUNCH_RESULT_MAX);
LEASEC__SAME(LEASEC_LAUNCH_RANGE_F_WRITE, LT_LAUNCH_LEASE_F_WRITE);
LEASEC__SAME(LEASEC_LAUNCH_IMAGE_LEN, LT_LAUNCH_IMAGE_LEN);
LEASEC__SAME(LEASEC_LAUNCH_KERNEL_LEN, LT_LAUNCH_KERNEL_LEN);
LT_STATIC_ASSERT(sizeof(((struct leasec_launch_result *)0)->cu_error) == LT_LAUNCH_CU_ERROR_LEN,
                 "the CUresult name is the wire's");
LT_STATIC_ASSERT(sizeof(((struct leasec_launch_result *)0)->message) == LT_ERROR_MSG_LEN,
                 "the words are the wire's");

/* Builds the LAUNCH for @l into @buf; returns its length or -errno. */
static int leasec_client__launch_build(struct leasec_client *c, unsigned agent,
                                       const struct leasec_launch *l, union lt_msg_buffer *buf)
{
    struct leasec_client__agent *a = leasec_client__agent_get(c, agent);
    if (!a)
        return leasec_client__fail(c, -ENOENT, "no agent %u", agent);
    if (a->state == LEASEC_CLIENT_READY && !(a->hello.caps & LT_CAP_LAUNCH))
        return leasec_client__fail(c, -EOPNOTSUPP,
                                   "launch: agent %s did not grant LAUNCH (caps 0x%x; ask for "
                                   "LEASEC_CAP_LAUNCH, and the agent needs a launchable kernel)",
                                   a->path, a->hello.caps);
    if (!l->image || !l->kernel || l->nranges == 0 || l->nranges > LEASEC_LAUNCH_MAX_RANGES ||
        l->arg_bytes % 8 != 0 || l->arg_bytes > LEASEC_LAUNCH_ARGS_MAX ||
        (l->arg_bytes && !l->args))
        return leasec_client__fail(c, -EINVAL,
                                   "launch: expected an image and a kernel name, 1..%d ranges "
                                   "and an argument block of a multiple of 8 bytes up to %u, "
                                   "found %u ranges and %zu bytes",
                                   LEASEC_LAUNCH_MAX_RANGES, LEASEC_LAUNCH_ARGS_MAX, l->nranges,
                                   l->arg_bytes);
    size_t len = sizeof(struct lt_msg_launch) + l->arg_bytes;
    struct lt_msg_launch *m = (struct lt_msg_launch *)(void *)buf->bytes;
    lt_msg_init(m, len, LT_MSG_LAUNCH, 1);
    m->arg_words = (uint32_t)(l->arg_bytes / 8);
    if (lt_name_set(m->image, sizeof m->image, l->image) != strlen(l->image) ||
        lt_name_set(m->kernel, sizeof m->kernel, l->kernel) != strlen(l->kernel))
        return leasec_client__fail(c, -EINVAL,
                                   "launch: image '%s' or kernel '%s' too long (at most %d and "
                                   "%d bytes)",
                                   l->image, l->kernel, LEASEC_LAUNCH_IMAGE_LEN - 1,
                                   LEASEC_LAUNCH_KERNEL_LEN - 1);
    for (int d = 0; d < 3; d++) {
        m->grid[d] = l->grid[d] ? l->grid[d] : 1;
        m->block[d] = l->block[d] ? l->block[d] : 1;
    }
    m->shared_bytes = l->shared_bytes;
    m->result_bytes = l->result_bytes;
    m->stream = l->stream;
    m->lease_count = l->nranges;
    for (unsigned i = 0; i < l->nranges; i++) {
        const struct leasec_launch_range *r = &l->ranges[i];
        struct leasec_client__lease_rec *rec = NULL;
        if (r->lease.agent != agent)
            return leasec_client__fail(c, -EINVAL,
                                       "launch: range %u's lease is on agent %u, the launch "
                                       "goes to agent %u",
                                       i, r->lease.agent, agent);
        int rc =
            a->state == LEASEC_CLIENT_READY ? leasec_client__lease_find(c, a, &r->lease, &rec) : 0;
        if (rc < 0)
            return rc;
        m->leases[i] = (struct lt_launch_lease){
            .lease = r->lease.id, .offset = r->offset, .length = r->length, .flags = r->flags};
    }
    if (l->arg_bytes)
        memcpy(m->args, l->args, l->arg_bytes);
    m->hdr.request_id = 1; /* the validator wants one; the send sets the real one */
    enum lt_error e = lt_validate_launch(m, len);
    if (e != LT_OK)
        return leasec_client__fail(c, lt_error_errno(e),
                                   "launch of %s refused before sending: %s (%s)", l->kernel,
                                   lt_error_name(e), lt_error_describe(e));
    return (int)len;
}

int leasec_client_launch(struct leasec_client *c, unsigned agent,
                         const struct leasec_launch *launch, uint64_t tag, uint64_t *request_id_p)
{
    union lt_msg_buffer buf;
    int len = leasec_client__launch_build(c, agent, launch, &buf);
    if (len < 0)
        return len;
    return leasec_client__msg_send(c, agent, buf.bytes, (size_t)len, tag, request_id_p);
}

/* The public form of a validated LAUNCH_COMPLETION. */
static void leasec_client__launch_public(const struct lt_msg_launch_completion *m,
                                         struct leasec_launch_result *r)
{
    memset(r, 0, sizeof *r);
    r->status = m->status;
    r->err = lt_error_errno(m->status);
    r->detail = m->detail;
    r->arg_index = m->arg_index;
    r->elapsed_ns = m->elapsed_ns;
    /* the validator checked both are names or all zero */
    memcpy(r->cu_error, m->cu_error, sizeof r->cu_error);
    memcpy(r->message, m->message, sizeof r->message);
    r->result_bytes = m->result_bytes;
    memcpy(r->result, m->result, m->result_bytes);
}

void leasec_client__launch_fire(struct leasec_client *c, unsigned agent, uint64_t request_id,
                                uint64_t tag, const void *msg)
{
    struct leasec_launch_result r;
    leasec_client__launch_public(msg, &r);
    struct leasec_client_launch_done d = {
        .agent = agent, .request_id = request_id, .tag = tag, .result = &r};
    LEASEC_CLIENT__CALL(c, on_launch, &d);
}

int leasec_client_launch_call(struct leasec_client *c, unsigned agent,
                              const struct leasec_launch *launch, int timeout_ms,
                              struct leasec_launch_result *result_p)
{
    union lt_msg_buffer buf, reply;
    int len = leasec_client__launch_build(c, agent, launch, &buf);
    if (len < 0)
        return len;
    int rc = leasec_client__msg_call(c, agent, buf.bytes, (size_t)len, timeout_ms, &reply);
    if (rc < 0)
        return rc;
    const struct lt_msg_launch_completion *m = (const void *)reply.bytes;
    leasec_client__launch_public(m, result_p);
    if (m->status == LT_OK)
        return 0;
    return leasec_client__fail(c, lt_error_errno(m->status), "launch of %s: %s (%s): \"%s\"%s%s",
                               launch->kernel, lt_error_name(m->status),
                               lt_error_describe(m->status), result_p->message,
                               result_p->cu_error[0] ? " " : "", result_p->cu_error);
}
