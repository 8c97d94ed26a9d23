/* Test harness for the agent's socket server: see harness.h. */
#include "harness.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fdpass.h"
#include "base/time.h"
#include "gpu/server.h"

#ifndef LEASE_AGENT_HOST
#error "LEASE_AGENT_HOST must name the lease-agent-host binary"
#endif

static uint64_t th__now_ms(void)
{
    return base_now_ns() / 1000000u;
}

static void th__sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

uint64_t th_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void th_fill(void *p, size_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    unsigned char *b = p;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = th_rand(&s);
        memcpy(b + i, &v, len - i < 8 ? len - i : 8);
    }
}

uint64_t th_rid(void)
{
    static uint64_t next = 0x1000;
    return ++next;
}

/* ---- the agent process ------------------------------------------------- */

int th_agent_nofile;

/* The agent binary: TH_AGENT when set (to run a test against another
 * build, e.g. an older one), else the one this tree built. */
static const char *th__agent_bin(void)
{
    const char *alt = getenv("TH_AGENT");
    return alt && alt[0] ? alt : LEASE_AGENT_HOST;
}

static pid_t th__spawn(const char *const *args, const char *log_path, int ready_w)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid != 0)
        return pid;
    int lfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (lfd < 0)
        _exit(126);
    dup2(lfd, 1);
    dup2(lfd, 2);
    if (ready_w >= 0) {
        if (ready_w == 3)
            fcntl(3, F_SETFD, 0);
        else if (dup2(ready_w, 3) < 0)
            _exit(126);
    }
    if (th_agent_nofile > 0) {
        struct rlimit rl = {.rlim_cur = (rlim_t)th_agent_nofile, .rlim_max = (rlim_t)th_agent_nofile};
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            _exit(125);
    }
    execv(th__agent_bin(), (char *const *)args);
    _exit(127);
}

