/* fi.h's liburing calls, for tests that link liburing (the reader). */
#include <errno.h>
#include <liburing.h>

#include "fi.h"

/* fi.c's counter, shared. */
bool fi__uring_hit(void);

int __real_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                      struct io_uring_params *p);
int __real_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov,
                                     unsigned n);
int __real_io_uring_register_iowq_max_workers(struct io_uring *ring, unsigned *values);
int __real_io_uring_submit(struct io_uring *ring);
int __real_io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr);

int __wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                      struct io_uring_params *p);
int __wrap_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov, unsigned n);
int __wrap_io_uring_register_iowq_max_workers(struct io_uring *ring, unsigned *values);
int __wrap_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr);

int __wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                      struct io_uring_params *p)
{
    return fi__uring_hit() ? -ENOMEM : __real_io_uring_queue_init_params(entries, ring, p);
}

int __wrap_io_uring_register_buffers(struct io_uring *ring, const struct iovec *iov, unsigned n)
{
    return fi__uring_hit() ? -ENOMEM : __real_io_uring_register_buffers(ring, iov, n);
}

int __wrap_io_uring_register_iowq_max_workers(struct io_uring *ring, unsigned *values)
{
    return fi__uring_hit() ? -ENOMEM : __real_io_uring_register_iowq_max_workers(ring, values);
}

int __wrap_io_uring_submit(struct io_uring *ring)
{
    return fi__uring_hit() ? -ENOMEM : __real_io_uring_submit(ring);
}

int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
    return fi__uring_hit() ? -ENOMEM : __real_io_uring_submit_and_wait(ring, wait_nr);
}
