/* The lease client's private structures and the functions its files share.
 * The files depend one way, top to bottom:
 *   client.c    life cycle, agents, connect/backoff/teardown, the event loop
 *   ctl.c       the typed stream/event/device and stats requests, and the
 *               public forms of what the agent sent (limits, replies)
 *   launch.c    LAUNCH (protocol 1.2) and its LAUNCH_COMPLETION
 *   dispatch.c  answers from an agent, matched to their requests
 *   ring.c      streaming rings: open, shard, close, and their answers
 *   msg.c       requests: the pending table, encoding, validation
 *   conn.c      transport: send queue, receive, broken connections, log
 * The id tables are base_u64map (base/u64map.h). The public API is
 * lease/client.h (stagingd/lib/include), the library's one header. */
#ifndef STAGINGD_CLIENT_INTERNAL_H
#define STAGINGD_CLIENT_INTERNAL_H

#include <stdint.h>
#include <sys/un.h>

#include "base/log.h"
#include "base/u64map.h"
#include "lease_types/lease_types.h" /* the validators */
#include "lease/client.h"            /* the public API */

#define LEASEC_CLIENT_MSG_LEN 512 /* error text; a request's failure adds a clause to it */
#define LEASEC_CLIENT_ERR_LEN (LEASEC_CLIENT_MSG_LEN + 128)

/* ---- Requests in flight ---- */

/* Where a blocking leasec_client_call wants its answer. */
struct leasec_client__sync {
    int done;
    int err;
    union lt_msg_buffer *reply;
    struct lt_failure *refusal; /* filled when the agent refused */
    int refused;
};

struct leasec_client__pending {
    struct leasec_client__pending *prev, *next; /* the agent's list, oldest first */
    uint64_t rid;
    uint64_t tag;
    uint16_t type;                    /* the request's enum lt_msg_type */
    unsigned seg;                     /* SEGMENT_OFFER: index into the client's segments */
    int quiet;                        /* SUBMIT with LT_SUBMIT_F_QUIET */
    uint32_t remaining;               /* LEASE_RELEASE: RELEASE_COMPLETEs still due */
    struct leasec_client_lease lease; /* SUBMIT: the lease it runs on */
    struct leasec_client__sync *sync;
    size_t len;
    uint64_t msg[]; /* the request as sent, for lt_validate_reply_matches */
};

/* A lease held on the current connection. */
struct leasec_client__lease_rec {
    struct leasec_client_lease lease;
    int releasing;
    uint64_t release_rid;
    unsigned quiet; /* QUIET submits on it still pending */
};

/* A ring open on the current connection (ring.c). */
struct leasec_client__ring_rec {
    struct leasec_ring ring;
    int closing; /* RING_CLOSE sent: no more shards */
};

/* A message waiting for room in the socket buffer. */
struct leasec_client__out {
    struct leasec_client__out *next;
    int fd; /* the client's own segment fd for an offer, else -1 */
    size_t len;
    uint64_t msg[];
};

/* A segment the client offers. */
struct leasec_client__segment {
    uint32_t key;
    uint32_t mem_class;
    int fd; /* the client's dup */
    unsigned char *base;
    uint64_t size;
};

enum {
    LEASEC_CLIENT__SEG_NONE = 0, /* not offered on this connection */
    LEASEC_CLIENT__SEG_OFFERED,
    LEASEC_CLIENT__SEG_ACCEPTED,
    LEASEC_CLIENT__SEG_REFUSED,
};

struct leasec_client__agent_seg {
    int state;
    struct lt_segment_id id;
};

struct leasec_client__agent {
    unsigned index;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int fd;
    enum leasec_client_agent_state state;
    uint32_t epoch;
    uint64_t next_rid;

    struct base_u64map pending; /* request id -> struct leasec_client__pending */
    struct leasec_client__pending *head, *tail;
    unsigned in_flight;
    struct base_u64map leases; /* lease id (u64) -> struct leasec_client__lease_rec */
    struct base_u64map rings;  /* ring id (u64) -> struct leasec_client__ring_rec */

    struct leasec_client__out *out_head, *out_tail;
    int epoll_out; /* EPOLLOUT armed */

    struct leasec_client__agent_seg *segs; /* parallel to the client's segments */
    unsigned offers_out;
    unsigned accepted;
    /* The words area of this connection (LEASEC_CAP_WORDS): mapped
     * read-only; NULL until WORDS_GRANT. words_out: WORDS_REQUEST unanswered. */
    int words_out;
    struct lt_segment_id words_id;
    unsigned char *words_base;
    uint64_t words_size;
    struct lt_msg_hello_reply hello;

