/* dispatch.c: the protocol handlers. Depends on conn.h and jobs.h; used by
 * server.c. */
#ifndef GA_SERVER_DISPATCH_H
#define GA_SERVER_DISPATCH_H

#include "internal.h"

/* Validates and answers one received message; closes @fds it does not keep. */
void ga_server__dispatch(struct ga_server__conn *c, const void *buf, size_t len, int *fds,
                         size_t nfds);
/* Answers a finished job on the loop thread and frees it. */
void ga_server__complete(struct ga_server *srv, struct ga_server__job *job);
/* lease service callbacks */
void ga_server__on_release_complete(void *arg, struct lease_client_id client,
                                    struct lt_lease_id lease);
void ga_server__on_client_drained(void *arg, struct lease_client_id client);

#endif /* GA_SERVER_DISPATCH_H */