void th_agent_start(struct th_agent *a, const char *dir, const char *const *extra)
{
    memset(a, 0, sizeof *a);
    if (dir) {
        snprintf(a->dir, sizeof a->dir, "%s", dir);
    } else {
        snprintf(a->dir, sizeof a->dir, "/tmp/ga-server-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(a->dir));
    }
    snprintf(a->sock, sizeof a->sock, "%s/agent.sock", a->dir);
    /* Beside the directory: the agent may be the one to create it. */
    snprintf(a->log, sizeof a->log, "%s.log", a->dir);
    const char *args[48] = {LEASE_AGENT_HOST,
                            "--socket",
                            a->sock,
                            "--pinned-budget",
                            "4M",
                            "--mapped-budget",
                            "2M",
                            "--workers",
                            "2",
                            "--ready-fd",
                            "3"};
    size_t n = 11;
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    a->pid = th__spawn(args, a->log, p[1]);
    close(p[1]);
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    int r = poll(&pfd, 1, TH_TIMEOUT_MS);
    char line[256] = {0};
    ssize_t got = r == 1 ? read(p[0], line, sizeof line - 1) : -1;
    close(p[0]);
    ck_assert_msg(got > 0 && strncmp(line, "ready ", 6) == 0,
                  "lease-agent-host did not report ready (poll %d, read %zd); see %s", r, got,
                  a->log);
}

int th_agent_run_once(const char *const *args, const char *log_path)
{
    pid_t pid = th__spawn(args, log_path, -1);
    int st = 0;
    uint64_t end = th__now_ms() + TH_TIMEOUT_MS;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (th__now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        th__sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int th_agent_stop(struct th_agent *a)
{
    if (a->pid <= 0)
        return -1;
    int st = 0;
    kill(a->pid, SIGTERM);
    uint64_t end = th__now_ms() + TH_TIMEOUT_MS;
    pid_t r;
    while ((r = waitpid(a->pid, &st, WNOHANG)) == 0 && th__now_ms() < end)
        th__sleep_ms(5);
    if (r == 0) {
        kill(a->pid, SIGKILL);
        waitpid(a->pid, &st, 0);
        a->pid = 0;
        return -1;
    }
    a->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The first line of @path holding @needle into @line (empty: none). */
static void th__log_find(const char *path, const char *needle, char *line, size_t len)
{
    line[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    while (fgets(line, (int)len, f))
        if (strstr(line, needle)) {
            fclose(f);
            return;
        }
    line[0] = '\0';
    fclose(f);
}

void th_agent_cleanup(struct th_agent *a)
{
    if (a->pid > 0)
        th_agent_stop(a);
    /* Every refusal the agent sent must have fit the wire: a text it had
     * to cut is a defect of that text (docs/reliability.md). */
    char cut[1024] = "";
    if (a->log[0])
        th__log_find(a->log, GA_SERVER_CUT_MARK, cut, sizeof cut);
    if (!a->dir[0]) {
        ck_assert_msg(!cut[0], "the agent sent a refusal longer than the wire holds: %s", cut);
        return;
    }
    DIR *d = opendir(a->dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", a->dir, e->d_name);
        if (unlink(p) < 0 && errno == EISDIR)
            rmdir(p);
    }
    if (d)
        closedir(d);
    rmdir(a->dir);
    if (!getenv("TH_KEEP_LOGS")) /* set it to read what the agent said */
        unlink(a->log);
    ck_assert_msg(!cut[0], "the agent sent a refusal longer than the wire holds: %s", cut);
}

int th_fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

bool th_file_wait_for(const char *path, const char *needle, int timeout_ms)
{
    uint64_t end = th__now_ms() + (uint64_t)timeout_ms;
    static char buf[1 << 20];
    do {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            if (strstr(buf, needle))
                return true;
        }
        th__sleep_ms(10);
    } while (th__now_ms() < end);
    return false;
}

/* ---- the client ----------------------------------------------------------- */

int th_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect %s: %s", path,
                  strerror(errno));
    return fd;
}

int th_send(int fd, const void *msg, size_t len, const int *fds, size_t nfds)
{
    ck_assert_uint_le(nfds, 64);
    return base_send_fds(fd, msg, len, fds, (unsigned)nfds, 0);
}

ssize_t th_recv(int fd, union lt_msg_buffer *buf, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, timeout_ms);
    if (r == 0)
        return -ETIMEDOUT;
    if (r < 0)
        return -errno;
    ssize_t n = recv(fd, buf->bytes, sizeof buf->bytes, 0);
    if (n < 0)
        return errno == ECONNRESET ? 0 : -errno;
    if (n == 0)
        return 0;
    enum lt_error e = lt_validate_from_agent(buf->bytes, (size_t)n, NULL);
    ck_assert_msg(e == LT_OK, "the agent sent an invalid %zd-byte message: %s", n,
                  lt_error_name(e));
    return n;
}

void th_expect(int fd, union lt_msg_buffer *buf, uint16_t type)
{
    ssize_t n = th_recv(fd, buf, TH_TIMEOUT_MS);
    ck_assert_msg(n > 0, "expected %s, found %s", lt_msg_type_name(type),
                  n == 0 ? "end of stream" : strerror((int)-n));
    if (buf->hdr.type != type && buf->hdr.type == LT_MSG_ERROR) {
        const struct lt_msg_error *e = (const void *)buf->bytes;
        ck_abort_msg("expected %s, found ERROR %s for %s: %s", lt_msg_type_name(type),
                     lt_error_name(e->code), lt_msg_type_name(e->failed_type), e->message);
    }
    ck_assert_msg(buf->hdr.type == type, "expected %s, found %s", lt_msg_type_name(type),
                  lt_msg_type_name(buf->hdr.type));
}

const struct lt_msg_error *th_expect_error(int fd, union lt_msg_buffer *buf, uint64_t rid,
                                           uint32_t code)
{
    th_expect(fd, buf, LT_MSG_ERROR);
    const struct lt_msg_error *e = (const void *)buf->bytes;
    ck_assert_msg(e->code == code, "expected ERROR %s, found %s: %s", lt_error_name(code),
                  lt_error_name(e->code), e->message);
    ck_assert_uint_eq(buf->hdr.request_id, rid);
    ck_assert_int_eq(e->err, code == LT_E_SYSTEM ? e->err : lt_error_errno(code));
    ck_assert_uint_ge(strlen(e->message), 1);
    return e;
}

void th_expect_silence(int fd, int ms)
{
    union lt_msg_buffer buf;
    ssize_t n = th_recv(fd, &buf, ms);
    ck_assert_msg(n == -ETIMEDOUT, "expected silence for %d ms, found %s", ms,
                  n > 0    ? lt_msg_type_name(buf.hdr.type)
                  : n == 0 ? "end of stream"
                           : "error");
}

int th_expect_eof(int fd)
{
    union lt_msg_buffer buf;
    for (int msgs = 0;; msgs++) {
        ssize_t n = th_recv(fd, &buf, TH_TIMEOUT_MS);
        ck_assert_msg(n != -ETIMEDOUT, "expected the agent to close the connection");
        if (n <= 0)
            return msgs;
    }
}

/* lt_validate_reply_matches reads the request as the message its type
 * names; handing it the request inside a full-size message buffer keeps
 * that true for the compiler too (GCC -O3 otherwise warns about the
 * branches for other types). */
static enum lt_error th__reply_matches(const void *req, size_t req_len, const void *reply)
{
    union lt_msg_buffer copy;
    memset(&copy, 0, sizeof copy);
    memcpy(copy.bytes, req, req_len < sizeof copy ? req_len : sizeof copy);
    return lt_validate_reply_matches(copy.bytes, reply);
}

int th_hello(const char *path, uint32_t caps, struct lt_msg_hello_reply *reply_p)
{
    int fd = th_connect(path);
    struct lt_msg_hello h;
    lt_msg_init(&h, sizeof h, LT_MSG_HELLO, th_rid());
    h.version_min = 1;
    h.version_max = 1;
    h.caps = caps;
    lt_name_set(h.name, sizeof h.name, "th-client");
    ck_assert_int_eq(th_send(fd, &h, sizeof h, NULL, 0), 0);
    union lt_msg_buffer buf;
    th_expect(fd, &buf, LT_MSG_HELLO_REPLY);
    ck_assert_int_eq(th__reply_matches(&h, sizeof h, buf.bytes), LT_OK);
    if (reply_p)
        memcpy(reply_p, buf.bytes, sizeof *reply_p);
    return fd;
}

int th_memfd(uint64_t size, int seals, uint64_t seed, void **map_p)
{
    int fd = memfd_create("th-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    th_fill(p, size, seed);
    if (!map_p)
        munmap(p, size); /* F_SEAL_WRITE needs no writable mapping left */
    if (seals)
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    if (map_p)
        *map_p = p;
    return fd;
}

uint64_t th_offer_send(int fd, const int *fds, size_t nfds, uint64_t size, uint32_t cls)
{
    struct lt_msg_segment_offer o;
    uint64_t rid = th_rid();
    lt_msg_init(&o, sizeof o, LT_MSG_SEGMENT_OFFER, rid);
    o.cookie = rid ^ 0xc00c1e;
    o.size = size;
    o.mem_class = cls;
    ck_assert_int_eq(th_send(fd, &o, sizeof o, fds, nfds), 0);
    return rid;
}

struct lt_segment_id th_offer(int fd, int segfd, uint64_t size, uint32_t cls, uint64_t cookie)
{
    struct lt_msg_segment_offer o;
    lt_msg_init(&o, sizeof o, LT_MSG_SEGMENT_OFFER, th_rid());
    o.cookie = cookie;
    o.size = size;
    o.mem_class = cls;
    ck_assert_int_eq(th_send(fd, &o, sizeof o, &segfd, 1), 0);
    union lt_msg_buffer buf;
    th_expect(fd, &buf, LT_MSG_SEGMENT_ACCEPT);
    ck_assert_int_eq(th__reply_matches(&o, sizeof o, buf.bytes), LT_OK);
    return ((const struct lt_msg_segment_accept *)(const void *)buf.bytes)->segment;
}

struct lt_lease_grant_entry th_lease(int fd, struct lt_segment_id seg, uint64_t off, uint64_t len,
                                     uint32_t cls)
{
    union {
        uint64_t a;
        unsigned char b[sizeof(struct lt_msg_lease_request) + sizeof(struct lt_lease_req_entry)];
    } req;
    struct lt_msg_lease_request *r = (void *)req.b;
    lt_msg_init(r, sizeof req.b, LT_MSG_LEASE_REQUEST, th_rid());
    r->count = 1;
    r->entries[0] =
        (struct lt_lease_req_entry){.segment = seg, .offset = off, .length = len, .mem_class = cls};
    ck_assert_int_eq(th_send(fd, r, sizeof req.b, NULL, 0), 0);
    union lt_msg_buffer buf;
    th_expect(fd, &buf, LT_MSG_LEASE_GRANT);
    ck_assert_int_eq(th__reply_matches(r, sizeof req.b, buf.bytes), LT_OK);
    return ((const struct lt_msg_lease_grant *)(const void *)buf.bytes)->entries[0];
}

uint64_t th_release_send(int fd, struct lt_lease_id lease)
{
    union {
        uint64_t a;
        unsigned char b[sizeof(struct lt_msg_lease_release) + sizeof(struct lt_lease_id)];
    } req;
    struct lt_msg_lease_release *r = (void *)req.b;
    uint64_t rid = th_rid();
    lt_msg_init(r, sizeof req.b, LT_MSG_LEASE_RELEASE, rid);
    r->count = 1;
    r->leases[0] = lease;
    ck_assert_int_eq(th_send(fd, r, sizeof req.b, NULL, 0), 0);
    return rid;
}

size_t th_launch_init(struct lt_msg_launch *m, const char *kernel, uint32_t block,
                      struct lt_lease_id lease, uint64_t length, uint32_t flags)
{
    const size_t len = sizeof(struct lt_msg_launch) + 8;
    ck_assert_int_eq(lt_msg_init(m, len, LT_MSG_LAUNCH, th_rid()), LT_OK);
    m->arg_words = 1;
    lt_name_set(m->image, sizeof m->image, "launch_kernels");
    lt_name_set(m->kernel, sizeof m->kernel, kernel);
    m->grid[0] = m->grid[1] = m->grid[2] = 1;
    m->block[0] = block;
    m->block[1] = m->block[2] = 1;
    m->lease_count = 1;
    m->leases[0] = (struct lt_launch_lease){.lease = lease, .length = length, .flags = flags};
    m->args[0] = 1;
    return len;
}

uint64_t th_submit_send(int fd, const struct lt_msg_submit *proto)
{
    struct lt_msg_submit m = *proto;
    uint64_t rid = th_rid();
    lt_header_init(&m.hdr, LT_MSG_SUBMIT, sizeof m, rid);
    ck_assert_int_eq(th_send(fd, &m, sizeof m, NULL, 0), 0);
    return rid;
}

void th_stats(int fd, uint32_t flags, union lt_msg_buffer *buf)
{
    struct lt_msg_stats_request s;
    lt_msg_init(&s, sizeof s, LT_MSG_STATS_REQUEST, th_rid());
    s.flags = flags;
    ck_assert_int_eq(th_send(fd, &s, sizeof s, NULL, 0), 0);
    th_expect(fd, buf, LT_MSG_STATS_REPLY);
    ck_assert_uint_eq(buf->hdr.request_id, s.hdr.request_id);
}

uint64_t th_ctl_send(int fd, uint16_t type, struct lt_stream_id stream, struct lt_event_id ev,
                     struct lt_event_id end, uint32_t flags)
{
    uint64_t rid = th_rid();
    if (type >= LT_MSG_STREAM_CREATE && type <= LT_MSG_STREAM_DESTROY) {
        struct lt_msg_stream_cmd m;
        lt_msg_init(&m, sizeof m, type, rid);
        m.stream = stream;
        m.flags = flags;
        ck_assert_int_eq(th_send(fd, &m, sizeof m, NULL, 0), 0);
    } else if (type == LT_MSG_DEVICE_SYNCHRONIZE) {
        struct lt_msg_device_sync m;
        lt_msg_init(&m, sizeof m, type, rid);
        ck_assert_int_eq(th_send(fd, &m, sizeof m, NULL, 0), 0);
    } else {
        struct lt_msg_event_cmd m;
        lt_msg_init(&m, sizeof m, type, rid);
        m.event = ev;
        m.end = end;
        m.stream = stream;
        m.flags = flags;
        ck_assert_int_eq(th_send(fd, &m, sizeof m, NULL, 0), 0);
    }
    return rid;
}

const struct lt_msg_ctl_reply *th_ctl(int fd, uint16_t type, struct lt_stream_id stream,
                                      struct lt_event_id ev, struct lt_event_id end, uint32_t flags,
                                      union lt_msg_buffer *buf)
{
    uint64_t rid = th_ctl_send(fd, type, stream, ev, end, flags);
    th_expect(fd, buf, LT_MSG_CTL_REPLY);
    const struct lt_msg_ctl_reply *r = (const void *)buf->bytes;
    ck_assert_uint_eq(buf->hdr.request_id, rid);
    ck_assert_uint_eq(r->request_type, type);
    return r;
}
