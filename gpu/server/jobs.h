/* jobs.c: work off the loop thread. Depends on internal.h only; used by
 * dispatch.c and server.c. */
#ifndef GA_SERVER_JOBS_H
#define GA_SERVER_JOBS_H

#include "internal.h"

/* From any thread: hands a finished job to the loop and wakes it. */
void ga_server__post(struct ga_server *srv, struct ga_server__job *job);
/* On the loop: every job posted so far, in order (NULL: none). */
struct ga_server__job *ga_server__jobs_take(struct ga_server *srv);
/* Queues a segment offer for the registrar thread, which registers it
 * (lease_segment_add) and posts the job back. */
void ga_server__offer_queue(struct ga_server *srv, struct ga_server__job *job);
/* Starts the registrar thread. Returns 0 or pthread_create's -errno. */
int ga_server__registrar_start(struct ga_server *srv);
/* Answers the offers not started yet (LT_E_SHUTTING_DOWN, posted) and joins
 * the thread. Idempotent. */
void ga_server__registrar_stop(struct ga_server *srv);

#endif /* GA_SERVER_JOBS_H */
