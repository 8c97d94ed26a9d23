/* Helpers shared by the lease client's suite (test_client_*.c): a fake
 * agent driven from the test, callbacks that record every event, and the
 * steps most tests take (handshake, leases, completions, releases). */
#ifndef CLIENT_TEST_UTIL_H
#define CLIENT_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#include "fake_agent.h"
#include "lease/client.h"

#define MIB ((uint64_t)1 << 20)
#define SEED 0xc11e47ull
#define WAIT_MS 5000

/* ---- recorded events ---- */

enum {
    EV_GRANT = 1,
    EV_COMPLETION,
    EV_RELEASE,
    EV_ERROR,
    EV_REPLY,
    EV_READY,
    EV_DISCONNECT,
    EV_LAUNCH,
};

struct ev {
    int kind;
    unsigned agent;
    uint64_t rid, tag;
    int err;
    uint32_t code, status, index, epoch;
    uint16_t type;
    int reusable;
    char msg[1024];
    struct leasec_client_lease lease;
    union leasec_op_result result;
    unsigned count;
    struct leasec_client_grant_entry ents[8];
    int nested_rc;
    /* on_error: the agent's refusal, when it made one */
    int refused;
    struct lt_failure refusal;
    /* on_reply */
    struct lt_stream_id stream;
    struct lt_event_id event;
    uint32_t ready;
    float elapsed_ms;
    int has_stats;
    uint32_t stats_clients, stats_have_self, stats_self_id;
    uint64_t stats_uptime_ns, stats_self_submits;
    /* on_launch */
    struct leasec_launch_result launch;
};

extern struct ev evs[512];
extern unsigned nev;
extern struct leasec_client *g_client;
extern char g_log[8192];        /* every log line of the client under test */
extern uint32_t g_handshake_ms; /* 0: the default */
extern uint32_t g_extra_caps;   /* client_new asks for these besides the default caps */
/* The test's temporary directory and the fake agent's socket in it. */
extern char g_dir[64];
extern char g_path[128];

/* ---- helpers (client_test_util.c) ---- */

/* The client log sink the tests install: appends each line to g_log. */
void capture_log(void *ctx, int level, const char *subsys, const char *line);

uint64_t rng_next(uint64_t *s);

uint64_t now_ms(void);

int count_fds(void);

void tmp_setup(void);

void tmp_teardown(void);

/* A shared memfd segment of @size bytes mapped here. */
void *memfd_seg(uint64_t size, int *fd_p);

/* Offers every segment of @pool, keyed by the pool's segment ids, as the
 * daemon does. Returns the number offered, or the first error. */
int offer_pool(struct leasec_client *c, const struct leasec_pool *pool);

struct leasec_client *client_new(uint32_t backoff_min, uint32_t backoff_max);

void pump_for(struct leasec_client *c, int ms);

void pump_until(struct leasec_client *c, unsigned want);

int ev_find(int kind, uint64_t rid);

unsigned ev_count(int kind);

/* Receives the next client message on the fake side, processing the
 * client meanwhile (it sends offers only while processing a reply). */
ssize_t recv_pumped(struct fake *f, struct leasec_client *c, union lt_msg_buffer *b, int *fds,
                    unsigned *nfds);

/* Receives one message and checks it is a valid @type from a client. */
size_t recv_type(struct fake *f, struct leasec_client *c, union lt_msg_buffer *b, uint16_t type);

/* Accepts the client's connection, processing the client meanwhile (it
 * reconnects only while processing). */
void accept_pumped(struct fake *f, struct leasec_client *c);

/* The agent's id for the k-th accepted segment of a handshake: distinct
 * from the client's keys, so a mapping mix-up shows. */
struct lt_segment_id agent_seg_id(unsigned k);

/* Accepts a connection, answers HELLO and every offer (with agent_seg_id),
 * and pumps the client until ready. Returns the number of offers seen;
 * their cookies go to @cookies_p (room for 8) when not NULL. */
unsigned handshake(struct fake *f, struct leasec_client *c, uint32_t caps, uint32_t batch,
                   unsigned nsegs, uint64_t *cookies_p);

/* Requests one lease per entry of @reqs and grants them all with lease
 * ids {first_slot + k, 1}. */
void lease_all(struct fake *f, struct leasec_client *c, const struct leasec_client_lease_req *reqs,
               unsigned n, uint32_t first_slot, struct leasec_client_lease *leases_p);

struct leasec_client_work checksum_work(uint64_t offset, uint64_t length, uint64_t sums);

void completion_send(struct fake *f, uint64_t rid, struct lt_lease_id lease, uint64_t blocks);

void release_complete_send(struct fake *f, uint64_t rid, struct lt_lease_id lease, uint32_t status);

/* A RELEASE_COMPLETE_BATCH answering release @rid: @n leases, @st their statuses. */
void release_batch_send(struct fake *f, uint64_t rid, const struct lt_lease_id *leases,
                        const uint32_t *st, uint32_t n);

/* ---- the suite's groups, in the order they run ---- */

void client_tests_handshake(TCase *tc); /* handshake, versions, segment offers */
void client_tests_leases(TCase *tc);    /* leases, submits, errors, releases */
void client_tests_agents(TCase *tc);    /* agent death, two agents, send queue, deadlines */
void client_tests_malformed(TCase *tc); /* malformed replies */
void client_tests_doorbell(TCase *tc);  /* doorbells across processes */
void client_tests_restart(TCase *tc);   /* the agent killed and restarted mid-run */
void client_tests_api(TCase *tc);       /* the library's typed calls, reconnect, names */

#endif /* CLIENT_TEST_UTIL_H */
