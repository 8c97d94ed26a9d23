/* The agent's command line, one table for lease-agent-host and lease-agent
 * (which adds its own options to it): every option turns into a field of
 * struct ga_server_cli. Parsed with getopt_long, so --opt=V and --opt V are
 * both accepted. Also the one table of budget defaults and the serve step
 * both programs end in. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/notify.h"
#include "base/parse.h"
#include "internal.h"
#include "lease_metrics/metrics.h"
#include "lease_types/socket.h"

enum {
    GA_OPT_SOCKET = GA_SERVER_CLI_OPT_BASE,
    GA_OPT_GROUP,
    GA_OPT_ALLOW_UID,
    GA_OPT_PINNED_BUDGET,
    GA_OPT_MAPPED_BUDGET,
    GA_OPT_WORKERS,
    GA_OPT_MAX_CLIENTS,
    GA_OPT_MAX_SEGMENTS,
    GA_OPT_MAX_STREAMS,
    GA_OPT_MAX_EVENTS,
    GA_OPT_MAX_INFLIGHT,
    GA_OPT_MAX_QUEUED_BYTES,
    GA_OPT_NAME,
    GA_OPT_READY_FD,
    GA_OPT_LOG_LEVEL,
    GA_OPT_HELP,
    GA_OPT_VERSION,
    GA_OPT_SEALS,
    GA_OPT_STAGED_BUDGET,
    GA_OPT_MAX_MAPPED_BYTES,
    GA_OPT_MAX_CLIENT_MAPPED,
    GA_OPT_MAX_CLIENT_STAGED,
    GA_OPT_MAX_CLIENTS_PER_UID,
    GA_OPT_MAX_INFLIGHT_PER_UID,
    GA_OPT_CONFIG,
    GA_OPT_LOG_FILE,
    GA_OPT_METRICS,
    GA_OPT_METRICS_REMOTE,
    GA_OPT_STOP_TIMEOUT,
};

const struct option ga_server_cli_options[] = {
    {"socket", required_argument, NULL, GA_OPT_SOCKET},
    {"group", required_argument, NULL, GA_OPT_GROUP},
    {"allow-uid", required_argument, NULL, GA_OPT_ALLOW_UID},
    {"pinned-budget", required_argument, NULL, GA_OPT_PINNED_BUDGET},
    {"mapped-budget", required_argument, NULL, GA_OPT_MAPPED_BUDGET},
    {"workers", required_argument, NULL, GA_OPT_WORKERS},
    {"max-clients", required_argument, NULL, GA_OPT_MAX_CLIENTS},
    {"max-segments", required_argument, NULL, GA_OPT_MAX_SEGMENTS},
    {"max-streams", required_argument, NULL, GA_OPT_MAX_STREAMS},
    {"max-events", required_argument, NULL, GA_OPT_MAX_EVENTS},
    {"max-inflight", required_argument, NULL, GA_OPT_MAX_INFLIGHT},
    {"max-queued-bytes", required_argument, NULL, GA_OPT_MAX_QUEUED_BYTES},
    {"name", required_argument, NULL, GA_OPT_NAME},
    {"ready-fd", required_argument, NULL, GA_OPT_READY_FD},
    {"log-level", required_argument, NULL, GA_OPT_LOG_LEVEL},
    {"help", no_argument, NULL, GA_OPT_HELP},
    {"version", no_argument, NULL, GA_OPT_VERSION},
    {"seals", required_argument, NULL, GA_OPT_SEALS},
    {"staged-budget", required_argument, NULL, GA_OPT_STAGED_BUDGET},
    {"max-mapped-bytes", required_argument, NULL, GA_OPT_MAX_MAPPED_BYTES},
    {"max-client-mapped", required_argument, NULL, GA_OPT_MAX_CLIENT_MAPPED},
    {"max-client-staged", required_argument, NULL, GA_OPT_MAX_CLIENT_STAGED},
    {"max-clients-per-uid", required_argument, NULL, GA_OPT_MAX_CLIENTS_PER_UID},
    {"max-inflight-per-uid", required_argument, NULL, GA_OPT_MAX_INFLIGHT_PER_UID},
    {"config", required_argument, NULL, GA_OPT_CONFIG},
    {"log-file", required_argument, NULL, GA_OPT_LOG_FILE},
    {"metrics", required_argument, NULL, GA_OPT_METRICS},
    {"metrics-remote", optional_argument, NULL, GA_OPT_METRICS_REMOTE},
    {"stop-timeout", required_argument, NULL, GA_OPT_STOP_TIMEOUT},
    {NULL, 0, NULL, 0},
};

const size_t ga_server_cli_option_count =
    sizeof ga_server_cli_options / sizeof ga_server_cli_options[0] - 1;

void ga_server_cli_usage(FILE *f, const char *prog)
{
    char def[256];
    if (lt_socket_default(def, sizeof def) < 0)
        snprintf(def, sizeof def, "(too long)");
    fprintf(f,
            "usage: %s [options]\n"
            "\n"
            "Serves the lease protocol (docs/protocol.md) on a Unix SOCK_SEQPACKET socket.\n"
            "\n"
            "  --socket PATH          socket path (default here: %s); its directory is\n"
            "                         created mode 0700 (0710 with --group), a lock file\n"
            "                         PATH.lock keeps a second agent off the same path\n"
            "  --group NAME           socket mode 0660 and directory 0710 of group NAME\n"
            "                         (default: 0600, owner only)\n"
            "  --allow-uid N[,N...]   allow peers with these uids (repeatable, up to %d;\n"
            "                         default: only the agent's own uid)\n"
            "  --pinned-budget SIZE   PINNED bytes registered at once (e.g. 8GiB)\n"
            "  --mapped-budget SIZE   MAPPED bytes registered at once (e.g. 1GiB)\n"
            "                         (defaults: 8GiB / 1GiB, scaled down to fit the locking\n"
            "                         limit: RLIMIT_MEMLOCK for the host backend)\n"
            "  --workers N            executor threads (default: min(4, CPUs))\n"
            "  --max-clients N        connections at once (default 64)\n"
            "  --max-clients-per-uid N  connections one uid may hold (default: a quarter of\n"
            "                         --max-clients when several uids are allowed, else all)\n"
            "  --max-segments N       segments per client (default: its share of the fds\n"
            "                         RLIMIT_NOFILE leaves for segments, at most 1024)\n"
            "  --staged-budget SIZE   STAGED bytes mapped at once, all clients (default: RAM)\n"
            "  --max-mapped-bytes SIZE  segment bytes mapped at once, every class (default:\n"
            "                         4x RAM, within 64GiB..32TiB)\n"
            "  --max-client-mapped SIZE / --max-client-staged SIZE  the same per client\n"
            "                         (default: half of each)\n"
            "  --seals strict|legacy  strict (default): leasable segments must be sealed\n"
            "                         F_SEAL_FUTURE_WRITE; legacy: SHRINK|GROW|SEAL suffices\n"
            "  --max-streams N        streams per client (default 64)\n"
            "  --max-events N         events per client (default 1024)\n"
            "  --max-inflight N       unanswered submits and commands per client (default 4096)\n"
            "  --max-inflight-per-uid N  the same for one uid's connections together (default:\n"
            "                         twice --max-inflight when several uids are allowed, else\n"
            "                         all)\n"
            "  --max-queued-bytes SIZE  replies queued for a client that does not read them\n"
            "                         before it is disconnected (default 1MiB)\n"
            "  --stop-timeout S       after SIGTERM, the longest the drain may take before the\n"
            "                         agent exits 1 without it (default 10; 0: wait for ever)\n"
            "  --name NAME            agent name in HELLO_REPLY\n"
            "  --ready-fd N           once serving, write \"ready <pid> <socket>\" to fd N and\n"
            "                         close it\n"
            "  --log-level LEVEL      error, warn, notice, info (default) or debug\n"
            "  --log-file PATH        append log lines to PATH, stamped with time and pid;\n"
            "                         SIGHUP reopens it (default: standard error)\n"
            "  --metrics HOST:PORT    serve Prometheus /metrics there, e.g. 127.0.0.1:9464\n"
            "                         (default: off)\n"
            "  --metrics-remote[=yes|no]  let --metrics bind an address that is not\n"
            "                         loopback (default: no)\n"
            "  --config FILE          'key = value' lines, a key per option above but\n"
            "                         --config, --ready-fd, --help and --version; read first,\n"
            "                         so options given here win\n"
            "  --help, -h             this text\n"
            "  --version              the version, then exit\n"
            "\n"
            "Signals: SIGTERM/SIGINT stop cleanly (socket and lock file removed), SIGUSR1\n"
            "logs the counters, SIGHUP reopens --log-file. Under a Type=notify unit the\n"
            "agent says READY=1 once it serves and STOPPING=1 when it stops. Sizes take\n"
            "K, M, G, T suffixes (binary: 1K = 1024). At start the soft RLIMIT_NOFILE is\n"
            "raised to the hard one.\n",
            prog, def, GA_SERVER_MAX_ALLOW_UIDS);
}

void ga_server_cli_init(struct ga_server_cli *cli)
{
    memset(cli, 0, sizeof *cli);
    cli->ready_fd = -1;
    cli->kept = (struct ga_server_listener){.listen_fd = -1, .lock_fd = -1};
    cli->log_level = BASE_LOG_INFO;
    cli->stop_timeout_s = GA_SERVER_CLI_STOP_TIMEOUT_DEFAULT;
}

void ga_server_cli_fini(struct ga_server_cli *cli)
{
    free(cli->config_text);
    cli->config_text = NULL;
}

/* "--name: expected ..., found 'v'", with the long name of @opt. */
static int ga_cli__refuse(int opt, const char *want, const char *val, char *err, size_t errlen)
{
    const char *name = "?";
    for (size_t i = 0; i < ga_server_cli_option_count; i++)
        if (ga_server_cli_options[i].val == opt)
            name = ga_server_cli_options[i].name;
    snprintf(err, errlen, "--%s: expected %s, found '%s'", name, want, val ? val : "");
    return -EINVAL;
}

