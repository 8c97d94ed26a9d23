/* lease-agent: the GPU agent. It serves the lease protocol on its socket
 * (docs/agent.md) with the CUDA backend (the default: hardware gate,
 * cuMemHostRegister, the CUDA executor) or, asked for by name, the host
 * backend (the same code as lease-agent-host: gpu/agent_host.h); a CUDA
 * start that fails is an error, never a silent fallback. --self-test
 * (agent_self_test.c) proves on real hardware that the embedded kernels load
 * and agree with the C reference.
 *
 * One getopt_long table: the server's options (gpu/server/cli.c, shared
 * with lease-agent-host) after lease-agent's own. The driver is loaded only
 * when a CUDA path starts (gpu/cu.h), so --help, --version and --backend
 * host work on a machine without it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "base/parse.h"
#include "gpu/agent_host.h"
#include "gpu/cu.h"
#include "gpu/executor_cuda.h"
#include "gpu/lease_backend.h"
#include "gpu/server.h"
#include "gpu/stop_watchdog.h"

enum agent_backend { AGENT_BACKEND_CUDA = 0, AGENT_BACKEND_HOST = 1 };

/* lease-agent's own options; their vals stay below GA_SERVER_CLI_OPT_BASE. */
enum {
    AGENT_OPT_SELF_TEST = 0x100,
    AGENT_OPT_BACKEND,
    AGENT_OPT_DEVICE,
    AGENT_OPT_CHUNK_BYTES,
    AGENT_OPT_CUBIN_DIR,
    AGENT_OPT_BYTES,
    AGENT_OPT_BLOCK_SIZE,
    AGENT_OPT_SEED,
    AGENT_OPT_RING_STREAMS,
    AGENT_OPT_RING_DISPATCH,
    AGENT_OPT_RING_JOIN,
    AGENT_OPT_DEVICE_BUDGET,
    AGENT_OPT_MAX_CLIENT_DEVICE,
    AGENT_OPT_MAX_LAUNCHES,
    AGENT_OPT_LAUNCH_THREADS,
    AGENT_OPT_LAUNCH_SHARED,
    AGENT_OPT_LAUNCH_ARGS,
    AGENT_OPT_ON_FAULT,
    AGENT_OPT_FAULT_RESTARTS,
    AGENT_OPT_BELL_TIMEOUT,
    AGENT_OPT_RESULT_SLOTS,
};

static const struct option agent_own_options[] = {
    {"self-test", no_argument, NULL, AGENT_OPT_SELF_TEST},
    {"backend", required_argument, NULL, AGENT_OPT_BACKEND},
    {"device", required_argument, NULL, AGENT_OPT_DEVICE},
    {"chunk-bytes", required_argument, NULL, AGENT_OPT_CHUNK_BYTES},
    {"cubin-dir", required_argument, NULL, AGENT_OPT_CUBIN_DIR},
    {"bytes", required_argument, NULL, AGENT_OPT_BYTES},
    {"block-size", required_argument, NULL, AGENT_OPT_BLOCK_SIZE},
    {"seed", required_argument, NULL, AGENT_OPT_SEED},
    {"ring-streams", required_argument, NULL, AGENT_OPT_RING_STREAMS},
    {"ring-dispatch", required_argument, NULL, AGENT_OPT_RING_DISPATCH},
    {"ring-join", required_argument, NULL, AGENT_OPT_RING_JOIN},
    {"device-budget", required_argument, NULL, AGENT_OPT_DEVICE_BUDGET},
    {"max-client-device", required_argument, NULL, AGENT_OPT_MAX_CLIENT_DEVICE},
    {"max-launches", required_argument, NULL, AGENT_OPT_MAX_LAUNCHES},
    {"launch-max-threads", required_argument, NULL, AGENT_OPT_LAUNCH_THREADS},
    {"launch-max-shared", required_argument, NULL, AGENT_OPT_LAUNCH_SHARED},
    {"launch-max-args", required_argument, NULL, AGENT_OPT_LAUNCH_ARGS},
    {"on-fault", required_argument, NULL, AGENT_OPT_ON_FAULT},
    {"fault-restarts", required_argument, NULL, AGENT_OPT_FAULT_RESTARTS},
    {"bell-timeout", required_argument, NULL, AGENT_OPT_BELL_TIMEOUT},
    {"result-slots", required_argument, NULL, AGENT_OPT_RESULT_SLOTS},
};
#define AGENT_OWN_COUNT (sizeof agent_own_options / sizeof agent_own_options[0])
#define AGENT_FAULT_RESTARTS_DEFAULT 16u
/* Streams the rings share under the polling dispatcher unless --ring-streams
 * says otherwise: 2 to 8 ran alike on the H200, one a ring and one in all
 * slower (docs/streaming.md, "Who queues the copies"). */
