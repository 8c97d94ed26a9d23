/* words.c: the client's words area (LT_CAP_WORDS): memory the agent makes,
 * owns and writes (done words, scan hits) and the client can only read.
 * Depends on conn.h; used by dispatch.c and work.c. */
#ifndef GA_SERVER_WORDS_H
#define GA_SERVER_WORDS_H

#include "internal.h"

/* WORDS_REQUEST: makes the area, registers it, answers WORDS_GRANT with its
 * fd, or an ERROR (LT_E_UNSUPPORTED without the cap, LT_E_LIMIT for a
 * second one, the lease service's refusal). */
void ga_server__words_request(struct ga_server__conn *c, const struct lt_msg_words_request *m);

#endif /* GA_SERVER_WORDS_H */
