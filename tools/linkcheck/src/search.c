/* ld.so's library search: dynamic string tokens, /etc/ld.so.conf, and the
 * search itself, done for every CPU at once (each glibc-hwcaps and legacy
 * hwcap folder, each $PLATFORM and $LIB), because which file a name loads
 * depends on the machine the program runs on. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ld.so.conf include nesting deeper than this is a loop, not a layout. */
#define SEARCH_LDCONF_MAX_DEPTH 16

int lc__strv_push(struct lc__strv *sv, const char *s, size_t len)
{
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 8;
        char **v = realloc(sv->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        sv->v = v;
        sv->cap = cap;
    }
    char *copy = strndup(s, len);
    if (!copy)
        return -ENOMEM;
    sv->v[sv->n++] = copy;
    return 0;
}

void lc__strv_free(struct lc__strv *sv)
{
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = sv->cap = 0;
}

/* Length of the token @name at @p ("ORIGIN" or "{ORIGIN}"), or 0 when @p
 * does not hold it; like ld.so, a bare token must not run on into more
 * identifier characters. */
static size_t search_dst_len(const char *p, const char *name)
{
    size_t n = strlen(name);
    if (p[0] == '{')
        return strncmp(p + 1, name, n) == 0 && p[n + 1] == '}' ? n + 2 : 0;
    if (strncmp(p, name, n) != 0 || isalnum((unsigned char)p[n]) || p[n] == '_')
        return 0;
    return n;
}

int lc__dst_expand(const char *entry, const struct lc__dst *dst, char **out_p, int *uses_origin_p)
{
    size_t cap = strlen(entry) + 1, len = 0;
    int uses_origin = 0;
    char *out = malloc(cap);
    if (!out)
        return -ENOMEM;
    for (const char *p = entry; *p;) {
        const char *repl = NULL;
        size_t skip = 0;
        if (*p == '$') {
            if ((skip = search_dst_len(p + 1, "ORIGIN"))) {
                if (!dst->origin) {
                    free(out);
                    return -ENOENT; /* ld.so drops the element */
                }
                repl = dst->origin;
                uses_origin = 1;
            } else if ((skip = search_dst_len(p + 1, "LIB"))) {
                repl = dst->lib;
            } else if ((skip = search_dst_len(p + 1, "PLATFORM"))) {
                repl = dst->platform;
            }
        }
        if (!repl) {
            if (len + 2 > cap) {
                char *grown = realloc(out, cap * 2);
                if (!grown) {
                    free(out);
                    return -ENOMEM;
                }
                out = grown;
                cap *= 2;
            }
            out[len++] = *p++;
            continue;
        }
        size_t rlen = strlen(repl);
        if (len + rlen + 1 > cap) {
            size_t want = cap * 2 > len + rlen + 1 ? cap * 2 : len + rlen + 1;
            char *grown = realloc(out, want);
            if (!grown) {
                free(out);
                return -ENOMEM;
            }
            out = grown;
            cap = want;
        }
        memcpy(out + len, repl, rlen);
        len += rlen;
        p += 1 + skip;
    }
    out[len] = '\0';
    *out_p = out;
    *uses_origin_p = uses_origin;
    return 0;
}

/* One directory line: "dir", "dir=TYPE" (old syntax), trailing '/' dropped. */
static int search_ldconf_add_dir(char *line, struct lc__strv *dirs)
{
    char *eq = strchr(line, '=');
    if (eq)
        *eq = '\0';
    size_t len = strlen(line);
    while (len > 0 && isspace((unsigned char)line[len - 1]))
        len--;
    while (len > 1 && line[len - 1] == '/')
        len--;
    if (len == 0)
        return 0;
    return lc__strv_push(dirs, line, len);
}

/* An include pattern: relative to the including file's directory, absolute
 * ones under @root. Files are read in glob's sorted order, as ldconfig does. */
static int search_ldconf_include(const char *root, const char *from, const char *pattern, int depth,
                                 struct lc__strv *dirs)
{
    char *full = NULL;
    int n;
    if (pattern[0] == '/') {
        n = asprintf(&full, "%s%s", root ? root : "", pattern);
    } else {
        const char *slash = strrchr(from, '/');
        int dirlen = slash ? (int)(slash - from) : 1;
        n = asprintf(&full, "%.*s/%s", dirlen, slash ? from : ".", pattern);
    }
    if (n < 0)
        return -ENOMEM;
    glob_t g;
    int rc = 0;
    int grc = glob(full, 0, NULL, &g);
    free(full);
    if (grc == GLOB_NOSPACE)
        return -ENOMEM;
    if (grc != 0)
        return 0; /* no match or unreadable: nothing to add */
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        rc = lc__ldconf_parse_file(root, g.gl_pathv[i], depth + 1, dirs);
    globfree(&g);
    return rc;
}

