/* The checker: loads the file and what it needs the way glibc's ld.so would
 * (search.c), runs the rules and writes the report. */
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

/* A dependency graph larger than this is hostile, not a program. */
#define CHECKER_MAX_OBJECTS 4096

/* ---- reporting ------------------------------------------------------- */

static void checker_default_report(void *arg, enum lc_severity severity, const char *line)
{
    (void)arg;
    FILE *to = severity == LC_SEVERITY_WARNING || severity == LC_SEVERITY_ERROR ? stderr : stdout;
    fprintf(to, "%s\n", line);
    fflush(to);
}

static void checker_error(struct lc_checker *c, int rc)
{
    if (c->first_error == 0)
        c->first_error = rc;
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
    c->fixed_stems = c->stems.n;
    c->report = checker_default_report;
    *checker_p = c;
    return 0;
}

void lc_checker_destroy(struct lc_checker *checker)
{
    if (!checker)
        return;
    lc__strv_free(&checker->stems);
    lc__strv_free(&checker->family_dirs);
    lc__strv_free(&checker->family_from);
    lc__strv_free(&checker->imports);
    free(checker->imports_file);
    free(checker->ld_library_path);
    free(checker->root);
    free(checker);
}

int lc_checker_forbid(struct lc_checker *checker, const char *stem)
{
    if (!stem || !stem[0] || strchr(stem, '/'))
        return -EINVAL;
    if (lc__strv_has(&checker->stems, stem))
        return 0;
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

const char *lc__checker_library_stem(const struct lc_checker *c, const char *name)
{
    for (size_t i = 0; i < c->stems.n; i++)
        if (lc_library_has_stem(name, c->stems.v[i]))
            return c->stems.v[i];
    return NULL;
}

const char *lc_checker_library_stem(const struct lc_checker *checker, const char *name)
{
    return lc__checker_library_stem(checker, name);
}

size_t lc_checker_stem_count(const struct lc_checker *checker)
{
    return checker->stems.n;
}

/* ---- the object table --------------------------------------------------- */

static void checker_obj_free(struct lc__obj *o)
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
    c->symbol_strings_forbidden = c->imports_refused = 0;
    c->not_found = 0;
    c->symbols_examined = c->bytes_scanned = 0;
}

/* Appends a zeroed object; returns its index or -ENOMEM. */
static long checker_obj_add(struct lc_checker *c)
{
    if (c->nobjs == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct lc__obj *objs = realloc(c->objs, cap * sizeof(*objs));
        if (!objs)
            return -ENOMEM;
        c->objs = objs;
        c->cap = cap;
    }
    memset(&c->objs[c->nobjs], 0, sizeof(c->objs[0]));
    c->objs[c->nobjs].parent = LC__NONE;
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
static int checker_obj_fill(struct lc__obj *o, const struct lc__elf *elf)
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
        case DT_AUDIT:
        case DT_DEPAUDIT:
            /* Audit libraries, a ':' list, are loaded before everything else. */
            s = lc__elf_dynstr(elf, d->d_un.d_val);
            for (const char *p = s; p && *p;) {
                size_t len = strcspn(p, ":");
                if (len && lc__strv_push(&o->needed, p, len))
                    return -ENOMEM;
                p += len + (p[len] == ':');
            }
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
 * ld.so's name match; LC__NONE when there is none. */
static size_t checker_find_loaded(const struct lc_checker *c, const char *name)
{
    for (size_t i = 1; i < c->nobjs; i++) {
        const struct lc__obj *o = &c->objs[i];
        if (strcmp(o->name, name) == 0 || (o->soname && strcmp(o->soname, name) == 0))
            return i;
        for (size_t a = 0; a < o->aliases.n; a++)
            if (strcmp(o->aliases.v[a], name) == 0)
                return i;
    }
    if (c->objs[0].soname && strcmp(c->objs[0].soname, name) == 0)
        return 0;
    return LC__NONE;
}

static size_t checker_find_file(const struct lc_checker *c, dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < c->nobjs; i++)
        if (c->objs[i].has_id && c->objs[i].dev == dev && c->objs[i].ino == ino)
            return i;
    return LC__NONE;
}

