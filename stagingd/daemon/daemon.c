/* stagingd the daemon: resources, the event loop, signals and control
 * commands. See stagingd/daemon.h; the command lines that run it are
 * stagingd/cli/daemon_cli.c. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "base/notify.h"
#include "daemon_internal.h"
#include "lease/client.h"
#include "stagingd/job.h"
#include "stagingd/reader.h"
#include "stagingd/shard.h"

#ifndef STAGINGD_VERSION
#define STAGINGD_VERSION "?"
#endif

#define SD_DAEMON__QUEUE_MAX 16u
#define SD_DAEMON__STATS_TIMEOUT_MS 2000

enum {
    SD_DAEMON__EV_CLIENT = 1,
    SD_DAEMON__EV_SIGNAL,
    SD_DAEMON__EV_STAGED,
    SD_DAEMON__EV_CONTROL,
};

/* ---- jobs ---- */

int sd_daemon_job_add(struct sd_daemon *d, const char *store, enum sd_job_op op, uint64_t conn)
{
    if (d->stopping)
        return -ESHUTDOWN;
    if (d->queued >= SD_DAEMON__QUEUE_MAX)
        return -EBUSY;
    struct sd_daemon__req *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    snprintf(r->store, sizeof r->store, "%s", store);
    r->op = op;
    r->conn = conn;
    if (d->qtail)
        d->qtail->next = r;
    else
        d->qhead = r;
    d->qtail = r;
    d->queued++;
    return 0;
}

static void sd_daemon__reply(struct sd_daemon *d, uint64_t conn, const char *text)
{
    if (conn && d->ctl)
        sd_ctl_send(d->ctl, conn, text);
}

static void sd_daemon__job_next(struct sd_daemon *d)
{
    while (!d->job && d->qhead && !d->stopping) {
        struct sd_daemon__req *r = d->qhead;
        d->qhead = r->next;
        if (!d->qhead)
            d->qtail = NULL;
        d->queued--;
        d->next_id = d->next_id % 255 + 1;
        struct sd_job_env env = {
            .id = d->next_id,
            .pool = d->pool,
            .reader = d->reader,
            .client = d->client,
            .nagents = d->cfg.nagents,
            .agent_paths = d->agent_paths,
            .words = d->words.base,
            .words_segment = d->words.segment_id,
            .words_offset = d->words.offset,
            .words_slots = d->words_slots,
            .seq = &d->seq,
            .notify_fd = d->evfd,
            .stream = sd_daemon__stream,
            .stream_ctx = d,
            .log = d->cfg.log,
            .status = d->cfg.log_file,
        };
        char err[SD_ERR_LEN];
        int rc = sd_job_create(&d->cfg.job, r->store, r->op, &env, err, sizeof err, &d->job);
        if (rc < 0) {
            sd_daemon__log(d, BASE_LOG_ERROR, "job %u (%s of %s) not started: %s", env.id,
                           sd_job_op_name(r->op), r->store, err);
            char line[SD_ERR_LEN + 64];
            snprintf(line, sizeof line, "error: job not started: %s\n", err);
            sd_daemon__reply(d, r->conn, line);
            d->last_status = 1;
            free(r);
            continue;
        }
        d->job_req = r;
        d->job_id = env.id;
        d->abandoned = 0;
        sd_daemon__log(d, BASE_LOG_INFO, "job %u: %s of %s started", env.id, sd_job_op_name(r->op),
                       r->store);
        char st[SD_CONFIG_PATH_MAX + 64];
        snprintf(st, sizeof st, "STATUS=job %u: %s of %s", env.id, sd_job_op_name(r->op), r->store);
        base_notify(st);
    }
}

