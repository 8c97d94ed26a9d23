/* The checker: loads the file and what it needs the way glibc's ld.so would,
 * runs the three rules and writes the report. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linkcheck/forbidden.h"

#define CHECKER_NONE SIZE_MAX
/* A dependency graph larger than this is hostile, not a program. */
#define CHECKER_MAX_OBJECTS 4096
/* Findings of one rule on one object printed before the rest are counted. */
#define CHECKER_PRINT_LIMIT 32
/* How much of a string found in data a report line quotes. */
#define CHECKER_QUOTE_MAX 160
#define CHECKER_QUOTE_LEAD 32

/* Where ld.so looks when nothing else found the library (Debian's order). */
static const char *const checker_default_dirs[] = {
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
};

/* glibc 2.33+ tries these below every search directory first; we search as
 * a CPU that supports every level would. */
static const char *const checker_hwcaps_subdirs[] = {
    "glibc-hwcaps/x86-64-v4/",
    "glibc-hwcaps/x86-64-v3/",
    "glibc-hwcaps/x86-64-v2/",
    "",
};

/* One object in the load graph: the file itself (index 0) or a library. */
struct checker_obj {
    char *name;    /* the DT_NEEDED string that loaded it; the label for index 0 */
    char *path;    /* where it was found */
    char *origin;  /* its directory, for $ORIGIN; NULL when unknown */
    char *soname;  /* NULL when it has none */
    char *rpath;   /* DT_RPATH, NULL when absent or overridden by DT_RUNPATH */
    char *runpath; /* DT_RUNPATH */
    int nodeflib;  /* DF_1_NODEFLIB: skip the default directories */
    int forbidden; /* found to be a forbidden library: never descended into */
    const char *forbidden_stem;
    const char *forbidden_by; /* "SONAME" or "real path" */
    size_t parent;            /* the object whose DT_NEEDED loaded it; CHECKER_NONE for index 0 */
    int has_id;
    dev_t dev;
    ino_t ino;
    struct lc__strv needed;  /* DT_NEEDED, DT_FILTER, DT_AUXILIARY names in order */
    struct lc__strv aliases; /* other names it was asked for by */
};

/* A candidate file the search opened and mapped. */
struct checker_found {
    char *path;
    void *map;
    size_t size;
    dev_t dev;
    ino_t ino;
};

struct lc_checker {
    struct lc__strv stems;
    char *ld_library_path;
    char *root;
    unsigned int flags;
    lc_report_fn report;
    void *report_arg;

    /* One check's state, reset by checker_begin(). */
    const char *file;
    struct checker_obj *objs;
    size_t nobjs;
    size_t cap;
    struct lc__strv conf_dirs;
    int conf_loaded;
    const char *lib_dst;
    int first_error;
    size_t findings;
    size_t libraries_forbidden;
    size_t symbols_forbidden;
    size_t strings_forbidden;
    size_t not_found;
    long long symbols_examined;
    long long bytes_scanned;
    size_t printed; /* findings printed for the current rule and object */
};

/* ---- reporting ---------------------------------------------------------- */

static void checker_default_report(void *arg, enum lc_severity severity, const char *line)
{
    (void)arg;
    FILE *to = severity == LC_SEVERITY_WARNING || severity == LC_SEVERITY_ERROR ? stderr : stdout;
    fprintf(to, "%s\n", line);
    fflush(to);
}

static const char *checker_severity_word(enum lc_severity severity)
{
    switch (severity) {
    case LC_SEVERITY_FINDING:
        return "FAIL";
    case LC_SEVERITY_WARNING:
        return "warning";
    case LC_SEVERITY_ERROR:
        return "error";
    case LC_SEVERITY_OK:
        return "OK";
    case LC_SEVERITY_INFO:
    default:
        return "info";
    }
}

/* Writes "linkcheck: <WORD> <file>: <message>" to the reporter. */
__attribute__((format(printf, 3, 4))) static void
checker_say(struct lc_checker *c, enum lc_severity severity, const char *fmt, ...)
{
    if (!c->report)
        return;
    if (severity == LC_SEVERITY_INFO && !(c->flags & LC_FLAG_VERBOSE))
        return;
    char *msg = NULL, *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0 || asprintf(&line, "linkcheck: %s %s: %s", checker_severity_word(severity), c->file,
                          msg) < 0) {
        c->report(c->report_arg, LC_SEVERITY_ERROR, "linkcheck: error: out of memory reporting");
        free(msg);
        return;
    }
    c->report(c->report_arg, severity, line);
    free(msg);
    free(line);
}