#define AGENT_POLL_RING_STREAMS_DEFAULT 4u
/* Chunks a copy waits to gather under the polling dispatcher
 * (docs/streaming.md, "Joining copies"). */
#define AGENT_RING_JOIN_DEFAULT 2u /* docs/streaming.md, "Joining copies" */

struct agent_args {
    struct ga_server_cli cli;
    struct agent_self_test_args st;
    int self_test;
    enum agent_backend backend;
    uint64_t chunk;
    uint32_t ring_streams;
    bool ring_streams_set; /* --ring-streams given */
    bool ring_poll;        /* --ring-dispatch poll (the default) */
    uint32_t ring_join;    /* --ring-join */
    bool ring_join_set;
    uint64_t device_budget;              /* --device-budget; 0: 3/4 of the device's */
    uint64_t device_client_max;          /* --max-client-device; 0: half the budget */
    uint32_t bell_timeout_ms;            /* --bell-timeout; 0: GA_CUDA_BELL_TIMEOUT_MS_DEFAULT */
    uint32_t result_slots;               /* --result-slots; 0: GA_CUDA_RESULT_SLOTS_DEFAULT */
    struct ga_exec_launch_limits launch; /* --max-launches, --launch-max-* */
    int fault_exit;                      /* --on-fault exit */
    uint32_t fault_restarts;             /* --fault-restarts */
    const char *server_opt;    /* the first server option given (refused with --self-test) */
    const char *serve_only;    /* --backend or --chunk-bytes given (refused with --self-test) */
    const char *self_test_opt; /* --bytes, --block-size or --seed (only with --self-test) */
};