static int checker_is_ancestor(const struct lc_checker *c, size_t anc, size_t i)
{
    for (size_t j = i; j != LC__NONE; j = c->objs[j].parent)
        if (j == anc)
            return 1;
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
        struct lc__found f[LC__MAX_CANDIDATES];
        size_t tried = 0;
        lc_report_fn saved = c->report;
        /* A broken candidate of a library we already refuse adds nothing. */
        c->report = NULL;
        int n = lc__search(c, loader, name, f, &tried);
        c->report = saved;
        where = strdup(n > 0 ? f[0].path : "not found");
        for (int k = 0; k < n; k++)
            lc__found_release(&f[k]);
    }
    char *leaf = NULL, *chain = NULL;
    if (where && asprintf(&leaf, "%s (%s)", name, where) >= 0)
        chain = lc__chain(c, loader, leaf);
    c->findings++;
    c->libraries_forbidden++;
    lc__say(c, LC_SEVERITY_FINDING, "needs forbidden library %s (stem '%s'), reached via %s", name,
            stem, chain ? chain : "?");
    free(chain);
    free(leaf);
    free(where);
}

static void checker_report_forbidden_file(struct lc_checker *c, size_t loader, const char *name,
                                          const struct lc__obj *o)
{
    char *leaf = NULL, *chain = NULL;
    if (asprintf(&leaf, "%s (%s)", name, o->path) >= 0)
        chain = lc__chain(c, loader, leaf);
    c->findings++;
    c->libraries_forbidden++;
    const char *cpu = o->conditional ? " (on CPUs that search its folder first)" : "";
    if (strcmp(o->forbidden_by, "folder") == 0)
        lc__say(c, LC_SEVERITY_FINDING,
                "needs library %s, which is a forbidden library by its folder %s, a CUDA toolkit "
                "or driver library folder%s, reached via %s",
                name, o->forbidden_stem, cpu, chain ? chain : "?");
    else
        lc__say(c, LC_SEVERITY_FINDING,
                "needs library %s, which is a forbidden library by its %s %s (stem '%s')%s, "
                "reached via %s",
                name, o->forbidden_by,
                strcmp(o->forbidden_by, "SONAME") == 0 ? o->soname : o->path, o->forbidden_stem,
                cpu, chain ? chain : "?");
    free(chain);
    free(leaf);
}

/* Whether the library found for @name is itself forbidden: by SONAME, by
 * the name of the file found or of the real file it resolves to (a
 * harmless-looking symlink to libcuda), or by living in a toolkit folder. */
static void checker_classify(const struct lc_checker *c, struct lc__obj *o)
{
    const char *stem = o->soname ? lc__checker_library_stem(c, o->soname) : NULL;
    if (stem) {
        o->forbidden_by = "SONAME";
    } else if ((stem = lc__checker_library_stem(c, o->path))) {
        o->forbidden_by = "file name";
    } else {
        char *real = realpath(o->path, NULL);
        const char *dir = NULL;
        if (real && (stem = lc__checker_library_stem(c, real))) {
            o->forbidden_by = "real path";
        } else if (real && lc__family_dir_of(c, real, &dir)) {
            o->forbidden_by = "folder";
            stem = dir;
        }
        if (stem) {
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
                         struct lc__found *f)
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
        char *chain = lc__chain(c, loader, NULL);
        lc__say(c, LC_SEVERITY_ERROR, "library %s at %s: %s, reached via %s", name, f->path,
                err.msg, chain ? chain : "?");
        free(chain);
        return rc;
    }
    long idx = checker_obj_add(c);
    if (idx < 0) {
        lc__elf_close(&elf);
        return idx;
    }
    struct lc__obj *o = &c->objs[idx];
    o->parent = loader;
    o->has_id = 1;
    o->dev = f->dev;
    o->ino = f->ino;
    o->conditional = f->conditional;
    o->path = f->path;
    f->path = NULL;
    if (!(o->name = strdup(name)) || !(o->origin = checker_dirname(o->path)) ||
        checker_obj_fill(o, &elf) < 0) {
        lc__elf_close(&elf);
        return -ENOMEM;
    }
    checker_classify(c, o);
    if (!o->forbidden) {
        char *chain = lc__chain(c, (size_t)idx, NULL);
        lc__say(c, LC_SEVERITY_INFO, "loads %s%s, reached via %s", name,
                o->conditional ? " (on some CPUs)" : "", chain ? chain : "?");
        free(chain);
        int symbols = (c->flags & LC_FLAG_SYMBOLS_RECURSIVE) != 0;
        int strings = (c->flags & LC_FLAG_STRINGS_RECURSIVE) != 0;
        if ((symbols || strings) &&
            (rc = lc__image_rules(c, (size_t)idx, &elf, symbols, strings)) < 0)
            checker_error(c, rc);
    }
    lc__elf_close(&elf);
    return idx;
}