static void sd_daemon__job_end(struct sd_daemon *d)
{
    struct sd_job *job = d->job;
    struct sd_daemon__req *r = d->job_req;
    sd_job_agent_stats(job, SD_DAEMON__STATS_TIMEOUT_MS);
    int status = sd_job_exit_status(job);
    char *text = NULL;
    size_t len = 0;
    FILE *out = r->conn ? open_memstream(&text, &len) : stdout;
    if (out) {
        sd_job_report(job, out);
        if (r->conn)
            fclose(out);
        else
            fflush(stdout);
    }
    if (r->conn && text) {
        sd_daemon__reply(d, r->conn, text);
        char fin[128];
        if (status == 0)
            snprintf(fin, sizeof fin, "ok\n");
        else
            snprintf(fin, sizeof fin, "error: job %u finished with status %d (%s)\n", d->job_id,
                     status, status == 3 ? "corrupt blocks found" : "shards failed or not run");
        sd_daemon__reply(d, r->conn, fin);
    }
    free(text);
    char verdict[SD_ERR_LEN];
    sd_job_outcome(job, verdict, sizeof verdict);
    sd_daemon__log(d,
                   status == 0   ? BASE_LOG_INFO
                   : status == 3 ? BASE_LOG_WARN
                                 : BASE_LOG_ERROR,
                   "%s", verdict);
    struct sd_job_counters jc;
    sd_job_counters_get(job, &jc);
    const uint64_t *src = (const uint64_t *)(const void *)&jc;
    uint64_t *dst = (uint64_t *)(void *)&d->done;
    for (size_t i = 0; i < sizeof jc / sizeof(uint64_t); i++)
        dst[i] += src[i];
    enum sd_job_op op = sd_job_op_get(job);
    sd_job_destroy(job);
    free(r);
    d->job = NULL;
    d->job_req = NULL;
    d->last_status = status;
    d->jobs_done++;
    sd_daemon__metrics_job_end(d, op, status);
    char st[SD_ERR_LEN + 16];
    snprintf(st, sizeof st, "STATUS=%s", verdict);
    base_notify(st);
}

/* ---- control commands ---- */

static void sd_daemon__stop(struct sd_daemon *d, const char *why);

static void sd_daemon__stats(struct sd_daemon *d, FILE *out)
{
    fprintf(out, "stagingd %s, pid %ld, up %.1f s\n", STAGINGD_VERSION, (long)getpid(),
            (double)(base_now_ns() - d->t_start_ns) / 1e9);
    fprintf(out, "jobs: %" PRIu64 " done, %d running, %u queued%s\n", d->jobs_done, d->job != NULL,
            d->queued, d->stopping ? "; stopping" : "");
    if (d->job) {
        char line[256];
        sd_job_progress(d->job, line, sizeof line);
        fprintf(out, "%s\n", line);
    }
    for (int cls = LT_CLASS_PINNED; cls <= LT_CLASS_MAPPED; cls++) {
        struct leasec_pool_class_stats ps;
        if (leasec_pool_stats(d->pool, (enum lt_class)cls, &ps) < 0 || ps.capacity == 0)
            continue;
        char cap[32], use[32], high[32];
        sd_daemon__bytes(ps.capacity, cap, sizeof cap);
        sd_daemon__bytes(ps.in_use, use, sizeof use);
        sd_daemon__bytes(ps.high_water, high, sizeof high);
        fprintf(
            out,
            "pool %s: %s in %u segment(s) (2 MiB pages: %u hugetlb, %u THP), %s in use in %" PRIu64
            " buffer(s), high water %s, %" PRIu64 " allocation failure(s)\n",
            lt_class_name((enum lt_class)cls), cap, ps.segments, ps.huge_segments, ps.thp_segments,
            use, ps.live_buffers, high, ps.alloc_failures);
    }
    struct sd_reader_info ri;
    struct sd_reader_stats rs;
    sd_reader_info_get(d->reader, &ri);
    sd_reader_stats_get(d->reader, &rs);
    fprintf(out,
            "reader: %u thread(s), %s%s; %" PRIu64 " request(s), %" PRIu64 " failed, %" PRIu64
            " bytes, %" PRIu64 " reads (%" PRIu64 " fixed)\n",
            ri.threads, ri.uring ? "io_uring" : "pread fallback", ri.fixed ? ", fixed buffers" : "",
            rs.requests, rs.failed, rs.bytes, rs.reads, rs.fixed_reads);
    static const char *const states[] = {"disconnected", "handshake", "offering segments", "ready"};
    for (unsigned a = 0; a < d->cfg.nagents; a++) {
        struct leasec_client_agent_info info;
        if (leasec_client_agent_info(d->client, a, &info) < 0)
            continue;
        fprintf(out,
                "agent %u %s: %s, connection %u, \"%s\", %u lease(s) held, %u request(s) in "
                "flight, %" PRIu64 " connect attempt(s)%s%s\n",
                a, d->cfg.agents[a], states[info.state], info.epoch, info.hello.agent_name,
                info.leases, info.in_flight, info.attempts, info.last_err ? ", last error: " : "",
                info.last_err ? strerror(-info.last_err) : "");
    }
}

