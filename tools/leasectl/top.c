/* leasectl top: status and counters every --interval seconds, with rates
 * over the interval (GB/s staged, leases/s, submits/s). On a terminal the
 * screen is redrawn in place; elsewhere frames follow each other, separated
 * by a blank line, so a log or a test can read them. --count N stops after
 * N frames. With --json each frame is one JSON document, with
 * --prometheus one exposition (the frame's samples). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "leasectl.h"

struct lctl__prev {
    int valid;
    double t;
    uint64_t granted[LCTL_AGENTS_MAX], submits[LCTL_AGENTS_MAX], regs[LCTL_AGENTS_MAX];
    double sd_bytes, sd_submits, sd_completions;
};

static double lctl__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double lctl__num(json_t *o, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(o, a), b));
}

static void lctl__frame(const struct lctl_opts *o, const struct lctl_snapshot *s,
                        struct lctl__prev *prev, FILE *out)
{
    double now = lctl__now(), dt = prev->valid ? now - prev->t : 0;
    char stamp[32];
    time_t wall = time(NULL);
    struct tm tm;
    localtime_r(&wall, &tm);
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    fprintf(out, "leasectl top, %s, every %.1f s%s\n", stamp, o->interval_s,
            dt > 0 ? "" : " (rates from the next frame)");
    for (unsigned i = 0; i < s->nagents; i++) {
        const struct lctl_agent *a = &s->agents[i];
        if (!a->have_stats) {
            fprintf(out, "agent %s: DOWN: %s\n", a->path, a->err);
            continue;
        }
        uint64_t granted = 0, submits = 0, regs = 0;
        for (uint32_t k = 0; k < a->nclients; k++) {
            granted += a->clients[k].leases_granted;
            submits += a->clients[k].submits;
        }
        for (int c = 0; c < 4; c++)
            regs += a->classes[c].registrations;
        char pinned[32], mapped[32];
        lctl_bytes(a->classes[LT_CLASS_PINNED].bytes_registered, pinned, sizeof pinned);
        lctl_bytes(a->classes[LT_CLASS_MAPPED].bytes_registered, mapped, sizeof mapped);
        fprintf(out,
                "agent %s \"%s\": %u client(s), registered PINNED %s MAPPED %s, live leases "
                "%" PRIu64 ", STATS %.2f ms",
                a->path, a->hello.agent_name, a->nclients, pinned, mapped,
                a->classes[LT_CLASS_PINNED].live_leases + a->classes[LT_CLASS_MAPPED].live_leases +
                    a->classes[LT_CLASS_STAGED].live_leases,
                a->rtt_ms);
        if (dt > 0)
            fprintf(out, "; %.0f leases/s, %.0f submits/s, %.1f registrations/s",
                    (double)(granted - prev->granted[i]) / dt,
                    (double)(submits - prev->submits[i]) / dt, (double)(regs - prev->regs[i]) / dt);
        fputc('\n', out);
        for (uint32_t k = 0; k < a->nclients; k++) {
            const struct lt_client_stats *c = &a->clients[k];
            char b[32];
            lctl_bytes(c->bytes_leased, b, sizeof b);
            fprintf(out,
                    "  client %" PRIu32 " %s (pid %" PRIu32 "): %" PRIu64 " segment(s), %" PRIu64
                    " lease(s) on %s, %" PRIu64 " granted, %" PRIu64 " submits\n",
                    c->client_id, c->name, c->pid, c->segments, c->live_leases, b,
                    c->leases_granted, c->submits);
        }
        prev->granted[i] = granted;
        prev->submits[i] = submits;
        prev->regs[i] = regs;
    }
    if (!s->sd_asked) {
        fprintf(out, "stagingd: %s\n", s->sd_err);
    } else if (!s->sd_stats) {
        fprintf(out, "stagingd %s: DOWN: %s\n", o->stagingd, s->sd_err);
    } else {
        json_t *st = s->sd_stats, *cur = json_object_get(json_object_get(st, "jobs"), "current");
        double bytes = lctl__num(st, "reader", "bytes"), sub = lctl__num(st, "totals", "submits"),
               comp = lctl__num(st, "totals", "completions");
        fprintf(out, "stagingd %s: %s", o->stagingd,
                cur ? json_string_value(json_object_get(cur, "progress")) : "idle");
        if (dt > 0)
            fprintf(out, "; staging %.2f GB/s, %.0f submits/s, %.0f completions/s",
                    (bytes - prev->sd_bytes) / dt / 1e9, (sub - prev->sd_submits) / dt,
                    (comp - prev->sd_completions) / dt);
        fputc('\n', out);
        prev->sd_bytes = bytes;
        prev->sd_submits = sub;
        prev->sd_completions = comp;
    }
    prev->t = now;
    prev->valid = 1;
}

int lctl_top(const struct lctl_opts *o, FILE *out)
{
    struct lctl__prev prev = {0};
    const int tty = isatty(fileno(out));
    int status = 0;
    for (unsigned n = 0; o->count == 0 || n < o->count; n++) {
        if (n > 0) {
            struct timespec ts = {
                .tv_sec = (time_t)o->interval_s,
                .tv_nsec = (long)((o->interval_s - (double)(time_t)o->interval_s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        struct lctl_snapshot s;
        lctl_snapshot_take(o, LCTL_WANT_STATS, &s);
        if (o->format == LCTL_JSON) {
            status = lctl_view_stats(o, &s, out);
        } else if (o->format == LCTL_PROMETHEUS) {
            status = lctl_view_prometheus(o, &s, LCTL_WANT_STATS, out);
        } else {
            if (tty)
                fputs("\033[H\033[2J", out);
            else if (n > 0)
                fputc('\n', out);
            lctl__frame(o, &s, &prev, out);
            status = 0;
            for (unsigned i = 0; i < s.nagents; i++)
                status |= !s.agents[i].have_stats;
            status |= s.sd_asked && !s.sd_stats;
        }
        fflush(out);
        lctl_snapshot_free(&s);
    }
    return status;
}