    uint64_t next_attempt_ns; /* DISCONNECTED */
    uint64_t deadline_ns;     /* HANDSHAKE, OFFERING */
    unsigned fail_streak;
    uint32_t next_delay_ms;
    uint64_t attempts;
    uint64_t offers_sent;
    int last_err;

    /* Set where tearing down now would pull state from under a caller
     * (a send inside a callback, a bad message mid-dispatch); the event
     * loop tears down at its next safe point. */
    int broken_err;
    char broken_msg[LEASEC_CLIENT_MSG_LEN];
};

struct leasec_client {
    struct leasec_client_callbacks cb;
    void *cb_ctx;
    struct base_log_sink log;
    char name[LT_NAME_LEN];
    uint32_t caps;
    uint32_t words_bytes; /* LEASEC_CAP_WORDS: the words area asked for */
    uint32_t backoff_min_ms, backoff_max_ms, handshake_timeout_ms;
    uint64_t rng;

    int epfd;
    int tfd;
    struct leasec_client__agent **agents;
    unsigned nagents;
    struct leasec_client__segment *segs;
    unsigned nsegs, segs_cap;

    int in_callback;                          /* depth of callbacks running now */
    struct leasec_client__agent *ready_watch; /* the agent leasec_client_wait_ready waits for */
    int ready_fail;                           /* how a connection to it ended meanwhile */
    union lt_msg_buffer rx;
    int rx_fd; /* the fd that came with rx (a WORDS_GRANT's), or -1 */
    char err[LEASEC_CLIENT_ERR_LEN];
    struct lt_failure refusal; /* leasec_client_last_refusal, when have_refusal */
    int have_refusal;
};

/* Runs callback @fn (a member of struct leasec_client_callbacks) if set,
 * counting the depth so the driving functions can refuse to nest. */
#define LEASEC_CLIENT__CALL(c, fn, ...)                                                            \
    do {                                                                                           \
        if ((c)->cb.fn) {                                                                          \
            (c)->in_callback++;                                                                    \
            (c)->cb.fn((c)->cb_ctx, __VA_ARGS__);                                                  \
            (c)->in_callback--;                                                                    \
        }                                                                                          \
    } while (0)

static inline struct leasec_client__agent *leasec_client__agent_get(const struct leasec_client *c,
                                                                    unsigned agent)
{
    return agent < c->nagents ? c->agents[agent] : NULL;
}

/* ---- conn.c ---- */

