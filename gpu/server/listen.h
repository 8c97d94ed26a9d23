/* listen.c: the socket, its directory and lock file, peer credentials.
 * Depends on internal.h only; used by server.c. */
#ifndef GA_SERVER_LISTEN_H
#define GA_SERVER_LISTEN_H

#include "internal.h"

/* Runtime directory, lock file, stale socket, bind, listen. */
int ga_server__listen_open(struct ga_server *srv);
/* handover.c: takes over a listening socket and its lock from the agent
 * process before this one, checking both. */
int ga_server__listen_adopt(struct ga_server *srv, const struct ga_server_listener *l);
/* Closes the listening socket and removes the socket file (not the lock);
 * with ga_server_listener_keep, only takes it out of the loop. */
void ga_server__listen_close(struct ga_server *srv);
/* Removes the lock file and releases the lock. */
void ga_server__lock_release(struct ga_server *srv);
/* Reads the peer's credentials; 1 when its uid is allowed, 0 when refused. */
int ga_server__peer_check(struct ga_server *srv, int fd, pid_t *pid_p, uid_t *uid_p);

#endif /* GA_SERVER_LISTEN_H */