static void agent_usage(FILE *f)
{
    fprintf(f,
            "usage: lease-agent [--backend cuda|host] [--device N] [--chunk-bytes SIZE]\n"
            "                   [--ring-streams N] [--ring-dispatch poll|wait] [--ring-join N]\n"
            "                   [--device-budget SIZE] [--max-client-device SIZE]\n"
            "                   [--bell-timeout MS] [--cubin-dir DIR]\n"
            "                   [server options]\n"
            "       lease-agent --self-test [--device N] [--bytes SIZE] [--block-size N]\n"
            "                   [--seed N] [--cubin-dir DIR]\n"
            "       lease-agent --help | --version\n"
            "\n"
            "  --backend cuda   (default) open GPU N through the hardware gate, register\n"
            "                   segments with cuMemHostRegister and run the work on the GPU.\n"
            "                   If that cannot start, lease-agent exits with the reason; it\n"
            "                   never falls back to the host backend by itself.\n"
            "  --backend host   the host backend (mlock, C reference kernels on CPU threads,\n"
            "                   polled doorbells), as lease-agent-host: no GPU is touched and\n"
            "                   no driver is needed; announced in the log.\n"
            "  --device N       CUDA device index (default 0)\n"
            "  --chunk-bytes SIZE  copy/compute pipeline chunk of the CUDA executor\n"
            "                   (default 64M; 4K..1G, a multiple of 4K)\n"
            "  --ring-dispatch poll|wait  who queues a ring's chunk copies: poll (default),\n"
            "                   an agent thread polls the rings' words and queues the\n"
            "                   copies of stored chunks, adjacent ones joined; wait, each\n"
            "                   queued ahead behind a GPU wait on its word, for clients of\n"
            "                   the agent's uid and root only (docs/streaming.md)\n"
            "  --ring-join N    with poll: how many adjacent chunks one copy waits to gather\n"
            "                   (1..%u, default %u; 1: each stored chunk is copied at once);\n"
            "                   a chunk waits at most %u us for its neighbour, and only on\n"
            "                   rings of at least twice N slots\n"
            "  --device-budget SIZE  device memory all clients' ring images and LAUNCH\n"
            "                   copies may take (a ring: depth x its largest shard, from\n"
            "                   RING_OPEN; a launch: its PINNED ranges, until it completes;\n"
            "                   default three quarters of the device's memory)\n"
            "  --max-client-device SIZE  of that, one client's (default half)\n"
            "  --ring-streams N CUDA streams the streaming rings share (0..64; 0: a stream\n"
            "                   per ring); default %u with poll, 0 with wait\n"
            "  --bell-timeout MS  how long a client's unrung bell or unstored ring word\n"
            "                   may hold back the unregistration of pinned memory before\n"
            "                   the agent releases it itself and answers that work BUSY\n"
            "                   (10..3600000, default %u; docs/reliability.md)\n"
            "  --result-slots N checksum, scan and launch results in flight at once, all\n"
            "                   clients (1..1048576, default %u); a streaming shard takes\n"
            "                   one only once its chunks are on the device; each client\n"
            "                   is sure of 64 (fewer if that kept back over a quarter)\n"
            "  --cubin-dir DIR  also load every DIR/*.cubin at start-up (SASS-only for this\n"
            "                   GPU's arch, no PTX, kernels named k_*) with DIR/NAME.kdesc,\n"
            "                   the kernels a client may LAUNCH; any bad file, a descriptor\n"
            "                   that disagrees with its cubin, or a kernel name already\n"
            "                   taken fails start-up\n"
            "  --max-launches N         LAUNCHes one client may have in flight (default 64)\n"
            "  --launch-max-threads N   grid x block threads of one LAUNCH (default 2^30)\n"
            "  --launch-max-shared SIZE dynamic shared memory of one LAUNCH (default 48K)\n"
            "  --launch-max-args SIZE   argument block of one LAUNCH (default and at most 1K)\n"
            "  --on-fault restart|exit  after a GPU fault (every request in flight answered\n"
            "                   GPU_FAULT): re-execute on the same socket (default), or exit 1\n"
            "  --fault-restarts N       restarts after faults before it exits instead\n"
            "                   (default %u)\n"
            "\n"
            "  --self-test      open GPU N through the hardware gate (driver >= 580 / CUDA 13,\n"
            "                   compute capability == the embedded cubins' arch), load every\n"
            "                   embedded kernel, checksum --bytes of seeded random data on the\n"
            "                   GPU (device memory and mapped host memory) and with the C\n"
            "                   reference, flip one bit and check that verify names exactly\n"
            "                   that block. Prints one result line; exit 0 only if everything\n"
            "                   matched. Serves nothing: takes no server option.\n"
            "  --bytes SIZE     self-test data (default %u; at least 64)\n"
            "  --block-size N   self-test checksum block (default %u; a multiple of 8)\n"
            "  --seed N         self-test data seed (non-zero)\n"
            "\n"
            "The NVIDIA driver (libcuda.so.1) is loaded when a CUDA path starts, not before:\n"
            "without it --help, --version and --backend host work, and the CUDA paths exit\n"
            "saying so.\n"
            "\n"
            "Server options (as lease-agent-host):\n",
            GA_CUDA_RING_JOIN_MAX, AGENT_RING_JOIN_DEFAULT, GA_CUDA_RING_JOIN_WAIT_NS / 1000u,
            AGENT_POLL_RING_STREAMS_DEFAULT, GA_CUDA_BELL_TIMEOUT_MS_DEFAULT,
            GA_CUDA_RESULT_SLOTS_DEFAULT, AGENT_FAULT_RESTARTS_DEFAULT, AGENT_DEFAULT_BYTES,
            AGENT_DEFAULT_BLOCK);
    ga_server_cli_usage(f, "lease-agent");
}

/* "--opt: expected ..., found 'v'" into @err. */
static int agent_refuse(const char *opt, const char *want, const char *val, char *err,
                        size_t errlen)
{
    snprintf(err, errlen, "--%s: expected %s, found '%s'", opt, want, val ? val : "");
    return -EINVAL;
}