/* One file @f that @name needed by object @i resolves to on some CPU. */
static int checker_need_found(struct lc_checker *c, size_t i, const char *name,
                              struct lc__found *f)
{
    size_t same = checker_find_file(c, f->dev, f->ino);
    if (same != LC__NONE) {
        /* The same file under another name: ld.so maps it once. */
        int prc = lc__strv_push(&c->objs[same].aliases, name, strlen(name));
        if (prc == 0 && c->objs[same].forbidden)
            checker_report_forbidden_file(c, i, name, &c->objs[same]);
        return prc;
    }
    if (c->nobjs >= CHECKER_MAX_OBJECTS) {
        lc__say(c, LC_SEVERITY_ERROR, "more than %d libraries to load; giving up at %s",
                CHECKER_MAX_OBJECTS, name);
        return -E2BIG;
    }
    long idx = checker_load(c, i, name, f);
    if (idx < 0)
        return (int)idx;
    if (c->objs[idx].forbidden)
        checker_report_forbidden_file(c, i, name, &c->objs[idx]);
    return 0;
}

/* One DT_NEEDED (or filter, or audit) entry @name of object @i. */
static int checker_need(struct lc_checker *c, size_t i, const char *name)
{
    const char *stem = lc__checker_library_stem(c, name);
    if (stem) {
        checker_report_forbidden_name(c, i, name, stem);
        return 0;
    }
    size_t have = checker_find_loaded(c, name);
    if (have != LC__NONE) {
        if (c->objs[have].forbidden) {
            checker_report_forbidden_file(c, i, name, &c->objs[have]);
        } else if (checker_is_ancestor(c, have, i)) {
            char *chain = lc__chain(c, i, name);
            lc__say(c, LC_SEVERITY_INFO, "dependency cycle, %s is already loaded: %s", name,
                    chain ? chain : "?");
            free(chain);
        }
        return 0;
    }
    if (c->flags & LC_FLAG_NO_SEARCH)
        return 0;
    if (c->nobjs >= CHECKER_MAX_OBJECTS) {
        lc__say(c, LC_SEVERITY_ERROR, "more than %d libraries to load; giving up at %s",
                CHECKER_MAX_OBJECTS, name);
        return -E2BIG;
    }
    struct lc__found f[LC__MAX_CANDIDATES];
    size_t tried = 0;
    int n = lc__search(c, i, name, f, &tried);
    if (n < 0)
        return n;
    if (n == 0) {
        char *chain = lc__chain(c, i, name);
        c->not_found++;
        if (c->flags & LC_FLAG_STRICT) {
            c->findings++;
            c->libraries_forbidden++;
        }
        lc__say(c, c->flags & LC_FLAG_STRICT ? LC_SEVERITY_FINDING : LC_SEVERITY_WARNING,
                "needs %s, which was not found (%zu candidate paths tried); its dependencies "
                "are not checked%s, reached via %s (not found)",
                name, tried,
                c->flags & LC_FLAG_STRICT ? " and at run time it could be anything" : "",
                chain ? chain : "?");
        free(chain);
        return 0;
    }
    int rc = 0;
    for (int k = 0; k < n; k++) {
        if (rc == 0)
            rc = checker_need_found(c, i, name, &f[k]);
        lc__found_release(&f[k]);
    }
    return rc;
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

/* asprintf() into *out_p, NULL on failure. */
__attribute__((format(printf, 2, 3))) static void checker_asprintf(char **out_p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(out_p, fmt, ap) < 0)
        *out_p = NULL;
    va_end(ap);
}

