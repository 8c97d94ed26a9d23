/* leasectl doctor: every check one line, "OK name: detail" or "FIX name:
 * what is wrong -> what to change"; exit 1 when any says FIX. It reads the
 * machine (/proc, /sys, probes), asks the agent and stagingd what they run
 * with (HELLO_REPLY's budgets and limits, each one's /proc/PID/limits),
 * and never loads CUDA: the driver is /proc/driver/nvidia/version and
 * nvidia-smi, run as a separate program. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/hugepages.h"
#include "lease_metrics/metrics.h"
#include "leasectl.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#define LCTL__TMPFS_MAGIC 0x01021994
#define LCTL__DRIVER_MIN 580 /* CUDA 13's kernel module, as the agent's hardware gate */

struct lctl__doc {
    FILE *out;
    enum lctl_format format;
    json_t *checks;
    int fixes;
};

static void lctl__check(struct lctl__doc *d, int ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void lctl__check(struct lctl__doc *d, int ok, const char *name, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    d->fixes += !ok;
    if (d->format == LCTL_HUMAN) {
        fprintf(d->out, "%s %s: %s\n", ok ? "OK" : "FIX", name, text);
        return;
    }
    json_array_append_new(d->checks,
                          json_pack("{ss sb ss}", "check", name, "ok", ok, "detail", text));
}

/* The first line of @path without its newline into @buf; 0 or -errno. */
static int lctl__read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = fgets(buf, (int)len, f) ? 0 : -EIO;
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    return rc;
}

static long long lctl__read_ll(const char *path)
{
    char b[64];
    return lctl__read_line(path, b, sizeof b) == 0 ? atoll(b) : -1;
}

/* Runs @argv with stdout into @buf (stderr dropped); its exit status, or
 * -errno when it could not start (127 for a missing program). */
static int lctl__run(char *const argv[], char *buf, size_t len)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -errno;
    }
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0)
            dup2(null, STDERR_FILENO);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < len && (got = read(p[0], buf + n, len - n - 1)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* "Max locked memory" / "Max open files" soft limit of process @pid (0:
 * this one). Returns 0 and *@v_p (RLIM_INFINITY for unlimited), or -errno. */
static int lctl__limit(pid_t pid, const char *what, int resource, uint64_t *v_p)
{
    if (pid <= 0 || pid == getpid()) {
        struct rlimit rl;
        if (getrlimit(resource, &rl) < 0)
            return -errno;
        *v_p = rl.rlim_cur;
        return 0;
    }
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/limits", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, what, strlen(what)) != 0)
            continue;
        char soft[32];
        if (sscanf(line + strlen(what), "%31s", soft) == 1) {
            *v_p =
                strcmp(soft, "unlimited") == 0 ? (uint64_t)RLIM_INFINITY : strtoull(soft, NULL, 10);
            rc = 0;
        }
        break;
    }
    fclose(f);
    return rc;
}

static uint64_t lctl__meminfo(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10) * 1024;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

/* ---- what the agent and stagingd say ---- */

struct lctl__ctx {
    const struct lctl_opts *o;
    struct lctl_agent agent;
    int host;                /* the host backend: no driver or device needed */
    uint64_t pinned, mapped; /* the budgets checked */
    const char *budget_src;
    json_t *sd;
    pid_t sd_pid;
};

