/* leasectl: the operator's command line against a running lease agent and
 * stagingd (docs/operations.md; man 8 leasectl). Options may stand before
 * or after the command. Exit status: 0 everything asked answered (doctor:
 * every check OK), 1 something did not answer (doctor: a FIX), 2 usage. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/parse.h"
#include "leasectl.h"
#include "lease_types/socket.h"

#ifndef LEASECTL_VERSION
#define LEASECTL_VERSION "?"
#endif
#ifndef LEASE_GPU_ARCH
#define LEASE_GPU_ARCH 120
#endif

/* stagingd's control socket under the unit (scripts/systemd/stagingd.service). */
#define LCTL_STAGINGD_DEFAULT "/run/stagingd/control.sock"

static void usage(FILE *to)
{
    char agent[LCTL_PATH_MAX] = "?";
    lt_socket_default(agent, sizeof agent);
    fprintf(to,
            "usage: leasectl [options] COMMAND\n"
            "\n"
            "Asks a running lease agent (its protocol socket) and stagingd (its control socket)\n"
            "what they hold and do. It connects as a client that asks for nothing and leaves at\n"
            "once: real clients are not disturbed.\n"
            "\n"
            "commands:\n"
            "  status     is each daemon up, what it is, its limits and budgets\n"
            "  stats      counters: the agent's per class and per client; stagingd's pool,\n"
            "             reader and job totals\n"
            "  leases     who holds what, since when, with how much work in flight\n"
            "  segments   registered segments per class and client; stagingd's pool segments\n"
            "  doctor     checks the machine and the daemons' settings: one line per check,\n"
            "             'OK name: ...' or 'FIX name: what is wrong -> what to change'\n"
            "  top        status and counters with rates, redrawn every --interval\n"
            "\n"
            "options:\n"
            "  --agent PATH           an agent socket (repeatable; default here: %s)\n"
            "  --stagingd SOCK        stagingd's control socket (default: %s when it exists)\n"
            "  --json                 one JSON document instead of tables\n"
            "  --prometheus           the Prometheus text exposition format instead of tables\n"
            "  --timeout MS           wait this long for each answer (default 2000)\n"
            "  --interval SECONDS     top: time between frames (default 2)\n"
            "  --count N              top: stop after N frames (default: until interrupted)\n"
            "  --device N             doctor: the GPU the agent serves (default 0)\n"
            "  --backend cuda|host    doctor: the agent's backend (default: what the agent says)\n"
            "  --store DIR            doctor: the shard store to check (default: stagingd's)\n"
            "  --pinned-budget SIZE   doctor: the PINNED budget to check (default: the agent's)\n"
            "  --mapped-budget SIZE   doctor: the MAPPED budget to check (default: the agent's)\n"
            "  --version              print the version\n"
            "  -h, --help             this text\n"
            "\n"
            "Exit status: 0 every daemon asked answered (doctor: every check OK); 1 one did\n"
            "not (doctor: a FIX line); 2 usage error.\n",
            agent, LCTL_STAGINGD_DEFAULT);
}

enum {
    O_AGENT = 256,
    O_STAGINGD,
    O_JSON,
    O_PROMETHEUS,
    O_TIMEOUT,
    O_INTERVAL,
    O_COUNT,
    O_DEVICE,
    O_BACKEND,
    O_STORE,
    O_PINNED,
    O_MAPPED,
    O_VERSION,
};

