/* The fake agent (see fake_agent.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "fake_agent.h"
#include "kernels/blockhash_ref.h"

/* ---- the scripted side ---- */

void fake_listen(struct fake *f, const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(path), sizeof(addr.sun_path));
    snprintf(f->path, sizeof(f->path), "%s", path);
    memcpy(addr.sun_path, path, strlen(path));
    unlink(path);
    f->cfd = -1;
    f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_msg(bind(f->lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "bind %s: %s", path,
                  strerror(errno));
    ck_assert_int_eq(listen(f->lfd, 8), 0);
}

void fake_accept(struct fake *f)
{
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    ck_assert_msg(poll(&p, 1, 5000) == 1, "fake agent: no connection within 5 s");
    f->cfd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(f->cfd, 0);
}

ssize_t fake_recv(struct fake *f, union lt_msg_buffer *b, int timeout_ms, int *fds, unsigned *nfds)
{
    struct pollfd p = {.fd = f->cfd, .events = POLLIN};
    if (nfds)
        *nfds = 0;
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = b->bytes, .iov_len = sizeof(b->bytes)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(f->cfd, &mh, MSG_CMSG_CLOEXEC);
    ck_assert_int_ge(n, 0);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            ck_assert_msg(fds && nfds && *nfds < 4, "fake agent: unexpected fd with a message");
            fds[(*nfds)++] = fd;
        }
    }
    return n;
}

void fake_send(struct fake *f, const void *msg, size_t len, int fd)
{
    int rc = base_send_fds(f->cfd, msg, len, &fd, fd >= 0 ? 1 : 0, 0);
    ck_assert_msg(rc == 0, "fake agent: send of %zu bytes: %s", len, strerror(-rc));
}

void fake_drop(struct fake *f)
{
    if (f->cfd >= 0)
        close(f->cfd);
    f->cfd = -1;
}

void fake_close(struct fake *f)
{
    fake_drop(f);
    if (f->lfd >= 0)
        close(f->lfd);
    f->lfd = -1;
    unlink(f->path);
}

void fake_hello_reply(struct lt_msg_hello_reply *m, uint64_t rid, uint32_t caps, uint32_t batch)
{
    lt_msg_init(m, sizeof(*m), LT_MSG_HELLO_REPLY, rid);
    m->version = LT_PROTO_VERSION;
    m->caps = caps;
    m->client_id = 7;
    m->max_lease_batch = batch;
    m->max_streams = 16;
    m->max_events = 64;
    m->max_segments = 64;
    m->max_segment_bytes = 1ull << 30;
    for (int k = 1; k < LT_CLASS_SLOTS; k++)
        m->class_budget[k] = UINT64_MAX;
    lt_name_set(m->agent_name, sizeof(m->agent_name), "fake-agent");
}

void fake_error(struct lt_msg_error *m, uint64_t rid, uint16_t failed_type, uint32_t code,
                uint32_t index, const char *text)
{
    lt_msg_init(m, sizeof(*m), LT_MSG_ERROR, rid);
    m->code = code;
    m->err = lt_error_errno(code);
    m->failed_type = failed_type;
    m->index = index;
    lt_name_set(m->message, sizeof(m->message), text);
}

/* ---- the automatic agent (a forked process; exits with _exit) ---- */

#define AUTO_MAX 512

struct auto_seg {
    unsigned char *base;
    uint64_t size;
    uint32_t mem_class;
};

struct auto_lease {
    uint32_t seg; /* index into segs */
    uint64_t offset, length;
    int live;
};

struct auto_state {
    int fd;
    uint32_t max_batch;
    int die_after;
    int served;
    struct auto_seg segs[64];
    unsigned nsegs;
    struct auto_lease leases[AUTO_MAX + 1]; /* slot 0 unused */
    unsigned nleases;
    struct lt_msg_submit queue[AUTO_MAX]; /* submits waiting for their bell */
    unsigned nqueue;
    uint32_t caps; /* granted at HELLO */
    /* The words area (LT_CAP_WORDS), as the real agent makes it: ours to
     * write, sealed so the client can only read it. Its id's slot is 65. */
    unsigned char *words;
    uint64_t words_size;
};