static void lctl__driver(struct lctl__doc *d, const struct lctl__ctx *c)
{
    if (c->host) {
        lctl__check(d, 1, "driver", "not needed: the host backend serves (no GPU)");
        return;
    }
    char line[512], out[1024];
    unsigned major = 0;
    const char *from = NULL;
    if (lctl__read_line("/proc/driver/nvidia/version", line, sizeof line) == 0) {
        const char *p = strstr(line, "Kernel Module");
        if (p && sscanf(p + strlen("Kernel Module"), " %u", &major) == 1)
            from = "/proc/driver/nvidia/version";
    }
    char *const smi[] = {"nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", NULL};
    int rc = -1;
    if (!from && (rc = lctl__run(smi, out, sizeof out)) == 0 && sscanf(out, "%u", &major) == 1)
        from = "nvidia-smi";
    if (!from) {
        lctl__check(d, 0, "driver",
                    "no NVIDIA driver found (/proc/driver/nvidia/version absent, nvidia-smi %s) "
                    "-> install the NVIDIA driver %u or newer for the CUDA agent, or run the host "
                    "backend (lease-agent --backend host, lease-agent-host; leasectl doctor "
                    "--backend host)",
                    rc == 127 ? "not on PATH" : "gave no version", LCTL__DRIVER_MIN);
        return;
    }
    if (major < LCTL__DRIVER_MIN)
        lctl__check(d, 0, "driver",
                    "kernel module %u (%s) is older than CUDA 13 needs -> install driver %u or "
                    "newer",
                    major, from, LCTL__DRIVER_MIN);
    else
        lctl__check(d, 1, "driver", "kernel module %u (%s), CUDA 13 needs %u or newer", major, from,
                    LCTL__DRIVER_MIN);
}

static void lctl__device(struct lctl__doc *d, const struct lctl__ctx *c)
{
    if (c->host) {
        lctl__check(d, 1, "device", "not needed: the host backend serves (no GPU)");
        return;
    }
    char node[32], out[4096];
    snprintf(node, sizeof node, "/dev/nvidia%d", c->o->device);
    char *const smi[] = {"nvidia-smi", "--query-gpu=index,compute_cap,name",
                         "--format=csv,noheader", NULL};
    int rc = lctl__run(smi, out, sizeof out);
    if (rc != 0) {
        lctl__check(d, 0, "device",
                    "cannot list GPUs (nvidia-smi %s; %s %s) -> install the NVIDIA driver, or "
                    "use the host backend",
                    rc == 127 ? "not on PATH" : "failed", node,
                    access(node, F_OK) == 0 ? "exists" : "is absent");
        return;
    }
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int idx;
        unsigned maj, min;
        char name[128] = "";
        if (sscanf(l, "%d, %u.%u, %127[^\n]", &idx, &maj, &min, name) < 3 || idx != c->o->device)
            continue;
        unsigned arch = maj * 10 + min;
        if (arch != c->o->arch)
            lctl__check(d, 0, "device",
                        "GPU %d (%s) is sm_%u but the agent's kernels are built for sm_%u -> "
                        "rebuild with make build ARCH=%u (or -DLEASE_GPU_ARCH=%u)",
                        idx, name, arch, c->o->arch, arch, arch);
        else
            lctl__check(d, 1, "device", "GPU %d (%s) is sm_%u, the arch the kernels are built for",
                        idx, name, arch);
        return;
    }
    lctl__check(d, 0, "device",
                "no GPU with index %d (nvidia-smi lists: %s) -> pick one it lists "
                "(lease-agent --device N, lease-agent@N.service)",
                c->o->device, out[0] ? out : "none");
}

static void lctl__agent_check(struct lctl__doc *d, const struct lctl__ctx *c)
{
    const struct lctl_agent *a = &c->agent;
    if (!a->have_stats) {
        lctl__check(d, 0, "agent",
                    "%s -> start it: systemctl start lease-agent@%d, or "
                    "lease-agent --socket %s",
                    a->err, c->o->device, a->path);
        return;
    }
    lctl__check(d, 1, "agent", "\"%s\" answers at %s (%s backend, protocol v%u, pid %ld)",
                a->hello.agent_name, a->path, c->host ? "host" : "CUDA", a->hello.version,
                (long)a->pid);
}