static void checker_error(struct lc_checker *c, int rc)
{
    if (c->first_error == 0)
        c->first_error = rc;
}

/* A printable, quoted-safe copy of @len bytes of @s, cut at @max bytes. */
static char *checker_escape(const char *s, size_t len, size_t max)
{
    size_t shown = len < max ? len : max;
    char *out = malloc(shown * 4 + 4);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < shown; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            out[o++] = (char)ch;
        else
            o += (size_t)sprintf(out + o, "\\x%02x", ch);
    }
    if (shown < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* "app -> libmid.so (/abs/libmid.so) -> <leaf>": how object @i was reached,
 * then @leaf when given. */
static char *checker_chain(const struct lc_checker *c, size_t i, const char *leaf)
{
    size_t depth = 0;
    for (size_t j = i; j != CHECKER_NONE; j = c->objs[j].parent)
        depth++;
    size_t *path = malloc(depth * sizeof(*path));
    if (!path)
        return NULL;
    size_t k = depth;
    for (size_t j = i; j != CHECKER_NONE; j = c->objs[j].parent)
        path[--k] = j;
    char *out = strdup(lc_path_basename(c->objs[0].name));
    for (size_t d = 1; d < depth && out; d++) {
        const struct checker_obj *o = &c->objs[path[d]];
        char *next = NULL;
        if (asprintf(&next, "%s -> %s (%s)", out, o->name, o->path) < 0)
            next = NULL;
        free(out);
        out = next;
    }
    if (out && leaf) {
        char *next = NULL;
        if (asprintf(&next, "%s -> %s", out, leaf) < 0)
            next = NULL;
        free(out);
        out = next;
    }
    free(path);
    return out;
}

/* ---- configuration ------------------------------------------------------ */

int lc_checker_create(struct lc_checker **checker_p)
{
    struct lc_checker *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    for (size_t i = 0; i < LC_FORBIDDEN_STEM_COUNT; i++) {
        if (lc__strv_push(&c->stems, lc_forbidden_stems[i], strlen(lc_forbidden_stems[i]))) {
            lc_checker_destroy(c);
            return -ENOMEM;
        }
    }
    c->report = checker_default_report;
    *checker_p = c;
    return 0;
}

void lc_checker_destroy(struct lc_checker *checker)
{
    if (!checker)
        return;
    lc__strv_free(&checker->stems);
    free(checker->ld_library_path);
    free(checker->root);
    free(checker);
}

int lc_checker_forbid(struct lc_checker *checker, const char *stem)
{
    if (!stem || !stem[0] || strchr(stem, '/'))
        return -EINVAL;
    return lc__strv_push(&checker->stems, stem, strlen(stem));
}

int lc_checker_set_ld_library_path(struct lc_checker *checker, const char *dirs)
{
    char *copy = NULL;
    /* ld.so ignores an empty LD_LIBRARY_PATH altogether. */
    if (dirs && dirs[0] && !(copy = strdup(dirs)))
        return -ENOMEM;
    free(checker->ld_library_path);
    checker->ld_library_path = copy;
    return 0;
}

int lc_checker_set_root(struct lc_checker *checker, const char *root)
{
    if (root && !root[0])
        return -EINVAL;
    char *copy = NULL;
    if (root) {
        size_t len = strlen(root);
        while (len > 0 && root[len - 1] == '/')
            len--;
        if (len > 0 && !(copy = strndup(root, len)))
            return -ENOMEM;
    }
    free(checker->root);
    checker->root = copy;
    return 0;
}

void lc_checker_set_flags(struct lc_checker *checker, unsigned int flags)
{
    checker->flags = flags;
}

void lc_checker_set_reporter(struct lc_checker *checker, lc_report_fn fn, void *arg)
{
    checker->report = fn;
    checker->report_arg = arg;
}

/* ---- forbidden names ---------------------------------------------------- */

static const char *checker_stem_of(const struct lc_checker *c, const char *name)
{
    for (size_t i = 0; i < c->stems.n; i++)
        if (lc_name_matches_stem(name, c->stems.v[i]))
            return c->stems.v[i];
    return NULL;
}

/* ---- the object table --------------------------------------------------- */

static void checker_obj_free(struct checker_obj *o)
{
    free(o->name);
    free(o->path);
    free(o->origin);
    free(o->soname);
    free(o->rpath);
    free(o->runpath);
    lc__strv_free(&o->needed);
    lc__strv_free(&o->aliases);
}

static void checker_end(struct lc_checker *c)
{
    for (size_t i = 0; i < c->nobjs; i++)
        checker_obj_free(&c->objs[i]);
    free(c->objs);
    c->objs = NULL;
    c->nobjs = c->cap = 0;
    lc__strv_free(&c->conf_dirs);
    c->conf_loaded = 0;
}

static void checker_begin(struct lc_checker *c, const char *file)
{
    checker_end(c);
    c->file = file;
    c->first_error = 0;
    c->findings = c->libraries_forbidden = c->symbols_forbidden = c->strings_forbidden = 0;
    c->not_found = 0;
    c->symbols_examined = c->bytes_scanned = 0;
    /* Debian's ld.so expands $LIB to its multiarch directory. */
    char *probe = NULL;
    struct stat st;
    c->lib_dst = "lib64";
    if (asprintf(&probe, "%s/lib/x86_64-linux-gnu", c->root ? c->root : "") >= 0 &&
        stat(probe, &st) == 0 && S_ISDIR(st.st_mode))
        c->lib_dst = "lib/x86_64-linux-gnu";
    free(probe);
}

/* Appends a zeroed object; returns its index or -ENOMEM. */
static long checker_obj_add(struct lc_checker *c)
{
    if (c->nobjs == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct checker_obj *objs = realloc(c->objs, cap * sizeof(*objs));
        if (!objs)
            return -ENOMEM;
        c->objs = objs;
        c->cap = cap;
    }
    memset(&c->objs[c->nobjs], 0, sizeof(c->objs[0]));
    c->objs[c->nobjs].parent = CHECKER_NONE;
    return (long)c->nobjs++;
}

static int checker_dup(const char *s, char **out_p)
{
    if (!s) {
        *out_p = NULL;
        return 0;
    }
    return (*out_p = strdup(s)) ? 0 : -ENOMEM;
}

/* Copies what the search needs from @elf's dynamic section into @o. */
static int checker_obj_fill(struct checker_obj *o, const struct lc__elf *elf)
{
    const char *rpath = NULL, *runpath = NULL, *soname = NULL;
    uint64_t flags_1 = 0;
    for (size_t i = 0; i < elf->ndyn; i++) {
        const Elf64_Dyn *d = &elf->dyn[i];
        const char *s = NULL;
        switch (d->d_tag) {
        case DT_NEEDED:
        case DT_FILTER:
        case DT_AUXILIARY:
            s = lc__elf_dynstr(elf, d->d_un.d_val);
            if (s && lc__strv_push(&o->needed, s, strlen(s)))
                return -ENOMEM;
            break;
        case DT_SONAME:
            soname = lc__elf_dynstr(elf, d->d_un.d_val);
            break;
        case DT_RPATH:
            rpath = lc__elf_dynstr(elf, d->d_un.d_val);
            break;
        case DT_RUNPATH:
            runpath = lc__elf_dynstr(elf, d->d_un.d_val);
            break;
        case DT_FLAGS_1:
            flags_1 = d->d_un.d_val;
            break;
        default:
            break;
        }
    }
    /* ld.so ignores DT_RPATH in an object that has DT_RUNPATH. */
    if (runpath)
        rpath = NULL;
    o->nodeflib = (flags_1 & DF_1_NODEFLIB) != 0;
    if (checker_dup(rpath, &o->rpath) || checker_dup(runpath, &o->runpath) ||
        checker_dup(soname, &o->soname))
        return -ENOMEM;
    return 0;
}

/* The object already loaded under @name (as asked for or by SONAME), like
 * ld.so's name match; CHECKER_NONE when there is none. */
static size_t checker_find_loaded(const struct lc_checker *c, const char *name)
{
    for (size_t i = 1; i < c->nobjs; i++) {
        const struct checker_obj *o = &c->objs[i];
        if (strcmp(o->name, name) == 0 || (o->soname && strcmp(o->soname, name) == 0))
            return i;
        for (size_t a = 0; a < o->aliases.n; a++)
            if (strcmp(o->aliases.v[a], name) == 0)
                return i;
    }
    if (c->objs[0].soname && strcmp(c->objs[0].soname, name) == 0)
        return 0;
    return CHECKER_NONE;
}

static size_t checker_find_file(const struct lc_checker *c, dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < c->nobjs; i++)
        if (c->objs[i].has_id && c->objs[i].dev == dev && c->objs[i].ino == ino)
            return i;
    return CHECKER_NONE;
}