int lc__ldconf_parse_file(const char *root, const char *path, int depth, struct lc__strv *dirs)
{
    if (depth > SEARCH_LDCONF_MAX_DEPTH)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        *strchrnul(line, '#') = '\0';
        line[strcspn(line, "\n")] = '\0';
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            continue;
        if (strncmp(p, "include", 7) == 0 && (p[7] == ' ' || p[7] == '\t')) {
            char *save = NULL;
            for (char *pat = strtok_r(p + 8, " \t", &save); pat && rc == 0;
                 pat = strtok_r(NULL, " \t", &save))
                rc = search_ldconf_include(root, path, pat, depth, dirs);
        } else if (strncasecmp(p, "hwcap", 5) == 0 && (p[5] == ' ' || p[5] == '\t')) {
            continue; /* long obsolete; ldconfig ignores it too */
        } else {
            rc = search_ldconf_add_dir(p, dirs);
        }
    }
    free(line);
    fclose(f);
    return rc;
}

int lc__ldconf_load(const char *root, struct lc__strv *dirs)
{
    char *path = NULL;
    if (asprintf(&path, "%s/etc/ld.so.conf", root ? root : "") < 0)
        return -ENOMEM;
    int rc = lc__ldconf_parse_file(root, path, 0, dirs);
    free(path);
    return rc;
}

int lc__strv_has(const struct lc__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return 1;
    return 0;
}

/* ---- the loader's search ------------------------------------------------ */

/* Where ld.so looks when nothing else found the library (Debian's order). */
static const char *const search_default_dirs[] = {
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
};

/* Folders below every search directory that ld.so tries first on CPUs that
 * have the feature: glibc-hwcaps (2.33+), then the legacy hwcap folders of
 * glibc before 2.37 (tls, AT_PLATFORM, the important hwcaps). Which of them
 * a machine searches depends on its CPU, so every one of them is a library
 * the program may load somewhere. */
static const char *const search_cpu_subdirs[] = {
    "glibc-hwcaps/x86-64-v4/",
    "glibc-hwcaps/x86-64-v3/",
    "glibc-hwcaps/x86-64-v2/",
    "tls/haswell/avx512_1/x86_64/",
    "tls/haswell/avx512_1/",
    "tls/haswell/x86_64/",
    "tls/haswell/",
    "tls/xeon_phi/avx512_1/x86_64/",
    "tls/xeon_phi/avx512_1/",
    "tls/xeon_phi/x86_64/",
    "tls/xeon_phi/",
    "tls/x86_64/avx512_1/x86_64/",
    "tls/x86_64/avx512_1/",
    "tls/x86_64/x86_64/",
    "tls/x86_64/",
    "tls/avx512_1/x86_64/",
    "tls/avx512_1/",
    "tls/",
    "haswell/avx512_1/x86_64/",
    "haswell/avx512_1/",
    "haswell/x86_64/",
    "haswell/",
    "xeon_phi/avx512_1/x86_64/",
    "xeon_phi/avx512_1/",
    "xeon_phi/x86_64/",
    "xeon_phi/",
    "x86_64/avx512_1/x86_64/",
    "x86_64/avx512_1/",
    "x86_64/x86_64/",
    "x86_64/",
    "avx512_1/x86_64/",
    "avx512_1/",
};

/* What $PLATFORM (AT_PLATFORM) is on x86-64 CPUs, and $LIB on the
 * distributions a binary may be carried to (Debian's first). */
static const char *const search_platforms[] = {"x86_64", "haswell", "xeon_phi"};
static const char *const search_libs[] = {"lib/x86_64-linux-gnu", "lib64", "lib"};

#define SEARCH_NVARIANTS                                                                          \
    (sizeof(search_platforms) / sizeof(search_platforms[0]) *                                    \
     sizeof(search_libs) / sizeof(search_libs[0]))

