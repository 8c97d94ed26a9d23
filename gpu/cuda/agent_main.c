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
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "base/parse.h"
#include "gpu/agent_host.h"
#include "gpu/cu.h"
#include "gpu/executor_cuda.h"
#include "gpu/lease_backend.h"
#include "gpu/server.h"

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
};
#define AGENT_OWN_COUNT (sizeof agent_own_options / sizeof agent_own_options[0])

struct agent_args {
    struct ga_server_cli cli;
    struct agent_self_test_args st;
    int self_test;
    enum agent_backend backend;
    uint64_t chunk;
    uint32_t ring_streams;
    const char *server_opt;    /* the first server option given (refused with --self-test) */
    const char *serve_only;    /* --backend or --chunk-bytes given (refused with --self-test) */
    const char *self_test_opt; /* --bytes, --block-size or --seed (only with --self-test) */
};

static void agent_usage(FILE *f)
{
    fprintf(f,
            "usage: lease-agent [--backend cuda|host] [--device N] [--chunk-bytes SIZE]\n"
            "                   [--ring-streams N] [--cubin-dir DIR] [server options]\n"
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
            "  --ring-streams N CUDA streams the streaming rings share (1..64); default 0:\n"
            "                   a stream per ring (docs/streaming.md)\n"
            "  --cubin-dir DIR  also load every DIR/*.cubin at start-up (SASS-only for this\n"
            "                   GPU's arch, no PTX, kernels named k_*); any bad file, or a\n"
            "                   kernel name already taken, fails start-up\n"
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
            AGENT_DEFAULT_BYTES, AGENT_DEFAULT_BLOCK);
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
    default:
        return -ENOENT;
    }
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
    static struct option table[AGENT_OWN_COUNT + 64];
    if (AGENT_OWN_COUNT + ga_server_cli_option_count + 1 > sizeof table / sizeof table[0])
        return agent_refuse("help", "a smaller option table", "", err, errlen);
    memcpy(table, agent_own_options, sizeof agent_own_options);
    memcpy(table + AGENT_OWN_COUNT, ga_server_cli_options,
           (ga_server_cli_option_count + 1) * sizeof table[0]);
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

static void agent_on_fault(void *arg, int err)
{
    (void)arg;
    base_log(agent_log, BASE_LOG_ERROR, AGENT_SUBSYS,
             "the GPU faulted (%s); every request in flight was answered GPU_FAULT. Stopping: "
             "restart the agent.",
             strerror(-err));
    agent_faulted = 1;
    struct ga_server *srv = __atomic_load_n(&agent_srv, __ATOMIC_ACQUIRE);
    if (srv)
        ga_server_stop(srv);
}

static int agent_serve_cuda(struct ga_server_cli *cli, int device, uint64_t chunk,
                            uint32_t ring_streams, const char *cubin_dir)
{
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
    struct ga_executor_cuda_opts xo = {
        .workers = cli->exec.workers,
        .max_streams = cli->exec.max_streams,
        .max_events = cli->exec.max_events,
        .chunk_bytes = chunk,
        .ring_streams = ring_streams,
        .on_fault = agent_on_fault,
        .log = cli->cfg.log,
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
    cli->cfg.backend = &be;
    cli->cfg.executor = ex;
    status = ga_server_cli_serve(cli, &agent_srv);
    if (agent_faulted)
        status = 1;
    cli->cfg.backend = NULL;
    cli->cfg.executor = NULL;
    ga_executor_destroy(ex);
out_be:
    lease_backend_fini(&be);
out_dev:
    ga_device_close(dev);
    agent_images_release(&ai);
    return status;
}

int main(int argc, char **argv)
{
    struct agent_args a;
    char err[512];
    if (agent_args_parse(argc, argv, &a, err, sizeof err) < 0) {
        fprintf(stderr, "lease-agent: %s (see --help)\n", err);
        return 2;
    }
    if (a.cli.help) {
        agent_usage(stdout);
        return 0;
    }
    if (a.cli.version) {
        ga_server_cli_version(stdout, "lease-agent");
        return 0;
    }
    if (a.self_test)
        return agent_self_test(&a.st);
    /* Before any thread starts, so only the server's signalfd sees them. */
    ga_server_cli_signals_block();
    struct base_log_file *logf = NULL;
    if (ga_server_cli_log_setup(&a.cli, &logf) < 0)
        return 1;
    int status = a.backend == AGENT_BACKEND_CUDA ? agent_serve_cuda(&a.cli, a.st.device, a.chunk,
                                                                    a.ring_streams, a.st.cubin_dir)
                                                 : ga_agent_host_serve(&a.cli, "--backend host");
    base_log_default_set(NULL);
    base_log_file_destroy(logf);
    return status;
}
