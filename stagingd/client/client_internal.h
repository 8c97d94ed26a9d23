/* The lease client's private structures and the functions its files share.
 * The files depend one way, top to bottom:
 *   client.c    life cycle, agents, connect/backoff/teardown, the event loop
 *   dispatch.c  answers from an agent, matched to their requests
 *   msg.c       requests: the pending table, encoding, validation
 *   conn.c      transport: send queue, receive, broken connections, log
 * The id tables are base_u64map (base/u64map.h). */
#ifndef STAGINGD_CLIENT_INTERNAL_H
#define STAGINGD_CLIENT_INTERNAL_H

#include <stdint.h>
#include <sys/un.h>

#include "base/log.h"
#include "base/u64map.h"
#include "lease_types/lease_types.h" /* the validators */
#include "stagingd/client.h"

#define SD_CLIENT_MSG_LEN 512 /* error text; a request's failure adds a clause to it */
#define SD_CLIENT_ERR_LEN (SD_CLIENT_MSG_LEN + 128)

/* ---- Requests in flight ---- */

/* Where a blocking sd_client_call wants its answer. */
struct sd_client__sync {
    int done;
    int err;
    union lt_msg_buffer *reply;
};

struct sd_client__pending {
    struct sd_client__pending *prev, *next; /* the agent's list, oldest first */
    uint64_t rid;
    uint64_t tag;
    uint16_t type;                /* the request's enum lt_msg_type */
    unsigned seg;                 /* SEGMENT_OFFER: index into the client's segments */
    int quiet;                    /* SUBMIT with LT_SUBMIT_F_QUIET */
    uint32_t remaining;           /* LEASE_RELEASE: RELEASE_COMPLETEs still due */
    struct sd_client_lease lease; /* SUBMIT: the lease it runs on */
    struct sd_client__sync *sync;
    size_t len;
    uint64_t msg[]; /* the request as sent, for lt_validate_reply_matches */
};

/* A lease held on the current connection. */
struct sd_client__lease_rec {
    struct sd_client_lease lease;
    int releasing;
    uint64_t release_rid;
    unsigned quiet; /* QUIET submits on it still pending */
};

/* A message waiting for room in the socket buffer. */
struct sd_client__out {
    struct sd_client__out *next;
    int fd; /* the client's own segment fd for an offer, else -1 */
    size_t len;
    uint64_t msg[];
};

/* A segment the client offers. */
struct sd_client__segment {
    uint32_t key;
    uint32_t mem_class;
    int fd; /* the client's dup */
    unsigned char *base;
    uint64_t size;
};

enum {
    SD_CLIENT__SEG_NONE = 0, /* not offered on this connection */
    SD_CLIENT__SEG_OFFERED,
    SD_CLIENT__SEG_ACCEPTED,
    SD_CLIENT__SEG_REFUSED,
};

struct sd_client__agent_seg {
    int state;
    struct lt_segment_id id;
};

struct sd_client__agent {
    unsigned index;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int fd;
    enum sd_client_agent_state state;
    uint32_t epoch;
    uint64_t next_rid;

    struct base_u64map pending; /* request id -> struct sd_client__pending */
    struct sd_client__pending *head, *tail;
    unsigned in_flight;
    struct base_u64map leases; /* lease id (u64) -> struct sd_client__lease_rec */

    struct sd_client__out *out_head, *out_tail;
    int epoll_out; /* EPOLLOUT armed */

    struct sd_client__agent_seg *segs; /* parallel to the client's segments */
    unsigned offers_out;
    unsigned accepted;
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
    char broken_msg[SD_CLIENT_MSG_LEN];
};

struct sd_client {
    struct sd_client_callbacks cb;
    void *cb_ctx;
    struct base_log_sink log;
    char name[LT_NAME_LEN];
    uint32_t caps;
    uint32_t backoff_min_ms, backoff_max_ms, handshake_timeout_ms;
    uint64_t rng;