static int checker_is_ancestor(const struct lc_checker *c, size_t anc, size_t i)
{
    for (size_t j = i; j != CHECKER_NONE; j = c->objs[j].parent)
        if (j == anc)
            return 1;
    return 0;
}

/* ---- rules on one image, reported ---------------------------------------- */

/* What the current image is, for report lines: "" for the file itself,
 * "library libx.so (/path) " for a loaded one. */
struct checker_subject {
    struct lc_checker *c;
    size_t obj;
    char *prefix;
    char *chain;
};

static int checker_subject_init(struct checker_subject *s, struct lc_checker *c, size_t obj)
{
    s->c = c;
    s->obj = obj;
    s->prefix = NULL;
    s->chain = NULL;
    if (obj == 0)
        return (s->prefix = strdup("")) ? 0 : -ENOMEM;
    s->chain = checker_chain(c, obj, NULL);
    if (!s->chain ||
        asprintf(&s->prefix, "library %s (%s) ", c->objs[obj].name, c->objs[obj].path) < 0) {
        free(s->chain);
        s->prefix = s->chain = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void checker_subject_free(struct checker_subject *s)
{
    free(s->prefix);
    free(s->chain);
}

static void checker_on_symbol(void *arg, const char *name, int defined, const char *pattern,
                              const char *table)
{
    struct checker_subject *s = arg;
    struct lc_checker *c = s->c;
    c->findings++;
    c->symbols_forbidden++;
    if (++c->printed > CHECKER_PRINT_LIMIT)
        return;
    char *shown = checker_escape(name, strlen(name), CHECKER_QUOTE_MAX);
    checker_say(c, LC_SEVERITY_FINDING, "%s%s forbidden symbol %s (pattern '%s') in %s%s%s",
                s->prefix, defined ? "defines" : "imports", shown ? shown : "?", pattern, table,
                s->chain ? ", reached via " : "", s->chain ? s->chain : "");
    free(shown);
}

static void checker_on_string(void *arg, const char *str, size_t len, size_t stem_pos,
                              const char *stem, const char *where, uint64_t offset)
{
    struct checker_subject *s = arg;
    struct lc_checker *c = s->c;
    c->findings++;
    c->strings_forbidden++;
    if (++c->printed > CHECKER_PRINT_LIMIT)
        return;
    /* A long string is quoted from a little before the stem. */
    size_t from = 0;
    if (len > CHECKER_QUOTE_MAX && stem_pos > CHECKER_QUOTE_LEAD)
        from = stem_pos - CHECKER_QUOTE_LEAD;
    char *shown = checker_escape(str + from, len - from, CHECKER_QUOTE_MAX);
    checker_say(c, LC_SEVERITY_FINDING,
                "%snames forbidden library in string \"%s%s\" (stem '%s') in %s at file offset "
                "0x%llx%s%s",
                s->prefix, from ? "..." : "", shown ? shown : "?", stem, where,
                (unsigned long long)offset, s->chain ? ", reached via " : "",
                s->chain ? s->chain : "");
    free(shown);
}

static void checker_print_overflow(struct lc_checker *c, const char *what)
{
    if (c->printed > CHECKER_PRINT_LIMIT)
        checker_say(c, LC_SEVERITY_FINDING, "%zu more %s not shown",
                    c->printed - CHECKER_PRINT_LIMIT, what);
}

/* Rules 2 and 3 on object @obj's image, as the flags ask. */
static int checker_image_rules(struct lc_checker *c, size_t obj, const struct lc__elf *elf,
                               int symbols, int strings)
{
    struct checker_subject s;
    if (checker_subject_init(&s, c, obj) < 0)
        return -ENOMEM;
    int rc = 0;
    if (symbols) {
        struct lc__err err;
        c->printed = 0;
        int n = lc__rule_symbols(elf, checker_on_symbol, &s, &err);
        checker_print_overflow(c, "forbidden symbols");
        if (n < 0) {
            checker_say(c, LC_SEVERITY_ERROR, "%smalformed ELF: %s%s%s", s.prefix, err.msg,
                        s.chain ? ", reached via " : "", s.chain ? s.chain : "");
            rc = n;
        } else {
            c->symbols_examined += n;
        }
    }
    if (strings) {
        c->printed = 0;
        long long n = lc__rule_strings(elf, (const char *const *)c->stems.v, c->stems.n,
                                       checker_on_string, &s);
        checker_print_overflow(c, "strings naming forbidden libraries");
        if (n < 0 && rc == 0)
            rc = (int)n;
        else if (n > 0)
            c->bytes_scanned += n;
    }
    checker_subject_free(&s);
    return rc;
}

/* The interpreter is loaded before anything else: its name counts too. */
static void checker_interp(struct lc_checker *c, const struct lc__elf *elf)
{
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type != PT_INTERP || ph->p_filesz == 0)
            continue;
        const char *s = (const char *)elf->data + ph->p_offset;
        size_t len = strnlen(s, (size_t)ph->p_filesz);
        char *name = strndup(s, len);
        const char *stem = name ? checker_stem_of(c, name) : NULL;
        if (stem) {
            char *shown = checker_escape(name, len, CHECKER_QUOTE_MAX);
            c->findings++;
            c->libraries_forbidden++;
            checker_say(c, LC_SEVERITY_FINDING,
                        "its interpreter (PT_INTERP) %s is a forbidden library (stem '%s')",
                        shown ? shown : "?", stem);
            free(shown);
        }
        free(name);
    }
}

