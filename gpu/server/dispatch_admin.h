/* dispatch_admin.c: the introspection requests (1.4, LT_CAP_INTROSPECT)
 * that leasectl pages through. Depends on conn.h; used by dispatch.c. */
#ifndef GA_SERVER_DISPATCH_ADMIN_H
#define GA_SERVER_DISPATCH_ADMIN_H

#include "internal.h"

/* Answers a validated LEASE_LIST_REQUEST or SEGMENT_LIST_REQUEST (@type)
 * from @c with one reply or an ERROR: LT_E_UNKNOWN_TYPE when @c was not
 * granted LT_CAP_INTROSPECT, LT_E_NOT_OWNER when it asks for another
 * client's entries without being privileged (ga_server__peer_privileged). */
void ga_server__list(struct ga_server__conn *c, const struct lt_msg_list_request *m,
                     uint16_t type);

/* 1 when @c may see every client's leases and segments: its uid is the
 * agent's own (the socket's owner) or root. */
int ga_server__peer_privileged(const struct ga_server__conn *c);

#endif /* GA_SERVER_DISPATCH_ADMIN_H */
