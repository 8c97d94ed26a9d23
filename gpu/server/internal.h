/* The socket server's objects, shared by its source files; each file's
 * functions are in its own header (conn.h, jobs.h, dispatch.h, listen.h),
 * which say what depends on what. Everything here is touched by the loop
 * thread only, except what struct ga_server says is guarded by its mutex. */
#ifndef GA_SERVER_INTERNAL_H
#define GA_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/time.h"
#include "base/u64map.h"
#include "gpu/server.h"
#include "lease_types/validate.h"

/* Every line of the server carries this subsystem name. */
#define GA_SERVER__SUBSYS "server"

/* ---- objects ------------------------------------------------------------ */

/* What an epoll event points at: the first member of each source. */
enum ga_server__src { GA_SRC_LISTEN = 1, GA_SRC_WAKE, GA_SRC_SIGNAL, GA_SRC_CONN };

struct ga_server__out {
    struct ga_server__out *next;
    uint32_t len;
    int fd;          /* sent with the message (SCM_RIGHTS), then closed; -1: none */
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
    bool writable;      /* the agent's mapping is writable: done words may go here */
    bool words;         /* the client's words area, made by the agent (LT_CAP_WORDS) */
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
    uint32_t inflight;             /* jobs (work, commands, offers) not yet completed */
    uint32_t segments;             /* listed in srv->segs */
    uint64_t seg_bytes_registered; /* sizes of its listed PINNED and MAPPED segments */
    struct base_u64map releases;   /* lease id -> the LEASE_RELEASE's request id */
    /* While a LEASE_RELEASE from a client granted LT_CAP_RC_BATCH is being
     * answered: the RELEASE_COMPLETE_BATCH its completions gather in. */
    struct lt_msg_release_complete_batch *rcb;
    uint64_t leases_granted;
    uint64_t submits;
    struct ga_server__seg *words; /* its words area (WORDS_REQUEST), or NULL */
    struct base_u64map rings; /* ring id -> struct ga_server__ring (ring.c) */
};

enum ga_server__job_kind {
    GA_JOB_WORK = 1,
    GA_JOB_CTL,
    GA_JOB_OFFER,
    GA_JOB_SHARD,     /* a RING_SHARD's answer (ring.c) */
    GA_JOB_RING_GONE, /* a ring's work drained: its leases go (ring.c) */
    GA_JOB_LAUNCH,
};

struct ga_server__ring;
struct ga_server__launch; /* dispatch_launch.c */

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
    struct lt_segment_id hits_hold;            /* the words area, for a scan's hits */
    struct ga_exec_result res;
    /* GA_JOB_SHARD, GA_JOB_RING_GONE, and GA_JOB_CTL for RING_CLOSE */
    struct ga_server__ring *ring;
    /* GA_JOB_CTL */
    uint16_t ctl_type; /* the command's LT_MSG_* type */
    struct ga_exec_ctl_result ctl;
    /* GA_JOB_OFFER */
    int fd;
    struct lt_msg_segment_offer offer;
    int rc;
    struct lt_segment_id seg_id; /* rc == 0 */
    struct lt_failure why;       /* rc < 0: what the ERROR says */
    uint64_t op_bytes;           /* GA_JOB_WORK: the bytes the op covers, for /metrics */
    /* GA_JOB_LAUNCH (and res) */
    struct ga_server__launch *launch;
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
    struct base_u64map segs;      /* segment id -> struct ga_server__seg * */
    struct base_u64map seg_slots; /* slot -> the latest segment id in that slot (u64) */
    bool accept_paused;           /* out of fds: listening socket not polled */
    bool fds_freed;               /* an fd was closed since accepting paused */
    uint64_t nofile;              /* RLIMIT_NOFILE after raising the soft limit */
    uint64_t segment_fds;         /* fds the lease service may hold for segments */
    /* The loop's scratch for a LEASE_REQUEST / LEASE_RELEASE of up to
     * LT_MAX_BATCH entries: nothing allocated or zeroed per batch. */
    struct lease_grant_req *grant_reqs;
    struct lease_grant_result *grant_res;
    struct lease_release_result *release_res;
    unsigned char *release_mine;
    bool dead_pending;
    bool created; /* create finished: the executor is ours to shut down */
    bool stopping;
    bool ran;
    bool listening;
    uint64_t start_ns;
    uint64_t accepted, refused;
    int stop_req; /* atomic: ga_server_stop */
    int keep_req; /* atomic: ga_server_listener_keep */
    bool kept;    /* the drain kept lfd and lockfd for ga_server_listener_take */
    /* Guarded by mu: the queue of finished jobs for the loop, and the
     * registrar thread's queue of segment offers. */
    pthread_mutex_t mu;
    pthread_cond_t reg_cv;
    struct ga_server__job *done_head, *done_tail;
    struct ga_server__job *reg_head, *reg_tail;
    bool reg_stop;
    bool reg_started;
    pthread_t reg_thread;
    /* /metrics (server_metrics.c), NULL when off: set before the loop
     * runs, read by the loop and registrar threads (atomic). */
    struct ga_server__metrics *metrics;
};

#endif /* GA_SERVER_INTERNAL_H */