static int checker_summary(struct lc_checker *c)
{
    size_t libraries = c->nobjs ? c->nobjs - 1 : 0;
    if (c->findings) {
        lc__say(c, LC_SEVERITY_FINDING,
                "%zu finding%s: %zu forbidden librar%s, %zu forbidden symbol%s, %zu string%s "
                "naming a forbidden library, %zu naming a CUDA entry point, %zu import%s not "
                "allowed",
                c->findings, c->findings == 1 ? "" : "s", c->libraries_forbidden,
                c->libraries_forbidden == 1 ? "y" : "ies", c->symbols_forbidden,
                c->symbols_forbidden == 1 ? "" : "s", c->strings_forbidden,
                c->strings_forbidden == 1 ? "" : "s", c->symbol_strings_forbidden,
                c->imports_refused, c->imports_refused == 1 ? "" : "s");
        return c->findings > INT_MAX ? INT_MAX : (int)c->findings;
    }
    if (c->first_error < 0) {
        lc__say(c, LC_SEVERITY_ERROR, "check incomplete: %s", strerror(-c->first_error));
        return c->first_error;
    }
    char *from = NULL;
    if (c->family_from.n) {
        size_t len = 1;
        for (size_t i = 0; i < c->family_from.n; i++)
            len += strlen(c->family_from.v[i]) + 1;
        from = calloc(1, len);
        for (size_t i = 0; from && i < c->family_from.n; i++) {
            if (i)
                strcat(from, " ");
            strcat(from, c->family_from.v[i]);
        }
    }
    char *set = NULL;
    if (from)
        checker_asprintf(&set, "%zu fixed, %zu more from the libraries installed in %s", c->fixed_stems,
               c->stems.n - c->fixed_stems, from);
    else
        checker_asprintf(&set, "%zu fixed; %s", c->fixed_stems,
               c->family_looked ? "no CUDA toolkit or driver here, so the fixed list only"
                                : "installed libraries not read");
    lc__say(c, LC_SEVERITY_OK,
            "no forbidden library among %zu loaded (%zu not found), no forbidden symbol among "
            "%lld, no forbidden library name in %lld bytes of data%s; %zu stems forbidden (%s)",
            libraries, c->not_found, c->symbols_examined, c->bytes_scanned,
            c->imports_file ? ", every import allowed" : "", c->stems.n, set ? set : "?");
    free(set);
    free(from);
    return 0;
}

/* The file's own SONAME: a library checked directly may be CUDA itself. */
static void checker_self(struct lc_checker *c)
{
    const struct lc__obj *o = &c->objs[0];
    const char *stem = o->soname ? lc__checker_library_stem(c, o->soname) : NULL;
    if (!stem)
        return;
    c->findings++;
    c->libraries_forbidden++;
    lc__say(c, LC_SEVERITY_FINDING, "is itself a forbidden library by its SONAME %s (stem '%s')",
            o->soname, stem);
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
        lc__say(c, LC_SEVERITY_ERROR, "%s", err.msg);
        return rc;
    }
    long top = checker_obj_add(c);
    if (top < 0 || !(c->objs[0].name = strdup(label)) || !(c->objs[0].path = strdup(label)) ||
        checker_dup(origin, &c->objs[0].origin) < 0 || checker_obj_fill(&c->objs[0], &elf) < 0) {
        lc__elf_close(&elf);
        checker_end(c);
        lc__say(c, LC_SEVERITY_ERROR, "out of memory");
        return -ENOMEM;
    }
    if (st) {
        c->objs[0].has_id = 1;
        c->objs[0].dev = st->st_dev;
        c->objs[0].ino = st->st_ino;
    }
    checker_self(c);
    lc__interp(c, &elf);
    rc = lc__image_rules(c, 0, &elf, 1, 1);
    if (rc >= 0 && c->imports_file)
        rc = lc__rule_imports(c, &elf);
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
        lc__say(checker, LC_SEVERITY_ERROR, "cannot open: %s", strerror(-rc));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        lc__say(checker, LC_SEVERITY_ERROR, "cannot stat: %s", strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        lc__say(checker, LC_SEVERITY_ERROR, "is a directory, expected an ELF file");
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        lc__say(checker, LC_SEVERITY_ERROR, "is not a regular file, expected an ELF file");
        return -EINVAL;
    }
    if (st.st_size == 0) {
        close(fd);
        lc__say(checker, LC_SEVERITY_ERROR, "the file is empty (expected an ELF header)");
        return -ENOEXEC;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        lc__say(checker, LC_SEVERITY_ERROR, "cannot map %lld bytes: %s", (long long)st.st_size,
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
