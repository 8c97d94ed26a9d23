/* work.c: the executor's requests and their answers. Depends on conn.h and
 * jobs.h; used by dispatch.c. */
#ifndef GA_SERVER_WORK_H
#define GA_SERVER_WORK_H

#include "internal.h"

/* Refuses a lease (resolved into @li; @what names it, as the request does)
 * as data when the lease service marked it words-only: granted through
 * LEASE_GRANT_ALLOW_WORDS in an unsealed MAPPED segment, whose client can
 * punch or MADV_REMOVE those pages under the lease. Returns 0, or -EPERM
 * with LT_E_SEGMENT_UNSEALED in *@why, worded to fit an ERROR's 87 bytes. */
int ga_server__lease_as_data(const char *what, const struct lease_info *li, struct lt_failure *why);
/* Whether a page under the lease in @li is gone: a segment the client can
 * punch (unsealed, --seals legacy) read one byte a page, guarded, before
 * the driver's own CPU reads of it could fault outside any guard. True
 * with LT_E_SEGMENT_GONE in *@why: the client is then dropped. */
bool ga_server__lease_gone(const struct lease_info *li, struct lt_failure *why);
/* After a request was refused because memory of @c's is gone (@why, from
 * ga_server__lease_gone or a word's read): logs it and drops @c, as after
 * any SIGBUS on a client's memory. */
void ga_server__drop_gone(struct ga_server__conn *c, const struct lt_failure *why);
/* A validated SUBMIT from @c: resolved, held and handed to the executor, or
 * refused with an ERROR. */
void ga_server__submit(struct ga_server__conn *c, const struct lt_msg_submit *m);
/* A validated stream, event or device command (@type) from @c. */
void ga_server__ctl(struct ga_server__conn *c, const void *buf, uint16_t type);
/* Answers a finished GA_JOB_WORK or GA_JOB_CTL job and undoes what it held;
 * the caller frees the job. */
void ga_server__work_complete(struct ga_server *srv, struct ga_server__job *j);
/* The COMPLETION of finished job @j, a SUBMIT's or a ring shard's, into @r. */
void ga_server__completion_build(const struct ga_server__job *j, struct lt_msg_completion *r);

#endif /* GA_SERVER_WORK_H */
