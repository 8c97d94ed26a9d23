/* The CUDA family as installed: every library a CUDA toolkit or the NVIDIA
 * driver ships becomes a forbidden stem, on top of the fixed floor in
 * forbidden_stems.def, and what one file is (lc_checker_classify_file(),
 * for the link-time trace and stagingd's self check). */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linkcheck/forbidden.h"

/* A derived stem that would forbid one of these is too generic to keep: a
 * toolkit folder may carry a copy of a system library. */
static const char *const family_common[] = {
    "libc.so.6",        "libm.so.6",       "libdl.so.2",      "librt.so.1",
    "libpthread.so.0",  "libgcc_s.so.1",   "libstdc++.so.6",  "libz.so.1",
    "libgomp.so.1",     "libcrypt.so.1",   "libutil.so.1",    "libresolv.so.2",
    "libmvec.so.1",     "libatomic.so.1",  "libssl.so.3",     "libcrypto.so.3",
    "libuuid.so.1",     "liburing.so.2",   "libjemalloc.so.2", "libasan.so.8",
    "libubsan.so.1",    "libelf.so.1",     "libnuma.so.1",    "libffi.so.8",
    "libzstd.so.1",     "liblzma.so.5",    "libbz2.so.1.0",   "libexpat.so.1",
    "libcheck.so.0",    "libsubunit.so.0", "libtinfo.so.6",   "libpython3.so",
};

/* The library folders of one toolkit root. */
static const char *const family_toolkit_dirs[] = {
    "lib64",         "lib",         "lib64/stubs",         "lib/stubs",
    "targets/*/lib", "targets/*/lib/stubs", "extras/CUPTI/lib64", "extras/CUPTI/lib",
    "nvvm/lib64",    "nvvm/lib",    "extras/Debugger/lib64", "compat",
};

/* Where toolkits live when nobody says. */
static const char *const family_default_roots[] = {
    "/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda", "/usr/lib/cuda",
};
static const char *const family_root_env[] = {"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT",
                                              "CUDAToolkit_ROOT"};

/* Folders that hold the driver's libraries and nothing else. */
static const char *const family_driver_dirs[] = {
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/x86_64-linux-gnu/nvidia",
    "/usr/lib/nvidia",
    "/usr/lib64/nvidia",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
};

/* System folders where the driver's libraries sit among everything else:
 * only the ones that look like the driver's are read. */
static const char *const family_system_dirs[] = {
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
    "/usr/lib",              "/usr/local/lib",
};

/* The stem of a library file name: "libcublasLt.so.13" -> "libcublasLt",
 * "libcudart_static.a" -> "libcudart_static". NULL when it is none. */
static char *family_stem_of_name(const char *name)
{
    if (strncmp(name, "lib", 3) != 0)
        return NULL;
    const char *so = strstr(name, ".so");
    while (so && so[3] != '\0' && so[3] != '.')
        so = strstr(so + 3, ".so");
    size_t len = strlen(name);
    if (so)
        len = (size_t)(so - name);
    else if (len > 2 && strcmp(name + len - 2, ".a") == 0)
        len -= 2;
    else
        return NULL;
    return len > 3 ? strndup(name, len) : NULL;
}

static int family_too_generic(const char *stem)
{
    for (size_t i = 0; i < sizeof(family_common) / sizeof(char *); i++)
        if (lc_library_has_stem(family_common[i], stem))
            return 1;
    return 0;
}

/* Adds @stem unless a stem already forbids it. Returns 1 when added, 0 when
 * not, -ENOMEM. */
static int family_add_stem(struct lc_checker *c, const char *stem)
{
    if (!stem || family_too_generic(stem) || lc__checker_library_stem(c, stem))
        return 0;
    return lc__strv_push(&c->stems, stem, strlen(stem)) < 0 ? -ENOMEM : 1;
}

/* The SONAME of the ELF file at @path, a new string, or NULL. */
static char *family_soname_of(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return NULL;
    char *soname = NULL;
    struct lc__elf elf;
    struct lc__err err;
    uint64_t off;
    if (lc__elf_open(&elf, map, (size_t)st.st_size, &err) == 0) {
        const char *s = lc__elf_dyn_get(&elf, DT_SONAME, &off) == 0 ? lc__elf_dynstr(&elf, off)
                                                                     : NULL;
        if (s)
            soname = strdup(s);
        lc__elf_close(&elf);
    }
    munmap(map, (size_t)st.st_size);
    return soname;
}