static void lctl__socket(struct lctl__doc *d, const struct lctl__ctx *c)
{
    const char *path = c->agent.path;
    struct stat st, dst;
    if (lstat(path, &st) < 0) {
        lctl__check(d, 0, "agent_socket", "%s: %s -> start the agent (it creates the socket)", path,
                    strerror(errno));
        return;
    }
    char dir[LCTL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, "%s", slash ? "/" : ".");
    if (!S_ISSOCK(st.st_mode)) {
        lctl__check(d, 0, "agent_socket", "%s is not a socket -> remove it and restart the agent",
                    path);
        return;
    }
    if (st.st_mode & 0007) {
        lctl__check(d, 0, "agent_socket",
                    "%s is mode %04o: anyone may connect -> the agent creates it 0600 (0660 with "
                    "--group); do not chmod it",
                    path, (unsigned)(st.st_mode & 07777));
        return;
    }
    if (stat(dir, &dst) == 0 && (dst.st_mode & 0022)) {
        lctl__check(d, 0, "agent_socket",
                    "its directory %s is mode %04o: others may replace the socket -> chmod "
                    "go-w %s (the agent makes it 0700, 0710 with --group)",
                    dir, (unsigned)(dst.st_mode & 07777), dir);
        return;
    }
    if (c->agent.up && st.st_uid != c->agent.uid) {
        lctl__check(d, 0, "agent_socket",
                    "%s is owned by uid %u but the agent runs as uid %u -> remove it and restart "
                    "the agent",
                    path, (unsigned)st.st_uid, (unsigned)c->agent.uid);
        return;
    }
    lctl__check(d, 1, "agent_socket", "%s mode %04o uid %u, directory %s mode %04o", path,
                (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, dir,
                (unsigned)(dst.st_mode & 07777));
}

static void lctl__memlock(struct lctl__doc *d, const struct lctl__ctx *c)
{
    uint64_t lim = 0;
    pid_t pid = c->agent.up ? c->agent.pid : 0;
    int rc = lctl__limit(pid, "Max locked memory", RLIMIT_MEMLOCK, &lim);
    const char *whose = pid ? "the agent's" : "leasectl's own (no agent answers)";
    if (rc < 0) {
        lctl__check(d, 0, "memlock",
                    "cannot read %s RLIMIT_MEMLOCK: %s -> run leasectl as the "
                    "agent's user or root",
                    whose, strerror(-rc));
        return;
    }
    char lb[32], nb[32];
    uint64_t need = c->pinned + c->mapped;
    lctl_bytes(lim, lb, sizeof lb);
    lctl_bytes(need, nb, sizeof nb);
    if (lim == (uint64_t)RLIM_INFINITY)
        snprintf(lb, sizeof lb, "unlimited");
    if (!c->host) {
        lctl__check(d, 1, "memlock",
                    "%s RLIMIT_MEMLOCK %s; the CUDA backend pins through the driver, which the "
                    "limit does not bound (budgets %s, %s)",
                    whose, lb, nb, c->budget_src);
        return;
    }
    if (lim != (uint64_t)RLIM_INFINITY && lim < need)
        lctl__check(d, 0, "memlock",
                    "%s RLIMIT_MEMLOCK %s is below the budgets %s (%s) the host backend locks -> "
                    "LimitMEMLOCK=%" PRIu64 " in the unit (or ulimit -l %" PRIu64
                    "), or smaller --pinned-budget / --mapped-budget",
                    whose, lb, nb, c->budget_src, need, need / 1024);
    else
        lctl__check(d, 1, "memlock", "%s RLIMIT_MEMLOCK %s covers the budgets %s (%s)", whose, lb,
                    nb, c->budget_src);
}

static void lctl__uring(struct lctl__doc *d, int *uring_rc_p)
{
    long long disabled = lctl__read_ll("/proc/sys/kernel/io_uring_disabled");
    struct io_uring ring;
    int rc = io_uring_queue_init(8, &ring, 0);
    *uring_rc_p = rc;
    if (rc < 0) {
        lctl__check(d, 0, "io_uring",
                    "io_uring_setup failed: %s%s -> %s; stagingd falls back to pread, slower",
                    strerror(-rc), disabled > 0 ? " (kernel.io_uring_disabled is set)" : "",
                    disabled > 0 ? "sysctl kernel.io_uring_disabled=0"
                    : rc == -EPERM || rc == -ENOSYS
                        ? "allow io_uring_setup, io_uring_enter and io_uring_register in the "
                          "seccomp profile (see the seccomp line)"
                        : "use a kernel with io_uring (5.10 or newer)");
        return;
    }
    struct io_uring_probe *probe = io_uring_get_probe_ring(&ring);
    int read_ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe)
        io_uring_free_probe(probe);
    io_uring_queue_exit(&ring);
    if (!read_ok)
        lctl__check(d, 0, "io_uring",
                    "the kernel's io_uring lacks IORING_OP_READ -> use a kernel of 5.6 or newer");
    else
        lctl__check(d, 1, "io_uring", "io_uring_setup works, IORING_OP_READ supported");
}

