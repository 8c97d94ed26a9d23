/* Internals shared by the socket server's source files. Everything here is
 * touched by the loop thread only, except what struct ga_server says is
 * guarded by its mutex. */
#ifndef GA_SERVER_INTERNAL_H
#define GA_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/server.h"
#include "lease_types/validate.h"

/* ---- a u64 -> u64 hash map (open addressing, key 0 never stored) -------- */

struct ga_server__map {
    uint64_t *keys;
    uint64_t *vals;
    size_t cap; /* a power of two, or 0 */
    size_t n;
};

/* Stores @key -> @val. Returns 0, -EEXIST (key present, untouched), -EINVAL
 * (key 0) or -ENOMEM. */
int ga_server__map_put(struct ga_server__map *m, uint64_t key, uint64_t val);
/* 1 and *val_p when @key is present, else 0. */
int ga_server__map_get(const struct ga_server__map *m, uint64_t key, uint64_t *val_p);
/* Removes @key; 1 and *val_p (may be NULL) when it was present, else 0. */
int ga_server__map_del(struct ga_server__map *m, uint64_t key, uint64_t *val_p);
void ga_server__map_fini(struct ga_server__map *m);

/* ---- objects ------------------------------------------------------------ */

/* What an epoll event points at: the first member of each source. */
enum ga_server__src { GA_SRC_LISTEN = 1, GA_SRC_WAKE, GA_SRC_SIGNAL, GA_SRC_CONN };

struct ga_server__out {
    struct ga_server__out *next;
    uint32_t len;
    uint64_t data[]; /* the message, 8-aligned */
};

struct ga_server__conn;

/* A segment a client offered and the agent accepted. Doorbell and done
 * words in MAPPED segments are reached through the lease service's own
 * mapping (lease_segment_info.host_base), held for as long as a job uses
 * them (lease_segment_hold .. lease_segment_unhold). */
struct ga_server__seg {
    struct lt_segment_id id; /* the lease service's, as the wire carries it */
    struct ga_server__conn *conn;
    uint64_t cookie;
    uint64_t size;
    uint32_t mem_class; /* enum lt_class */
    uint32_t refs;      /* 1 while listed in srv->segs, +1 per job using a word in it */
};

struct ga_server__conn {
    enum ga_server__src src; /* GA_SRC_CONN */
    struct ga_server *srv;
    struct ga_server__conn *next, *prev;
    int fd;
    uint32_t id;                   /* the wire client id: nonzero, never reused */
    struct lease_client_id client; /* lease-service client; .value is the executor owner */
    pid_t pid;
    uid_t uid;
    bool hello;
    bool dead;   /* close at the next sweep */
    bool closed; /* socket gone; freed once @inflight is 0 */
    bool polling_out;
    bool corked;   /* replies are queued, sent together at ga_server__uncork */
    uint32_t caps; /* granted at HELLO */
    char name[LT_NAME_LEN];
    struct ga_server__out *oq_head, *oq_tail;
    uint64_t oq_bytes;
    uint32_t inflight;              /* jobs (work, commands, offers) not yet completed */
    uint32_t segments;              /* listed in srv->segs */
    uint64_t seg_bytes_registered;  /* sizes of its listed PINNED and MAPPED segments */
    struct ga_server__map releases; /* lease id -> the LEASE_RELEASE's request id */
    /* While a LEASE_RELEASE from a client granted LT_CAP_RC_BATCH is being
     * answered: the RELEASE_COMPLETE_BATCH its completions gather in. */
    struct lt_msg_release_complete_batch *rcb;
    uint64_t leases_granted;
    uint64_t submits;
};

enum ga_server__job_kind { GA_JOB_WORK = 1, GA_JOB_CTL, GA_JOB_OFFER };

/* One request answered off the loop thread; posted back when done. */
struct ga_server__job {
    struct ga_server__job *next;
    enum ga_server__job_kind kind;
    struct ga_server__conn *conn;
    uint64_t request_id;
    /* GA_JOB_WORK */
    struct lease_ticket ticket;
    struct lt_lease_id lease;
    uint16_t op;
    uint32_t flags;
    struct ga_server__seg *bell_seg, *done_seg;
    struct lt_segment_id bell_hold, done_hold; /* held in the lease service; {0, 0}: none */
    struct ga_exec_result res;
    /* GA_JOB_CTL */
    struct ga_exec_ctl_result ctl;
    /* GA_JOB_OFFER */
    int fd;
    struct lt_msg_segment_offer offer;
    int rc;
    struct lt_segment_id seg_id; /* rc == 0 */
    struct lt_failure why;       /* rc < 0: what the ERROR says */
};

