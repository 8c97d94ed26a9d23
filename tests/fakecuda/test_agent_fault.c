/* lease-agent's CUDA backend when the GPU faults, over its socket: the
 * kernel of a CHECKSUM_VERIFY faults (FAKECUDA_FAULT_KERNEL, which only the
 * fake can do), the submit is answered GPU_FAULT, the agent says the device
 * is unusable and exits with status 1. Runs against tests/fakecuda only. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/blockhash_ref.h"

#define MiB (1024ull * 1024ull)
#define CAPS (LT_CAP_DOORBELL | LT_CAP_DONE_WORD | LT_CAP_TIMING)

/* --on-fault exit: the agent stops after the fault (test_agent_launch
 * proves the default, a restart on the same socket). */
static const char *const agent_args[] = {"--chunk-bytes", "1M", "--on-fault", "exit",
                                         "--pinned-budget", "16M", NULL};

/* Another client's COPY_H2D parked behind a bell it never rings: the bell
 * in an unsealed MAPPED segment of its own (@map_p), the data in a sealed
 * one leased PINNED. */
static uint64_t parked_copy_send(int fd, void **map_p)
{
    const uint64_t size = 1 * MiB;
    int bfd = th_memfd(size, TH_OLD_SEALS, 9, map_p);
    memset(*map_p, 0, 64);
    struct lt_segment_id bells = th_offer(fd, bfd, size, LT_CLASS_MAPPED, 9);
    close(bfd);
    void *data = NULL;
    int dfd = th_memfd(size, TH_GOOD_SEALS, 10, &data);
    struct lt_segment_id seg = th_offer(fd, dfd, size, LT_CLASS_PINNED, 10);
    close(dfd);
    munmap(data, size);
    struct lt_lease_grant_entry g = th_lease(fd, seg, 0, size, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);
    struct lt_msg_submit m;
    memset(&m, 0, sizeof m);
    m.lease = g.lease;
    m.op = LT_OP_COPY_H2D;
    m.args.copy = (struct lt_op_copy_h2d){.offset = 4096, .length = 64 * 1024};
    m.flags = LT_SUBMIT_F_WAIT_BELL;
    m.bell = (struct lt_word_ref){.segment = bells, .offset = 0};
    m.bell_seq = 1;
    const uint64_t rid = th_submit_send(fd, &m);
    th_expect_silence(fd, 50);
    return rid;
}

START_TEST(a_faulting_kernel_is_answered_gpu_fault_and_stops_the_agent)
{
    ck_assert_msg(getenv("FAKECUDA_FAULT_KERNEL"), "run with FAKECUDA_FAULT_KERNEL set");
    struct th_agent a;
    th_agent_start(&a, NULL, agent_args);
    /* A bell-gated submit of another client, parked behind a bell the
     * agent polls on the CPU: the fault answers it GPU_FAULT too, and the
     * agent still stops with status 1 once that client has gone. */
    int parked = th_hello(a.sock, CAPS, NULL);
    void *parked_map = NULL;
    const uint64_t parked_rid = parked_copy_send(parked, &parked_map);
    int fd = th_hello(a.sock, CAPS, NULL);
    const uint64_t size = 4 * MiB, len = 3 * MiB;
    const uint32_t bs = 65536;
    void *map = NULL;
    int mfd = th_memfd(size, TH_GOOD_SEALS, 5, &map);
    uint64_t *sums = (uint64_t *)(void *)((unsigned char *)map + len);
    ck_assert_int_eq(kr_block_checksums(map, len, bs, sums), (long)(len / bs));
    struct lt_segment_id seg = th_offer(fd, mfd, size, LT_CLASS_PINNED, 5);
    close(mfd);
    struct lt_lease_grant_entry g = th_lease(fd, seg, 0, size, LT_CLASS_PINNED);
    ck_assert_uint_eq(g.status, LT_OK);

    struct lt_msg_submit m;
    memset(&m, 0, sizeof m);
    m.lease = g.lease;
    m.op = LT_OP_CHECKSUM_VERIFY;
    m.args.checksum = (struct lt_op_checksum_verify){
        .offset = 0, .length = len, .sums_offset = len, .block_size = bs};
    uint64_t rid = th_submit_send(fd, &m);
    union lt_msg_buffer b;
    ssize_t n = 0;
    do {
        n = th_recv(fd, &b, TH_TIMEOUT_MS);
    } while (n > 0 && !(b.hdr.type == LT_MSG_COMPLETION && b.hdr.request_id == rid));
    ck_assert_msg(n > 0, "no completion for the faulting submit");
    struct lt_msg_completion c;
    memcpy(&c, b.bytes, sizeof c);
    ck_assert_msg(c.status == LT_E_GPU_FAULT, "expected GPU_FAULT, found %s",
                  lt_error_name(c.status));
    ck_assert(th_file_wait_for(a.log, "the GPU faulted", 5000));
    ck_assert(th_file_wait_for(a.log, "CUDA_ERROR_ILLEGAL_ADDRESS", 0));
    do {
        n = th_recv(parked, &b, TH_TIMEOUT_MS);
    } while (n > 0 && !(b.hdr.type == LT_MSG_COMPLETION && b.hdr.request_id == parked_rid));
    ck_assert_msg(n > 0, "no completion for the parked submit");
    memcpy(&c, b.bytes, sizeof c);
    ck_assert_msg(c.status == LT_E_GPU_FAULT, "the parked submit: expected GPU_FAULT, found %s",
                  lt_error_name(c.status));
    close(parked);
    munmap(parked_map, 1 * MiB);
    usleep(300 * 1000); /* the agent lets the parked client's segment go */
    close(fd);
    ck_assert_int_eq(th_agent_stop(&a), 1);
    th_agent_cleanup(&a);
    munmap(map, size);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("agent_fault");
    TCase *tc = tcase_create("fault");
    tcase_add_test(tc, a_faulting_kernel_is_answered_gpu_fault_and_stops_the_agent);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
