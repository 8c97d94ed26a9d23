/* The SIGBUS guard: see base/sigbus.h. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "base/sigbus.h"

/* One or two armed ranges, on the stack of the call that armed them. */
struct base__guard_frame {
    uintptr_t lo, hi;   /* [lo, hi) */
    uintptr_t lo2, hi2; /* a second range (a copy's destination), or empty */
    struct base__guard_frame *prev;
    sigjmp_buf jb;
};

/* The innermost armed frame of this thread. Written only by this thread;
 * read by its signal handler, hence the signal fences around the writes. */
static _Thread_local struct base__guard_frame *base__guard_top;
static _Thread_local bool base__guard_unblocked; /* SIGBUS unblocked on this thread */

static struct sigaction base__guard_prev; /* what handled SIGBUS before */
static pthread_once_t base__guard_once = PTHREAD_ONCE_INIT;
static int base__guard_err;
static uint64_t base__guard_caught;

/* Hands a fault that is no guard's to the handler that was there before:
 * the default one is restored and the fault, on return, happens again
 * (synchronous) or is raised again (sent), so the process dies of it. */
static void base__guard_forward(int sig, siginfo_t *si, void *uc)
{
    if ((base__guard_prev.sa_flags & SA_SIGINFO) && base__guard_prev.sa_sigaction) {
        base__guard_prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (base__guard_prev.sa_handler != SIG_DFL && base__guard_prev.sa_handler != SIG_IGN) {
        base__guard_prev.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (si->si_code <= 0) /* kill(), sigqueue(), tgkill(): nothing to re-execute */
        raise(sig);
}

static void base__guard_handler(int sig, siginfo_t *si, void *uc)
{
    /* Only a fault the kernel raised carries a meaningful address. */
    if (si->si_code > 0) {
        uintptr_t a = (uintptr_t)si->si_addr;
        for (struct base__guard_frame *f = base__guard_top; f; f = f->prev) {
            if ((a >= f->lo && a < f->hi) || (a >= f->lo2 && a < f->hi2)) {
                /* SA_NODEFER: SIGBUS is not blocked here, so no mask to
                 * restore on the way out. */
                siglongjmp(f->jb, 1);
            }
        }
    }
    base__guard_forward(sig, si, uc);
}

static void base__guard_setup(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = base__guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &base__guard_prev) < 0)
        base__guard_err = -errno;
}

int base_guard_install(void)
{
    pthread_once(&base__guard_once, base__guard_setup);
    return base__guard_err;
}

static void base__guard_range(uintptr_t *lo_p, uintptr_t *hi_p, const void *addr, size_t len)
{
    *lo_p = (uintptr_t)addr;
    *hi_p = len > UINTPTR_MAX - *lo_p ? UINTPTR_MAX : *lo_p + len;
}

/* base_guard_run with a second range armed as well. */
static int base__guard_run2(const void *addr, size_t len, const void *addr2, size_t len2,
                            base_guard_fn fn, void *arg)
{
    int rc = base_guard_install();
    if (rc < 0)
        return rc;
    /* A synchronous SIGBUS that is blocked on the faulting thread kills the
     * process whatever the handler (the kernel forces the default action),
     * and this may run on a thread someone else made and masked (a
     * driver's, running a stream host function such as a bounce copy).
     * Once a thread: guards sit in polling loops (the host backend's
     * doorbells), and a mask is not changed under them. */
    if (!base__guard_unblocked) {
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        if ((rc = pthread_sigmask(SIG_UNBLOCK, &bus, NULL)) != 0)
            return -rc;
        base__guard_unblocked = true;
    }
    struct base__guard_frame f;
    base__guard_range(&f.lo, &f.hi, addr, len);
    base__guard_range(&f.lo2, &f.hi2, addr2, len2);
    f.prev = base__guard_top;
    if (sigsetjmp(f.jb, 0) != 0) {
        /* The handler jumped here; frames inside this one are gone too. */
        base__guard_top = f.prev;
        atomic_signal_fence(memory_order_seq_cst);
        __atomic_fetch_add(&base__guard_caught, 1, __ATOMIC_RELAXED);
        return -EFAULT;
    }
    base__guard_top = &f;
    atomic_signal_fence(memory_order_seq_cst);
    fn(arg);
    atomic_signal_fence(memory_order_seq_cst);
    base__guard_top = f.prev;
    atomic_signal_fence(memory_order_seq_cst);
    return 0;
}

int base_guard_run(const void *addr, size_t len, base_guard_fn fn, void *arg)
{
    return base__guard_run2(addr, len, NULL, 0, fn, arg);
}

struct base__guard_copy {
    void *dst;
    const void *src;
    size_t len;
};

static void base__guard_copy_fn(void *arg)
{
    struct base__guard_copy *c = arg;
    memcpy(c->dst, c->src, c->len);
}

int base_guard_copy(void *dst, const void *src, size_t len)
{
    struct base__guard_copy c = {dst, src, len};
    return base__guard_run2(src, len, dst, len, base__guard_copy_fn, &c);
}

struct base__guard_word {
    uint64_t *word;
    uint64_t value;
};

static void base__guard_load_fn(void *arg)
{
    struct base__guard_word *w = arg;
    w->value = __atomic_load_n(w->word, __ATOMIC_ACQUIRE);
}

static void base__guard_store_fn(void *arg)
{
    struct base__guard_word *w = arg;
    __atomic_store_n(w->word, w->value, __ATOMIC_RELEASE);
}

int base_guard_load_u64(const uint64_t *word, uint64_t *value_p)
{
    struct base__guard_word w = {(uint64_t *)(uintptr_t)word, 0};
    int rc = base_guard_run(word, sizeof *word, base__guard_load_fn, &w);
    if (rc == 0)
        *value_p = w.value;
    return rc;
}

int base_guard_store_u64(uint64_t *word, uint64_t value)
{
    struct base__guard_word w = {word, value};
    return base_guard_run(word, sizeof *word, base__guard_store_fn, &w);
}

uint64_t base_guard_faults(void)
{
    return __atomic_load_n(&base__guard_caught, __ATOMIC_RELAXED);
}