/* Whether a file name in a system folder looks like one of the driver's. */
static int family_driver_name(const struct lc_checker *c, const char *name)
{
    return strstr(name, "nvidia") || strstr(name, "NVIDIA") ||
           lc__checker_library_stem(c, name) != NULL;
}

/* Reads one folder: each lib* file's stem (and SONAME's, when asked) is
 * added; with @only_driver, only files named like the driver's. Returns
 * stems added or -ENOMEM. */
static int family_read_dir(struct lc_checker *c, const char *dir, int only_driver,
                           unsigned int how)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int added = 0, rc = 0, seen = 0;
    struct dirent *e;
    while (rc >= 0 && (e = readdir(d))) {
        if (strncmp(e->d_name, "lib", 3) != 0 || (only_driver && !family_driver_name(c, e->d_name)))
            continue;
        char *stem = family_stem_of_name(e->d_name);
        if (!stem)
            continue;
        seen = 1;
        rc = family_add_stem(c, stem);
        free(stem);
        if (rc > 0)
            added++;
        if (rc >= 0 && (how & LC_INSTALLED_SONAMES) && e->d_type != DT_LNK) {
            char *path = NULL;
            if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
                rc = -ENOMEM;
                break;
            }
            char *soname = family_soname_of(path);
            free(path);
            char *sstem = soname ? family_stem_of_name(lc_path_basename(soname)) : NULL;
            rc = family_add_stem(c, sstem);
            if (rc > 0)
                added++;
            free(sstem);
            free(soname);
        }
    }
    closedir(d);
    if (rc >= 0 && seen && !only_driver && !lc__strv_has(&c->family_from, dir) &&
        lc__strv_push(&c->family_from, dir, strlen(dir)) < 0)
        rc = -ENOMEM;
    return rc < 0 ? rc : added;
}

/* Records @dir (when it exists) as a family folder by its real path and
 * reads it. Returns stems added or -ENOMEM. */
static int family_take_dir(struct lc_checker *c, const char *dir, unsigned int how)
{
    char *real = realpath(dir, NULL);
    struct stat st;
    if (!real || stat(real, &st) < 0 || !S_ISDIR(st.st_mode) ||
        lc__strv_has(&c->family_dirs, real)) {
        free(real);
        return 0;
    }
    int rc = lc__strv_push(&c->family_dirs, real, strlen(real));
    if (rc == 0)
        rc = family_read_dir(c, real, 0, how);
    free(real);
    return rc;
}

/* Every library folder of the toolkit at @root. */
static int family_take_root(struct lc_checker *c, const char *root, unsigned int how)
{
    int added = 0;
    for (size_t i = 0; i < sizeof(family_toolkit_dirs) / sizeof(char *); i++) {
        char *pattern = NULL;
        if (asprintf(&pattern, "%s/%s", root, family_toolkit_dirs[i]) < 0)
            return -ENOMEM;
        glob_t g;
        int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
        free(pattern);
        if (grc == GLOB_NOSPACE)
            return -ENOMEM;
        if (grc != 0)
            continue;
        int rc = 0;
        for (size_t k = 0; k < g.gl_pathc && rc >= 0; k++)
            if ((rc = family_take_dir(c, g.gl_pathv[k], how)) > 0)
                added += rc;
        globfree(&g);
        if (rc < 0)
            return rc;
    }
    return added;
}

/* Each root of the ':' list @roots, or each glob match of it. */
static int family_take_roots(struct lc_checker *c, const char *roots, unsigned int how)
{
    int added = 0;
    for (const char *p = roots; p && *p;) {
        size_t len = strcspn(p, ":");
        char *pattern = strndup(p, len);
        if (!pattern)
            return -ENOMEM;
        glob_t g;
        int grc = glob(pattern, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g);
        free(pattern);
        if (grc == GLOB_NOSPACE)
            return -ENOMEM;
        int rc = 0;
        for (size_t k = 0; grc == 0 && k < g.gl_pathc && rc >= 0; k++)
            if ((rc = family_take_root(c, g.gl_pathv[k], how)) > 0)
                added += rc;
        if (grc == 0)
            globfree(&g);
        if (rc < 0)
            return rc;
        p += len + (p[len] == ':');
    }
    return added;
}