    int epfd;
    int tfd;
    struct sd_client__agent **agents;
    unsigned nagents;
    struct sd_client__segment *segs;
    unsigned nsegs, segs_cap;

    int in_callback;                      /* depth of callbacks running now */
    struct sd_client__agent *ready_watch; /* the agent sd_client_wait_ready waits for */
    int ready_fail;                       /* how a connection to it ended meanwhile */
    union lt_msg_buffer rx;
    char err[SD_CLIENT_ERR_LEN];
};

/* Runs callback @fn (a member of struct sd_client_callbacks) if set,
 * counting the depth so the driving functions can refuse to nest. */
#define SD_CLIENT__CALL(c, fn, ...)                                                                \
    do {                                                                                           \
        if ((c)->cb.fn) {                                                                          \
            (c)->in_callback++;                                                                    \
            (c)->cb.fn((c)->cb_ctx, __VA_ARGS__);                                                  \
            (c)->in_callback--;                                                                    \
        }                                                                                          \
    } while (0)

static inline struct sd_client__agent *sd_client__agent_get(const struct sd_client *c,
                                                            unsigned agent)
{
    return agent < c->nagents ? c->agents[agent] : NULL;
}

/* ---- conn.c ---- */

/* Logs one line through the client's sink: every client line is info. */
#define sd_client__log(c, ...) base_log(&(c)->log, BASE_LOG_INFO, "client", __VA_ARGS__)
/* Stores the message for sd_client_last_error (and returns @err). */
int sd_client__fail(struct sd_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks the connection broken and wakes the event loop, which tears it
 * down at its next safe point. The first cause is kept. */
void sd_client__break(struct sd_client *c, struct sd_client__agent *a, int err, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
/* Sends (or queues) one message, with @fd attached when >= 0. Returns 0,
 * -ENOTCONN, or -ECONNRESET/-errno after marking the connection broken. */
int sd_client__send(struct sd_client *c, struct sd_client__agent *a, const void *msg, size_t len,
                    int fd);
/* Sends what the queue holds while the socket takes it. */
void sd_client__flush(struct sd_client *c, struct sd_client__agent *a);
/* Frees the queue unsent. */
void sd_client__out_free(struct sd_client__agent *a);
/* Receives one message into c->rx. Returns its length; 0 when nothing is
 * waiting or the connection broke (refused fds, EOF, a cut packet). */
int sd_client__recv(struct sd_client *c, struct sd_client__agent *a);

/* ---- msg.c ---- */

/* Builds a pending record holding a copy of @msg. NULL on ENOMEM. */
struct sd_client__pending *sd_client__pending_new(const void *msg, size_t len, uint64_t tag);
/* Adds @p to @a's tables. Returns 0 or -ENOMEM. */
int sd_client__pending_add(struct sd_client__agent *a, struct sd_client__pending *p);
/* Removes @p from @a's tables (does not free it). */
void sd_client__pending_unlink(struct sd_client__agent *a, struct sd_client__pending *p);
void sd_client__pending_free(struct sd_client__pending *p);
/* Frees every lease record of @leases and the table. */
void sd_client__leases_free(struct base_u64map *leases);
/* Sends HELLO on a fresh connection. Returns 0 or -errno. */
int sd_client__hello_send(struct sd_client *c, struct sd_client__agent *a);
/* Offers segment @seg on @a. Returns 0 or -errno. */
int sd_client__offer_send(struct sd_client *c, struct sd_client__agent *a, unsigned seg);

/* ---- dispatch.c ---- */

/* Validates and answers one message of @len bytes in c->rx. May mark @a broken. */
void sd_client__dispatch(struct sd_client *c, struct sd_client__agent *a, size_t len);
/* Fails every request in flight on @a with @err/@msg and forgets its
 * leases; the caller has already closed the socket. */
void sd_client__fail_all(struct sd_client *c, struct sd_client__agent *a, int err, const char *msg);

#endif /* STAGINGD_CLIENT_INTERNAL_H */
