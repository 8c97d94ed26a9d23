/* dispatch_launch.c: LAUNCH (protocol 1.2) and its LAUNCH_COMPLETION.
 * Depends on conn.h and jobs.h; used by dispatch.c. */
#ifndef GA_SERVER_DISPATCH_LAUNCH_H
#define GA_SERVER_DISPATCH_LAUNCH_H

#include "internal.h"

/* A validated LAUNCH from @c: refused with an ERROR when @c was not granted
 * LT_CAP_LAUNCH, else answered by exactly one LAUNCH_COMPLETION (now, for a
 * refusal, or when the executor is done). */
void ga_server__launch(struct ga_server__conn *c, const struct lt_msg_launch *m);
/* Answers a finished GA_JOB_LAUNCH and undoes its pins (after the answer);
 * the caller frees the job. */
void ga_server__launch_complete(struct ga_server *srv, struct ga_server__job *j);

#endif /* GA_SERVER_DISPATCH_LAUNCH_H */
