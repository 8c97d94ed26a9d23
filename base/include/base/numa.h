/* base: NUMA placement from sysfs, without libnuma (docs/multi-gpu.md).
 * Where a machine has more than one node, the staging threads and buffers
 * serving a GPU belong on the node of its PCIe root: sysfs names it
 * (bus/pci/devices/<bdf>/numa_node) and the node's CPUs
 * (devices/system/node/nodeN/cpulist). Threads are bound with
 * pthread_setaffinity_np, memory with the mbind system call.
 *
 * The sysfs root is "/sys", or $LEASE_SYSFS_ROOT where set (tests use a
 * fake tree).
 *
 * Threads: reentrant; no state. */
#ifndef BASE_NUMA_H
#define BASE_NUMA_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BASE_NUMA_BDF_LEN 32
#define BASE_NUMA_WHY_LEN 128

/* $LEASE_SYSFS_ROOT, else "/sys" (the environment's string: not to free). */
const char *base_numa_root(void);

/* The number of NUMA nodes under @root (nodeN folders), at least 1. */
unsigned base_numa_nodes(const char *root);

/* Parses a sysfs cpulist ("0-3,8,10-11\n") into *@set_p. Returns the CPUs
 * in it, or -EINVAL (nothing written) for a malformed or empty list. */
int base_numa_cpulist_parse(const char *s, cpu_set_t *set_p);

/* The node of PCI device @bdf ("0000:41:00.0"): 0..N, or -1 where sysfs
 * says none (-1) or has no such device; -EINVAL for a malformed @bdf. */
int base_numa_pci_node(const char *root, const char *bdf);

/* The CPUs of node @node into *@set_p. Returns their count or -errno. */
int base_numa_node_cpus(const char *root, int node, cpu_set_t *set_p);

/* Finds a PCI bus id in @text (an agent's name, "ga-cuda 0000:41:00.0";
 * the domain may be left out: "41:00.0") and writes it, with the domain,
 * to @bdf_p. Returns 0, or -ENOENT with none. */
int base_numa_bdf_find(const char *text, char *bdf_p, size_t len);

/* Where a GPU's staging work should run. */
struct base_numa_place {
    int node; /* -1: place nothing (why says so) */
    unsigned nodes;
    cpu_set_t cpus; /* node's CPUs, when node >= 0 */
    unsigned ncpus;
    char bdf[BASE_NUMA_BDF_LEN]; /* "" when unknown */
    char why[BASE_NUMA_WHY_LEN]; /* one line for the log and leasectl doctor */
};

/* The decision for the GPU whose bus id is in @agent_name: nothing on one
 * node; else its device's node and that node's CPUs, or nothing with the
 * reason (no bus id, no node in sysfs, no CPUs). Always fills *@p_p. */
void base_numa_decide(const char *root, const char *agent_name, struct base_numa_place *p_p);

/* Binds thread @t to @p's CPUs. Returns 0, 1 when @p places nothing, or
 * -errno. */
int base_numa_thread_bind(pthread_t t, const struct base_numa_place *p);

/* Asks the kernel to keep [@addr, @addr + @len) (page aligned) on @p's
 * node, moving pages already there where it can (MPOL_PREFERRED,
 * MPOL_MF_MOVE). Returns 0, 1 when @p places nothing, or -errno (pages
 * pinned by a registration may not move: EIO). */
int base_numa_mem_bind(void *addr, size_t len, const struct base_numa_place *p);

#ifdef __cplusplus
}
#endif

#endif /* BASE_NUMA_H */
