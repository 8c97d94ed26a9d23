/* stagingd's lease client: speaks wire protocol v1 (docs/protocol.md) to one
 * GPU agent per GPU over SOCK_SEQPACKET sockets, offers the caller's memfd
 * segments to each, requests and releases leases in batches, submits work,
 * and rings doorbells. CUDA-free, and independent of the rest of stagingd:
 * any storage daemon can link it. docs/lease-client.md says how it behaves
 * when an agent goes away.
 *
 * Threading: a client is driven by one thread at a time (the caller's event
 * loop). Callbacks run on that thread, inside sd_client_process,
 * sd_client_wait, sd_client_wait_ready or sd_client_call; they may call the
 * request functions (lease, submit, release, send, segment_add, agent_add)
 * but not the driving functions (those answer -EDEADLK) nor destroy.
 * sd_client_ring and sd_client_done_word_read touch only the word they are
 * given and are safe from any thread or process.
 *
 * Every request ends in exactly one callback: on_grant, on_completion or
 * on_reply when its answer arrived, on_error when the agent refused it or
 * the connection ended first. LEASE_RELEASE is the exception: one
 * on_release per listed lease. A QUIET submit is answered only on failure;
 * it is retired silently when its lease's release completes. */
#ifndef STAGINGD_CLIENT_H
#define STAGINGD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "lease_types/proto.h" /* messages, ids, classes and error codes */

LT_EXTERN_C_BEGIN

struct sd_client;

/* A lease the agent granted, as the client hands it out: a value the caller
 * keeps and passes back to submit and release. It belongs to one connection
 * (@epoch); after a reconnect it is refused with -ESTALE. */
struct sd_client_lease {
    struct lt_lease_id id;
    unsigned agent;
    uint32_t epoch;
    uint32_t segment;   /* the caller's segment key (sd_client_segment_add) */
    uint32_t mem_class; /* the class served: the segment's, or STAGED on fallback */
    uint64_t offset;    /* within the segment */
    uint64_t length;
};

/* One entry of a lease request. */
struct sd_client_lease_req {
    uint32_t segment;   /* a segment key */
    uint32_t mem_class; /* 0: the segment's class; or LT_CLASS_STAGED */
    uint32_t flags;     /* LT_LEASE_F_ALLOW_STAGED */
    uint64_t offset;
    uint64_t length;
};

/* A 64-bit word in a MAPPED segment the agent accepted. seq 0: not used. */
struct sd_client_word {
    uint32_t segment;
    uint64_t offset; /* multiple of 8 */
    uint64_t seq;    /* bell: the GPU waits for word >= seq; done: stored when finished */
};

/* One piece of work on a lease. */
struct sd_client_work {
    uint16_t op;                /* enum lt_op */
    uint32_t flags;             /* 0 or LT_SUBMIT_F_QUIET; the word flags follow bell/done */
    struct lt_stream_id stream; /* {0, 0}: the default stream */
    struct sd_client_word bell; /* needs LT_CAP_DOORBELL */
    struct sd_client_word done; /* needs LT_CAP_DONE_WORD */
    union lt_op_args args;      /* offsets relative to the lease */
};

/* ---- What callbacks receive (valid only during the callback) ---- */

struct sd_client_grant_entry {
    int err;                      /* 0, or lt_error_errno(status) */
    uint32_t status;              /* enum lt_error */
    struct sd_client_lease lease; /* filled when err == 0 */
};

struct sd_client_grant {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    unsigned count; /* as requested, in request order */
    const struct sd_client_grant_entry *entries;
};

struct sd_client_completion {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    struct sd_client_lease lease;
    uint16_t op;
    uint32_t status; /* enum lt_error; CHECKSUM_MISMATCH comes with the result filled */
    int err;         /* lt_error_errno(status) */
    uint32_t detail;
    uint64_t elapsed_ns;
    union lt_op_result result;
};

struct sd_client_release {
    unsigned agent;
    uint64_t request_id; /* the release's */
    uint64_t tag;
    struct sd_client_lease lease;
    uint32_t status; /* the agent's, or LT_OK when the client decided (err says why) */
    int err;         /* 0; lt_error_errno(status); or the connection's end (-ECONNRESET...) */
    int reusable;    /* 1 only for RELEASE_COMPLETE with LT_OK: the bytes are the caller's again */
    const char *message;
};

struct sd_client_error {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    uint16_t request_type; /* enum lt_msg_type of the failed request */
    int err;               /* negative errno */
    uint32_t code;         /* the agent's enum lt_error; LT_OK when the client decided */
    uint32_t index;        /* the failing batch entry, or LT_INDEX_NONE */
    const char *message;   /* names the agent socket; quotes the agent's text if any */
};