/* ---- the search --------------------------------------------------------- */

static void checker_found_release(struct checker_found *f)
{
    if (f->map)
        munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof(*f));
}

/* Opens @path as ld.so would a candidate. Returns 1 and fills @f when it is
 * a library to load, 0 to keep searching, -ENOEXEC when ld.so would stop
 * with an error (reported here), -ENOMEM. */
static int checker_try(struct lc_checker *c, size_t loader, const char *name, const char *path,
                       struct checker_found *f, size_t *tried)
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
        checker_say(c, LC_SEVERITY_INFO, "skipped %s for %s: wrong ELF class or machine", path,
                    name);
    } else if (compatible < 0) {
        char *chain = checker_chain(c, loader, NULL);
        checker_say(c, LC_SEVERITY_ERROR,
                    "library %s found at %s is not an ELF file ld.so could load (%s), reached "
                    "via %s",
                    name, path, size ? "bad ELF identification" : "empty file",
                    chain ? chain : "?");
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

/* Tries @name in every directory of the colon list @list (with @seps as
 * separators), expanding tokens with @origin; absolute directories that did
 * not come from $ORIGIN go under --root. */
static int checker_try_list(struct lc_checker *c, size_t loader, const char *name, const char *list,
                            const char *seps, const char *origin, struct checker_found *f,
                            size_t *tried)
{
    struct lc__dst dst = {origin, c->lib_dst, "x86_64"};
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, seps);
        char *entry = strndup(p, len);
        if (!entry)
            return -ENOMEM;
        char *dir = NULL;
        int uses_origin = 0;
        int rc = lc__dst_expand(entry, &dst, &dir, &uses_origin);
        free(entry);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 0) {
            const char *prefix = dir[0] == '/' && !uses_origin && c->root ? c->root : "";
            const char *base = dir[0] ? dir : "."; /* an empty entry is the current directory */
            for (size_t h = 0; h < sizeof(checker_hwcaps_subdirs) / sizeof(char *); h++) {
                char *cand = NULL;
                if (asprintf(&cand, "%s%s/%s%s", prefix, base, checker_hwcaps_subdirs[h], name) <
                    0) {
                    rc = -ENOMEM;
                    break;
                }
                rc = checker_try(c, loader, name, cand, f, tried);
                free(cand);
                if (rc != 0)
                    break;
            }
            free(dir);
            if (rc != 0)
                return rc;
        }
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

