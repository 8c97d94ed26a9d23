/* A fake GPU agent for the lease client's tests, speaking wire protocol v1
 * on a SOCK_SEQPACKET socket. Two forms: a scripted one the test drives
 * message by message from its own thread (the client is non-blocking, so
 * one thread can play both sides), and an automatic one in a forked
 * process that serves HELLO, offers, leases, submits (CHECKSUM_VERIFY,
 * computed with the C reference over the memfd it was given, honouring
 * doorbell and completion words) and releases (one RELEASE_COMPLETE_BATCH
 * per release when LT_CAP_RC_BATCH was asked for), and can kill itself
 * mid-run. */
#ifndef TESTS_CLIENT_FAKE_AGENT_H
#define TESTS_CLIENT_FAKE_AGENT_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/un.h>

#include "lease_types/lease_types.h"

struct fake {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int lfd; /* listening socket, -1 when closed */
    int cfd; /* accepted connection, -1 when none */
};

/* Listens at @path (removing a stale socket file first). */
void fake_listen(struct fake *f, const char *path);
/* Accepts one connection within 5 s (fails the test otherwise). */
void fake_accept(struct fake *f);
/* Receives one packet within @timeout_ms into @b, fds into @fds (room for
 * 4, may be NULL when none are expected). Returns the length, or -1 on timeout. */
ssize_t fake_recv(struct fake *f, union lt_msg_buffer *b, int timeout_ms, int *fds, unsigned *nfds);
/* Sends @len raw bytes as one packet, with @fd attached when >= 0. */
void fake_send(struct fake *f, const void *msg, size_t len, int fd);
/* Closes the accepted connection (the agent "dies" for this client). */
void fake_drop(struct fake *f);
/* Closes everything and removes the socket file. */
void fake_close(struct fake *f);

/* A valid HELLO_REPLY answering @rid. */
void fake_hello_reply(struct lt_msg_hello_reply *m, uint64_t rid, uint32_t caps, uint32_t batch);
/* A valid ERROR answering @rid. */
void fake_error(struct lt_msg_error *m, uint64_t rid, uint16_t failed_type, uint32_t code,
                uint32_t index, const char *text);

/* Forks an automatic agent listening at @path. After @die_after
 * completions it SIGKILLs itself on the next SUBMIT it receives (-1:
 * never). Returns the child's pid. */
pid_t auto_agent_start(const char *path, int die_after, uint32_t max_batch);

#endif /* TESTS_CLIENT_FAKE_AGENT_H */