struct ga_server {
    struct ga_server_config cfg; /* strings below are our copies */
    char *path;
    char *lock_path;
    char *dir;
    char *agent_name;
    uid_t *allow;
    size_t nallow;
    bool has_group;
    gid_t gid;
    int epfd, lfd, lockfd, wakefd, sigfd;
    enum ga_server__src src_listen, src_wake, src_signal;
    struct lease_backend be;
    struct lease_service *svc;
    struct ga_executor *ex;
    struct ga_server__conn *conns; /* open and closed-but-draining */
    uint32_t nconns;               /* open ones */
    uint32_t next_id;
    struct ga_server__map segs;      /* segment id -> struct ga_server__seg * */
    struct ga_server__map seg_slots; /* slot + 1 -> the latest segment id in that slot */
    bool accept_paused;              /* out of fds: listening socket not polled */
    bool dead_pending;
    bool created; /* create finished: the executor is ours to shut down */
    bool stopping;
    bool ran;
    bool listening;
    uint64_t start_ns;
    uint64_t accepted, refused;
    int stop_req; /* atomic: ga_server_stop */
    /* Guarded by mu: the queue of finished jobs for the loop, and the
     * registrar thread's queue of segment offers. */
    pthread_mutex_t mu;
    pthread_cond_t reg_cv;
    struct ga_server__job *done_head, *done_tail;
    struct ga_server__job *reg_head, *reg_tail;
    bool reg_stop;
    bool reg_started;
    pthread_t reg_thread;
};

/* ---- server.c ----------------------------------------------------------- */

void ga_server__log(const struct ga_server *srv, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
uint64_t ga_server__now_ns(void);
/* Queues or sends one message to @c; a dead or closed client drops it. */
void ga_server__send(struct ga_server__conn *c, const void *msg, uint32_t len);
/* Between these two, replies to @c are queued and then sent in as few
 * sendmmsg calls as they fit (a release of 64 leases: 64 RELEASE_COMPLETEs, or
 * one RELEASE_COMPLETE_BATCH for a client granted LT_CAP_RC_BATCH). */
void ga_server__cork(struct ga_server__conn *c);
void ga_server__uncork(struct ga_server__conn *c);
/* Sends an ERROR: @code, the failing batch @index (LT_INDEX_NONE), and a
 * message. Its err is @err for LT_E_SYSTEM (when a valid errno) and
 * lt_error_errno(@code) otherwise, as the protocol defines the field. */
void ga_server__send_error(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                           uint32_t code, int err, uint32_t index, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Sends the ERROR for a refusal as whoever decided it explained it. */
void ga_server__send_failure(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                             uint32_t index, const struct lt_failure *why);
/* Marks @c for closing after the current event. */
void ga_server__conn_kill(struct ga_server__conn *c, const char *why);
/* From any thread: hands a finished job to the loop. */
void ga_server__post(struct ga_server *srv, struct ga_server__job *job);
/* Queues a segment offer for the registrar thread. */
void ga_server__offer_queue(struct ga_server *srv, struct ga_server__job *job);
struct ga_server__conn *ga_server__conn_by_client(struct ga_server *srv,
                                                  struct lease_client_id client);
/* A job of @c finished: frees a closed client whose last job it was. */
void ga_server__conn_put(struct ga_server__conn *c);
void ga_server__seg_unref(struct ga_server__seg *seg);

/* ---- dispatch.c --------------------------------------------------------- */

/* Validates and answers one received message; closes @fds it does not keep. */
void ga_server__dispatch(struct ga_server__conn *c, const void *buf, size_t len, int *fds,
                         size_t nfds);
/* Answers a finished job on the loop thread and frees it. */
void ga_server__complete(struct ga_server *srv, struct ga_server__job *job);
/* The registrar thread's part of an offer: verify, map, register. */
void ga_server__offer_run(struct ga_server *srv, struct ga_server__job *job);
/* lease service callbacks */
void ga_server__on_release_complete(void *arg, struct lease_client_id client,
                                    struct lt_lease_id lease);
void ga_server__on_client_drained(void *arg, struct lease_client_id client);

/* ---- listen.c ----------------------------------------------------------- */

/* Runtime directory, lock file, stale socket, bind, listen. */
int ga_server__listen_open(struct ga_server *srv);
/* Closes the listening socket and removes the socket file (not the lock). */
void ga_server__listen_close(struct ga_server *srv);
/* Removes the lock file and releases the lock. */
void ga_server__lock_release(struct ga_server *srv);
/* Reads the peer's credentials; 1 when its uid is allowed, 0 when refused. */
int ga_server__peer_check(struct ga_server *srv, int fd, pid_t *pid_p, uid_t *uid_p);

#endif /* GA_SERVER_INTERNAL_H */