static int checker_is_default_dir(const char *dir)
{
    for (size_t i = 0; i < sizeof(checker_default_dirs) / sizeof(char *); i++)
        if (strcmp(dir, checker_default_dirs[i]) == 0)
            return 1;
    return 0;
}

/* Finds the library @name needed by object @loader in ld.so's order. Returns
 * 1 (found, @f filled), 0 (not found), or a negative errno. */
static int checker_search(struct lc_checker *c, size_t loader, const char *name,
                          struct checker_found *f, size_t *tried)
{
    const struct checker_obj *l = &c->objs[loader];
    int rc;
    if (strchr(name, '/')) {
        /* A path: tokens expand, no search. */
        struct lc__dst dst = {l->origin, c->lib_dst, "x86_64"};
        char *path = NULL, *full = NULL;
        int uses_origin = 0;
        rc = lc__dst_expand(name, &dst, &path, &uses_origin);
        if (rc == -ENOENT)
            return 0;
        if (rc < 0)
            return rc;
        const char *prefix = path[0] == '/' && !uses_origin && c->root ? c->root : "";
        if (asprintf(&full, "%s%s", prefix, path) < 0) {
            free(path);
            return -ENOMEM;
        }
        rc = checker_try(c, loader, name, full, f, tried);
        free(full);
        free(path);
        return rc;
    }
    /* DT_RPATH of the loader, then of its loaders up to the file itself, unless
     * the loader has DT_RUNPATH. */
    if (!l->runpath) {
        for (size_t j = loader; j != CHECKER_NONE; j = c->objs[j].parent) {
            const struct checker_obj *o = &c->objs[j];
            if (o->rpath &&
                (rc = checker_try_list(c, loader, name, o->rpath, ":", o->origin, f, tried)))
                return rc;
        }
    }
    if (c->ld_library_path && (rc = checker_try_list(c, loader, name, c->ld_library_path, ":;",
                                                     c->objs[0].origin, f, tried)))
        return rc;
    if (l->runpath &&
        (rc = checker_try_list(c, loader, name, l->runpath, ":", l->origin, f, tried)))
        return rc;
    /* ld.so.cache stands for these; with DF_1_NODEFLIB it drops system ones. */
    if (!c->conf_loaded) {
        if ((rc = lc__ldconf_load(c->root, &c->conf_dirs)) < 0)
            return rc;
        c->conf_loaded = 1;
    }
    for (size_t i = 0; i < c->conf_dirs.n; i++) {
        if (l->nodeflib && checker_is_default_dir(c->conf_dirs.v[i]))
            continue;
        if ((rc = checker_try_list(c, loader, name, c->conf_dirs.v[i], "", NULL, f, tried)))
            return rc;
    }
    if (!l->nodeflib) {
        for (size_t i = 0; i < sizeof(checker_default_dirs) / sizeof(char *); i++)
            if ((rc = checker_try_list(c, loader, name, checker_default_dirs[i], "", NULL, f,
                                       tried)))
                return rc;
    }
    return 0;
}