static void sd_daemon__command(void *ctx, uint64_t conn, char *line)
{
    struct sd_daemon *d = ctx;
    char *words[8];
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(line, " \t", &save); w && n < 8; w = strtok_r(NULL, " \t", &save))
        words[n++] = w;
    if (n == 0)
        return;
    sd_daemon__log(d, BASE_LOG_DEBUG, "control: connection %" PRIu64 ": %s", conn, words[0]);
    if (strcmp(words[0], "help") == 0) {
        sd_daemon__reply(
            d, conn,
            "commands:\n"
            "  stats [json]                   counters of the daemon, pool, reader, agents\n"
            "  leases [json]                  the leases the running job holds (JSON)\n"
            "  segments [json]                the pool's segments and the agents' (JSON)\n"
            "  job [STORE] [verify|scan|both] run a job; the report follows when it ends\n"
            "  quit                           stop as on SIGTERM (drain, release, exit)\n"
            "ok\n");
    } else if ((strcmp(words[0], "stats") == 0 || strcmp(words[0], "leases") == 0 ||
                strcmp(words[0], "segments") == 0) &&
               (n > 2 || (n == 2 && strcmp(words[1], "json") != 0))) {
        char msg[96];
        snprintf(msg, sizeof msg, "error: expected '%s' or '%s json'\n", words[0], words[0]);
        sd_daemon__reply(d, conn, msg);
    } else if ((strcmp(words[0], "stats") == 0 && n == 2) || strcmp(words[0], "leases") == 0 ||
               strcmp(words[0], "segments") == 0) {
        char *text = NULL;
        if (sd_daemon__json(d, words[0], &text) < 0) {
            sd_daemon__reply(d, conn, "error: out of memory\n");
            return;
        }
        sd_daemon__reply(d, conn, text);
        sd_daemon__reply(d, conn, "ok\n");
        free(text);
    } else if (strcmp(words[0], "stats") == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        if (!out) {
            sd_daemon__reply(d, conn, "error: out of memory\n");
            return;
        }
        sd_daemon__stats(d, out);
        fprintf(out, "ok\n");
        fclose(out);
        sd_daemon__reply(d, conn, text);
        free(text);
    } else if (strcmp(words[0], "job") == 0) {
        const char *store = d->cfg.store;
        enum sd_job_op op = d->cfg.op;
        int bad = n > 3;
        for (int i = 1; i < n && !bad; i++) {
            enum sd_job_op o;
            if (sd_job_op_parse(words[i], &o) == 0)
                op = o;
            else if (i == 1)
                store = words[i];
            else
                bad = 1;
        }
        if (bad || !store[0]) {
            sd_daemon__reply(d, conn,
                             "error: expected 'job [STORE] [verify|scan|both]' (no "
                             "default store is configured)\n");
            return;
        }
        int rc = sd_daemon_job_add(d, store, op, conn);
        if (rc < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "error: job not queued: %s\n",
                     rc == -ESHUTDOWN ? "stagingd is shutting down"
                     : rc == -EBUSY   ? "the queue is full"
                                      : strerror(-rc));
            sd_daemon__reply(d, conn, msg);
            return;
        }
        char msg[128];
        snprintf(msg, sizeof msg, "queued: %s, %u job(s) ahead\n", sd_job_op_name(op),
                 d->queued - 1 + (d->job != NULL));
        sd_daemon__reply(d, conn, msg);
    } else if (strcmp(words[0], "quit") == 0) {
        sd_daemon__reply(d, conn, "stopping\nok\n");
        sd_daemon__stop(d, "quit on the control socket");
    } else {
        char msg[160];
        snprintf(msg, sizeof msg, "error: unknown command '%.64s' ('help' lists them)\n", words[0]);
        sd_daemon__reply(d, conn, msg);
    }
}