#define AUTO_WORDS_SLOT 65u

static void auto_die(const char *why)
{
    fprintf(stderr, "auto agent: %s\n", why);
    _exit(3);
}

static void auto_send(struct auto_state *s, const void *msg, size_t len)
{
    if (send(s->fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len)
        _exit(0); /* the client went away: nothing left to serve */
}

static void auto_error(struct auto_state *s, const struct lt_header *h, uint32_t code,
                       const char *text)
{
    struct lt_msg_error m;
    fake_error(&m, h->request_id, h->type, code, LT_INDEX_NONE, text);
    auto_send(s, &m, sizeof(m));
}

static unsigned char *auto_word(struct auto_state *s, struct lt_word_ref w)
{
    if (w.segment.slot == AUTO_WORDS_SLOT && s->words) {
        if (w.offset + 8 > s->words_size)
            auto_die("word out of the words area");
        return s->words + w.offset;
    }
    if (w.segment.slot == 0 || w.segment.slot > s->nsegs)
        auto_die("word in an unknown segment");
    struct auto_seg *g = &s->segs[w.segment.slot - 1];
    if (w.offset + 8 > g->size)
        auto_die("word out of range");
    return g->base + w.offset;
}

/* Runs one CHECKSUM_VERIFY as the GPU would, then answers. */
static void auto_run(struct auto_state *s, const struct lt_msg_submit *q)
{
    struct auto_lease *l = &s->leases[q->lease.slot];
    struct auto_seg *g = &s->segs[l->seg];
    const struct lt_op_checksum_verify *a = &q->args.checksum;
    struct lt_msg_completion m;
    lt_msg_init(&m, sizeof(m), LT_MSG_COMPLETION, q->hdr.request_id);
    m.lease = q->lease;
    m.op = q->op;
    uint64_t blocks = kr_block_count(a->length, a->block_size);
    if (a->offset + a->length > l->length || a->sums_offset + blocks * 8 > l->length) {
        auto_error(s, &q->hdr, LT_E_OUT_OF_RANGE, "checksum range outside the lease");
        return;
    }
    const unsigned char *data = g->base + l->offset + a->offset;
    const uint64_t *sums = (const uint64_t *)(const void *)(g->base + l->offset + a->sums_offset);
    struct lt_checksum_result *r = &m.result.checksum;
    r->first_bad_block = LT_BLOCK_NONE;
    for (uint64_t b = 0; b < blocks; b++) {
        uint64_t off = b * a->block_size;
        uint64_t n = a->length - off < a->block_size ? a->length - off : a->block_size;
        uint64_t got = kr_block_checksum(data + off, n);
        if (got != sums[b]) {
            if (r->first_bad_block == LT_BLOCK_NONE) {
                r->first_bad_block = b;
                r->expected = sums[b];
                r->actual = got;
            }
            r->bad_blocks++;
        }
    }
    r->blocks_checked = blocks;
    m.status = r->bad_blocks ? LT_E_CHECKSUM_MISMATCH : LT_OK;
    if (q->flags & LT_SUBMIT_F_SIGNAL_DONE)
        __atomic_store_n((uint64_t *)(void *)auto_word(s, q->done), q->done_seq, __ATOMIC_RELEASE);
    auto_send(s, &m, sizeof(m));
    s->served++;
}

static void auto_handle(struct auto_state *s, union lt_msg_buffer *b, size_t n, int fd)
{
    uint16_t type;
    enum lt_error e = lt_validate_from_client(b->bytes, n, &type);
    if (e != LT_OK)
        auto_die(lt_error_describe(e));
    const struct lt_header *h = &b->hdr;
    switch (type) {
    case LT_MSG_HELLO: {
        struct lt_msg_hello_reply m;
        fake_hello_reply(&m, h->request_id, ((struct lt_msg_hello *)(void *)b)->caps, s->max_batch);
        s->caps = m.caps;
        auto_send(s, &m, sizeof(m));
        break;
    }
    case LT_MSG_SEGMENT_OFFER: {
        const struct lt_msg_segment_offer *o = (const void *)b;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size != o->size || s->nsegs == 64)
            auto_die("bad segment offer");
        /* Read-only, as the real agent maps a segment sealed
         * F_SEAL_FUTURE_WRITE (the pool's are): words go to the words area. */
        void *base = mmap(NULL, o->size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (base == MAP_FAILED)
            auto_die("mmap of an offered segment failed");
        s->segs[s->nsegs] = (struct auto_seg){base, o->size, o->mem_class};
        s->nsegs++;
        struct lt_msg_segment_accept m;
        lt_msg_init(&m, sizeof(m), LT_MSG_SEGMENT_ACCEPT, h->request_id);
        m.cookie = o->cookie;
        m.segment = lt_segment_id_make(s->nsegs, 1);
        m.size = o->size;
        m.mem_class = o->mem_class;
        auto_send(s, &m, sizeof(m));
        break;
    }
    case LT_MSG_LEASE_REQUEST: {
        const struct lt_msg_lease_request *q = (const void *)b;
        union lt_msg_buffer out;
        size_t len =
            sizeof(struct lt_msg_lease_grant) + q->count * sizeof(struct lt_lease_grant_entry);
        lt_msg_init(&out, len, LT_MSG_LEASE_GRANT, h->request_id);
        struct lt_msg_lease_grant *g = (void *)&out;
        g->count = q->count;
        for (uint32_t k = 0; k < q->count; k++) {
            const struct lt_lease_req_entry *r = &q->entries[k];
            uint32_t si = r->segment.slot - 1;
            if (r->segment.slot == 0 || si >= s->nsegs ||
                r->offset + r->length > s->segs[si].size || s->nleases == AUTO_MAX) {
                g->entries[k].status = LT_E_OUT_OF_RANGE;
                continue;
            }
            s->nleases++;
            s->leases[s->nleases] = (struct auto_lease){si, r->offset, r->length, 1};
            g->entries[k].lease = lt_lease_id_make(s->nleases, 1);
            g->entries[k].mem_class = r->mem_class;
            g->entries[k].status = LT_OK;
        }
        auto_send(s, &out, len);
        break;
    }
    case LT_MSG_SUBMIT: {
        const struct lt_msg_submit *q = (const void *)b;
        if (s->die_after >= 0 && s->served >= s->die_after)
            raise(SIGKILL); /* killed with this request (and any queued) in flight */
        if (q->lease.slot == 0 || q->lease.slot > s->nleases || !s->leases[q->lease.slot].live) {
            auto_error(s, h, LT_E_NOT_FOUND, "no such lease");
            break;
        }
        if (s->nqueue == AUTO_MAX)
            auto_die("submit queue full");
        s->queue[s->nqueue++] = *q;
        break;
    }
    case LT_MSG_LEASE_RELEASE: {
        /* With LT_CAP_RC_BATCH granted, as the real agent: one batch for
         * the whole release; otherwise one RELEASE_COMPLETE per lease. */
        const struct lt_msg_lease_release *q = (const void *)b;
        union lt_msg_buffer bo;
        struct lt_msg_release_complete_batch *rb = (void *)&bo;
        lt_msg_init(rb, sizeof(*rb) + q->count * sizeof(rb->entries[0]),
                    LT_MSG_RELEASE_COMPLETE_BATCH, h->request_id);
        rb->count = q->count;
        for (uint32_t k = 0; k < q->count; k++) {
            struct lt_msg_release_complete m;
            lt_msg_init(&m, sizeof(m), LT_MSG_RELEASE_COMPLETE, h->request_id);
            m.lease = q->leases[k];
            uint32_t slot = q->leases[k].slot;
            m.status = slot && slot <= s->nleases && s->leases[slot].live ? LT_OK : LT_E_NOT_FOUND;
            for (unsigned i = 0; i < s->nqueue; i++)
                if (lt_lease_id_eq(s->queue[i].lease, q->leases[k]))
                    auto_die("release of a lease with queued work (the client never does this)");
            if (m.status == LT_OK)
                s->leases[slot].live = 0;
            rb->entries[k].lease = m.lease;
            rb->entries[k].status = m.status;
            if (!(s->caps & LT_CAP_RC_BATCH))
                auto_send(s, &m, sizeof(m));
        }
        if (s->caps & LT_CAP_RC_BATCH)
            auto_send(s, rb, rb->hdr.length);
        break;
    }
    case LT_MSG_WORDS_REQUEST: {
        const struct lt_msg_words_request *q = (const void *)b;
        int wfd = memfd_create("auto-words", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (!(s->caps & LT_CAP_WORDS) || s->words || wfd < 0 || ftruncate(wfd, q->bytes) < 0)
            auto_die("words area");
        s->words = mmap(NULL, q->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0);
        if (s->words == MAP_FAILED ||
            fcntl(wfd, F_ADD_SEALS,
                  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
            auto_die("words area mapping");
        s->words_size = q->bytes;
        struct lt_msg_words_grant m;
        lt_msg_init(&m, sizeof(m), LT_MSG_WORDS_GRANT, h->request_id);
        m.segment = lt_segment_id_make(AUTO_WORDS_SLOT, 1);
        m.size = q->bytes;
        if (base_send_fds(s->fd, &m, sizeof(m), &wfd, 1, 0) < 0)
            _exit(0);
        close(wfd);
        break;
    }
    default:
        auto_error(s, h, LT_E_UNSUPPORTED, "the auto agent does not serve this");
        break;
    }
}

static void auto_serve(const char *path, int die_after, uint32_t max_batch)
{
    static struct auto_state s; /* large: keep it off the stack */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path));
    unlink(path);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 4) < 0)
        auto_die("cannot listen");
    s.fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s.fd < 0)
        auto_die("accept failed");
    s.max_batch = max_batch;
    s.die_after = die_after;
    for (;;) {
        /* Run what the bells allow, then wait for the next message. */
        for (unsigned i = 0; i < s.nqueue;) {
            const struct lt_msg_submit *q = &s.queue[i];
            if ((q->flags & LT_SUBMIT_F_WAIT_BELL) &&
                __atomic_load_n((uint64_t *)(void *)auto_word(&s, q->bell), __ATOMIC_ACQUIRE) <
                    q->bell_seq) {
                i++;
                continue;
            }
            auto_run(&s, q);
            s.queue[i] = s.queue[--s.nqueue];
        }
        struct pollfd p = {.fd = s.fd, .events = POLLIN};
        int r = poll(&p, 1, s.nqueue ? 1 : 1000);
        if (r < 0 && errno != EINTR)
            auto_die("poll failed");
        if (r <= 0)
            continue;
        union lt_msg_buffer b;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec iov = {.iov_base = b.bytes, .iov_len = sizeof(b.bytes)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl.buf)};
        ssize_t n = recvmsg(s.fd, &mh, MSG_CMSG_CLOEXEC);
        if (n <= 0)
            _exit(0); /* the client closed: done */
        int fd = -1;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        if (cm && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        auto_handle(&s, &b, (size_t)n, fd);
    }
}

pid_t auto_agent_start(const char *path, int die_after, uint32_t max_batch)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        auto_serve(path, die_after, max_batch);
        _exit(0);
    }
    return pid;
}