/* ---- the walk ----------------------------------------------------------- */

static void checker_report_forbidden_name(struct lc_checker *c, size_t loader, const char *name,
                                          const char *stem)
{
    /* Say where it is when we can, without loading it. */
    char *where = NULL;
    if (c->flags & LC_FLAG_NO_SEARCH) {
        where = strdup("not searched");
    } else {
        struct checker_found f = {0};
        size_t tried = 0;
        lc_report_fn saved = c->report;
        /* A broken candidate of a library we already refuse adds nothing. */
        c->report = NULL;
        int rc = checker_search(c, loader, name, &f, &tried);
        c->report = saved;
        where = strdup(rc == 1 ? f.path : "not found");
        checker_found_release(&f);
    }
    char *leaf = NULL, *chain = NULL;
    if (where && asprintf(&leaf, "%s (%s)", name, where) >= 0)
        chain = checker_chain(c, loader, leaf);
    c->findings++;
    c->libraries_forbidden++;
    checker_say(c, LC_SEVERITY_FINDING, "needs forbidden library %s (stem '%s'), reached via %s",
                name, stem, chain ? chain : "?");
    free(chain);
    free(leaf);
    free(where);
}

static void checker_report_forbidden_file(struct lc_checker *c, size_t loader, const char *name,
                                          const struct checker_obj *o)
{
    char *leaf = NULL, *chain = NULL;
    if (asprintf(&leaf, "%s (%s)", name, o->path) >= 0)
        chain = checker_chain(c, loader, leaf);
    c->findings++;
    c->libraries_forbidden++;
    checker_say(c, LC_SEVERITY_FINDING,
                "needs library %s, which is a forbidden library by its %s %s (stem '%s'), "
                "reached via %s",
                name, o->forbidden_by, strcmp(o->forbidden_by, "SONAME") == 0 ? o->soname : o->path,
                o->forbidden_stem, chain ? chain : "?");
    free(chain);
    free(leaf);
}

/* Whether the library found for @name is itself forbidden, by SONAME or by
 * the real file it resolves to (a harmless-looking symlink to libcuda). */
static void checker_classify(const struct lc_checker *c, struct checker_obj *o)
{
    const char *stem = o->soname ? checker_stem_of(c, o->soname) : NULL;
    if (stem) {
        o->forbidden_by = "SONAME";
    } else {
        char *real = realpath(o->path, NULL);
        if (real && (stem = checker_stem_of(c, real))) {
            o->forbidden_by = "real path";
            free(o->path);
            o->path = real;
            real = NULL;
        }
        free(real);
    }
    if (stem) {
        o->forbidden = 1;
        o->forbidden_stem = stem;
    }
}

static char *checker_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Makes a new object for library @name found as @f, needed by @loader. Takes
 * @f's path. Returns its index or a negative errno (reported). */