static int agent_option(struct agent_args *a, int opt, const char *name, const char *val, char *err,
                        size_t errlen)
{
    uint64_t v = 0;
    uint32_t u = 0;
    switch (opt) {
    case AGENT_OPT_SELF_TEST:
        a->self_test = 1;
        return 0;
    case AGENT_OPT_BACKEND:
        a->serve_only = "--backend";
        if (strcmp(val, "cuda") == 0)
            a->backend = AGENT_BACKEND_CUDA;
        else if (strcmp(val, "host") == 0)
            a->backend = AGENT_BACKEND_HOST;
        else
            return agent_refuse(name, "'cuda' or 'host'", val, err, errlen);
        return 0;
    case AGENT_OPT_DEVICE:
        if (base_parse_u32(val, 0, 63, &u, NULL, 0) < 0)
            return agent_refuse(name, "0..63", val, err, errlen);
        a->st.device = (int)u;
        return 0;
    case AGENT_OPT_CHUNK_BYTES:
        a->serve_only = "--chunk-bytes";
        if (base_parse_size(val, &v, NULL, 0) < 0 || v < 4096 || v % 4096 != 0 || v > (1ull << 30))
            return agent_refuse(name, "a multiple of 4K from 4K to 1G", val, err, errlen);
        a->chunk = v;
        return 0;
    case AGENT_OPT_RING_STREAMS:
        a->serve_only = "--ring-streams";
        if (base_parse_u32(val, 0, 64, &u, NULL, 0) < 0)
            return agent_refuse(name, "0..64", val, err, errlen);
        a->ring_streams = u;
        a->ring_streams_set = true;
        return 0;
    case AGENT_OPT_RING_DISPATCH:
        a->serve_only = "--ring-dispatch";
        if (strcmp(val, "poll") == 0)
            a->ring_poll = true;
        else if (strcmp(val, "wait") == 0)
            a->ring_poll = false;
        else
            return agent_refuse(name, "'wait' or 'poll'", val, err, errlen);
        return 0;
    case AGENT_OPT_RING_JOIN:
        a->serve_only = "--ring-join";
        if (base_parse_u32(val, 1, GA_CUDA_RING_JOIN_MAX, &u, NULL, 0) < 0)
            return agent_refuse(name, "1..4 (chunks)", val, err, errlen);
        a->ring_join = u;
        a->ring_join_set = true;
        return 0;
    case AGENT_OPT_DEVICE_BUDGET:
    case AGENT_OPT_MAX_CLIENT_DEVICE:
        a->serve_only = opt == AGENT_OPT_DEVICE_BUDGET ? "--device-budget" : "--max-client-device";
        if (base_parse_size(val, &v, NULL, 0) < 0 || v < (1ull << 20))
            return agent_refuse(name, "a size of at least 1M", val, err, errlen);
        if (opt == AGENT_OPT_DEVICE_BUDGET)
            a->device_budget = v;
        else
            a->device_client_max = v;
        return 0;
    case AGENT_OPT_BELL_TIMEOUT:
        a->serve_only = "--bell-timeout";
        if (base_parse_u32(val, 10, 3600000, &u, NULL, 0) < 0)
            return agent_refuse(name, "10..3600000 (ms)", val, err, errlen);
        a->bell_timeout_ms = u;
        return 0;
    case AGENT_OPT_RESULT_SLOTS:
        a->serve_only = "--result-slots";
        if (base_parse_u32(val, 1, GA_CUDA_RESULT_SLOTS_MAX, &u, NULL, 0) < 0)
            return agent_refuse(name, "1..1048576 (slots)", val, err, errlen);
        a->result_slots = u;
        return 0;
    case AGENT_OPT_CUBIN_DIR:
        if (!val[0])
            return agent_refuse(name, "a directory", val, err, errlen);
        a->st.cubin_dir = val;
        return 0;
    case AGENT_OPT_BYTES:
        a->self_test_opt = "--bytes";
        if (base_parse_size(val, &v, NULL, 0) < 0 || v < 64 || v > SIZE_MAX / 2)
            return agent_refuse(name, "a size of at least 64 bytes", val, err, errlen);
        a->st.bytes = (size_t)v;
        return 0;
    case AGENT_OPT_BLOCK_SIZE:
        a->self_test_opt = "--block-size";
        if (base_parse_u32(val, 8, UINT32_MAX, &u, NULL, 0) < 0 || u % 8 != 0)
            return agent_refuse(name, "a multiple of 8", val, err, errlen);
        a->st.block_size = u;
        return 0;
    case AGENT_OPT_SEED:
        a->self_test_opt = "--seed";
        if (base_parse_u64(val, 1, UINT64_MAX, &v, NULL, 0) < 0)
            return agent_refuse(name, "a non-zero number", val, err, errlen);
        a->st.seed = v;
        return 0;
    case AGENT_OPT_MAX_LAUNCHES:
        a->serve_only = "--max-launches";
        if (base_parse_u32(val, 1, 1u << 20, &u, NULL, 0) < 0)
            return agent_refuse(name, "1..1048576", val, err, errlen);
        a->launch.max_inflight = u;
        return 0;
    case AGENT_OPT_LAUNCH_THREADS:
        a->serve_only = "--launch-max-threads";
        if (base_parse_u64(val, 1, UINT64_MAX, &v, NULL, 0) < 0)
            return agent_refuse(name, "a non-zero number", val, err, errlen);
        a->launch.max_threads = v;
        return 0;
    case AGENT_OPT_LAUNCH_SHARED:
        a->serve_only = "--launch-max-shared";
        if (base_parse_size(val, &v, NULL, 0) < 0 || v == 0 || v > (1u << 30))
            return agent_refuse(name, "a size from 1 byte to 1G", val, err, errlen);
        a->launch.max_shared = (uint32_t)v;
        return 0;
    case AGENT_OPT_LAUNCH_ARGS:
        a->serve_only = "--launch-max-args";
        if (base_parse_size(val, &v, NULL, 0) < 0 || v == 0 || v > LT_LAUNCH_ARGS_MAX)
            return agent_refuse(name, "a size from 1 byte to 1K", val, err, errlen);
        a->launch.max_arg_bytes = (uint32_t)v;
        return 0;
    case AGENT_OPT_ON_FAULT:
        a->serve_only = "--on-fault";
        if (strcmp(val, "restart") == 0)
            a->fault_exit = 0;
        else if (strcmp(val, "exit") == 0)
            a->fault_exit = 1;
        else
            return agent_refuse(name, "'restart' or 'exit'", val, err, errlen);
        return 0;
    case AGENT_OPT_FAULT_RESTARTS:
        a->serve_only = "--fault-restarts";
        if (base_parse_u32(val, 0, 1u << 20, &u, NULL, 0) < 0)
            return agent_refuse(name, "0..1048576", val, err, errlen);
        a->fault_restarts = u;
        return 0;
    default:
        return -ENOENT;
    }
}

