/* ga completer: the completion thread (library ga_exec, driver-free).
 *
 * A driver calls a stream's host functions on its own thread, where driver
 * calls are forbidden, and while one runs the stream waits. So the host
 * function only queues a node prepared beforehand (allocated and counted
 * before it is handed to the driver, so firing needs no allocation); this
 * thread runs the node's function, which may call the driver or the lease
 * service, and frees the node.
 *
 * Threads: every call may run on any thread; ga_completer_fire is what the
 * driver calls. Errors are logged once through the completer's sink
 * (subsystem "exec"). */
#ifndef GPU_COMPLETER_H
#define GPU_COMPLETER_H

#include <stdint.h>

#include "base/log.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ga_completer;
struct ga_cnode;

/* Starts the completion thread; @log (NULL: the process default) is kept by
 * pointer and must outlive the completer. Returns 0, -ENOMEM or
 * pthread_create's errno. */
int ga_completer_create(const struct base_log_sink *log, struct ga_completer **c_p);

/* A node that will run @fn(@arg) once fired; counted as pending. Returns 0
 * or -ENOMEM. */
int ga_completer_prepare(struct ga_completer *c, void (*fn)(void *arg), void *arg,
                         struct ga_cnode **node_p);

/* Frees a node that was never fired (its hand-over to the driver failed). */
void ga_completer_cancel(struct ga_completer *c, struct ga_cnode *node);

/* Fires @node (a struct ga_cnode *): a host function the driver calls once
 * the stream's earlier work is done. Takes a mutex and signals; nothing
 * else. */
void ga_completer_fire(void *node);

/* Nodes prepared and not yet run; nodes run. */
void ga_completer_counts(struct ga_completer *c, uint64_t *pending_p, uint64_t *run_p);

/* Waits until every prepared node has run (unless @abandon: the device
 * faulted and some may never fire), stops the thread and frees @c. Returns
 * how many nodes were abandoned; when that is not 0, @c is deliberately left
 * allocated, since the driver may still fire one. NULL: 0. */
uint64_t ga_completer_destroy(struct ga_completer *c, int abandon);

#ifdef __cplusplus
}
#endif

#endif /* GPU_COMPLETER_H */