static long checker_load(struct lc_checker *c, size_t loader, const char *name,
                         struct checker_found *f)
{
    struct lc__elf elf;
    struct lc__err err;
    int rc = lc__elf_open(&elf, f->map, f->size, &err);
    if (rc == 0 && elf.eh.e_type == ET_REL) {
        snprintf(err.msg, sizeof(err.msg),
                 "a relocatable object (ET_REL), which ld.so cannot load");
        lc__elf_close(&elf);
        rc = -ENOEXEC;
    }
    if (rc < 0) {
        char *chain = checker_chain(c, loader, NULL);
        checker_say(c, LC_SEVERITY_ERROR, "library %s at %s: %s, reached via %s", name, f->path,
                    err.msg, chain ? chain : "?");
        free(chain);
        return rc;
    }
    long idx = checker_obj_add(c);
    if (idx < 0) {
        lc__elf_close(&elf);
        return idx;
    }
    struct checker_obj *o = &c->objs[idx];
    o->parent = loader;
    o->has_id = 1;
    o->dev = f->dev;
    o->ino = f->ino;
    o->path = f->path;
    f->path = NULL;
    if (!(o->name = strdup(name)) || !(o->origin = checker_dirname(o->path)) ||
        checker_obj_fill(o, &elf) < 0) {
        lc__elf_close(&elf);
        return -ENOMEM;
    }
    checker_classify(c, o);
    if (!o->forbidden) {
        char *chain = checker_chain(c, (size_t)idx, NULL);
        checker_say(c, LC_SEVERITY_INFO, "loads %s, reached via %s", name, chain ? chain : "?");
        free(chain);
        int symbols = (c->flags & LC_FLAG_SYMBOLS_RECURSIVE) != 0;
        int strings = (c->flags & LC_FLAG_STRINGS_RECURSIVE) != 0;
        if ((symbols || strings) &&
            (rc = checker_image_rules(c, (size_t)idx, &elf, symbols, strings)) < 0)
            checker_error(c, rc);
    }
    lc__elf_close(&elf);
    return idx;
}

/* One DT_NEEDED (or filter) entry @name of object @i. */
static int checker_need(struct lc_checker *c, size_t i, const char *name)
{
    const char *stem = checker_stem_of(c, name);
    if (stem) {
        checker_report_forbidden_name(c, i, name, stem);
        return 0;
    }
    size_t have = checker_find_loaded(c, name);
    if (have != CHECKER_NONE) {
        if (c->objs[have].forbidden) {
            checker_report_forbidden_file(c, i, name, &c->objs[have]);
        } else if (checker_is_ancestor(c, have, i)) {
            char *chain = checker_chain(c, i, name);
            checker_say(c, LC_SEVERITY_INFO, "dependency cycle, %s is already loaded: %s", name,
                        chain ? chain : "?");
            free(chain);
        }
        return 0;
    }
    if (c->flags & LC_FLAG_NO_SEARCH)
        return 0;
    if (c->nobjs >= CHECKER_MAX_OBJECTS) {
        checker_say(c, LC_SEVERITY_ERROR, "more than %d libraries to load; giving up at %s",
                    CHECKER_MAX_OBJECTS, name);
        return -E2BIG;
    }
    struct checker_found f = {0};
    size_t tried = 0;
    int rc = checker_search(c, i, name, &f, &tried);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        char *chain = checker_chain(c, i, name);
        c->not_found++;
        checker_say(c, LC_SEVERITY_WARNING,
                    "needs %s, which was not found (%zu candidate paths tried); its dependencies "
                    "are not checked, reached via %s (not found)",
                    name, tried, chain ? chain : "?");
        free(chain);
        return 0;
    }
    size_t same = checker_find_file(c, f.dev, f.ino);
    if (same != CHECKER_NONE) {
        /* The same file under another name: ld.so maps it once. */
        int prc = lc__strv_push(&c->objs[same].aliases, name, strlen(name));
        if (prc == 0 && c->objs[same].forbidden)
            checker_report_forbidden_file(c, i, name, &c->objs[same]);
        checker_found_release(&f);
        return prc;
    }
    long idx = checker_load(c, i, name, &f);
    checker_found_release(&f);
    if (idx < 0)
        return (int)idx;
    if (c->objs[idx].forbidden)
        checker_report_forbidden_file(c, i, name, &c->objs[idx]);
    return 0;
}

/* Breadth first, as ld.so maps dependencies. */
static void checker_walk(struct lc_checker *c)
{
    for (size_t i = 0; i < c->nobjs; i++) {
        if (c->objs[i].forbidden)
            continue;
        for (size_t k = 0; k < c->objs[i].needed.n; k++) {
            int rc = checker_need(c, i, c->objs[i].needed.v[k]);
            if (rc == -ENOMEM || rc == -E2BIG) {
                checker_error(c, rc);
                return;
            }
            if (rc < 0)
                checker_error(c, rc);
        }
    }
}