static int ga_cli__u32(int opt, const char *val, uint32_t min, uint32_t max, const char *want,
                       uint32_t *v_p, char *err, size_t errlen)
{
    return base_parse_u32(val, min, max, v_p, NULL, 0) == 0
               ? 0
               : ga_cli__refuse(opt, want, val, err, errlen);
}

static int ga_cli__size(int opt, const char *val, uint64_t min, const char *want, uint64_t *v_p,
                        char *err, size_t errlen)
{
    uint64_t v = 0;
    if (base_parse_size(val, &v, NULL, 0) < 0 || v < min)
        return ga_cli__refuse(opt, want, val, err, errlen);
    *v_p = v;
    return 0;
}

/* "1000" or "0,1000,1001": each appended to the allow list. */
static int ga_cli__uids(struct ga_server_cli *cli, int opt, const char *val, char *err,
                        size_t errlen)
{
    const char *p = val ? val : "";
    for (;;) {
        char one[16];
        size_t n = strcspn(p, ",");
        uint32_t u = 0;
        if (n == 0 || n >= sizeof one)
            return ga_cli__refuse(opt, "uids (0..4294967294), comma-separated", val, err, errlen);
        memcpy(one, p, n);
        one[n] = '\0';
        int rc = ga_cli__u32(opt, one, 0, UINT32_MAX - 1, "uids (0..4294967294), comma-separated",
                             &u, err, errlen);
        if (rc == 0 && cli->cfg.allow_count >= GA_SERVER_MAX_ALLOW_UIDS)
            rc = ga_cli__refuse(opt, "at most 64 uids", val, err, errlen);
        if (rc < 0)
            return rc;
        cli->allow[cli->cfg.allow_count++] = (uid_t)u;
        cli->cfg.allow_uids = cli->allow;
        if (p[n] == '\0')
            return 0;
        p += n + 1;
    }
}

