/* server_metrics.c: the agent's /metrics. The event hooks below are called
 * where the events happen, on the loop thread; each is a few atomic adds,
 * nothing when /metrics is off. Registrations and their time are the lease
 * service's counters, read at a scrape. Depends on internal.h only; called
 * from dispatch.c, work.c and server.c. */
#ifndef GA_SERVER_METRICS_H
#define GA_SERVER_METRICS_H

#include "internal.h"

/* A SUBMIT accepted (@j the job, @m its message): counts it by op and the
 * doorbell waits, and keeps the bytes its op covers in j->op_bytes. */
void ga_server__metrics_submit(struct ga_server *srv, struct ga_server__job *j,
                               const struct lt_msg_submit *m);
/* A GA_JOB_WORK job finished: its completion by op and status, and its
 * bytes when it succeeded. */
void ga_server__metrics_completion(struct ga_server *srv, const struct ga_server__job *j);
/* A RELEASE_COMPLETE (or a batch entry) sent with @status. */
void ga_server__metrics_release_complete(struct ga_server *srv, uint32_t status);
/* On the loop thread when woken: takes the clients' snapshot a scrape asked
 * for. */
void ga_server__metrics_serve(struct ga_server *srv);
/* Stops the HTTP thread and frees what metrics_start made (before the lease
 * service goes). Idempotent. */
void ga_server__metrics_stop(struct ga_server *srv);

#endif /* GA_SERVER_METRICS_H */