static int checker_summary(struct lc_checker *c)
{
    size_t libraries = c->nobjs ? c->nobjs - 1 : 0;
    if (c->findings) {
        checker_say(c, LC_SEVERITY_FINDING,
                    "%zu finding%s: %zu forbidden librar%s, %zu forbidden symbol%s, %zu string%s "
                    "naming a forbidden library",
                    c->findings, c->findings == 1 ? "" : "s", c->libraries_forbidden,
                    c->libraries_forbidden == 1 ? "y" : "ies", c->symbols_forbidden,
                    c->symbols_forbidden == 1 ? "" : "s", c->strings_forbidden,
                    c->strings_forbidden == 1 ? "" : "s");
        return c->findings > INT_MAX ? INT_MAX : (int)c->findings;
    }
    if (c->first_error < 0) {
        checker_say(c, LC_SEVERITY_ERROR, "check incomplete: %s", strerror(-c->first_error));
        return c->first_error;
    }
    checker_say(c, LC_SEVERITY_OK,
                "no forbidden library among %zu loaded (%zu not found), no forbidden symbol "
                "among %lld, no forbidden library name in %lld bytes of data",
                libraries, c->not_found, c->symbols_examined, c->bytes_scanned);
    return 0;
}

/* Checks the image @data (@size bytes) labelled @label, whose directory is
 * @origin (NULL when unknown) and whose identity is @st (NULL when none). */
static int checker_run(struct lc_checker *c, const char *label, const char *origin,
                       const struct stat *st, const void *data, size_t size)
{
    checker_begin(c, label);
    struct lc__elf elf;
    struct lc__err err;
    int rc = lc__elf_open(&elf, data, size, &err);
    if (rc < 0) {
        checker_say(c, LC_SEVERITY_ERROR, "%s", err.msg);
        return rc;
    }
    long top = checker_obj_add(c);
    if (top < 0 || !(c->objs[0].name = strdup(label)) || !(c->objs[0].path = strdup(label)) ||
        checker_dup(origin, &c->objs[0].origin) < 0 || checker_obj_fill(&c->objs[0], &elf) < 0) {
        lc__elf_close(&elf);
        checker_end(c);
        checker_say(c, LC_SEVERITY_ERROR, "out of memory");
        return -ENOMEM;
    }
    if (st) {
        c->objs[0].has_id = 1;
        c->objs[0].dev = st->st_dev;
        c->objs[0].ino = st->st_ino;
    }
    checker_interp(c, &elf);
    rc = checker_image_rules(c, 0, &elf, 1, 1);
    lc__elf_close(&elf);
    if (rc < 0)
        checker_error(c, rc);
    else
        checker_walk(c);
    rc = checker_summary(c);
    checker_end(c);
    return rc;
}

int lc_checker_check_buffer(struct lc_checker *checker, const char *name, const void *data,
                            size_t size)
{
    char *origin = strchr(name, '/') ? checker_dirname(name) : NULL;
    if (strchr(name, '/') && !origin)
        return -ENOMEM;
    int rc = checker_run(checker, name, origin, NULL, data, size);
    free(origin);
    return rc;
}

int lc_checker_check_file(struct lc_checker *checker, const char *path)
{
    checker_begin(checker, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang us */
    if (fd < 0) {
        int rc = -errno;
        checker_say(checker, LC_SEVERITY_ERROR, "cannot open: %s", strerror(-rc));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        checker_say(checker, LC_SEVERITY_ERROR, "cannot stat: %s", strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        checker_say(checker, LC_SEVERITY_ERROR, "is a directory, expected an ELF file");
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        checker_say(checker, LC_SEVERITY_ERROR, "is not a regular file, expected an ELF file");
        return -EINVAL;
    }
    if (st.st_size == 0) {
        close(fd);
        checker_say(checker, LC_SEVERITY_ERROR, "the file is empty (expected an ELF header)");
        return -ENOEXEC;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        checker_say(checker, LC_SEVERITY_ERROR, "cannot map %lld bytes: %s", (long long)st.st_size,
                    strerror(map_errno));
        return -map_errno;
    }
    /* $ORIGIN of the file itself is its real directory, as ld.so takes it
     * from /proc/self/exe. */
    char *real = realpath(path, NULL);
    char *origin = real ? checker_dirname(real) : NULL;
    int rc = (real && !origin) ? -ENOMEM
                               : checker_run(checker, path, origin, &st, map, (size_t)st.st_size);
    free(origin);
    free(real);
    munmap(map, (size_t)st.st_size);
    return rc;
}
