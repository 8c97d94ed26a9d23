/* Helpers for tests/hostile: each test plays one attack of issue #12 on a
 * real lease-agent-host (tests/gpu/server/harness.h) and checks that the
 * agent refuses it or survives it, and goes on serving everyone else.
 *
 * The tests run against older agents too (TH_AGENT=/path/to/old/agent), to
 * show that they fail there: so a segment is first offered sealed the way
 * agents before F_SEAL_FUTURE_WRITE wanted it, and only when the agent
 * refuses that as unsealed, sealed the way it wants now. */
#ifndef TESTS_HOSTILE_H
#define TESTS_HOSTILE_H

#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/server/harness.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#define HS_OLD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define HS_SEALS (HS_OLD_SEALS | F_SEAL_FUTURE_WRITE)

#define HS_KIB 1024ull
#define HS_MIB (1024ull * 1024ull)
#define HS_HUGE (2ull << 20)

struct hs_seg {
    int fd;
    unsigned char *map; /* this process's read-write mapping */
    uint64_t size;
    int huge;  /* hugetlb (2 MiB pages) */
    int seals; /* as added */
    struct lt_segment_id id;
};

/* A memfd of @size bytes (hugetlb when @huge) mapped read-write into s->map,
 * filled from @seed, then sealed @seals. Returns 0, or -errno (hugetlb with
 * no free pages: -ENOMEM). */
int hs_memfd(struct hs_seg *s, uint64_t size, int huge, int seals, uint64_t seed);
void hs_seg_close(struct hs_seg *s);

/* Offers @s as @cls on @conn: LT_OK with s->id set, or the ERROR's code
 * with its message copied to @msg. */
uint32_t hs_offer(int conn, struct hs_seg *s, uint32_t cls, char *msg, size_t msglen);

/* A segment this agent accepts: made and offered with HS_OLD_SEALS, and
 * when the agent refuses that as LT_E_SEGMENT_UNSEALED, made again with
 * HS_SEALS. Asserts that one of them is accepted. Returns 0, or -ENOMEM
 * for hugetlb without free pages. */
int hs_offer_accepted(int conn, struct hs_seg *s, uint64_t size, int huge, uint32_t cls,
                      uint64_t seed);

/* Makes and offers a segment sealed HS_OLD_SEALS and leases all of it as
 * @cls (with the checksum layout of hs_checksum_fill over the first @data
 * bytes when @data is not 0). When the agent refuses the offer or the lease
 * as LT_E_SEGMENT_UNSEALED -- it leases no bytes a client could free -- the
 * refusal must name F_SEAL_FUTURE_WRITE, and it all happens again with a
 * fresh segment sealed HS_SEALS. Asserts the lease is granted; *old_p
 * (may be NULL) is 1 when the old seals went through. Returns the grant. */
struct lt_lease_grant_entry hs_offer_and_lease(int conn, struct hs_seg *s, uint64_t size, int huge,
                                               uint32_t cls, uint64_t seed, uint64_t data,
                                               int *old_p);

/* Fills the first @data bytes with seeded bytes and puts their 4 KiB block
 * checksums at @data (the layout hs_checksum_submit asks the agent to
 * verify). */
void hs_checksum_fill(unsigned char *map, uint64_t data, uint64_t seed);
/* A CHECKSUM_VERIFY of [0, @data) of @lease against the sums at @data. */
void hs_checksum_submit(struct lt_msg_submit *s, struct lt_lease_id lease, uint64_t data);

/* A doorbell the client never rings: on @conn (granted LT_CAP_DOORBELL)
 * offers @bells (64 KiB, unsealed MAPPED, zeroed) and @data (64 KiB, seeds
 * @seed and @seed + 1), leases @data STAGED and sends a CHECKSUM_VERIFY of
 * @len bytes behind the bell at offset 0 with sequence 1; asserts the agent
 * stays silent for 50 ms. Returns the SUBMIT's request id. */
uint64_t hs_unrung_bell_submit(int conn, struct hs_seg *bells, struct hs_seg *data, uint64_t len,
                               uint64_t seed);

/* A client thread that zeroes the bell word @bell over and over, taking
 * back whatever the agent might store there, until hs_bell_rewriter_stop. */
struct hs_rewriter {
    pthread_t thread;
    uint64_t *bell;
    int running;
};
void hs_bell_rewriter_start(struct hs_rewriter *r, void *bell);
void hs_bell_rewriter_stop(struct hs_rewriter *r);

/* Asserts the agent process is alive and a new client is served: HELLO
 * and STATS_REQUEST answered. */
void hs_assert_serving(struct th_agent *a);
/* The end of a test: hs_assert_serving, then the agent stopped (SIGTERM)
 * and expected to exit 0, and its files removed. */
void hs_agent_finish(struct th_agent *a);

/* 1 while @pid has not exited (it is not reaped). */
int hs_alive(pid_t pid);

/* Huge pages free now, less those promised to mappings. */
long hs_huge_free(void);

/* A LAUNCH of @kernel (image launch_kernels, the launch test cubins) on the
 * first 4 KiB of @lease, one thread block of 32, one argument word 1, 8
 * result bytes unless @flags asks LT_LAUNCH_LEASE_F_WRITE. Returns its id. */
uint64_t hs_launch_send(int c, struct lt_lease_id lease, uint32_t flags, const char *kernel);
/* Its LAUNCH_COMPLETION, asserted to answer @rid. */
struct lt_msg_launch_completion hs_launch_wait(int c, uint64_t rid);

#endif /* TESTS_HOSTILE_H */