/* The self-test's options: no config keys (a config file sets up serving). */
static const char *const agent_cmdline_only[] = {"self-test", "bytes", "block-size", "seed", NULL};

/* One key of a --config file: lease-agent's own or the server's. */
static int agent_config_apply(void *ctx, int opt, const char *name, const char *val, char *err,
                              size_t errlen)
{
    struct agent_args *a = ctx;
    int rc = agent_option(a, opt, name, val, err, errlen);
    return rc == -ENOENT ? ga_server_cli_option(&a->cli, opt, val, err, errlen) : rc;
}

/* The whole command line, lease-agent's options and the server's. Returns
 * 0 or -EINVAL with @err saying which option expected what. */
static int agent_args_parse(int argc, char **argv, struct agent_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    ga_server_cli_init(&a->cli);
    a->st = (struct agent_self_test_args){.bytes = AGENT_DEFAULT_BYTES,
                                          .block_size = AGENT_DEFAULT_BLOCK,
                                          .seed = AGENT_DEFAULT_SEED};
    a->fault_restarts = AGENT_FAULT_RESTARTS_DEFAULT;
    a->ring_poll = true;
    a->ring_join = AGENT_RING_JOIN_DEFAULT;
    static struct option table[AGENT_OWN_COUNT + 64];
    if (AGENT_OWN_COUNT + ga_server_cli_option_count + 1 > sizeof table / sizeof table[0])
        return agent_refuse("help", "a smaller option table", "", err, errlen);
    memcpy(table, agent_own_options, sizeof agent_own_options);
    memcpy(table + AGENT_OWN_COUNT, ga_server_cli_options,
           (ga_server_cli_option_count + 1) * sizeof table[0]);
    /* The config file first, wherever --config stands: flags win. */
    const char *conf = NULL;
    int crc = ga_server_cli_config_find(argc, argv, table, &conf, err, errlen);
    if (crc == 0 && conf)
        crc = ga_server_cli_config_load(&a->cli, conf, table, agent_cmdline_only,
                                        agent_config_apply, a, err, errlen);
    if (crc < 0)
        return crc;
    opterr = 0; /* every refusal is ours, in one line */
    optind = 1;
    for (;;) {
        int index = -1;
        int opt = getopt_long(argc, argv, "+:h", table, &index);
        if (opt == -1)
            break;
        if (opt == '?' || opt == ':')
            return ga_server_cli_getopt_error(argc, argv, opt, err, errlen);
        if (opt == 'h') {
            a->cli.help = 1;
            continue;
        }
        const char *name = index >= 0 ? table[index].name : "?";
        int rc = agent_option(a, opt, name, optarg, err, errlen);
        if (rc == -ENOENT) {
            rc = ga_server_cli_option(&a->cli, opt, optarg, err, errlen);
            if (rc == 0 && !a->server_opt && strcmp(name, "help") != 0 &&
                strcmp(name, "version") != 0 && strcmp(name, "log-level") != 0)
                a->server_opt = name;
        }
        if (rc < 0)
            return rc;
    }
    if (optind < argc) {
        snprintf(err, errlen, "expected an option, found '%s'", argv[optind]);
        return -EINVAL;
    }
    if (a->cli.help || a->cli.version)
        return 0;
    if (!a->ring_streams_set)
        a->ring_streams = a->ring_poll ? AGENT_POLL_RING_STREAMS_DEFAULT : 0;
    if (a->ring_join_set && !a->ring_poll) {
        snprintf(err, errlen,
                 "--ring-join: expected --ring-dispatch poll with it, found --ring-dispatch wait "
                 "(which queues every chunk ahead on its own)");
        return -EINVAL;
    }
    if (a->self_test && a->server_opt) {
        snprintf(err, errlen, "--%s: not with --self-test, which serves nothing", a->server_opt);
        return -EINVAL;
    }
    if (a->self_test && a->serve_only) {
        snprintf(err, errlen, "%s: not with --self-test, which serves nothing", a->serve_only);
        return -EINVAL;
    }
    if (!a->self_test && a->self_test_opt) {
        snprintf(err, errlen, "%s: expected --self-test with it, found a server start",
                 a->self_test_opt);
        return -EINVAL;
    }
    if (!a->self_test && a->st.cubin_dir && a->backend != AGENT_BACKEND_CUDA) {
        snprintf(err, errlen,
                 "--cubin-dir %s: expected the CUDA backend, found --backend host (which "
                 "loads no cubins)",
                 a->st.cubin_dir);
        return -EINVAL;
    }
    return 0;
}

