/* alloc_mix: liblease-client must not take over the program's allocator,
 * and its insides (base, jemalloc) must not clash with the program's own
 * names. Built outside the project like examples/lease_copy.c, shared and
 * static, with and without the program linking jemalloc itself
 * (tests/examples/test_example.sh); no agent needed.
 *
 * Checks, each a FAIL line when wrong:
 *   - malloc resolves to libc (or the sanitizer's, or the program's own
 *     jemalloc when it links one), never to the library;
 *   - the library exports no jemalloc and no base_ name (dlsym finds none
 *     in it; for the archive, test_example.sh reads its symbol table and
 *     this program's own base_parse_enum would clash at link time);
 *   - memory the program mallocs survives library calls that allocate and
 *     free inside (pool and client life cycles), and memory the library
 *     hands back through libc (leasec_client_last_error is the client's,
 *     not freed by us) stays valid;
 *   - pool buffers come from the pool's segments (locate finds them), many
 *     rounds, interleaved with the program's mallocs and frees;
 *   - a program function named like base's (base_parse_enum) does not
 *     replace the library's: leasec_pool_pages_parse still works.
 * The last line is PASS or FAIL. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lease/client.h>

/* Named like base's parser on purpose: with base's names global in the
 * library this would either clash (static) or be called by it (shared). */
int base_parse_enum(void);
int base_parse_enum(void)
{
    return -1000;
}

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("FAIL: %s\n", what);
        failures++;
    }
}

static const char *object_of(void *addr)
{
    Dl_info i;
    return dladdr(addr, &i) && i.dli_fname ? i.dli_fname : "?";
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The definition the loader binds malloc to (a function pointer taken
     * in the program could be its PLT slot). */
    const char *malloc_from = object_of(dlsym(RTLD_DEFAULT, "malloc"));
    const char *lib_from = object_of((void *)leasec_version);
    const char *prog = object_of((void *)main);
    printf("alloc_mix: malloc from %s, leasec_version from %s\n", malloc_from, lib_from);
    check(strstr(malloc_from, "lease-client") == NULL, "malloc comes from liblease-client");
    check(strcmp(malloc_from, prog) != 0,
          "malloc comes from the program itself (jemalloc linked in statically)");

    /* Nothing of jemalloc or base is visible from outside the library. */
    void *self = dlopen(NULL, RTLD_NOW);
    static const char *const hidden[] = {
        "mallocx",         "dallocx",       "mallctl",           "je_malloc",           "base_log",
        "base_u64map_put", "base_send_fds", "lc_checker_create", "sd_selfcheck_no_cuda"};
    for (size_t k = 0; k < sizeof hidden / sizeof hidden[0]; k++) {
        void *p = self ? dlsym(self, hidden[k]) : NULL;
        if (p && strstr(object_of(p), "lease-client")) {
            printf("FAIL: liblease-client exports %s\n", hidden[k]);
            failures++;
        }
    }
    if (self)
        dlclose(self);

    /* The program's memory across the library's allocations. */
    char *mine = malloc(4096);
    check(mine != NULL, "malloc");
    memset(mine, 0x5a, 4096);

    enum leasec_pool_pages pages = LEASEC_POOL_PAGES_AUTO;
    check(leasec_pool_pages_parse("thp", &pages) == 0 && pages == LEASEC_POOL_PAGES_THP,
          "leasec_pool_pages_parse reached the program's base_parse_enum");
    check(base_parse_enum() == -1000, "the program's own function");

    struct leasec_pool_config pc;
    check(leasec_pool_config_default(&pc) == 0, "pool config");
    memset(pc.class_bytes, 0, sizeof pc.class_bytes);
    pc.class_bytes[LT_CLASS_PINNED] = 4u << 20;
    pc.segment_bytes = 2u << 20;
    pc.prefault_threads = 1;
    pc.pages = LEASEC_POOL_PAGES_SMALL;
    struct leasec_pool *pool = NULL;
    int rc = leasec_pool_create(&pc, &pool);
    if (rc < 0) {
        printf("FAIL: pool create: %s\n", strerror(-rc));
        return 1;
    }
    for (int round = 0; round < 200; round++) {
        struct leasec_pool_buf b;
        void *theirs = malloc((size_t)(round * 37 + 1));
        rc = leasec_pool_alloc(pool, LT_CLASS_PINNED, (size_t)(round % 7 + 1) * 65536, &b);
        if (rc < 0) {
            printf("FAIL: pool alloc round %d: %s\n", round, strerror(-rc));
            failures++;
            free(theirs);
            break;
        }
        uint32_t seg = 0;
        uint64_t off = 0;
        check(leasec_pool_locate(pool, b.base, b.len, &seg, &off) == 0 && seg == b.segment_id &&
                  off == b.offset,
              "a pool buffer outside the pool's segments");
        memset(b.base, round & 0xff, b.len);
        check(leasec_pool_free(pool, &b) == 0, "pool free");
        free(theirs); /* program memory, freed by the program after pool calls */
    }

    /* A client life cycle: its internal mallocs and frees, and an error
     * message it formats, while the program's block stays intact. */
    struct leasec_client_config cc;
    leasec_client_config_default(&cc);
    cc.name = "alloc-mix";
    for (int round = 0; round < 20; round++) {
        struct leasec_client *c = NULL;
        rc = leasec_client_create(&cc, &c);
        if (rc < 0) {
            printf("FAIL: client create: %s\n", strerror(-rc));
            failures++;
            break;
        }
        unsigned agent;
        check(leasec_client_agent_add(c, "", &agent) == -ENAMETOOLONG, "an empty socket path");
        char *copy = strdup(leasec_client_last_error(c)); /* libc's strdup, our free */
        check(copy && strstr(copy, "socket path"), "the client's error text");
        free(copy);
        leasec_client_destroy(c);
    }
    leasec_pool_destroy(pool);

    int intact = 1;
    for (int i = 0; i < 4096; i++)
        intact &= mine[i] == 0x5a;
    check(intact, "the program's block changed under the library");
    free(mine);

    if (failures) {
        printf("FAIL: alloc_mix: %d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS: alloc_mix: malloc stays %s's; no jemalloc or base name leaves the library\n",
           malloc_from);
    return 0;
}