static int parse(int argc, char **argv, struct lctl_opts *o, const char **cmd_p)
{
    static const struct option opts[] = {
        {"agent", required_argument, NULL, O_AGENT},
        {"stagingd", required_argument, NULL, O_STAGINGD},
        {"json", no_argument, NULL, O_JSON},
        {"prometheus", no_argument, NULL, O_PROMETHEUS},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"interval", required_argument, NULL, O_INTERVAL},
        {"count", required_argument, NULL, O_COUNT},
        {"device", required_argument, NULL, O_DEVICE},
        {"backend", required_argument, NULL, O_BACKEND},
        {"store", required_argument, NULL, O_STORE},
        {"pinned-budget", required_argument, NULL, O_PINNED},
        {"mapped-budget", required_argument, NULL, O_MAPPED},
        {"version", no_argument, NULL, O_VERSION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case O_AGENT:
            if (o->nagents == LCTL_AGENTS_MAX || strlen(optarg) >= LCTL_PATH_MAX)
                bad = "--agent: expected at most 16 paths of at most 107 bytes";
            else
                memcpy(o->agents[o->nagents++], optarg, strlen(optarg) + 1);
            break;
        case O_STAGINGD:
            if (strlen(optarg) >= LCTL_PATH_MAX) {
                bad = "--stagingd: expected a path of at most 107 bytes";
                break;
            }
            memcpy(o->stagingd, optarg, strlen(optarg) + 1);
            o->stagingd_given = 1;
            break;
        case O_JSON:
            o->format = LCTL_JSON;
            break;
        case O_PROMETHEUS:
            o->format = LCTL_PROMETHEUS;
            break;
        case O_TIMEOUT:
            if (base_parse_u64(optarg, 1, 600000, &v, NULL, 0) < 0)
                bad = "--timeout: expected milliseconds, 1..600000";
            o->timeout_ms = (int)v;
            break;
        case O_INTERVAL: {
            char *end;
            o->interval_s = strtod(optarg, &end);
            if (*end || !(o->interval_s >= 0.05 && o->interval_s <= 3600))
                bad = "--interval: expected seconds, 0.05..3600";
            break;
        }
        case O_COUNT:
            if (base_parse_u64(optarg, 1, 1000000, &v, NULL, 0) < 0)
                bad = "--count: expected 1..1000000";
            o->count = (unsigned)v;
            break;
        case O_DEVICE:
            if (base_parse_u64(optarg, 0, 63, &v, NULL, 0) < 0)
                bad = "--device: expected 0..63";
            o->device = (int)v;
            break;
        case O_BACKEND:
            if (strcmp(optarg, "cuda") == 0)
                o->backend = 1;
            else if (strcmp(optarg, "host") == 0)
                o->backend = 2;
            else
                bad = "--backend: expected cuda or host";
            break;
        case O_STORE:
            snprintf(o->store, sizeof o->store, "%s", optarg);
            break;
        case O_PINNED:
        case O_MAPPED:
            if (base_parse_size(optarg, &v, NULL, 0) < 0)
                bad = c == O_PINNED ? "--pinned-budget: expected a size such as 8GiB"
                                    : "--mapped-budget: expected a size such as 1GiB";
            else if (c == O_PINNED)
                o->pinned_budget = v;
            else
                o->mapped_budget = v;
            break;
        case O_VERSION:
            printf("leasectl %s (kernels for sm_%u)\n", LEASECTL_VERSION, o->arch);
            return 1;
        case 'h':
            usage(stdout);
            return 1;
        case ':':
            fprintf(stderr, "leasectl: %s: expected a value, found nothing\n", argv[optind - 1]);
            return -EINVAL;
        default:
            fprintf(stderr, "leasectl: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return -EINVAL;
        }
        if (bad) {
            fprintf(stderr, "leasectl: %s, found '%s'\n", bad, optarg);
            return -EINVAL;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr,
                "leasectl: expected one command (status, stats, leases, segments, doctor, "
                "top), found %s\n",
                optind == argc ? "none" : "more than one word");
        return -EINVAL;
    }
    *cmd_p = argv[optind];
    return 0;
}

int main(int argc, char **argv)
{
    struct lctl_opts o = {.timeout_ms = 2000, .interval_s = 2, .arch = LEASE_GPU_ARCH};
    const char *cmd = NULL;
    int rc = parse(argc, argv, &o, &cmd);
    if (rc != 0) {
        if (rc < 0)
            usage(stderr);
        return rc < 0 ? 2 : 0;
    }
    if (o.nagents == 0 && lt_socket_default(o.agents[0], sizeof o.agents[0]) == 0)
        o.nagents = 1;
    struct stat st;
    if (!o.stagingd_given && stat(LCTL_STAGINGD_DEFAULT, &st) == 0)
        snprintf(o.stagingd, sizeof o.stagingd, "%s", LCTL_STAGINGD_DEFAULT);

    static const struct {
        const char *name;
        unsigned want;
        int (*view)(const struct lctl_opts *, const struct lctl_snapshot *, FILE *);
    } views[] = {
        {"status", LCTL_WANT_STATS, lctl_view_status},
        {"stats", LCTL_WANT_STATS, lctl_view_stats},
        {"leases", LCTL_WANT_LEASES, lctl_view_leases},
        {"segments", LCTL_WANT_SEGMENTS, lctl_view_segments},
    };
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        if (strcmp(cmd, views[i].name) != 0)
            continue;
        struct lctl_snapshot s;
        lctl_snapshot_take(&o, views[i].want, &s);
        int status = o.format == LCTL_PROMETHEUS
                         ? lctl_view_prometheus(&o, &s, views[i].want, stdout)
                         : views[i].view(&o, &s, stdout);
        lctl_snapshot_free(&s);
        return status;
    }
    if (strcmp(cmd, "doctor") == 0)
        return lctl_doctor(&o, stdout);
    if (strcmp(cmd, "top") == 0)
        return lctl_top(&o, stdout);
    fprintf(stderr,
            "leasectl: unknown command '%s' (status, stats, leases, segments, doctor, top)\n", cmd);
    return 2;
}