/* ---- the CUDA server ---------------------------------------------------- */

static struct ga_server *agent_srv; /* for the fault callback */
static volatile int agent_faulted;
static const struct base_log_sink *agent_log;
static int agent_fault_restart; /* set before the server starts: restart after a fault */

static void agent_on_fault(void *arg, int err)
{
    (void)arg;
    base_log(agent_log, BASE_LOG_ERROR, AGENT_SUBSYS,
             "the GPU faulted (%s); every request in flight was answered GPU_FAULT. %s",
             strerror(-err),
             agent_fault_restart ? "Restarting on the same socket: clients reconnect"
                                 : "Stopping (--on-fault exit): restart the agent.");
    agent_faulted = 1;
    struct ga_server *srv = __atomic_load_n(&agent_srv, __ATOMIC_ACQUIRE);
    if (srv && agent_fault_restart)
        ga_server_listener_keep(srv);
    if (srv)
        ga_server_stop(srv);
}

static int agent_serve_cuda(struct agent_args *a)
{
    struct ga_server_cli *cli = &a->cli;
    const int device = a->st.device;
    const char *cubin_dir = a->st.cubin_dir;
    static const char hint[] = "To serve without a GPU, start it with the host backend explicitly: "
                               "'lease-agent --backend host' or 'lease-agent-host'.";
    const struct base_log_sink *log = &cli->cfg.log;
    agent_log = log;
    char msg[768];
    if (agent_driver_load(msg, sizeof msg) < 0) {
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS,
                 "the CUDA backend cannot start on device %d: %s", device, msg);
        return 1;
    }
    struct ga_device *dev = NULL;
    struct ga_device_opts opts = {.ordinal = device, .log = log};
    struct agent_images ai;
    if (agent_images_prepare(log, cubin_dir, &ai, &opts) < 0)
        return 1;
    int rc = ga_device_open(&opts, &dev);
    if (rc < 0) {
        agent_images_release(&ai);
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS,
                 "the CUDA backend cannot start on device %d: %s (the lines above say what was "
                 "found and what is required). %s",
                 device, strerror(-rc), hint);
        return 1;
    }
    int status = 1;
    struct lease_backend be = {0};
    struct lt_failure why;
    rc = ga_cuda_lease_backend_init(ga_device_context(dev), 0, &be, &why);
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS, "CUDA registration backend: %s. %s",
                 why.message, hint);
        goto out_dev;
    }
    const struct ga_device_info *in = ga_device_info_get(dev);
    ga_server_cli_budgets_default(cli, ga_server_cli_half_memory(), "half the physical memory");
    cli->cfg.rings_trust_client = !a->ring_poll;
    struct ga_cuda_retire_gate gate = {0};
    /* Every client that may connect is sure of some result slots, so no
     * two (or more) uids' parked submits can take them all. */
    const uint32_t clients =
        cli->cfg.max_clients ? cli->cfg.max_clients : GA_SERVER_MAX_CLIENTS_DEFAULT;
    const uint32_t slots = a->result_slots ? a->result_slots : GA_CUDA_RESULT_SLOTS_DEFAULT;
    struct ga_executor_cuda_opts xo = {
        .workers = cli->exec.workers,
        .max_streams = cli->exec.max_streams,
        .max_events = cli->exec.max_events,
        .chunk_bytes = a->chunk,
        .ring_streams = a->ring_streams,
        .ring_poll = a->ring_poll,
        .ring_join = a->ring_join,
        .result_slots = a->result_slots,
        .result_floor = ga_executor_cuda_result_floor(slots, clients),
        .result_floor_clients = clients,
        .device_budget = a->device_budget,
        .device_client_max = a->device_client_max,
        .on_fault = agent_on_fault,
        .log = cli->cfg.log,
        .launch = a->launch,
        .retire_gate = &gate,
    };
    struct ga_executor *ex = NULL;
    rc = ga_executor_cuda_create(dev, &xo, &ex);
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS,
                 "the CUDA executor cannot start on device %d (%s): %s (see above). %s", device,
                 in->name, strerror(-rc), hint);
        goto out_be;
    }
    base_log(log, BASE_LOG_NOTICE, AGENT_SUBSYS,
             "CUDA backend on device %d %s (sm_%u, %s, driver API %d, kernel module %d.%d)",
             in->ordinal, in->name, in->arch, in->pci_bus_id, in->driver_version, in->kmd_major,
             in->kmd_minor);
    /* The reaper asks the executor before each unregistration (issue 12). */
    ga_cuda_lease_backend_gate(&be, &gate, a->bell_timeout_ms);
    cli->cfg.backend = &be;
    cli->cfg.executor = ex;
    status = ga_server_cli_serve(cli, &agent_srv);
    if (agent_faulted)
        status = 1;
    cli->cfg.backend = NULL;
    cli->cfg.executor = NULL;
    ga_cuda_lease_backend_gate(&be, NULL, a->bell_timeout_ms); /* before the gate's executor goes */
    ga_executor_destroy(ex);