int lc_checker_forbid_installed(struct lc_checker *checker, const char *roots, unsigned int how)
{
    if ((roots && roots[0]) || (how & (LC_INSTALLED_DEFAULT_ROOTS | LC_INSTALLED_DRIVER)))
        checker->family_looked = 1;
    int added = 0, rc = family_take_roots(checker, roots, how);
    if (rc < 0)
        return rc;
    added += rc;
    if (how & LC_INSTALLED_DEFAULT_ROOTS) {
        for (size_t i = 0; i < sizeof(family_root_env) / sizeof(char *); i++) {
            const char *env = getenv(family_root_env[i]);
            if (env && env[0] && (rc = family_take_roots(checker, env, how)) < 0)
                return rc;
            added += rc > 0 ? rc : 0;
        }
        for (size_t i = 0; i < sizeof(family_default_roots) / sizeof(char *); i++) {
            if ((rc = family_take_roots(checker, family_default_roots[i], how)) < 0)
                return rc;
            added += rc;
        }
    }
    if (how & LC_INSTALLED_DRIVER) {
        for (size_t i = 0; i < sizeof(family_driver_dirs) / sizeof(char *); i++) {
            if ((rc = family_take_dir(checker, family_driver_dirs[i], how)) < 0)
                return rc;
            added += rc;
        }
        for (size_t i = 0; i < sizeof(family_system_dirs) / sizeof(char *); i++) {
            if ((rc = family_read_dir(checker, family_system_dirs[i], 1, how)) < 0)
                return rc;
            added += rc;
        }
    }
    return added;
}

int lc_checker_forbid_file(struct lc_checker *checker, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int added = 0, rc = 0;
    while (rc >= 0 && getline(&line, &cap, f) >= 0) {
        *strchrnul(line, '#') = '\0';
        char *p = line + strspn(line, " \t");
        p[strcspn(p, " \t\r\n")] = '\0';
        if (!p[0])
            continue;
        size_t before = checker->stems.n;
        rc = lc_checker_forbid(checker, p);
        if (rc == 0 && checker->stems.n > before)
            added++;
    }
    free(line);
    fclose(f);
    return rc < 0 ? rc : added;
}

int lc__family_dir_of(const struct lc_checker *c, const char *path, const char **dir_p)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return 0;
    size_t len = (size_t)(slash - path);
    for (size_t i = 0; i < c->family_dirs.n; i++) {
        if (strlen(c->family_dirs.v[i]) == len && strncmp(c->family_dirs.v[i], path, len) == 0) {
            *dir_p = c->family_dirs.v[i];
            return 1;
        }
    }
    return 0;
}

/* ---- what one file is ---------------------------------------------------- */

/* Section names nvcc gives the fat binaries it embeds. */
static const char *const family_fatbin_sections[] = {".nv_fatbin", ".nvFatBinSegment",
                                                     "__nv_relfatbin", ".nv.fatbin"};

struct family_first_symbol {
    char *why;
};

static void family_on_symbol(void *arg, const char *name, int defined, const char *pattern,
                             const char *table)
{
    struct family_first_symbol *f = arg;
    if (f->why)
        return;
    if (asprintf(&f->why, "it %s the CUDA symbol %s (pattern '%s') in %s",
                 defined ? "defines" : "imports", name, pattern, table) < 0)
        f->why = NULL;
}

