/* The agent's command line, shared by lease-agent-host and, later, the CUDA
 * lease-agent: every option turns into a field of struct ga_server_cli. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "lease_types/socket.h"

int ga_server_size_parse(const char *s, uint64_t *bytes_p)
{
    if (!s || s[0] < '0' || s[0] > '9')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    case '\0':
        break;
    default:
        return -EINVAL;
    }
    if (shift) {
        end++;
        if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
            end += strlen(end);
    } else if (strcasecmp(end, "b") == 0) {
        end++;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -EINVAL;
    *bytes_p = (uint64_t)v << shift;
    return 0;
}

static int ga_cli__u32(const char *s, uint32_t min, uint32_t max, uint32_t *v_p)
{
    if (!s || s[0] < '0' || s[0] > '9')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *v_p = (uint32_t)v;
    return 0;
}

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
            "  --allow-uid N          allow peers with uid N (repeatable, up to %d;\n"
            "                         default: only the agent's own uid)\n"
            "  --pinned-budget SIZE   PINNED bytes registered at once (e.g. 8GiB)\n"
            "  --mapped-budget SIZE   MAPPED bytes registered at once (e.g. 1GiB)\n"
            "                         (defaults: 8GiB / 1GiB, scaled down to fit the locking\n"
            "                         limit: RLIMIT_MEMLOCK for the host backend)\n"
            "  --workers N            executor threads (default: min(4, CPUs))\n"
            "  --max-clients N        connections at once (default 64)\n"
            "  --max-segments N       segments per client (default 1024)\n"
            "  --max-streams N        streams per client (default 64)\n"
            "  --max-events N         events per client (default 1024)\n"
            "  --max-inflight N       unanswered submits and commands per client (default 4096)\n"
            "  --max-queued-bytes SIZE  replies queued for a client that does not read them\n"
            "                         before it is disconnected (default 1MiB)\n"
            "  --name NAME            agent name in HELLO_REPLY\n"
            "  --ready-fd N           once serving, write \"ready <pid> <socket>\" to fd N and\n"
            "                         close it\n"
            "  --help                 this text\n"
            "\n"
            "Signals: SIGTERM/SIGINT stop cleanly (socket and lock file removed), SIGUSR1\n"
            "logs the counters. Sizes take K, M, G, T suffixes (binary: 1K = 1024).\n",
            prog, def, GA_SERVER_MAX_ALLOW_UIDS);
}

int ga_server_cli_parse(int argc, char **argv, struct ga_server_cli *cli_p, char *err,
                        size_t errlen)
{
    struct ga_server_cli *cli = cli_p;
    memset(cli, 0, sizeof *cli);
    cli->ready_fd = -1;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = NULL;
        char name[64];
        const char *eq = strchr(opt, '=');
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            cli->help = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) {
            snprintf(err, errlen, "expected an option, found '%s'", opt);
            return -EINVAL;
        }
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - opt), opt);
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", opt);
            if (i + 1 < argc)
                val = argv[++i];
        }
        if (!val) {
            snprintf(err, errlen, "%s: expected a value, found nothing", name);
            return -EINVAL;
        }
        uint32_t u = 0;
        uint64_t sz = 0;
        int rc = 0;
        const char *want = NULL;
        if (strcmp(name, "--socket") == 0) {
            cli->cfg.socket_path = val;
            rc = val[0] ? 0 : -EINVAL;
            want = "a path";
        } else if (strcmp(name, "--group") == 0) {
            cli->cfg.group = val;
            rc = val[0] ? 0 : -EINVAL;
            want = "a group name";
        } else if (strcmp(name, "--allow-uid") == 0) {
            want = "a uid (0..4294967294)";
            rc = ga_cli__u32(val, 0, UINT32_MAX - 1, &u);
            if (rc == 0 && cli->cfg.allow_count >= GA_SERVER_MAX_ALLOW_UIDS) {
                want = "at most 64 --allow-uid options";
                rc = -EINVAL;
            }
            if (rc == 0)
                cli->allow[cli->cfg.allow_count++] = (uid_t)u;
        } else if (strcmp(name, "--pinned-budget") == 0) {
            want = "a size such as 8GiB";
            rc = ga_server_size_parse(val, &cli->cfg.budget_pinned);
            cli->budget_pinned_set = 1;
        } else if (strcmp(name, "--mapped-budget") == 0) {
            want = "a size such as 1GiB";
            rc = ga_server_size_parse(val, &cli->cfg.budget_mapped);
            cli->budget_mapped_set = 1;
        } else if (strcmp(name, "--workers") == 0) {
            want = "1..256";
            rc = ga_cli__u32(val, 1, 256, &cli->host.workers);
        } else if (strcmp(name, "--max-clients") == 0) {
            want = "1..65536";
            rc = ga_cli__u32(val, 1, 65536, &cli->cfg.max_clients);
        } else if (strcmp(name, "--max-segments") == 0) {
            want = "1..1048576";
            rc = ga_cli__u32(val, 1, 1u << 20, &cli->cfg.max_segments);
        } else if (strcmp(name, "--max-streams") == 0) {
            want = "1..65536";
            rc = ga_cli__u32(val, 1, 65536, &cli->host.max_streams);
        } else if (strcmp(name, "--max-events") == 0) {
            want = "1..1048576";
            rc = ga_cli__u32(val, 1, 1u << 20, &cli->host.max_events);
        } else if (strcmp(name, "--max-inflight") == 0) {
            want = "1..1048576";
            rc = ga_cli__u32(val, 1, 1u << 20, &cli->cfg.max_inflight);
        } else if (strcmp(name, "--max-queued-bytes") == 0) {
            want = "a size of at least 4K";
            rc = ga_server_size_parse(val, &sz);
            if (rc == 0 && sz < 4096)
                rc = -EINVAL;
            cli->cfg.max_queued_bytes = sz;
        } else if (strcmp(name, "--name") == 0) {
            want = "1..31 printable characters";
            size_t n = strlen(val);
            rc = n == 0 || n >= LT_NAME_LEN ? -EINVAL : 0;
            for (size_t k = 0; rc == 0 && k < n; k++)
                if ((unsigned char)val[k] < 0x20 || (unsigned char)val[k] > 0x7e)
                    rc = -EINVAL;
            cli->cfg.agent_name = val;
        } else if (strcmp(name, "--ready-fd") == 0) {
            want = "an open fd number (3..65535)";
            rc = ga_cli__u32(val, 3, 65535, &u);
            cli->ready_fd = (int)u;
        } else {
            snprintf(err, errlen, "unknown option '%s'", name);
            return -EINVAL;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s: expected %s, found '%s'", name, want, val);
            return -EINVAL;
        }
    }
    cli->cfg.allow_uids = cli->cfg.allow_count ? cli->allow : NULL;
    return 0;
}