out_be:
    lease_backend_fini(&be);
out_dev:
    ga_device_close(dev);
    agent_images_release(&ai);
    return status;
}

/* ---- restarting after a fault ----------------------------------------------- */

#define AGENT_ENV_LISTENER "LEASE_AGENT_LISTEN_FDS" /* "<socket fd>,<lock fd>" */
#define AGENT_ENV_RESTARTS "LEASE_AGENT_RESTARTS"   /* restarts after faults so far */

/* What the agent process before this one handed over (and forgets it, so
 * nothing this one starts inherits it). Returns 1 when it did. */
static int agent_inherited(struct ga_server_listener *l_p, uint32_t *restarts_p)
{
    const char *fds = getenv(AGENT_ENV_LISTENER), *n = getenv(AGENT_ENV_RESTARTS);
    int lfd = -1, lockfd = -1, got = 0;
    char tail = 0;
    if (fds && sscanf(fds, "%d,%d%c", &lfd, &lockfd, &tail) == 2 && lfd > 2 && lockfd > 2) {
        *l_p = (struct ga_server_listener){.listen_fd = lfd, .lock_fd = lockfd};
        uint32_t r = 0;
        *restarts_p = n && base_parse_u32(n, 0, UINT32_MAX, &r, NULL, 0) == 0 ? r : 1;
        got = 1;
    } else if (fds) {
        fprintf(stderr, "lease-agent: %s='%s': expected two fds above 2, ignored\n",
                AGENT_ENV_LISTENER, fds);
    }
    unsetenv(AGENT_ENV_LISTENER);
    unsetenv(AGENT_ENV_RESTARTS);
    return got;
}

/* Every fd but the listener's closes across exec: the driver's device
 * files among them, which hold the faulted context. */
static int agent_cloexec_all_but(const struct ga_server_listener *l)
{
    int rc = -ENOSYS;
#ifdef CLOSE_RANGE_CLOEXEC
    rc = close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) == 0 ? 0 : -errno;