/* ---- shutdown ---- */

static void sd_daemon__stop(struct sd_daemon *d, const char *why)
{
    if (d->stopping) {
        if (d->job && !d->abandoned) {
            sd_daemon__log(d, BASE_LOG_WARN, "%s again: not waiting for in-flight work any longer",
                           why);
            sd_job_abandon(d->job, "stopped twice");
            d->abandoned = 1;
        }
        return;
    }
    d->stopping = 1;
    base_notify("STOPPING=1");
    d->drain_deadline_ns = base_now_ns() + (uint64_t)d->cfg.drain_timeout_s * 1000000000ull;
    sd_daemon__log(d, BASE_LOG_INFO,
                   "%s: stopping: no new work; in-flight shards finish and release their leases "
                   "(up to %u s)",
                   why, d->cfg.drain_timeout_s);
    if (d->ctl)
        sd_ctl_stop_accepting(d->ctl);
    if (d->job)
        sd_job_cancel(d->job, "stagingd is shutting down");
    while (d->qhead) {
        struct sd_daemon__req *r = d->qhead;
        d->qhead = r->next;
        sd_daemon__reply(d, r->conn, "error: job not run: stagingd is shutting down\n");
        free(r);
    }
    d->qtail = NULL;
    d->queued = 0;
}

static void sd_daemon__signal(struct sd_daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            /* logrotate moved the file: write to a new one at the path. */
            if (d->cfg.log_path[0] && d->cfg.log_file) {
                int rc = base_log_file_reopen(d->cfg.log_file);
                if (rc == 0)
                    sd_daemon__log(d, BASE_LOG_INFO,
                                   "SIGHUP from pid %u: log file %s reopened (settings are read "
                                   "at start; restart to change them)",
                                   si.ssi_pid, d->cfg.log_path);
            } else {
                sd_daemon__log(d, BASE_LOG_INFO,
                               "SIGHUP from pid %u: no log file to reopen (logging to standard "
                               "error); settings are read at start, restart to change them",
                               si.ssi_pid);
            }
            continue;
        }
        char why[64];
        snprintf(why, sizeof why, "%s from pid %u", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                 si.ssi_pid);
        sd_daemon__stop(d, why);
    }
}

/* ---- the loop ---- */

