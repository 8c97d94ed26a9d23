/* conn.c: one client connection. Depends on internal.h only; used by
 * dispatch.c and server.c. */
#ifndef GA_SERVER_CONN_H
#define GA_SERVER_CONN_H

#include "internal.h"

/* Queues or sends one message to @c; a dead or closed client drops it. */
void ga_server__send(struct ga_server__conn *c, const void *msg, uint32_t len);
/* The same with @fd attached (SCM_RIGHTS); the caller keeps @fd (a queued
 * message holds a dup of it). */
void ga_server__send_fd(struct ga_server__conn *c, const void *msg, uint32_t len, int fd);
/* Sends what is queued, up to a batch of messages per sendmmsg. */
void ga_server__flush(struct ga_server__conn *c);
/* Between these two, replies to @c are queued and then sent in as few
 * sendmmsg calls as they fit (a release of 64 leases: 64 RELEASE_COMPLETEs, or
 * one RELEASE_COMPLETE_BATCH for a client granted LT_CAP_RC_BATCH). */
void ga_server__cork(struct ga_server__conn *c);
void ga_server__uncork(struct ga_server__conn *c);
/* Sends an ERROR: @code, the failing batch @index (LT_INDEX_NONE), and a
 * message, cut at a word to fit the wire. Its err is @err for LT_E_SYSTEM
 * (when a valid errno) and lt_error_errno(@code) otherwise, as the protocol
 * defines the field. Logged: at warning, with the option that helps, for the
 * pin budget and RLIMIT_MEMLOCK; at info otherwise. */
void ga_server__send_error(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                           uint32_t code, int err, uint32_t index, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Sends the ERROR for a refusal as whoever decided it explained it. */
void ga_server__send_failure(struct ga_server__conn *c, uint64_t request_id, uint16_t failed_type,
                             uint32_t index, const struct lt_failure *why);
/* Whether @c may have one more request in flight: its own count under
 * --max-inflight and its uid's, over every connection of that uid (open or
 * draining), under --max-inflight-per-uid. When not, @why says which limit
 * (the ERROR's text, LT_E_LIMIT). */
bool ga_server__inflight_room(const struct ga_server__conn *c, char *why, size_t len);
/* Marks @c for closing after the current event. */
void ga_server__conn_kill(struct ga_server__conn *c, const char *why);
/* Closes every client marked dead. */
void ga_server__sweep(struct ga_server *srv);
/* Peer gone (or told to go): its socket, queue, executor owner, leases and
 * segments. Freed once its last job is answered. */
void ga_server__conn_close(struct ga_server__conn *c);
struct ga_server__conn *ga_server__conn_by_client(struct ga_server *srv,
                                                  struct lease_client_id client);
/* A job of @c finished: frees a closed client whose last job it was. */
void ga_server__conn_put(struct ga_server__conn *c);
void ga_server__seg_unref(struct ga_server__seg *seg);
/* An fd of the agent's was closed: accepting may resume (it pauses on
 * EMFILE). ga_server__accept_resume, from the loop, then re-arms it. */
void ga_server__fd_freed(struct ga_server *srv);
void ga_server__accept_resume(struct ga_server *srv);

#endif /* GA_SERVER_CONN_H */