/* The "Seccomp:" mode of process @pid (0: this one): 0 none, 1 strict, 2
 * filter; -1 unknown. */
static int lctl__seccomp_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, pid > 0 ? "/proc/%ld/status" : "/proc/self/status", (long)pid);
    FILE *f = fopen(path, "re");
    int mode = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Seccomp: %d", &mode) == 1)
            break;
    if (f)
        fclose(f);
    return mode;
}

static void lctl__seccomp(struct lctl__doc *d, const struct lctl__ctx *c, int uring_rc)
{
    int self = lctl__seccomp_of(0), sd = c->sd_pid > 0 ? lctl__seccomp_of(c->sd_pid) : -1;
    static const char *const modes[] = {"none", "strict", "filter"};
    const char *sm = self >= 0 && self <= 2 ? modes[self] : "unknown";
    if (self == 2 && (uring_rc == -EPERM || uring_rc == -ENOSYS)) {
        lctl__check(d, 0, "seccomp",
                    "a seccomp filter is on and io_uring_setup fails with %s: the filter blocks "
                    "io_uring -> allow io_uring_setup, io_uring_enter and io_uring_register "
                    "(docker: --security-opt seccomp=PROFILE; systemd: SystemCallFilter=)",
                    strerror(-uring_rc));
        return;
    }
    if (sd == 2)
        lctl__check(d, 1, "seccomp",
                    "leasectl: %s; stagingd (pid %ld): filter (that io_uring works there: "
                    "'leasectl stats' shows its reader on io_uring)",
                    sm, (long)c->sd_pid);
    else
        lctl__check(d, 1, "seccomp", "mode %s%s, io_uring not blocked", sm,
                    self == 2 ? " (a filter that allows io_uring)" : "");
}

static void lctl__hugepages(struct lctl__doc *d)
{
    long long nr = base_hugepages_counter("nr_hugepages");
    long long freep = base_hugepages_counter("free_hugepages");
    char thp[128] = "";
    lctl__read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", thp, sizeof thp);
    /* The policy in force is the bracketed word: "always [advise] never". */
    char pol[32] = "unknown";
    const char *b = strchr(thp, '[');
    if (b)
        sscanf(b + 1, "%31[^]]", pol);
    int thp_ok = strcmp(pol, "always") == 0 || strcmp(pol, "within_size") == 0 ||
                 strcmp(pol, "advise") == 0 || strcmp(pol, "force") == 0;
    if (freep > 0 || thp_ok)
        lctl__check(d, 1, "hugepages",
                    "2 MiB pages for the pool: %lld hugetlb page(s) reserved, %lld free; shmem THP "
                    "'%s'",
                    nr < 0 ? 0 : nr, freep < 0 ? 0 : freep, pol);
    else
        lctl__check(
            d, 0, "hugepages",
            "no 2 MiB pages for stagingd's pool (%lld hugetlb page(s) free, shmem THP "
            "'%s'): the agent registers 4 KiB pages 1.4-2.5x slower -> echo N > " BASE_HUGE_SYSFS
            "/nr_hugepages, or echo advise > "
            "/sys/kernel/mm/transparent_hugepage/shmem_enabled",
            freep < 0 ? 0 : freep, pol);
}