int sd_daemon_run(struct sd_daemon *d)
{
    int rc = 0;
    for (;;) {
        sd_daemon__job_next(d);
        sd_daemon__agents_watch(d);
        if (!d->job && (d->stopping || (d->mode == SD_DAEMON_ONESHOT && !d->qhead)))
            break;
        int timeout = -1;
        if (d->job) {
            sd_job_staged(d->job);
            if (sd_job_step(d->job, &timeout)) {
                sd_daemon__job_end(d);
                continue;
            }
        }
        if (d->stopping && d->job && !d->abandoned) {
            uint64_t now = base_now_ns();
            if (now >= d->drain_deadline_ns) {
                sd_daemon__log(
                    d, BASE_LOG_WARN,
                    "drain timeout (%u s): abandoning in-flight work; the agent reclaims "
                    "its leases when the connection closes",
                    d->cfg.drain_timeout_s);
                sd_job_abandon(d->job, "drain timeout at shutdown");
                d->abandoned = 1;
                continue;
            }
            int left = (int)((d->drain_deadline_ns - now) / 1000000) + 1;
            if (timeout < 0 || left < timeout)
                timeout = left;
        }
        sd_daemon__metrics_publish(d, 0);
        int mt = sd_daemon__metrics_timeout(d);
        if (mt >= 0 && (timeout < 0 || mt < timeout))
            timeout = mt;
        struct epoll_event evs[8];
        int n = epoll_wait(d->epfd, evs, 8, timeout);
        if (n < 0 && errno != EINTR) {
            sd_daemon__log(d, BASE_LOG_ERROR, "epoll_wait failed: %s", strerror(errno));
            rc = 1;
            break;
        }
        for (int i = 0; i < n; i++) {
            switch (evs[i].data.u32) {
            case SD_DAEMON__EV_SIGNAL:
                sd_daemon__signal(d);
                break;
            case SD_DAEMON__EV_STAGED: {
                uint64_t v;
                if (read(d->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
                    sd_daemon__log(d, BASE_LOG_ERROR, "eventfd read failed: %s", strerror(errno));
                break;
            }
            case SD_DAEMON__EV_CONTROL:
                sd_ctl_process(d->ctl);
                break;
            default:
                break;
            }
        }
        int prc = leasec_client_process(d->client);
        if (prc < 0)
            sd_daemon__log(d, BASE_LOG_ERROR, "lease client: %s", strerror(-prc));
    }
    if (d->stopping)
        sd_daemon__log(d, BASE_LOG_INFO, "stopped: every lease released%s",
                       d->abandoned ? " or abandoned" : "");
    return d->mode == SD_DAEMON_ONESHOT ? d->last_status : rc;
}

/* ---- creation ---- */

void sd_daemon_signals_block(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int sd_daemon_create(const struct sd_config *cfg, enum sd_daemon_mode mode, struct sd_daemon **d_p)
{
    struct sd_daemon *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    int rc;
    d->cfg = *cfg;
    d->mode = mode;
    d->epfd = d->sigfd = d->evfd = -1;
    d->words_slots = cfg->job.inflight;
    d->t_start_ns = base_now_ns();
    for (unsigned a = 0; a < cfg->nagents && a < SD_CONFIG_AGENTS_MAX; a++)
        d->agent_paths[a] = d->cfg.agents[a];

    if (cfg->nagents == 0) {
        sd_daemon__log(d, BASE_LOG_ERROR,
                       "expected at least one agent socket (--agent), found none");
        rc = -EINVAL;
        goto fail;
    }
    d->streams = calloc(cfg->nagents, sizeof *d->streams);
    if (!d->streams) {
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned a = 0; a < cfg->nagents; a++) {
        d->streams[a].ids = calloc(d->words_slots, sizeof *d->streams[a].ids);
        d->streams[a].valid = calloc(d->words_slots, 1);
        if (!d->streams[a].ids || !d->streams[a].valid) {
            rc = -ENOMEM;
            goto fail;
        }
    }

    uint64_t largest = 0;
    if (mode == SD_DAEMON_ONESHOT && cfg->store[0]) {
        largest = sd_daemon__largest_buffer(cfg->store, &cfg->job, cfg->op, &d->cfg.log);
        if (!largest) {
            rc = -EINVAL;
            goto fail;
        }
    }
    rc = sd_daemon__pool_create(cfg, mode, d->words_slots, largest, &d->pool);
    if (rc < 0)
        goto fail;
    rc = leasec_pool_alloc(
        d->pool, LT_CLASS_MAPPED,
        (size_t)sd_daemon__round_up(64ull * d->words_slots, LEASEC_POOL_BUF_ALIGN), &d->words);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "doorbell words: %s", strerror(-rc));
        goto fail;
    }
    d->have_words = 1;
    memset(d->words.base, 0, d->words.len);

    struct sd_reader_config rcfg = {
        .threads = cfg->threads,
        .pool = d->pool,
        .log = d->cfg.log,
    };
    rc = sd_reader_create(&rcfg, &d->reader);
    if (rc < 0) {
        sd_daemon__log(d, BASE_LOG_ERROR, "staging reader: %s", strerror(-rc));
        goto fail;
    }

    rc = sd_daemon__client_open(d);
    if (rc < 0)
        goto fail;

    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    d->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    d->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->epfd < 0 || d->evfd < 0 || d->sigfd < 0) {
        rc = -errno;
        sd_daemon__log(d, BASE_LOG_ERROR, "epoll/eventfd/signalfd: %s", strerror(-rc));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.u32 = SD_DAEMON__EV_CLIENT;
    rc = epoll_ctl(d->epfd, EPOLL_CTL_ADD, leasec_client_fd(d->client), &ev);
    ev.data.u32 = SD_DAEMON__EV_SIGNAL;
    rc = rc ? rc : epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->sigfd, &ev);
    ev.data.u32 = SD_DAEMON__EV_STAGED;
    rc = rc ? rc : epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->evfd, &ev);
    if (rc < 0) {
        rc = -errno;
        sd_daemon__log(d, BASE_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
        goto fail;
    }
    if (mode == SD_DAEMON_RUN && cfg->control[0]) {
        rc = sd_ctl_create(cfg->control, sd_daemon__command, d, &d->cfg.log, &d->ctl);
        if (rc < 0)
            goto fail;
        ev.data.u32 = SD_DAEMON__EV_CONTROL;
        if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, sd_ctl_fd(d->ctl), &ev) < 0) {
            rc = -errno;
            sd_daemon__log(d, BASE_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
            goto fail;
        }
    }

    rc = sd_daemon__metrics_start(d);
    if (rc < 0)
        goto fail;

    struct leasec_pool_class_stats ps = {0};
    struct sd_reader_info ri;
    leasec_pool_stats(d->pool, LT_CLASS_PINNED, &ps);
    sd_reader_info_get(d->reader, &ri);
    char pinned[32];
    sd_daemon__bytes(ps.capacity, pinned, sizeof pinned);
    sd_daemon__log(
        d, BASE_LOG_INFO,
        "stagingd %s ready: pool PINNED %s in %u segment(s) (2 MiB pages: %u hugetlb, %u THP) "
        "+ MAPPED words for %u slot(s); %u staging thread(s) (%s%s); %u agent(s), first %s%s%s",
        STAGINGD_VERSION, pinned, ps.segments, ps.huge_segments, ps.thp_segments, d->words_slots,
        ri.threads, ri.uring ? "io_uring" : "pread fallback", ri.fixed ? ", fixed buffers" : "",
        cfg->nagents, cfg->agents[0], d->ctl ? "; control " : "", d->ctl ? cfg->control : "");
    if (mode == SD_DAEMON_RUN) {
        /* Ready: the control socket (and /metrics) answer. Agents come and
         * go afterwards; `stats` says how they are. */
        char st[SD_CONFIG_SOCK_MAX + 96];
        snprintf(st, sizeof st, "READY=1\nSTATUS=serving jobs on %s\nMAINPID=%ld",
                 d->ctl ? cfg->control : "(no control socket)", (long)getpid());
        int nrc = base_notify(st);
        if (nrc < 0)
            sd_daemon__log(d, BASE_LOG_WARN,
                           "NOTIFY_SOCKET is set but READY=1 could not be sent: %s",
                           strerror(-nrc));
    }
    *d_p = d;
    return 0;