/* The answer to a request sent with sd_client_send (CTL_REPLY, STATS_REPLY). */
struct sd_client_reply {
    unsigned agent;
    uint64_t request_id;
    uint64_t tag;
    const void *msg; /* validated, 8-aligned */
    size_t len;
};

/* Every member may be NULL. */
struct sd_client_callbacks {
    void (*on_grant)(void *ctx, const struct sd_client_grant *g);
    void (*on_completion)(void *ctx, const struct sd_client_completion *c);
    void (*on_release)(void *ctx, const struct sd_client_release *r);
    void (*on_error)(void *ctx, const struct sd_client_error *e);
    void (*on_reply)(void *ctx, const struct sd_client_reply *r);
    /* Handshake done and every segment offer answered: leases may be
     * requested, failed work resubmitted. @epoch numbers the connection. */
    void (*on_ready)(void *ctx, unsigned agent, uint32_t epoch);
    /* A connection that got as far as connect() ended; called before the
     * requests it carried fail. Leases of that epoch are gone. */
    void (*on_disconnect)(void *ctx, unsigned agent, int err, const char *message);
};

struct sd_client_config {
    const char *name;              /* HELLO name: 1..31 printable ASCII bytes */
    uint32_t caps;                 /* LT_CAP_CLIENT_KNOWN bits wanted (default: RC_BATCH too) */
    uint32_t backoff_min_ms;       /* first reconnect delay */
    uint32_t backoff_max_ms;       /* the delay doubles up to this; jitter takes up to half off */
    uint32_t handshake_timeout_ms; /* connect to ready */
    uint64_t seed;                 /* jitter seed; 0: from the pid and the clock */
    struct sd_client_callbacks cb;
    void *cb_ctx;
    /* Where the client's notices go (connects, handshakes, refusals), at
     * info level with subsystem "client"; zeroed: the process default. */
    struct base_log_sink log;
};

enum sd_client_agent_state {
    SD_CLIENT_DISCONNECTED = 0, /* waiting for the next connect attempt */
    SD_CLIENT_HANDSHAKE = 1,    /* HELLO sent */
    SD_CLIENT_OFFERING = 2,     /* segment offers outstanding */
    SD_CLIENT_READY = 3,
};

struct sd_client_agent_info {
    enum sd_client_agent_state state;
    uint32_t epoch;             /* connections established so far; the current one's */
    uint64_t attempts;          /* connect() calls */
    uint64_t offers_sent;       /* SEGMENT_OFFERs, over all connections */
    unsigned segments_accepted; /* on this connection */
    unsigned in_flight;         /* requests awaiting an answer */
    unsigned leases;            /* leases held on this connection */
    uint32_t next_delay_ms;     /* when disconnected: the delay chosen before the next attempt */
    int last_err;               /* why the last connection or attempt ended; 0 if none */
    struct lt_msg_hello_reply hello; /* this connection's limits; zero before the handshake */
};

/* ---- Life cycle ---- */

/* Fills @config_p: name "stagingd", caps DOORBELL|DONE_WORD, backoff
 * 10 ms .. 2 s, handshake timeout 5 s, no callbacks, the default log. */
void sd_client_config_default(struct sd_client_config *config_p);

/* Creates a client with no agents and no segments. Copies @config (the name
 * too). Returns 0; -EINVAL for a bad name, caps or backoff (the reason is
 * logged); -ENOMEM; -errno from epoll_create1/timerfd_create. The caller
 * frees the client with sd_client_destroy. */
int sd_client_create(const struct sd_client_config *config, struct sd_client **client_p);

/* Closes every connection and fd the client holds and frees it, firing no
 * callback. Never frees or touches segment memory. NULL is a no-op. */
void sd_client_destroy(struct sd_client *c);

/* Adds a segment offered to every agent (now if ready, else on the next
 * handshake). @fd is duplicated (the caller keeps its own); @base and @size
 * describe this process's mapping, which must outlive the client. @key is
 * the caller's name for it, sent as the offer's cookie. Returns 0; -EEXIST
 * for a key in use; -EINVAL for a bad size or class; -errno from dup. */
int sd_client_segment_add(struct sd_client *c, uint32_t key, int fd, void *base, uint64_t size,
                          uint32_t mem_class);

/* Adds the agent listening at @path and tries to connect at once; a failed
 * attempt is retried with backoff. Returns 0 and the agent's index in
 * *agent_p (indices count from 0); -ENAMETOOLONG; -ENOMEM. */
int sd_client_agent_add(struct sd_client *c, const char *path, unsigned *agent_p);

/* ---- Driving ---- */

/* A descriptor that polls readable whenever sd_client_process has work:
 * a message from an agent, room to send, or a reconnect or timeout due.
 * Owned by the client. */
int sd_client_fd(const struct sd_client *c);

/* Does all work pending now without blocking: reads and dispatches
 * messages (firing callbacks), flushes queued sends, reconnects agents whose
 * backoff expired, times out stuck handshakes. Returns the number of
 * messages handled; -EDEADLK from a callback; -errno from epoll. */
