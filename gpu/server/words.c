/* The words area: a memfd per client that the agent creates, maps
 * read-write and registers MAPPED (lease_segment_add_words), and seals
 * SHRINK|GROW|SEAL|FUTURE_WRITE once mapped, so the client it goes to
 * (WORDS_GRANT carries the fd) can map it read-only and nobody can shrink
 * it or free its pages. The agent writes there what it must write for the
 * client -- done words (the GPU's cuStreamWriteValue64, the host backend's
 * store) and VECTOR_SCAN hits -- and never into the client's own segments,
 * which it maps read-only when they are sealed F_SEAL_FUTURE_WRITE
 * (docs/lease-service.md, "What a peer can and cannot do to shared
 * memory"). It goes with the connection. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conn.h"
#include "words.h"

void ga_server__words_request(struct ga_server__conn *c, const struct lt_msg_words_request *m)
{
    struct ga_server *srv = c->srv;
    uint64_t rid = m->hdr.request_id;
    if (!(c->caps & LT_CAP_WORDS)) {
        ga_server__send_error(c, rid, LT_MSG_WORDS_REQUEST, LT_E_UNSUPPORTED, 0, LT_INDEX_NONE,
                              "WORDS_REQUEST needs the WORDS capability, not granted at HELLO");
        return;
    }
    if (c->words) {
        ga_server__send_error(c, rid, LT_MSG_WORDS_REQUEST, LT_E_LIMIT, 0, LT_INDEX_NONE,
                              "one words area per connection: segment {%" PRIu32 ",%" PRIu32
                              "} is already this client's",
                              c->words->id.slot, c->words->id.gen);
        return;
    }
    char name[48];
    snprintf(name, sizeof name, "lease-agent-words-%" PRIu32, c->id);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)m->bytes) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        ga_server__send_error(c, rid, LT_MSG_WORDS_REQUEST,
                              e == EMFILE || e == ENFILE ? LT_E_LIMIT : LT_E_SYSTEM, -e,
                              LT_INDEX_NONE, "words area of %" PRIu32 " bytes: %s: %s", m->bytes,
                              fd < 0 ? "memfd_create" : "ftruncate", strerror(e));
        return;
    }
    struct ga_server__seg *seg = calloc(1, sizeof(*seg));
    struct lt_segment_id id = {0, 0};
    struct lt_failure why;
    /* A small MAPPED registration (at most LT_WORDS_MAX_BYTES): quick
     * enough for the loop thread. */
    int rc = seg ? lease_segment_add_words(srv->svc, c->client, fd, m->bytes, &id, &why)
                 : lt_failure_set(&why, LT_E_SYSTEM, -ENOMEM, "agent out of memory");
    uint64_t key = lt_segment_id_to_u64(id);
    if (rc == 0) {
        rc = base_u64map_put(&srv->segs, key, seg);
        if (rc < 0) {
            lease_segment_remove(srv->svc, c->client, id, NULL); /* closes fd */
            fd = -1;
            lt_failure_set(&why, LT_E_SYSTEM, rc, "agent out of memory");
        }
    }
    if (rc < 0) {
        free(seg);
        if (fd >= 0)
            close(fd);
        ga_server__fd_freed(srv);
        ga_server__send_failure(c, rid, LT_MSG_WORDS_REQUEST, LT_INDEX_NONE, &why);
        return;
    }
    *seg = (struct ga_server__seg){.id = id,
                                   .conn = c,
                                   .size = m->bytes,
                                   .mem_class = LT_CLASS_MAPPED,
                                   .refs = 1,
                                   .writable = true,
                                   .words = true};
    struct base_u64map_entry *e = base_u64map_find(&srv->seg_slots, id.slot);
    if (e)
        e->u64 = key;
    else
        base_u64map_put_u64(&srv->seg_slots, id.slot, key);
    c->segments++;
    c->seg_bytes_registered += m->bytes;
    c->words = seg;
    struct lt_msg_words_grant g;
    lt_msg_init(&g, sizeof g, LT_MSG_WORDS_GRANT, rid);
    g.segment = id;
    g.size = m->bytes;
    /* The fd stays the lease service's; the peer gets its own copy. */
    ga_server__send_fd(c, &g, sizeof g, fd);
    base_log(&srv->cfg.log, BASE_LOG_INFO, GA_SERVER__SUBSYS,
             "client %" PRIu32 ": words area {%" PRIu32 ",%" PRIu32 "} of %" PRIu32
             " bytes, sealed read-only for it",
             c->id, id.slot, id.gen, m->bytes);
}