int lc__classify_image(const struct lc_checker *c, const struct lc__elf *elf, int symbols,
                       char **why_p)
{
    char *why = NULL;
    int n = 0;
    uint64_t off;
    const char *soname =
        lc__elf_dyn_get(elf, DT_SONAME, &off) == 0 ? lc__elf_dynstr(elf, off) : NULL;
    const char *stem = soname ? lc__checker_library_stem(c, soname) : NULL;
    if (stem) {
        n = asprintf(&why, "its SONAME %s is a forbidden library (stem '%s')", soname, stem);
        goto out;
    }
    for (size_t i = 0; i < elf->ndyn; i++) {
        if (!lc__elf_tag_names_libraries(elf->dyn[i].d_tag))
            continue;
        const char *need = lc__elf_dynstr(elf, elf->dyn[i].d_un.d_val);
        if (need && (stem = lc__checker_library_stem(c, need))) {
            n = asprintf(&why, "it needs the forbidden library %s (stem '%s')", need, stem);
            goto out;
        }
    }
    for (size_t i = 1; i < elf->shnum; i++) {
        const char *name = lc__elf_section_name(elf, i);
        for (size_t k = 0; name && k < sizeof(family_fatbin_sections) / sizeof(char *); k++) {
            if (strcmp(name, family_fatbin_sections[k]) == 0) {
                n = asprintf(&why, "it holds a CUDA fat binary (section %s)", name);
                goto out;
            }
        }
    }
    if (symbols) {
        struct family_first_symbol first = {NULL};
        struct lc__err err;
        if (lc__rule_symbols(elf, family_on_symbol, &first, &err) >= 0 && first.why) {
            why = first.why;
            goto out;
        }
        free(first.why);
    }
    return 0;
out:
    if (n < 0 || !why)
        return -ENOMEM;
    *why_p = why;
    return 1;
}

/* Parses the decimal size field of an ar member header. */
static int family_ar_size(const unsigned char *h, uint64_t *size_p)
{
    uint64_t v = 0;
    int digits = 0;
    for (size_t i = 48; i < 58 && h[i] != ' '; i++) {
        if (h[i] < '0' || h[i] > '9')
            return -ENOEXEC;
        v = v * 10 + (uint64_t)(h[i] - '0');
        digits++;
    }
    if (!digits)
        return -ENOEXEC;
    *size_p = v;
    return 0;
}

/* A member's name: "name/" (GNU), "/N" into the long-name table, "#1/N" (BSD). */
static char *family_ar_name(const unsigned char *h, const unsigned char *d, size_t size,
                            uint64_t data_off, uint64_t msize, const char *names, size_t names_len,
                            size_t *skip_p)
{
    *skip_p = 0;
    if (h[0] == '/' && h[1] >= '0' && h[1] <= '9') {
        size_t at = (size_t)strtoul((const char *)h + 1, NULL, 10);
        if (!names || at >= names_len)
            return NULL;
        size_t len = 0;
        while (at + len < names_len && names[at + len] != '/' && names[at + len] != '\n')
            len++;
        return strndup(names + at, len);
    }
    if (h[0] == '#' && h[1] == '1' && h[2] == '/') {
        size_t len = (size_t)strtoul((const char *)h + 3, NULL, 10);
        if (len > msize || data_off + len > size)
            return NULL;
        *skip_p = len;
        return strndup((const char *)d + data_off, len);
    }
    size_t len = 0;
    while (len < 16 && h[len] != '/' && h[len] != ' ')
        len++;
    return strndup((const char *)h, len);
}

/* Every ELF member of the archive @d[0..size) (its members' files, for a
 * thin archive beside @path). Returns 1 with *why_p, 0, or -errno. */
static int family_classify(struct lc_checker *c, const char *path, unsigned int how, int depth,
                           char **why_p);