int sd_client_process(struct sd_client *c);

/* Processes until @request_id on @agent has ended (its callback fired) or
 * @timeout_ms passed (< 0: forever). Returns 0; -ETIMEDOUT; -ENOENT for an
 * id never issued; -EDEADLK from a callback. */
int sd_client_wait(struct sd_client *c, unsigned agent, uint64_t request_id, int timeout_ms);

/* Processes until @agent is ready. Returns 0; -ETIMEDOUT; or, when a
 * connection made during the wait ends before ready, its error (e.g.
 * -EPROTONOSUPPORT for a version mismatch, message in sd_client_last_error).
 * Attempts that find no listener keep waiting. */
int sd_client_wait_ready(struct sd_client *c, unsigned agent, int timeout_ms);

/* The state, counters and limits of @agent. Returns 0 or -ENOENT. */
int sd_client_agent_info(const struct sd_client *c, unsigned agent,
                         struct sd_client_agent_info *info_p);

/* The last error message a client function decided (empty if none);
 * overwritten by the next one. Owned by the client. */
const char *sd_client_last_error(const struct sd_client *c);

/* ---- Requests ---- */

/* Requests @n leases (1..the agent's max_lease_batch) in one LEASE_REQUEST
 * with request flags @req_flags (LT_LEASE_REQ_F_*). Answered by on_grant or
 * on_error. Returns 0 and the request id; -ENOTCONN when the agent is not
 * ready; -E2BIG over the batch limit; -ENOENT for a segment the agent did
 * not accept; -ERANGE for a range outside its segment; -EINVAL;
 * -ECONNRESET when the send finds the connection gone. */
int sd_client_lease_request(struct sd_client *c, unsigned agent,
                            const struct sd_client_lease_req *reqs, unsigned n, uint32_t req_flags,
                            uint64_t tag, uint64_t *request_id_p);

/* Submits @work on @lease. Answered by on_completion or on_error (QUIET:
 * only on failure). Returns 0 and the request id; -ESTALE for a lease of an
 * older connection; -ENOENT for a lease not held; -EBUSY for one being
 * released; -EOPNOTSUPP for a bell or done word the agent did not grant the
 * capability for; -EINVAL for a bad word or arguments; -ENOTCONN;
 * -ECONNRESET. */
int sd_client_submit(struct sd_client *c, const struct sd_client_lease *lease,
                     const struct sd_client_work *work, uint64_t tag, uint64_t *request_id_p);

/* Releases @n leases (1..max_lease_batch, one agent, one epoch). Each ends
 * in on_release, reusable only after the agent's RELEASE_COMPLETE with
 * LT_OK. Returns 0 and the request id; errors as sd_client_submit, and
 * -EINVAL for a lease listed twice. */
int sd_client_lease_release(struct sd_client *c, const struct sd_client_lease *leases, unsigned n,
                            uint64_t tag, uint64_t *request_id_p);

/* Sends a stream, event, device or stats request built by the caller
 * (lt_msg_init); the client sets the request id. Answered by on_reply or
 * on_error. Returns 0 and the request id; -EINVAL for another type or a
 * message its validator refuses; -ENOTCONN; -ECONNRESET. */
int sd_client_send(struct sd_client *c, unsigned agent, const void *msg, size_t len, uint64_t tag,
                   uint64_t *request_id_p);

/* sd_client_send, then waits up to @timeout_ms for the answer and copies the
 * reply into *@reply_p instead of calling on_reply. Returns 0; the agent's
 * ERROR as lt_error_errno(code) (its text in sd_client_last_error); the
 * connection's end (-ECONNRESET...); -ETIMEDOUT, after which a late answer
 * goes to the callbacks; the errors of sd_client_send. */
int sd_client_call(struct sd_client *c, unsigned agent, const void *msg, size_t len, int timeout_ms,
                   union lt_msg_buffer *reply_p);

/* ---- Doorbells ---- */

/* This process's address of the word @offset in segment @key, which must
 * be 8-aligned and inside the segment. Returns 0; -ENOENT; -EINVAL. */
int sd_client_word_ptr(const struct sd_client *c, uint32_t key, uint64_t offset, uint64_t **word_p);

/* Rings a doorbell: a release store of @seq into @bell, so every write
 * before it (the shard's bytes) is visible to whoever sees @seq. For work
 * the agent queued behind the bell this is the whole hand-off: no message. */
void sd_client_ring(uint64_t *bell, uint64_t seq);

/* An acquire load of a completion word: once it shows the done_seq of a
 * submit, what the GPU wrote before it is visible. */
uint64_t sd_client_done_word_read(const uint64_t *done);

LT_EXTERN_C_END

#endif /* STAGINGD_CLIENT_H */
