/* ring.c: streaming rings (protocol 1.1, docs/streaming.md): RING_OPEN,
 * RING_SHARD and RING_CLOSE resolved against the lease service and handed
 * to the executor; their answers. Depends on conn.h and jobs.h; used by
 * dispatch.c and work.c. */
#ifndef GA_SERVER_RING_H
#define GA_SERVER_RING_H

#include "internal.h"

/* Validated messages from @c: each answered (RING_OPENED, a COMPLETION,
 * RING_CLOSED) or refused with an ERROR. */
void ga_server__ring_open(struct ga_server__conn *c, const struct lt_msg_ring_open *m);
void ga_server__ring_shard(struct ga_server__conn *c, const struct lt_msg_ring_shard *m);
void ga_server__ring_close(struct ga_server__conn *c, const struct lt_msg_ring_close *m);

/* A finished GA_JOB_SHARD or GA_JOB_RING_GONE job, on the loop; the
 * caller frees the job. */
void ga_server__ring_complete(struct ga_server *srv, struct ga_server__job *j);

/* The RING_CLOSED (or ERROR) for a finished RING_CLOSE command. */
void ga_server__ring_closed_reply(struct ga_server__conn *c, struct ga_server__job *j);

#endif /* GA_SERVER_RING_H */