fail:
    sd_daemon_destroy(d);
    return rc < 0 ? rc : -EINVAL;
}

void sd_daemon_destroy(struct sd_daemon *d)
{
    if (!d)
        return;
    if (d->job) {
        /* Only when the loop failed: the job's reads must land first. */
        sd_reader_drain(d->reader);
        sd_job_staged(d->job);
        sd_job_destroy(d->job);
        free(d->job_req);
    }
    while (d->qhead) {
        struct sd_daemon__req *r = d->qhead;
        d->qhead = r->next;
        free(r);
    }
    sd_ctl_destroy(d->ctl);
    sd_daemon__metrics_stop(d);
    /* The client first: closing the connections hands every lease and
     * segment back to the agents before the memory behind them goes. */
    leasec_client_destroy(d->client);
    sd_reader_destroy(d->reader);
    if (d->have_words)
        leasec_pool_free(d->pool, &d->words);
    leasec_pool_destroy(d->pool);
    if (d->streams)
        for (unsigned a = 0; a < d->cfg.nagents; a++) {
            free(d->streams[a].ids);
            free(d->streams[a].valid);
        }
    free(d->streams);
    if (d->epfd >= 0)
        close(d->epfd);
    if (d->sigfd >= 0)
        close(d->sigfd);
    if (d->evfd >= 0)
        close(d->evfd);
    for (unsigned a = 0; a < SD_CONFIG_AGENTS_MAX; a++)
        base_u64map_fini(&d->lease_since[a]);
    free(d);
}