#endif
    if (rc < 0) {
        DIR *d = opendir("/proc/self/fd");
        if (!d)
            return -errno;
        for (struct dirent *e; (e = readdir(d));) {
            int fd = atoi(e->d_name);
            if (fd > 2 && fd != dirfd(d))
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
    }
    if (fcntl(l->listen_fd, F_SETFD, 0) < 0 || fcntl(l->lock_fd, F_SETFD, 0) < 0)
        return -errno;
    return 0;
}

/* Re-executes lease-agent with its own arguments, the listener passed on.
 * Returns only on failure (logged). */
static int agent_reexec(char **argv, const struct ga_server_listener *l, uint32_t restarts)
{
    char fds[32], n[16];
    snprintf(fds, sizeof fds, "%d,%d", l->listen_fd, l->lock_fd);
    snprintf(n, sizeof n, "%" PRIu32, restarts);
    int rc = agent_cloexec_all_but(l);
    if (rc == 0 && (setenv(AGENT_ENV_LISTENER, fds, 1) < 0 || setenv(AGENT_ENV_RESTARTS, n, 1) < 0))
        rc = -errno;
    if (rc == 0) {
        fprintf(stderr,
                "lease-agent: re-executing after a GPU fault (restart %" PRIu32
                "), serving the same socket\n",
                restarts);
        execv("/proc/self/exe", argv);
        rc = -errno;
    }
    fprintf(stderr, "lease-agent: error: agent: restarting after the GPU fault failed: %s\n",
            strerror(-rc));
    return rc;
}

int main(int argc, char **argv)
{
    struct agent_args a;
    char err[512];
    struct ga_server_listener inherited;
    uint32_t restarts = 0;
    int handed = agent_inherited(&inherited, &restarts);
    if (agent_args_parse(argc, argv, &a, err, sizeof err) < 0) {
        fprintf(stderr, "lease-agent: %s (see --help)\n", err);
        ga_server_cli_fini(&a.cli);
        return 2;
    }
    if (a.cli.help || a.cli.version) {
        if (a.cli.help)
            agent_usage(stdout);
        else
            ga_server_cli_version(stdout, "lease-agent");
        ga_server_cli_fini(&a.cli);
        return 0;
    }
    if (a.self_test) {
        ga_server_cli_fini(&a.cli);
        return agent_self_test(&a.st);
    }
    /* Before any thread starts, so only the server's signalfd sees them. */
    ga_server_cli_signals_block();
    struct base_log_file *logf = NULL;
    int lrc = ga_server_cli_log_setup(&a.cli, &logf);
    if (lrc < 0) {
        fprintf(stderr, "lease-agent: --log-file %s: %s\n", a.cli.log_file ? a.cli.log_file : "-",
                strerror(-lrc));
        ga_server_cli_fini(&a.cli);
        return 1;
    }
    if (handed && a.backend == AGENT_BACKEND_CUDA) {
        /* The first process reported "ready"; this one serves what it left. */
        a.cli.cfg.inherit = &inherited;
        a.cli.ready_fd = -1;
        base_log(&a.cli.cfg.log, BASE_LOG_NOTICE, AGENT_SUBSYS,
                 "restarted after a GPU fault (%" PRIu32 " of at most %" PRIu32 ")", restarts,
                 a.fault_restarts);
    } else if (handed) {
        close(inherited.listen_fd); /* the host backend never faults: bind anew */
        close(inherited.lock_fd);
    }
    agent_fault_restart = !a.fault_exit && restarts < a.fault_restarts;
    ga_stop_watchdog_install(&a.cli);
    int status = a.backend == AGENT_BACKEND_CUDA ? agent_serve_cuda(&a)
                                                 : ga_agent_host_serve(&a.cli, "--backend host");
    if (agent_faulted && !agent_fault_restart)
        base_log(&a.cli.cfg.log, BASE_LOG_ERROR, AGENT_SUBSYS,
                 "not restarting after the GPU fault: %s",
                 a.fault_exit ? "--on-fault exit" : "--fault-restarts reached");
    base_log_default_set(NULL);
    base_log_file_destroy(logf);
    ga_server_cli_fini(&a.cli);
    if (agent_faulted && a.cli.kept.listen_fd >= 0)
        agent_reexec(argv, &a.cli.kept, restarts + 1);
    return status;
}