void lc__found_release(struct lc__found *f)
{
    if (f->map)
        munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof(*f));
}

/* Every distinct expansion of @entry over the $PLATFORM and $LIB values, in
 * @out (caller frees each). Returns how many, 0 when $ORIGIN is unknown, or
 * -ENOMEM; *uses_origin_p says whether $ORIGIN was used. */
static int search_expand_all(const char *entry, const char *origin, char **out, int *uses_origin_p)
{
    int n = 0;
    for (size_t p = 0; p < sizeof(search_platforms) / sizeof(search_platforms[0]); p++) {
        for (size_t l = 0; l < sizeof(search_libs) / sizeof(search_libs[0]); l++) {
            struct lc__dst dst = {origin, search_libs[l], search_platforms[p]};
            char *x = NULL;
            int rc = lc__dst_expand(entry, &dst, &x, uses_origin_p);
            if (rc == -ENOENT)
                return 0; /* ld.so drops the element */
            if (rc < 0) {
                while (n > 0)
                    free(out[--n]);
                return rc;
            }
            int dup = 0;
            for (int k = 0; k < n && !dup; k++)
                dup = strcmp(out[k], x) == 0;
            if (dup)
                free(x);
            else
                out[n++] = x;
        }
    }
    return n;
}

/* Opens @path as ld.so would a candidate. Returns 1 and fills @f when it is
 * a library to load, 0 to keep searching, -ENOEXEC when ld.so would stop
 * with an error (reported here), -ENOMEM. */