static void lctl__memfd(struct lctl__doc *d)
{
    int fd = memfd_create("leasectl-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        lctl__check(d, 0, "memfd",
                    "memfd_create(MFD_ALLOW_SEALING) failed: %s -> a kernel of 3.17 "
                    "or newer, with memfd allowed by seccomp",
                    strerror(errno));
        return;
    }
    int rc = ftruncate(fd, 1 << 21) < 0 ? -errno : 0;
    const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (rc == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
        rc = -errno;
    if (rc == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0)
        rc = -errno;
    int got = rc == 0 ? fcntl(fd, F_GET_SEALS) : -1;
    close(fd);
    if (rc < 0 || got != seals) {
        lctl__check(d, 0, "memfd",
                    "sealing a memfd failed (%s, seals 0x%x) -> a kernel with memfd "
                    "sealing (3.17+); stagingd's segments must be sealed",
                    rc < 0 ? strerror(-rc) : "wrong seals", got < 0 ? 0u : (unsigned)got);
        return;
    }
    fd = memfd_create("leasectl-doctor-fw", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int fw = fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
    int fw_err = fw ? 0 : errno;
    if (fd >= 0)
        close(fd);
    lctl__check(d, 1, "memfd", "memfd sealing works (SHRINK, GROW, SEAL); F_SEAL_FUTURE_WRITE %s",
                fw ? "works too" : strerror(fw_err));
}

static void lctl__shm(struct lctl__doc *d, const struct lctl__ctx *c)
{
    struct statfs sf;
    struct statvfs sv;
    uint64_t avail = lctl__meminfo("MemAvailable"), total = lctl__meminfo("MemTotal");
    char ab[32], tb[32], nb[32], fb[32];
    lctl_bytes(avail, ab, sizeof ab);
    lctl_bytes(total, tb, sizeof tb);
    if (statfs("/dev/shm", &sf) < 0 || statvfs("/dev/shm", &sv) < 0) {
        lctl__check(d, 0, "dev_shm",
                    "/dev/shm: %s -> mount -t tmpfs tmpfs /dev/shm (POSIX shared "
                    "memory; stagingd's segments are memfds, shmem too)",
                    strerror(errno));
    } else {
        lctl_bytes((uint64_t)sv.f_bavail * sv.f_frsize, fb, sizeof fb);
        lctl__check(d, sf.f_type == LCTL__TMPFS_MAGIC, "dev_shm", "/dev/shm is %s with %s free%s",
                    sf.f_type == LCTL__TMPFS_MAGIC ? "tmpfs" : "not tmpfs", fb,
                    sf.f_type == LCTL__TMPFS_MAGIC ? "" : " -> mount -t tmpfs tmpfs /dev/shm");
    }
    /* Registered memory is already out of MemAvailable. */
    uint64_t need = c->pinned + c->mapped, used = 0;
    for (int k = 0; c->agent.have_stats && k < 4; k++)
        used += c->agent.classes[k].bytes_registered;
    lctl_bytes(need, nb, sizeof nb);
    if (need > total)
        lctl__check(d, 0, "memory",
                    "the budgets %s (%s) exceed physical memory %s -> smaller "
                    "--pinned-budget / --mapped-budget",
                    nb, c->budget_src, tb);
    else if (need > avail + used)
        lctl__check(d, 0, "memory",
                    "budgets %s (%s) but only %s available -> free memory or "
                    "smaller budgets",
                    nb, c->budget_src, ab);
    else
        lctl__check(d, 1, "memory", "%s available of %s; budgets %s (%s)", ab, tb, nb,
                    c->budget_src);
}

static void lctl__fds(struct lctl__doc *d, const struct lctl__ctx *c)
{
    uint64_t lim = 0;
    pid_t pid = c->agent.up ? c->agent.pid : 0;
    /* The agent holds an fd per segment of every client, plus sockets. */
    uint64_t need = (c->agent.up ? c->agent.hello.max_segments : 1024) + 256;
    const char *whose = pid ? "the agent's" : "leasectl's own (no agent answers)";
    if (lctl__limit(pid, "Max open files", RLIMIT_NOFILE, &lim) < 0) {
        lctl__check(d, 0, "fd_limit",
                    "cannot read %s RLIMIT_NOFILE -> run leasectl as the agent's "
                    "user or root",
                    whose);
        return;
    }
    if (lim != (uint64_t)RLIM_INFINITY && lim < need)
        lctl__check(d, 0, "fd_limit",
                    "%s RLIMIT_NOFILE %" PRIu64 " is below %" PRIu64
                    " (a client's --max-segments plus sockets) -> LimitNOFILE=%" PRIu64
                    " in the unit (or ulimit -n)",
                    whose, lim, need, need < 65536 ? 65536 : need);
    else
        lctl__check(d, 1, "fd_limit",
                    "%s RLIMIT_NOFILE %" PRIu64 " (a client's segments and "
                    "sockets need %" PRIu64 ")",
                    whose, lim, need);
}

/* The store's O_DIRECT alignment: statx(STATX_DIOALIGN) on a shard, else a
 * 4 KiB O_DIRECT read of one. */
static void lctl__store(struct lctl__doc *d, const struct lctl__ctx *c)
{
    const char *store = c->o->store[0] ? c->o->store : NULL;
    if (!store && c->sd) {
        const char *s =
            json_string_value(json_object_get(json_object_get(c->sd, "config"), "store"));
        store = s && s[0] ? s : NULL;
    }
    if (!store) {
        lctl__check(d, 1, "store_odirect",
                    "not checked: no --store DIR, and no stagingd names one");
        return;
    }
    DIR *dir = opendir(store);
    if (!dir) {
        lctl__check(d, 0, "store_odirect", "%s: %s -> pass the store directory (--store DIR)",
                    store, strerror(errno));
        return;
    }
    char file[4096 + 256] = "";
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (e->d_type == DT_REG && strstr(e->d_name, ".sds")) {
            snprintf(file, sizeof file, "%s/%s", store, e->d_name);
            break;
        }
    closedir(dir);
    const char *probe = file[0] ? file : store;
    struct statx sx;
    memset(&sx, 0, sizeof sx);
    if (statx(AT_FDCWD, probe, 0, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_mem_align == 0)
            lctl__check(d, 0, "store_odirect",
                        "%s: the file system has no O_DIRECT (statx) -> "
                        "stagingd reads through the page cache there; put the store on ext4 or "
                        "xfs for direct reads",
                        store);
        else
            lctl__check(d, sx.stx_dio_mem_align <= 4096 && sx.stx_dio_offset_align <= 4096,
                        "store_odirect",
                        "%s: O_DIRECT memory alignment %u, offset alignment %u (statx); stagingd's "
                        "buffers are 4096-aligned%s",
                        store, sx.stx_dio_mem_align, sx.stx_dio_offset_align,
                        sx.stx_dio_mem_align <= 4096 && sx.stx_dio_offset_align <= 4096
                            ? ""
                            : " -> use a file system with at most 4 KiB direct-I/O alignment");
        return;
    }
    if (!file[0]) {
        lctl__check(d, 1, "store_odirect",
                    "%s: no shard to probe (statx reports no direct-I/O "
                    "alignment on this kernel)",
                    store);
        return;
    }
    int fd = open(file, O_RDONLY | O_DIRECT | O_CLOEXEC);
    int rc = fd < 0 ? -errno : 0;
    void *buf = rc == 0 ? aligned_alloc(4096, 4096) : NULL;
    if (rc == 0 && !buf)
        rc = -ENOMEM;
    if (buf && pread(fd, buf, 4096, 0) < 0)
        rc = -errno;
    free(buf);
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        lctl__check(d, 0, "store_odirect",
                    "%s: a 4 KiB O_DIRECT read failed: %s -> stagingd reads "
                    "through the page cache there; put the store on ext4 or xfs",
                    file, strerror(-rc));
    else
        lctl__check(d, 1, "store_odirect",
                    "%s: a 4 KiB-aligned O_DIRECT read works (probed: "
                    "statx reports no alignment on this kernel)",
                    file);
}

/* One gauge per check, through lease_metrics like every other series. */
static void lctl__doctor_prometheus(json_t *checks, FILE *out)
{
    struct lm_registry *reg;
    struct lm_family *f;
    const char *const labels[] = {"check", NULL};
    if (lm_registry_create(&reg) < 0)
        return;
    if (lm_family_add(reg, LM_GAUGE, "lease_doctor_check_ok",
                      "1 when leasectl doctor's check passed, 0 when it says FIX.", labels, NULL, 0,
                      &f) == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(checks, i, e)
        {
            const char *const v[] = {json_string_value(json_object_get(e, "check")), NULL};
            struct lm_series *s;
            if (v[0] && lm_series_get(f, v, &s) == 0)
                lm_gauge_set(s, json_is_true(json_object_get(e, "ok")));
        }
    }
    char *text = NULL;
    size_t len = 0;
    if (lm_registry_render(reg, &text, &len) == 0)
        fwrite(text, 1, len, out);
    free(text);
    lm_registry_destroy(reg);
}

int lctl_doctor(const struct lctl_opts *o, FILE *out)
{
    struct lctl__doc d = {.out = out, .format = o->format, .checks = json_array()};
    struct lctl__ctx c = {.o = o};
    lctl_agent_query(o->agents[0], o->timeout_ms, &c.agent);
    c.host = o->backend == 2 ||
             (o->backend == 0 && c.agent.up && (c.agent.hello.caps & LT_CAP_HOST_BACKEND));
    /* The budgets to check: the options, else the agent's, else its defaults. */
    if (o->pinned_budget || o->mapped_budget) {
        c.pinned = o->pinned_budget;
        c.mapped = o->mapped_budget;
        c.budget_src = "from --pinned-budget / --mapped-budget";
    } else if (c.agent.up) {
        c.pinned = c.agent.hello.class_budget[LT_CLASS_PINNED];
        c.mapped = c.agent.hello.class_budget[LT_CLASS_MAPPED];
        c.pinned = c.pinned == UINT64_MAX ? 0 : c.pinned;
        c.mapped = c.mapped == UINT64_MAX ? 0 : c.mapped;
        c.budget_src = "the agent's";
    } else {
        c.pinned = 8ull << 30;
        c.mapped = 1ull << 30;
        c.budget_src = "the agent's defaults, 8 GiB + 1 GiB";
    }
    char err[LCTL_ERR_LEN];
    if (o->stagingd[0] &&
        lctl_stagingd_json(o->stagingd, "stats json", o->timeout_ms, &c.sd, err, sizeof err) == 0)
        c.sd_pid = (pid_t)json_integer_value(json_object_get(c.sd, "pid"));

    int uring_rc = 0;
    lctl__driver(&d, &c);
    lctl__device(&d, &c);
    lctl__agent_check(&d, &c);
    lctl__socket(&d, &c);
    lctl__memlock(&d, &c);
    lctl__uring(&d, &uring_rc);
    lctl__seccomp(&d, &c, uring_rc);
    lctl__hugepages(&d);
    lctl__memfd(&d);
    lctl__shm(&d, &c);
    lctl__fds(&d, &c);
    lctl__store(&d, &c);
    if (o->stagingd[0] && !c.sd)
        lctl__check(&d, 0, "stagingd", "%s -> start stagingd (systemctl start stagingd)", err);
    else if (c.sd)
        lctl__check(&d, 1, "stagingd", "answers at %s (pid %ld)", o->stagingd, (long)c.sd_pid);
    json_decref(c.sd);

    if (o->format == LCTL_JSON) {
        lctl_json_print(
            json_pack("{sb si so}", "ok", d.fixes == 0, "fixes", d.fixes, "checks", d.checks), out);
    } else {
        if (o->format == LCTL_PROMETHEUS)
            lctl__doctor_prometheus(d.checks, out);
        json_decref(d.checks);
    }
    return d.fixes ? 1 : 0;
}
