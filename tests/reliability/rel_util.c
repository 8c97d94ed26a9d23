/* Helpers of the reliability suites: see rel_util.h. */
#include "rel_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int rel_proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return pid == getpid() ? n - 1 : n;
}

int rel_proc_fds_settled(pid_t pid)
{
    int n = rel_proc_fds(pid);
    for (int i = 0; i < 20; i++) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
        int m = rel_proc_fds(pid);
        if (m == n)
            break;
        n = m;
    }
    return n;
}

static long rel__status_field(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

long rel_proc_rss_kb(pid_t pid)
{
    return rel__status_field(pid, "VmRSS");
}

int rel_proc_threads(pid_t pid)
{
    return (int)rel__status_field(pid, "Threads");
}

int rel_proc_all_cloexec(pid_t pid, char *msg, size_t len)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%ld/fdinfo", (long)pid);
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(msg, len, "%s: %s", dir, strerror(errno));
        return -1;
    }
    int checked = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd <= 2)
            continue;
        char path[384], line[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue; /* closed meanwhile */
        unsigned long flags = 0;
        int have = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "flags: %lo", &flags) == 1) {
                have = 1;
                break;
            }
        fclose(f);
        if (!have)
            continue;
        checked++;
        if (!(flags & O_CLOEXEC)) {
            char link[128], target[256] = "?";
            snprintf(link, sizeof link, "/proc/%ld/fd/%d", (long)pid, fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            target[n > 0 ? n : 1] = '\0';
            snprintf(msg, len, "pid %ld fd %d (%s) lacks O_CLOEXEC (flags 0%lo)", (long)pid, fd,
                     target, flags);
            rc = -1;
            break;
        }
    }
    closedir(d);
    return rc < 0 ? rc : checked;
}

static void rel__quiet(void *ctx, int level, const char *subsys, const char *line)
{
    (void)ctx;
    (void)level;
    (void)subsys;
    (void)line;
}

int rel_agent_stats(const char *sock, struct leasec_agent_stats *st_p, char *msg, size_t len)
{
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "rel-probe";
    cc.caps = 0;
    cc.log.fn = rel__quiet;
    struct leasec_client *c = NULL;
    unsigned a;
    int rc = leasec_client_create(&cc, &c);
    if (rc == 0)
        rc = leasec_client_agent_add(c, sock, &a);
    if (rc == 0)
        rc = leasec_client_wait_ready(c, a, 5000);
    if (rc == 0)
        rc = leasec_client_stats_call(c, a, LEASEC_STATS_F_ALL_CLIENTS, 5000, st_p);
    if (rc < 0)
        snprintf(msg, len, "probe of %s: %s (%s)", sock, strerror(-rc),
                 c ? leasec_client_last_error(c) : "no client");
    leasec_client_destroy(c);
    return rc;
}

int rel_agent_wait_clean(const char *sock, const char *name, int timeout_ms, char *msg,
                         size_t len)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct leasec_agent_stats st;
        if (rel_agent_stats(sock, &st, msg, len) < 0)
            return -1;
        uint64_t live = 0, segs = 0;
        for (int k = 1; k < LT_CLASS_SLOTS; k++) {
            live += st.classes[k].live_leases;
            segs += st.classes[k].segments;
        }
        unsigned named = 0;
        for (uint32_t i = 0; i < st.client_count; i++)
            named += name && strncmp(st.clients[i].name, name, LEASEC_NAME_LEN) == 0;
        if (!named && !live && !segs)
            return 0;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms > timeout_ms) {
            snprintf(msg, len,
                     "after %d ms the agent still holds %u client(s) named '%s', %" PRIu64
                     " live lease(s), %" PRIu64 " segment(s) (%u clients in all)",
                     timeout_ms, named, name ? name : "", live, segs, st.client_count);
            return -1;
        }
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

uint64_t rel_rand(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

uint64_t rel_seed(const char *what)
{
    const char *env = getenv("LEASE_RELIABILITY_SEED");
    uint64_t seed;
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 20;
    }
    fprintf(stderr, "%s: seed %#" PRIx64 " (replay with LEASE_RELIABILITY_SEED=%#" PRIx64 ")\n",
            what, seed, seed);
    return seed;
}

bool rel_long(void)
{
    const char *env = getenv("LEASE_RELIABILITY_LONG");
    return env && *env && strcmp(env, "0") != 0;
}