/* Logs one line through the client's sink: every client line is info. */
#define leasec_client__log(c, ...) base_log(&(c)->log, BASE_LOG_INFO, "client", __VA_ARGS__)
/* Stores the message for leasec_client_last_error (and returns @err). */
int leasec_client__fail(struct leasec_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks the connection broken and wakes the event loop, which tears it
 * down at its next safe point. The first cause is kept. */
void leasec_client__break(struct leasec_client *c, struct leasec_client__agent *a, int err,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Sends (or queues) one message, with @fd attached when >= 0. Returns 0,
 * -ENOTCONN, or -ECONNRESET/-errno after marking the connection broken. */
int leasec_client__send(struct leasec_client *c, struct leasec_client__agent *a, const void *msg,
                        size_t len, int fd);
/* Sends what the queue holds while the socket takes it. */
void leasec_client__flush(struct leasec_client *c, struct leasec_client__agent *a);
/* Frees the queue unsent. */
void leasec_client__out_free(struct leasec_client__agent *a);
/* Receives one message into c->rx. Returns its length; 0 when nothing is
 * waiting or the connection broke (refused fds, EOF, a cut packet). */
int leasec_client__recv(struct leasec_client *c, struct leasec_client__agent *a);

/* ---- msg.c ---- */

/* Builds a pending record holding a copy of @msg. NULL on ENOMEM. */
struct leasec_client__pending *leasec_client__pending_new(const void *msg, size_t len,
                                                          uint64_t tag);
/* Adds @p to @a's tables. Returns 0 or -ENOMEM. */
int leasec_client__pending_add(struct leasec_client__agent *a, struct leasec_client__pending *p);
/* Removes @p from @a's tables (does not free it). */
void leasec_client__pending_unlink(struct leasec_client__agent *a,
                                   struct leasec_client__pending *p);
void leasec_client__pending_free(struct leasec_client__pending *p);
/* Frees every lease record of @leases and the table. */
void leasec_client__leases_free(struct base_u64map *leases);
/* The record of @lease when it is held on @a's connection and not being
 * released. Returns 0, -ESTALE (an older connection's), -ENOENT, -EBUSY. */
int leasec_client__lease_find(struct leasec_client *c, struct leasec_client__agent *a,
                              const struct leasec_client_lease *lease,
                              struct leasec_client__lease_rec **rec_p);
/* Sends HELLO on a fresh connection. Returns 0 or -errno. */
int leasec_client__hello_send(struct leasec_client *c, struct leasec_client__agent *a);
/* Asks @a for its words area (LEASEC_CAP_WORDS). Returns 0 or -errno. */
int leasec_client__words_send(struct leasec_client *c, struct leasec_client__agent *a);
/* Unmaps @a's words area, if any. */
void leasec_client__words_drop(struct leasec_client__agent *a);
/* Offers segment @seg on @a. Returns 0 or -errno. */
int leasec_client__offer_send(struct leasec_client *c, struct leasec_client__agent *a,
                              unsigned seg);

/* Stamps a request id on @msg, records it as pending and sends it (with
 * @fd attached when >= 0). Returns 0 and the record in *@p_p, or -errno
 * with last_error. */
int leasec_client__request(struct leasec_client *c, struct leasec_client__agent *a, void *msg,
                           size_t len, int fd, uint64_t tag, struct leasec_client__pending **p_p);
/* 0 when @a (index @agent) exists and is ready, else -ENOENT / -ENOTCONN
 * with last_error. */
int leasec_client__need_ready(struct leasec_client *c, struct leasec_client__agent *a,
                              unsigned agent);
/* The record behind @lease, current and not releasing: 0, or -ESTALE,
 * -ENOENT, -EBUSY with last_error. */
int leasec_client__lease_find(struct leasec_client *c, struct leasec_client__agent *a,
                              const struct leasec_client_lease *lease,
                              struct leasec_client__lease_rec **rec_p);

/* Sends a stream, event, device, stats or launch request built by the caller
 * (lt_msg_init); the client sets the request id. Answered by on_reply
 * (through leasec_client__reply_fire) or on_error. Returns 0 and the
 * request id; -EINVAL for another type or a message its validator refuses;
 * -ENOENT; -ENOTCONN; -ENOMEM; -ECONNRESET. The typed ctl and stats calls
 * (ctl.c) and the tests build on it. */
int leasec_client__msg_send(struct leasec_client *c, unsigned agent, const void *msg, size_t len,
                            uint64_t tag, uint64_t *request_id_p);

/* ---- client.c ---- */

/* leasec_client__msg_send, then waits up to @timeout_ms for the answer and
 * copies the reply into *@reply_p instead of calling on_reply. Returns 0;
 * the agent's ERROR as lt_error_errno(code) (its text in last_error, its
 * failure in last_refusal); the connection's end; -ETIMEDOUT, after which a
 * late answer goes to the callbacks; the errors of __msg_send. */
int leasec_client__msg_call(struct leasec_client *c, unsigned agent, const void *msg, size_t len,
                            int timeout_ms, union lt_msg_buffer *reply_p);

/* ---- ctl.c ---- */

/* The public form of a HELLO_REPLY. */
void leasec_client__hello_public(const struct lt_msg_hello_reply *m,
                                 struct leasec_agent_hello *hello_p);
/* Calls on_reply with the public form of @msg (a CTL_REPLY or STATS_REPLY
 * answering request @p), for @agent. */
void leasec_client__reply_fire(struct leasec_client *c, unsigned agent, uint64_t request_id,
                               uint64_t tag, const void *msg);

/* ---- ring.c ---- */

/* A validated RING_OPENED or RING_CLOSED answering ring request @p (already
 * unlinked): tracks the ring and calls on_reply. */
void leasec_client__ring_answer(struct leasec_client *c, struct leasec_client__agent *a,
                                const struct leasec_client__pending *p, const void *msg);
/* A RING_CLOSE @p was refused: its ring takes shards again. */
void leasec_client__ring_close_refused(struct leasec_client__agent *a,
                                       const struct leasec_client__pending *p);
/* Frees every ring record of @rings and the table. */
void leasec_client__rings_free(struct base_u64map *rings);

/* ---- launch.c ---- */

/* Calls on_launch with the public form of LAUNCH_COMPLETION @msg. */
void leasec_client__launch_fire(struct leasec_client *c, unsigned agent, uint64_t request_id,
                                uint64_t tag, const void *msg);

/* ---- dispatch.c ---- */

/* Validates and answers one message of @len bytes in c->rx. May mark @a broken. */
void leasec_client__dispatch(struct leasec_client *c, struct leasec_client__agent *a, size_t len);
/* Fails every request in flight on @a with @err/@msg and forgets its
 * leases; the caller has already closed the socket. */
void leasec_client__fail_all(struct leasec_client *c, struct leasec_client__agent *a, int err,
                             const char *msg);

#endif /* STAGINGD_CLIENT_INTERNAL_H */