static int search_try(struct lc_checker *c, size_t loader, const char *name, const char *path,
                      struct lc__found *f, size_t *tried)
{
    (*tried)++;
    /* O_NONBLOCK: a FIFO in a search directory must not hang the check. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return 0;
    }
    int rc = 0;
    void *map = NULL;
    size_t size = (size_t)st.st_size;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            map = NULL;
    }
    close(fd);
    int compatible = map ? lc__elf_loader_compatible(map, size) : -ENOEXEC;
    if (compatible == 0) {
        lc__say(c, LC_SEVERITY_INFO, "skipped %s for %s: wrong ELF class or machine", path, name);
    } else if (compatible < 0) {
        char *chain = lc__chain(c, loader, NULL);
        lc__say(c, LC_SEVERITY_ERROR,
                "library %s found at %s is not an ELF file ld.so could load (%s), reached via %s",
                name, path, size ? "bad ELF identification" : "empty file", chain ? chain : "?");
        free(chain);
        rc = -ENOEXEC;
    } else {
        f->path = strdup(path);
        if (!f->path) {
            rc = -ENOMEM;
        } else {
            f->map = map;
            f->size = size;
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            return 1;
        }
    }
    if (map)
        munmap(map, size);
    return rc;
}

/* The candidates found so far, and whether the search is over. */
struct search_result {
    struct lc__found *found;
    size_t n;
    int done; /* a candidate every CPU would take was found */
};

/* Tries @path; on a hit keeps it unless the same file is already a
 * candidate. Returns 0 or a negative errno. */
static int search_candidate(struct lc_checker *c, size_t loader, const char *name,
                            const char *path, int conditional, struct search_result *r,
                            size_t *tried)
{
    struct lc__found f = {0};
    int rc = search_try(c, loader, name, path, &f, tried);
    if (rc <= 0)
        return rc;
    for (size_t k = 0; k < r->n; k++) {
        if (r->found[k].dev == f.dev && r->found[k].ino == f.ino) {
            lc__found_release(&f);
            if (!conditional)
                r->done = 1;
            return 0;
        }
    }
    f.conditional = conditional;
    r->found[r->n++] = f;
    if (!conditional || r->n == LC__MAX_CANDIDATES)
        r->done = 1;
    return 0;
}

/* Tries @name in every directory of the list @list (with @seps as
 * separators), expanding tokens with @origin; absolute directories that did
 * not come from $ORIGIN go under --root. */
static int search_list(struct lc_checker *c, size_t loader, const char *name, const char *list,
                       const char *seps, const char *origin, struct search_result *r,
                       size_t *tried)
{
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, seps);
        char *entry = strndup(p, len);
        if (!entry)
            return -ENOMEM;
        char *dirs[SEARCH_NVARIANTS];
        int uses_origin = 0;
        int n = search_expand_all(entry, origin, dirs, &uses_origin);
        free(entry);
        if (n < 0)
            return n;
        int rc = 0;
        for (int v = 0; v < n; v++) {
            const char *dir = dirs[v];
            const char *prefix = dir[0] == '/' && !uses_origin && c->root ? c->root : "";
            const char *base = dir[0] ? dir : "."; /* an empty entry is the current directory */
            for (size_t h = 0; h <= sizeof(search_cpu_subdirs) / sizeof(char *) && !rc && !r->done;
                 h++) {
                int last = h == sizeof(search_cpu_subdirs) / sizeof(char *);
                char *cand = NULL;
                if (asprintf(&cand, "%s%s/%s%s", prefix, base, last ? "" : search_cpu_subdirs[h],
                             name) < 0) {
                    rc = -ENOMEM;
                    break;
                }
                rc = search_candidate(c, loader, name, cand, !last || n > 1, r, tried);
                free(cand);
            }
        }
        for (int v = 0; v < n; v++)
            free(dirs[v]);
        if (rc < 0)
            return rc;
        if (r->done || p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

static int search_is_default_dir(const char *dir)
{
    for (size_t i = 0; i < sizeof(search_default_dirs) / sizeof(char *); i++)
        if (strcmp(dir, search_default_dirs[i]) == 0)
            return 1;
    return 0;
}

/* A DT_NEEDED name holding '/': a path, tokens expanded, no search. */
static int search_path(struct lc_checker *c, size_t loader, const char *name,
                       struct search_result *r, size_t *tried)
{
    char *paths[SEARCH_NVARIANTS];
    int uses_origin = 0;
    int n = search_expand_all(name, c->objs[loader].origin, paths, &uses_origin);
    int rc = n < 0 ? n : 0;
    for (int v = 0; v < n; v++) {
        const char *prefix = paths[v][0] == '/' && !uses_origin && c->root ? c->root : "";
        char *full = NULL;
        if (rc == 0 && !r->done) {
            if (asprintf(&full, "%s%s", prefix, paths[v]) < 0)
                rc = -ENOMEM;
            else
                rc = search_candidate(c, loader, name, full, n > 1, r, tried);
        }
        free(full);
        free(paths[v]);
    }
    return rc;
}

int lc__search(struct lc_checker *c, size_t loader, const char *name, struct lc__found *found,
               size_t *tried)
{
    const struct lc__obj *l = &c->objs[loader];
    struct search_result r = {found, 0, 0};
    int rc = 0;
    if (strchr(name, '/')) {
        rc = search_path(c, loader, name, &r, tried);
        goto out;
    }
    /* DT_RPATH of the loader, then of its loaders up to the file itself, unless
     * the loader has DT_RUNPATH. */
    if (!l->runpath) {
        for (size_t j = loader; j != LC__NONE && !r.done && rc == 0; j = c->objs[j].parent) {
            const struct lc__obj *o = &c->objs[j];
            if (o->rpath)
                rc = search_list(c, loader, name, o->rpath, ":", o->origin, &r, tried);
        }
    }
    if (rc == 0 && !r.done && c->ld_library_path)
        rc = search_list(c, loader, name, c->ld_library_path, ":;", c->objs[0].origin, &r, tried);
    if (rc == 0 && !r.done && l->runpath)
        rc = search_list(c, loader, name, l->runpath, ":", l->origin, &r, tried);
    /* ld.so.cache stands for these; with DF_1_NODEFLIB it drops system ones. */
    if (rc == 0 && !r.done && !c->conf_loaded) {
        rc = lc__ldconf_load(c->root, &c->conf_dirs);
        c->conf_loaded = rc == 0;
    }
    for (size_t i = 0; rc == 0 && !r.done && i < c->conf_dirs.n; i++) {
        if (l->nodeflib && search_is_default_dir(c->conf_dirs.v[i]))
            continue;
        rc = search_list(c, loader, name, c->conf_dirs.v[i], "", NULL, &r, tried);
    }
    for (size_t i = 0; rc == 0 && !r.done && !l->nodeflib &&
                       i < sizeof(search_default_dirs) / sizeof(char *);
         i++)
        rc = search_list(c, loader, name, search_default_dirs[i], "", NULL, &r, tried);
out:
    if (rc < 0) {
        for (size_t k = 0; k < r.n; k++)
            lc__found_release(&found[k]);
        return rc;
    }
    return (int)r.n;
}