int ga_server_cli_option(struct ga_server_cli *cli, int opt, const char *val, char *err,
                         size_t errlen)
{
    uint32_t u = 0;
    int rc = 0;
    switch (opt) {
    case GA_OPT_SOCKET:
        if (!val[0])
            return ga_cli__refuse(opt, "a path", val, err, errlen);
        cli->cfg.socket_path = val;
        return 0;
    case GA_OPT_GROUP:
        if (!val[0])
            return ga_cli__refuse(opt, "a group name", val, err, errlen);
        cli->cfg.group = val;
        return 0;
    case GA_OPT_ALLOW_UID:
        /* The command line's list replaces the config file's. */
        if (!cli->in_config && !cli->allow_cmdline) {
            cli->allow_cmdline = 1;
            cli->cfg.allow_count = 0;
        }
        return ga_cli__uids(cli, opt, val, err, errlen);
    case GA_OPT_PINNED_BUDGET:
        cli->budget_pinned_set = 1;
        return ga_cli__size(opt, val, 0, "a size such as 8GiB", &cli->cfg.budget_pinned, err,
                            errlen);
    case GA_OPT_MAPPED_BUDGET:
        cli->budget_mapped_set = 1;
        return ga_cli__size(opt, val, 0, "a size such as 1GiB", &cli->cfg.budget_mapped, err,
                            errlen);
    case GA_OPT_WORKERS:
        return ga_cli__u32(opt, val, 1, 256, "1..256", &cli->exec.workers, err, errlen);
    case GA_OPT_MAX_CLIENTS:
        return ga_cli__u32(opt, val, 1, 65536, "1..65536", &cli->cfg.max_clients, err, errlen);
    case GA_OPT_MAX_SEGMENTS:
        return ga_cli__u32(opt, val, 1, 1u << 20, "1..1048576", &cli->cfg.max_segments, err,
                           errlen);
    case GA_OPT_MAX_STREAMS:
        return ga_cli__u32(opt, val, 1, 65536, "1..65536", &cli->exec.max_streams, err, errlen);
    case GA_OPT_MAX_EVENTS:
        return ga_cli__u32(opt, val, 1, 1u << 20, "1..1048576", &cli->exec.max_events, err, errlen);
    case GA_OPT_MAX_INFLIGHT:
        return ga_cli__u32(opt, val, 1, 1u << 20, "1..1048576", &cli->cfg.max_inflight, err,
                           errlen);
    case GA_OPT_MAX_QUEUED_BYTES:
        return ga_cli__size(opt, val, 4096, "a size of at least 4K", &cli->cfg.max_queued_bytes,
                            err, errlen);
    case GA_OPT_NAME: {
        size_t n = strlen(val);
        rc = n == 0 || n >= LT_NAME_LEN ? -EINVAL : 0;
        for (size_t k = 0; rc == 0 && k < n; k++)
            if ((unsigned char)val[k] < 0x20 || (unsigned char)val[k] > 0x7e)
                rc = -EINVAL;
        if (rc < 0)
            return ga_cli__refuse(opt, "1..31 printable characters", val, err, errlen);
        cli->cfg.agent_name = val;
        return 0;
    }
    case GA_OPT_READY_FD:
        rc = ga_cli__u32(opt, val, 3, 65535, "an open fd number (3..65535)", &u, err, errlen);
        if (rc == 0)
            cli->ready_fd = (int)u;
        return rc;
    case GA_OPT_LOG_LEVEL: {
        int level = 0;
        if (base_parse_enum(val, base_log_levels, &level, NULL, 0) < 0)
            return ga_cli__refuse(opt, "error, warn, notice, info or debug", val, err, errlen);
        cli->log_level = level;
        return 0;
    }
    case GA_OPT_HELP:
        cli->help = 1;
        return 0;
    case GA_OPT_VERSION:
        cli->version = 1;
        return 0;
    case GA_OPT_SEALS:
        if (strcmp(val, "strict") == 0)
            cli->cfg.seals = LEASE_SEALS_STRICT;
        else if (strcmp(val, "legacy") == 0)
            cli->cfg.seals = LEASE_SEALS_LEGACY;
        else
            return ga_cli__refuse(opt, "strict or legacy", val, err, errlen);
        return 0;
    case GA_OPT_STAGED_BUDGET:
        return ga_cli__size(opt, val, 4096, "a size of at least 4K", &cli->cfg.budget_staged, err,
                            errlen);
    case GA_OPT_MAX_MAPPED_BYTES:
        return ga_cli__size(opt, val, 4096, "a size of at least 4K", &cli->cfg.max_mapped_bytes,
                            err, errlen);
    case GA_OPT_MAX_CLIENT_MAPPED:
        return ga_cli__size(opt, val, 4096, "a size of at least 4K",
                            &cli->cfg.max_client_mapped_bytes, err, errlen);
    case GA_OPT_MAX_CLIENT_STAGED:
        return ga_cli__size(opt, val, 4096, "a size of at least 4K",
                            &cli->cfg.max_client_staged_bytes, err, errlen);
    case GA_OPT_MAX_CLIENTS_PER_UID:
        return ga_cli__u32(opt, val, 1, 65536, "1..65536", &cli->cfg.max_clients_per_uid, err,
                           errlen);
    case GA_OPT_STOP_TIMEOUT:
        return ga_cli__u32(opt, val, 0, 86400, "0..86400 (seconds)", &cli->stop_timeout_s, err,
                           errlen);
    case GA_OPT_MAX_INFLIGHT_PER_UID:
        return ga_cli__u32(opt, val, 1, UINT32_MAX, "1..4294967295",
                           &cli->cfg.max_inflight_per_uid, err, errlen);
    case GA_OPT_CONFIG: /* read before the other options (ga_server_cli_config_find) */
        if (!val[0])
            return ga_cli__refuse(opt, "a file", val, err, errlen);
        cli->config = val;
        return 0;
    case GA_OPT_LOG_FILE:
        if (!val[0])
            return ga_cli__refuse(opt, "a path", val, err, errlen);
        cli->log_file = val;
        return 0;
    case GA_OPT_METRICS: {
        if (!val[0] || strcmp(val, "off") == 0) {
            cli->metrics = NULL;
            return 0;
        }
        struct sockaddr_storage ss;
        size_t alen = 0;
        char why[256];
        /* The form only: a remote address is refused at start, once
         * --metrics-remote is known wherever it stands. */
        if (lm_listen_parse(val, LM_SERVER_ALLOW_REMOTE, &ss, sizeof ss, &alen, why, sizeof why) <
            0) {
            snprintf(err, errlen, "--metrics: %s", why);
            return -EINVAL;
        }
        cli->metrics = val;
        return 0;
    }
    case GA_OPT_METRICS_REMOTE: {
        bool yes = true;
        if (val && base_parse_bool(val, &yes, NULL, 0) < 0)
            return ga_cli__refuse(opt, "yes or no", val, err, errlen);
        cli->metrics_remote = yes;
        return 0;
    }
    default:
        return -ENOENT;
    }
}

