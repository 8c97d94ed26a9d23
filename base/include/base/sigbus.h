/* base: surviving a SIGBUS on memory another process can take away.
 *
 * A shared mapping of a file some other process controls (a memfd a peer
 * passed over a socket) faults with SIGBUS where that process freed the
 * pages under it: a truncation, or a hole punched in a hugetlb file while
 * no free huge page is left to fault back in. Sealing the file is the first
 * defence (docs/lease-service.md); this is the second, for what a seal
 * cannot stop or a kernel does not offer.
 *
 * base_guard_run runs a piece of code with one address range armed on the
 * calling thread. A SIGBUS whose address lies inside an armed range of the
 * faulting thread ends that piece at once, and its base_guard_run returns
 * -EFAULT. Every other SIGBUS (another address, another thread, nothing
 * armed, one sent by kill) goes on to whatever handled SIGBUS before the
 * guard was installed, by default the kernel's: the process dies with a
 * core, as it would without the guard.
 *
 * The guarded code is abandoned mid-way (siglongjmp), so it must not take a
 * lock, allocate, or leave any state half-changed that outlives the call:
 * copy, compare, load and store. Guards nest; the innermost one whose range
 * holds the address catches the fault, and the pieces inside it are
 * abandoned with it. A guard is never crossed by a CUDA host function or any
 * other callback boundary: each call returns before its caller does.
 *
 * Threads: the handler is process-wide, installed once (base_guard_install,
 * or the first guard's call); ranges are armed per thread. The handler
 * reads only the faulting thread's own thread-local state. A thread's first
 * guarded call unblocks SIGBUS on it (and leaves it unblocked): the kernel
 * kills a process whose thread faults with SIGBUS blocked, and guarded code
 * may run on threads its caller did not make (a driver's, running stream
 * host functions) with whatever mask they were given. */
#ifndef BASE_SIGBUS_H
#define BASE_SIGBUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the process-wide SIGBUS handler (SA_SIGINFO | SA_NODEFER),
 * keeping the one it replaces for every fault that is not a guard's.
 * Idempotent and thread-safe. Returns 0, or -errno from sigaction. */
int base_guard_install(void);

typedef void (*base_guard_fn)(void *arg);

/* Runs @fn(@arg) with [@addr, @addr + @len) armed on this thread. Returns
 * 0 when @fn returned, -EFAULT when a SIGBUS inside the range ended it, or
 * -errno when the handler could not be installed (@fn not run). */
int base_guard_run(const void *addr, size_t len, base_guard_fn fn, void *arg);

/* memcpy(@dst, @src, @len) with both ranges armed (either may be a peer's
 * memory). Returns 0 or -EFAULT (then @dst holds a part of the bytes). */
int base_guard_copy(void *dst, const void *src, size_t len);

/* An acquire load of *@word into *@value_p (written only on success).
 * Returns 0 or -EFAULT. */
int base_guard_load_u64(const uint64_t *word, uint64_t *value_p);

/* A release store of @value into *@word. Returns 0 or -EFAULT. */
int base_guard_store_u64(uint64_t *word, uint64_t value);

/* Faults caught by guards since the process started (all threads). */
uint64_t base_guard_faults(void);

#ifdef __cplusplus
}
#endif

#endif /* BASE_SIGBUS_H */
