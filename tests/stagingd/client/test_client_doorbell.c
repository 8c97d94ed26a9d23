/* The lease client against a fake agent: Doorbells and done words across processes. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/blockhash_ref.h"
#include "client_test_util.h"

/* ---- doorbells ---- */

START_TEST(test_doorbell_ring_and_done_word_cross_processes)
{
    enum { ROUNDS = 2000, SLOTS = 64 };
    int fd;
    uint64_t *w = memfd_seg(4096, &fd);
    uint64_t *bell = &w[0], *done = &w[1], *result = &w[2], *data = &w[8];
    memset(w, 0, 4096);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* the "GPU": waits for each ring, reads the staged words, answers */
        for (uint64_t seq = 1; seq <= ROUNDS; seq++) {
            uint64_t spins = 0;
            while (__atomic_load_n(bell, __ATOMIC_ACQUIRE) < seq)
                if (++spins % 64 == 0) {
                    sched_yield();
                    if (spins > (1ull << 30))
                        _exit(2);
                }
            uint64_t sum = seq;
            for (int i = 0; i < SLOTS; i++)
                sum = sum * 31 + data[i];
            *result = sum;
            __atomic_store_n(done, seq, __ATOMIC_RELEASE);
        }
        _exit(0);
    }
    uint64_t rng = SEED;
    for (uint64_t seq = 1; seq <= ROUNDS; seq++) {
        uint64_t expect = seq;
        for (int i = 0; i < SLOTS; i++) {
            data[i] = rng_next(&rng);
            expect = expect * 31 + data[i];
        }
        leasec_client_ring(bell, seq);
        uint64_t spins = 0;
        while (leasec_client_done_word_read(done) < seq) {
            if (++spins % 64 == 0)
                sched_yield();
            ck_assert_msg(spins < (1ull << 30), "round %llu: no answer", (unsigned long long)seq);
        }
        ck_assert_uint_eq(leasec_client_done_word_read(done), seq);
        ck_assert_uint_eq(*result, expect);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* the words a client resolves are the segment's own */
    struct leasec_client *c = client_new(5, 50);
    ck_assert_int_eq(leasec_client_segment_add(c, 5, fd, w, 4096, LT_CLASS_MAPPED), 0);
    uint64_t *p;
    ck_assert_int_eq(leasec_client_word_ptr(c, 5, 8, &p), 0);
    ck_assert_ptr_eq(p, done);
    ck_assert_int_eq(leasec_client_word_ptr(c, 5, 4092, &p), -EINVAL);
    ck_assert_int_eq(leasec_client_word_ptr(c, 5, 4096, &p), -EINVAL);
    ck_assert_int_eq(leasec_client_word_ptr(c, 6, 0, &p), -ENOENT);
    leasec_client_destroy(c);
    munmap(w, 4096);
    close(fd);
}
END_TEST

void client_tests_doorbell(TCase *tc)
{
    tcase_add_test(tc, test_doorbell_ring_and_done_word_cross_processes);
}
