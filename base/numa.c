/* NUMA placement from sysfs (base/numa.h). The mbind call is made through
 * syscall(2): glibc has no wrapper and libnuma would be a dependency for
 * one system call. */
#include "base/numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BASE_NUMA__MPOL_PREFERRED 1
#define BASE_NUMA__MPOL_MF_MOVE (1 << 1)
#define BASE_NUMA__NODES_MAX 1024

const char *base_numa_root(void)
{
    const char *r = getenv("LEASE_SYSFS_ROOT");
    return r && r[0] ? r : "/sys";
}

unsigned base_numa_nodes(const char *root)
{
    char path[512];
    snprintf(path, sizeof path, "%s/devices/system/node", root);
    DIR *d = opendir(path);
    if (!d)
        return 1;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "node", 4) != 0 || !isdigit((unsigned char)s[4]))
            continue;
        char *end;
        strtoul(s + 4, &end, 10);
        n += *end == '\0';
    }
    closedir(d);
    return n ? n : 1;
}

int base_numa_cpulist_parse(const char *s, cpu_set_t *set_p)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int count = 0;
    const char *p = s;
    while (*p && *p != '\n') {
        char *end;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1]))
                return -EINVAL;
            hi = strtoul(p + 1, &end, 10);
            p = end;
        }
        if (hi < lo || hi >= CPU_SETSIZE)
            return -EINVAL;
        for (unsigned long c = lo; c <= hi; c++) {
            if (!CPU_ISSET(c, &set))
                count++;
            CPU_SET(c, &set);
        }
        if (*p == ',')
            p++;
        else if (*p && *p != '\n')
            return -EINVAL;
    }
    if (count == 0)
        return -EINVAL;
    *set_p = set;
    return count;
}

/* The first line of @path into @buf. Returns 0 or -errno. */
static int base_numa__read(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = fgets(buf, (int)len, f) ? 0 : -EIO;
    fclose(f);
    return rc;
}

/* Whether @s is "dddd:bb:dd.f" (hex digits) exactly for @n bytes. */
static int base_numa__is_bdf(const char *s, size_t n)
{
    static const char full[] = "xxxx:xx:xx.x";
    if (n != sizeof full - 1)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (full[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != full[i])
            return 0;
    }
    return 1;
}

int base_numa_pci_node(const char *root, const char *bdf)
{
    if (!bdf || !base_numa__is_bdf(bdf, strlen(bdf)))
        return -EINVAL;
    char path[512], line[32];
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", root, bdf);
    if (base_numa__read(path, line, sizeof line) < 0)
        return -1;
    /* "-1" (no node) or a node number */
    if (!isdigit((unsigned char)line[0]))
        return -1;
    char *end;
    unsigned long v = strtoul(line, &end, 10);
    if (v >= BASE_NUMA__NODES_MAX)
        return -1;
    return (int)v;
}

int base_numa_node_cpus(const char *root, int node, cpu_set_t *set_p)
{
    if (node < 0)
        return -EINVAL;
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/devices/system/node/node%d/cpulist", root, node);
    int rc = base_numa__read(path, line, sizeof line);
    if (rc < 0)
        return rc;
    return base_numa_cpulist_parse(line, set_p);
}

/* sysfs spells bus ids in lower case. */
static void base_numa__lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'F')
            *s = (char)(*s - 'A' + 'a');
}

int base_numa_bdf_find(const char *text, char *bdf_p, size_t len)
{
    if (!text || len < 13)
        return -ENOENT;
    for (const char *p = text; *p; p++) {
        if (p != text && !isspace((unsigned char)p[-1]))
            continue; /* a token's start */
        size_t n = strcspn(p, " \t\n");
        if (base_numa__is_bdf(p, n)) {
            snprintf(bdf_p, len, "%.12s", p);
            base_numa__lower(bdf_p);
            return 0;
        }
        char tmp[16];
        if (n == 7 && len >= 13) { /* "bb:dd.f": domain 0000 */
            snprintf(tmp, sizeof tmp, "0000:%.7s", p);
            if (base_numa__is_bdf(tmp, 12)) {
                snprintf(bdf_p, len, "%s", tmp);
                base_numa__lower(bdf_p);
                return 0;
            }
        }
    }
    return -ENOENT;
}

void base_numa_decide(const char *root, const char *agent_name, struct base_numa_place *p_p)
{
    struct base_numa_place p;
    memset(&p, 0, sizeof p);
    p.node = -1;
    p.nodes = base_numa_nodes(root);
    if (base_numa_bdf_find(agent_name, p.bdf, sizeof p.bdf) < 0)
        p.bdf[0] = '\0';
    if (p.nodes <= 1) {
        snprintf(p.why, sizeof p.why, "one NUMA node: nothing to place");
    } else if (!p.bdf[0]) {
        snprintf(p.why, sizeof p.why,
                 "%u NUMA nodes, but the agent's name carries no PCI bus id: not placed", p.nodes);
    } else {
        int node = base_numa_pci_node(root, p.bdf);
        int n = node >= 0 ? base_numa_node_cpus(root, node, &p.cpus) : -ENOENT;
        if (node < 0)
            snprintf(p.why, sizeof p.why, "GPU %s: sysfs names no NUMA node for it: not placed",
                     p.bdf);
        else if (n <= 0)
            snprintf(p.why, sizeof p.why, "GPU %s: node %d lists no CPUs: not placed", p.bdf, node);
        else {
            p.node = node;
            p.ncpus = (unsigned)n;
            snprintf(p.why, sizeof p.why, "GPU %s on node %d of %u: %u CPU(s)", p.bdf, node,
                     p.nodes, p.ncpus);
        }
    }
    *p_p = p;
}

int base_numa_thread_bind(pthread_t t, const struct base_numa_place *p)
{
    if (p->node < 0)
        return 1;
    return -pthread_setaffinity_np(t, sizeof p->cpus, &p->cpus);
}

int base_numa_mem_bind(void *addr, size_t len, const struct base_numa_place *p)
{
    if (p->node < 0)
        return 1;
    unsigned long mask[BASE_NUMA__NODES_MAX / (8 * sizeof(unsigned long))] = {0};
    const unsigned bits = 8 * sizeof(unsigned long);
    mask[(unsigned)p->node / bits] |= 1ul << ((unsigned)p->node % bits);
    long rc = syscall(SYS_mbind, addr, len, BASE_NUMA__MPOL_PREFERRED, mask,
                      (unsigned long)BASE_NUMA__NODES_MAX, BASE_NUMA__MPOL_MF_MOVE);
    return rc == 0 ? 0 : -errno;
}