int ga_server_cli_getopt_error(int argc, char **argv, int opt, char *err, size_t errlen)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (opt == ':')
        snprintf(err, errlen, "%s: expected a value, found nothing", arg);
    else
        snprintf(err, errlen, "unknown option '%s'", arg);
    return -EINVAL;
}

static int ga_cli__apply(void *ctx, int opt, const char *name, const char *val, char *err,
                         size_t errlen)
{
    (void)name;
    return ga_server_cli_option(ctx, opt, val, err, errlen);
}

int ga_server_cli_parse(int argc, char **argv, struct ga_server_cli *cli_p, char *err,
                        size_t errlen)
{
    ga_server_cli_init(cli_p);
    const char *conf = NULL;
    int crc = ga_server_cli_config_find(argc, argv, ga_server_cli_options, &conf, err, errlen);
    if (crc == 0 && conf)
        crc = ga_server_cli_config_load(cli_p, conf, ga_server_cli_options,
                                        ga_server_cli_cmdline_only, ga_cli__apply, cli_p, err,
                                        errlen);
    if (crc < 0)
        return crc;
    opterr = 0; /* every refusal is ours, in one line */
    optind = 1;
    for (;;) {
        int opt = getopt_long(argc, argv, "+:h", ga_server_cli_options, NULL);
        if (opt == -1)
            break;
        if (opt == 'h')
            opt = GA_OPT_HELP;
        if (opt == '?' || opt == ':')
            return ga_server_cli_getopt_error(argc, argv, opt, err, errlen);
        int rc = ga_server_cli_option(cli_p, opt, optarg, err, errlen);
        if (rc < 0)
            return rc == -ENOENT ? ga_server_cli_getopt_error(argc, argv, '?', err, errlen) : rc;
    }
    if (optind < argc) {
        snprintf(err, errlen, "expected an option, found '%s'", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

/* ---- the defaults and the serve step both agents share ----------------- */

#define GA_CLI_PINNED_DEFAULT (8ull << 30)
#define GA_CLI_MAPPED_DEFAULT (1ull << 30)

uint64_t ga_server_cli_half_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_MAX;
}

void ga_server_cli_budgets_default(struct ga_server_cli *cli, uint64_t cap, const char *what)
{
    uint64_t pin = GA_CLI_PINNED_DEFAULT, map = GA_CLI_MAPPED_DEFAULT;
    if (cap < pin + map) {
        pin = cap / 4 * 3;
        map = cap / 4;
    }
    pin -= pin % 4096;
    map -= map % 4096;
    if (!cli->budget_pinned_set)
        cli->cfg.budget_pinned = pin;
    if (!cli->budget_mapped_set)
        cli->cfg.budget_mapped = map;
    if (!cli->budget_pinned_set || !cli->budget_mapped_set)
        base_log(&cli->cfg.log, BASE_LOG_NOTICE, GA_SERVER__SUBSYS,
                 "budgets PINNED %" PRIu64 " MAPPED %" PRIu64 " bytes (%s: %" PRIu64
                 " bytes; set them with --pinned-budget and --mapped-budget)",
                 cli->cfg.budget_pinned, cli->cfg.budget_mapped, what, cap);
}

void ga_server_cli_version(FILE *f, const char *prog)
{
    /* The minor is the highest this build implements; a peer uses a minor's
     * messages only after HELLO granted its capability (proto.h). */
    fprintf(f, "%s %s (lease protocol %u.%u)\n", prog, LEASE_VERSION, (unsigned)LT_PROTO_VERSION,
            (unsigned)LT_PROTO_MINOR);
}

void ga_server_cli_signals_block(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int ga_server_cli_log_setup(struct ga_server_cli *cli, struct base_log_file **file_p)
{
    struct base_log_file *f = NULL;
    int rc = cli->log_file ? base_log_file_open(cli->log_file, NULL,
                                                BASE_LOG_FILE_TIME | BASE_LOG_FILE_PID, &f)
                           : base_log_file_fd(STDERR_FILENO, NULL, BASE_LOG_FILE_COLOUR, &f);
    if (rc < 0)
        return rc;
    cli->log_sink = base_log_file_sink(f, cli->log_level);
    cli->cfg.log = cli->log_sink;
    cli->cfg.log_file = f;
    base_log_default_set(&cli->log_sink);
    *file_p = f;
    return 0;
}

int ga_server_cli_serve(struct ga_server_cli *cli, struct ga_server **running_p)
{
    cli->cfg.handle_signals = 1;
    cli->cfg.notify = 1;
    struct ga_server *srv = NULL;
    int rc = ga_server_create(&cli->cfg, &srv);
    if (rc < 0) {
        base_log(&cli->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "not started: %s",
                 strerror(-rc));
        return 1;
    }
    if (cli->metrics && cli->metrics[0]) {
        char err[512];
        rc = ga_server_metrics_start(srv, cli->metrics, cli->metrics_remote, err, sizeof err);
        if (rc < 0) {
            base_log(&cli->cfg.log, BASE_LOG_ERROR, GA_SERVER__SUBSYS, "not started: %s%s", err,
                     rc == -EPERM        ? " (--metrics-remote allows it)"
                     : rc == -EADDRINUSE ? "; choose another port (--metrics 127.0.0.1:PORT)"
                                         : "");
            ga_server_destroy(srv);
            return 1;
        }
    }
    if (running_p)
        __atomic_store_n(running_p, srv, __ATOMIC_RELEASE);
    if (cli->ready_fd >= 0) {
        if (dprintf(cli->ready_fd, "ready %ld %s\n", (long)getpid(), ga_server_socket_path(srv)) <
            0)
            base_log(&cli->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS, "--ready-fd %d: %s",
                     cli->ready_fd, strerror(errno));
        close(cli->ready_fd);
    }
    char state[512];
    snprintf(state, sizeof state, "READY=1\nSTATUS=serving %s\nMAINPID=%ld",
             ga_server_socket_path(srv), (long)getpid());
    int nrc = base_notify(state);
    if (nrc < 0)
        base_log(&cli->cfg.log, BASE_LOG_WARN, GA_SERVER__SUBSYS,
                 "NOTIFY_SOCKET: READY=1 not delivered: %s", strerror(-nrc));
    rc = ga_server_run(srv);
    if (running_p)
        __atomic_store_n(running_p, NULL, __ATOMIC_RELEASE);
    if (ga_server_listener_take(srv, &cli->kept) < 0)
        cli->kept = (struct ga_server_listener){.listen_fd = -1, .lock_fd = -1};
    ga_server_destroy(srv);
    return rc < 0 ? 1 : 0;
}