static int family_classify_archive(struct lc_checker *c, const char *path, const unsigned char *d,
                                   size_t size, int thin, unsigned int how, char **why_p)
{
    const char *names = NULL;
    size_t names_len = 0;
    uint64_t at = 8;
    int rc = 0;
    while (rc == 0 && at + 60 <= size) {
        const unsigned char *h = d + at;
        uint64_t msize;
        if (h[58] != '`' || h[59] != '\n' || family_ar_size(h, &msize) < 0)
            return -ENOEXEC;
        uint64_t data = at + 60;
        int table = h[0] == '/' && (h[1] == ' ' || h[1] == '/' || strncmp((const char *)h, "/SYM64/", 7) == 0);
        /* A thin archive stores only its tables; members live in their files. */
        int stored = !thin || table;
        if (stored && (msize > size || data > size - msize))
            return -ENOEXEC;
        if (h[0] == '/' && h[1] == '/' && h[2] == ' ') {
            names = (const char *)d + data;
            names_len = (size_t)msize;
        } else if (!table) {
            size_t skip;
            char *name = family_ar_name(h, d, size, data, msize, names, names_len, &skip);
            if (thin && name) {
                char *member = NULL;
                const char *slash = strrchr(path, '/');
                if (name[0] == '/')
                    member = strdup(name);
                else if (asprintf(&member, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path,
                                  name) < 0)
                    member = NULL;
                char *mwhy = NULL;
                int mrc = member ? family_classify(c, member, how, 1, &mwhy) : -ENOMEM;
                if (mrc == 1 && asprintf(why_p, "its member %s: %s", name, mwhy) < 0)
                    mrc = -ENOMEM;
                rc = mrc == 1 ? 1 : mrc == -ENOMEM ? -ENOMEM : 0;
                free(mwhy);
                free(member);
            } else if (!thin && msize - skip >= 4 &&
                       memcmp(d + data + skip, "\177ELF", 4) == 0) {
                struct lc__elf elf;
                struct lc__err err;
                if (lc__elf_open(&elf, d + data + skip, (size_t)(msize - skip), &err) == 0) {
                    char *mwhy = NULL;
                    int mrc = lc__classify_image(c, &elf, (how & LC_CLASSIFY_SYMBOLS) != 0, &mwhy);
                    lc__elf_close(&elf);
                    if (mrc == 1 && asprintf(why_p, "its member %s: %s", name ? name : "?",
                                             mwhy) < 0)
                        mrc = -ENOMEM;
                    rc = mrc;
                    free(mwhy);
                }
            }
            free(name);
        }
        at = stored ? data + msize + (msize & 1) : data;
    }
    return rc;
}

/* Whether the file at @path is CUDA by name: its own, its real path's, or
 * its folder. Returns 1 with *why_p, 0, or -ENOMEM. */
static int family_by_name(struct lc_checker *checker, const char *path, char **why_p)
{
    const char *stem = lc__checker_library_stem(checker, path), *dir = NULL;
    char *real = realpath(path, NULL);
    int rc = 0;
    if (stem) {
        rc = asprintf(why_p, "its file name is a forbidden library (stem '%s')", stem) < 0
                 ? -ENOMEM
                 : 1;
    } else if (real && (stem = lc__checker_library_stem(checker, real))) {
        rc = asprintf(why_p, "it is %s, a forbidden library (stem '%s')", real, stem) < 0 ? -ENOMEM
                                                                                            : 1;
    } else if (real && lc__family_dir_of(checker, real, &dir)) {
        rc = asprintf(why_p, "it lives in %s, a CUDA toolkit or driver library folder", dir) < 0
                 ? -ENOMEM
                 : 1;
    }
    free(real);
    return rc;
}

/* @depth 1 is a thin archive's member: another archive there is not read.
 * Only ELF files and archives are judged, by name and by content: a data
 * file or a linker script that happens to be called "checkpoint" is not a
 * library. */
static int family_classify(struct lc_checker *checker, const char *path, unsigned int how, int depth,
                           char **why_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
        close(fd);
        return -ENOEXEC;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *d = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (d == MAP_FAILED)
        return -errno;
    int elf_file = memcmp(d, "\177ELF", 4) == 0;
    int archive = depth == 0 && (memcmp(d, "!<arch>\n", 8) == 0 || memcmp(d, "!<thin>\n", 8) == 0);
    int rc = elf_file || archive ? family_by_name(checker, path, why_p) : -ENOEXEC;
    if (rc == 0 && elf_file) {
        struct lc__elf elf;
        struct lc__err err;
        rc = lc__elf_open(&elf, d, size, &err);
        if (rc == 0) {
            rc = lc__classify_image(checker, &elf, (how & LC_CLASSIFY_SYMBOLS) != 0, why_p);
            lc__elf_close(&elf);
        }
    } else if (rc == 0) {
        rc = family_classify_archive(checker, path, d, size, d[2] == 't', how, why_p);
    }
    munmap((void *)d, size);
    return rc;
}

int lc_checker_classify_file(struct lc_checker *checker, const char *path, unsigned int how,
                             char **why_p)
{
    return family_classify(checker, path, how, 0, why_p);
}
