/* base/numa: cpulists, bus ids in agent names, and the placement decision
 * against fake sysfs trees (one node, two nodes) under LEASE_SYSFS_ROOT;
 * binding a thread to a node's CPUs where the machine allows. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/numa.h"
#include "check_main.h"

static void put(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* every folder on the way */
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void rm_rf(const char *root)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

/* A two-node machine: GPU 0000:41:00.0 on node 1, 0000:c1:00.0 on node 0,
 * 0000:01:00.0 with no node (-1). */
static void two_nodes(char *root, size_t len)
{
    snprintf(root, len, "/tmp/numa-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    put(root, "devices/system/node/node0/cpulist", "0-3,8-11\n");
    put(root, "devices/system/node/node1/cpulist", "4-7,12-15\n");
    put(root, "devices/system/node/possible", "0-1\n");
    put(root, "bus/pci/devices/0000:41:00.0/numa_node", "1\n");
    put(root, "bus/pci/devices/0000:c1:00.0/numa_node", "0\n");
    put(root, "bus/pci/devices/0000:01:00.0/numa_node", "-1\n");
}

START_TEST(cpulists_parse_and_malformed_ones_are_refused)
{
    cpu_set_t s;
    ck_assert_int_eq(base_numa_cpulist_parse("0-3,8,10-11\n", &s), 7);
    ck_assert(CPU_ISSET(0, &s) && CPU_ISSET(3, &s) && CPU_ISSET(8, &s) && CPU_ISSET(11, &s));
    ck_assert(!CPU_ISSET(4, &s) && !CPU_ISSET(9, &s));
    ck_assert_int_eq(base_numa_cpulist_parse("5", &s), 1);
    ck_assert_int_eq(base_numa_cpulist_parse("0-1,1-2", &s), 3);
    ck_assert_int_eq(base_numa_cpulist_parse("", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("\n", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("3-1", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("1-", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("a", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("1,,2", &s), -EINVAL);
    ck_assert_int_eq(base_numa_cpulist_parse("0-99999", &s), -EINVAL);
}
END_TEST

START_TEST(bus_ids_are_found_in_agent_names)
{
    char b[BASE_NUMA_BDF_LEN];
    ck_assert_int_eq(base_numa_bdf_find("ga-cuda 0000:41:00.0", b, sizeof b), 0);
    ck_assert_str_eq(b, "0000:41:00.0");
    ck_assert_int_eq(base_numa_bdf_find("gpu1 C1:00.0 h200", b, sizeof b), 0);
    ck_assert_str_eq(b, "0000:c1:00.0");
    ck_assert_int_eq(base_numa_bdf_find("ga-cuda", b, sizeof b), -ENOENT);
    ck_assert_int_eq(base_numa_bdf_find("ga-host", b, sizeof b), -ENOENT);
    ck_assert_int_eq(base_numa_bdf_find("x0000:41:00.0", b, sizeof b), -ENOENT);
    ck_assert_int_eq(base_numa_bdf_find("0000:41:00.0x", b, sizeof b), -ENOENT);
    ck_assert_int_eq(base_numa_bdf_find(NULL, b, sizeof b), -ENOENT);
}
END_TEST

START_TEST(two_nodes_place_each_gpu_on_its_node)
{
    char root[64];
    two_nodes(root, sizeof root);
    ck_assert_uint_eq(base_numa_nodes(root), 2);
    ck_assert_int_eq(base_numa_pci_node(root, "0000:41:00.0"), 1);
    ck_assert_int_eq(base_numa_pci_node(root, "0000:c1:00.0"), 0);
    ck_assert_int_eq(base_numa_pci_node(root, "0000:01:00.0"), -1);
    ck_assert_int_eq(base_numa_pci_node(root, "0000:99:00.0"), -1);
    ck_assert_int_eq(base_numa_pci_node(root, "../../etc"), -EINVAL);

    struct base_numa_place p;
    base_numa_decide(root, "ga-cuda 0000:41:00.0", &p);
    ck_assert_int_eq(p.node, 1);
    ck_assert_uint_eq(p.nodes, 2);
    ck_assert_uint_eq(p.ncpus, 8);
    ck_assert(CPU_ISSET(4, &p.cpus) && CPU_ISSET(15, &p.cpus) && !CPU_ISSET(0, &p.cpus));
    ck_assert_str_eq(p.bdf, "0000:41:00.0");
    ck_assert_str_eq(p.why, "GPU 0000:41:00.0 on node 1 of 2: 8 CPU(s)");

    base_numa_decide(root, "gpu1 c1:00.0", &p);
    ck_assert_int_eq(p.node, 0);
    ck_assert(CPU_ISSET(0, &p.cpus) && CPU_ISSET(11, &p.cpus) && !CPU_ISSET(4, &p.cpus));

    /* no node in sysfs, no bus id, a node without CPUs: nothing placed */
    base_numa_decide(root, "ga-cuda 0000:01:00.0", &p);
    ck_assert_int_eq(p.node, -1);
    ck_assert_ptr_nonnull(strstr(p.why, "names no NUMA node"));
    base_numa_decide(root, "ga-cuda", &p);
    ck_assert_int_eq(p.node, -1);
    ck_assert_ptr_nonnull(strstr(p.why, "no PCI bus id"));
    put(root, "devices/system/node/node1/cpulist", "\n");
    base_numa_decide(root, "ga-cuda 0000:41:00.0", &p);
    ck_assert_int_eq(p.node, -1);
    ck_assert_ptr_nonnull(strstr(p.why, "lists no CPUs"));
    /* nothing placed: binding does nothing */
    ck_assert_int_eq(base_numa_thread_bind(pthread_self(), &p), 1);
    ck_assert_int_eq(base_numa_mem_bind(NULL, 0, &p), 1);
    rm_rf(root);
}
END_TEST

START_TEST(one_node_places_nothing)
{
    char root[64];
    snprintf(root, sizeof root, "/tmp/numa-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    put(root, "devices/system/node/node0/cpulist", "0-1\n");
    put(root, "bus/pci/devices/0000:41:00.0/numa_node", "0\n");
    struct base_numa_place p;
    base_numa_decide(root, "ga-cuda 0000:41:00.0", &p);
    ck_assert_int_eq(p.node, -1);
    ck_assert_uint_eq(p.nodes, 1);
    ck_assert_str_eq(p.why, "one NUMA node: nothing to place");
    rm_rf(root);
    /* no node folder at all (a kernel without NUMA): one node */
    ck_assert_uint_eq(base_numa_nodes("/nonexistent-sysfs"), 1);
}
END_TEST

START_TEST(the_root_comes_from_the_environment)
{
    unsetenv("LEASE_SYSFS_ROOT");
    ck_assert_str_eq(base_numa_root(), "/sys");
    setenv("LEASE_SYSFS_ROOT", "/tmp/fake", 1);
    ck_assert_str_eq(base_numa_root(), "/tmp/fake");
    setenv("LEASE_SYSFS_ROOT", "", 1);
    ck_assert_str_eq(base_numa_root(), "/sys");
    unsetenv("LEASE_SYSFS_ROOT");
}
END_TEST

/* Binding for real, to this machine's node 0 (a decision made by hand, as
 * if a second node existed): the thread's mask becomes the node's CPUs and
 * mbind takes the range. */
START_TEST(binding_a_thread_and_memory_to_node_0)
{
    struct base_numa_place p;
    memset(&p, 0, sizeof p);
    int n = base_numa_node_cpus("/sys", 0, &p.cpus);
    if (n <= 0)
        return; /* no sysfs node 0 here: nothing to bind to */
    p.node = 0;
    cpu_set_t before;
    ck_assert_int_eq(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
    cpu_set_t both;
    CPU_AND(&both, &before, &p.cpus);
    if (CPU_COUNT(&both) == 0)
        return; /* a cgroup keeps us off node 0 */
    p.cpus = both;
    ck_assert_int_eq(base_numa_thread_bind(pthread_self(), &p), 0);
    cpu_set_t now;
    ck_assert_int_eq(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    ck_assert(CPU_EQUAL(&now, &both));
    ck_assert_int_eq(pthread_setaffinity_np(pthread_self(), sizeof before, &before), 0);
    size_t len = 1u << 20;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    memset(m, 1, len);
    int rc = base_numa_mem_bind(m, len, &p);
    /* ENOSYS: a kernel without NUMA; EPERM: a sandbox refusing mbind */
    ck_assert_msg(rc == 0 || rc == -ENOSYS || rc == -EPERM, "mbind: %d", rc);
    munmap(m, len);
}
END_TEST

static Suite *numa_suite(void)
{
    Suite *s = suite_create("base_numa");
    TCase *tc = tcase_create("numa");
    tcase_add_test(tc, cpulists_parse_and_malformed_ones_are_refused);
    tcase_add_test(tc, bus_ids_are_found_in_agent_names);
    tcase_add_test(tc, two_nodes_place_each_gpu_on_its_node);
    tcase_add_test(tc, one_node_places_nothing);
    tcase_add_test(tc, the_root_comes_from_the_environment);
    tcase_add_test(tc, binding_a_thread_and_memory_to_node_0);
    suite_add_tcase(s, tc);
    return s;
}

BASE_CHECK_MAIN(numa_suite)
