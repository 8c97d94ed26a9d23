/* Layer 4 of the CUDA boundary: at start-up stagingd refuses to run with
 * any CUDA library in its address space (docs/boundary.md).
 *
 * Names alone are not enough: a renamed or symlinked copy, a library loaded
 * with dlmopen() or as an LD_AUDIT module (both invisible to
 * dl_iterate_phdr(), which lists the caller's namespace only) and a
 * preloaded shim under an innocent name all hide from a name match. So every
 * object is judged by what it is -- name, SONAME (from memory and from its
 * file), real path, folder, DT_NEEDED names and the CUDA symbols it defines
 * or imports -- through linkcheck's classifier, and /proc/self/maps is read
 * as well as the loader's list. LD_PRELOAD, LD_AUDIT and /etc/ld.so.preload
 * are refused when they name anything CUDA, loaded or not. */
#include "stagingd/selfcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "linkcheck/forbidden.h"
#include "linkcheck/linkcheck.h"

/* One line of /proc/self/maps that maps a file. */
struct selfcheck_map {
    uintptr_t start, end;
    int readable;
    unsigned long long offset;
    dev_t dev;
    unsigned long inode;
    char *path; /* as the kernel shows it: symlinks resolved, " (deleted)" kept */
};

/* One object from dl_iterate_phdr(). */
struct selfcheck_obj {
    char *name;   /* dlpi_name; "" for the program */
    char *soname; /* read from its dynamic section in memory, NULL when none */
};

/* What the check saw, taken before it opens anything itself. */
struct selfcheck_view {
    struct selfcheck_map *maps;
    size_t nmaps, maps_cap;
    struct selfcheck_obj *objs;
    size_t nobjs, objs_cap;
    int nomem;
};

static int selfcheck_readable(const struct selfcheck_view *v, uintptr_t at, size_t len)
{
    for (size_t i = 0; i < v->nmaps; i++)
        if (v->maps[i].readable && at >= v->maps[i].start && len <= v->maps[i].end - at)
            return 1;
    return 0;
}

/* Every mapping of /proc/self/maps, anonymous ones too: the in-memory
 * SONAME reader needs to know what is readable. */
static int selfcheck_read_maps(struct selfcheck_view *v)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        unsigned long start, end, inode;
        unsigned long long offset;
        unsigned int major, minor;
        char perms[5];
        int at = 0;
        if (sscanf(line, "%lx-%lx %4s %llx %x:%x %lu %n", &start, &end, perms, &offset, &major,
                   &minor, &inode, &at) < 7)
            continue;
        char *path = line + at;
        path[strcspn(path, "\n")] = '\0';
        if (v->nmaps == v->maps_cap) {
            size_t ncap = v->maps_cap ? v->maps_cap * 2 : 64;
            struct selfcheck_map *grown = realloc(v->maps, ncap * sizeof(*grown));
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            v->maps = grown;
            v->maps_cap = ncap;
        }
        struct selfcheck_map *m = &v->maps[v->nmaps];
        *m = (struct selfcheck_map){start,  end, perms[0] == 'r', offset, makedev(major, minor),
                                    inode, NULL};
        if (inode != 0 && path[0] == '/' && !(m->path = strdup(path))) {
            rc = -ENOMEM;
            break;
        }
        v->nmaps++;
    }
    free(line);
    fclose(f);
    return rc;
}

/* The SONAME in an object's dynamic section in memory, where ld.so put it;
 * every read is checked against the readable mappings first. */
static char *selfcheck_mem_soname(const struct selfcheck_view *v, const struct dl_phdr_info *info)
{
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_DYNAMIC)
            continue;
        uintptr_t dyn = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        size_t n = ph->p_memsz / sizeof(ElfW(Dyn));
        if (!selfcheck_readable(v, dyn, n * sizeof(ElfW(Dyn))))
            return NULL;
        uintptr_t strtab = 0;
        size_t strsz = 0, soname = SIZE_MAX;
        for (size_t k = 0; k < n; k++) {
            const ElfW(Dyn) *d = (const ElfW(Dyn) *)dyn + k;
            if (d->d_tag == DT_NULL)
                break;
            if (d->d_tag == DT_STRTAB)
                strtab = (uintptr_t)d->d_un.d_ptr;
            else if (d->d_tag == DT_STRSZ)
                strsz = (size_t)d->d_un.d_val;
            else if (d->d_tag == DT_SONAME)
                soname = (size_t)d->d_un.d_val;
        }
        /* ld.so relocates DT_STRTAB in place, except in read-only dynamic
         * sections such as the vDSO's. */
        if (strtab && strtab < (uintptr_t)info->dlpi_addr)
            strtab += (uintptr_t)info->dlpi_addr;
        if (!strtab || soname >= strsz || !selfcheck_readable(v, strtab, strsz))
            return NULL;
        const char *s = (const char *)strtab + soname;
        size_t len = strnlen(s, strsz - soname);
        return len < strsz - soname ? strndup(s, len) : NULL;
    }
    return NULL;
}

static int selfcheck_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct selfcheck_view *v = arg;
    (void)size;
    if (v->nobjs == v->objs_cap) {
        size_t ncap = v->objs_cap ? v->objs_cap * 2 : 32;
        struct selfcheck_obj *grown = realloc(v->objs, ncap * sizeof(*grown));
        if (!grown) {
            v->nomem = 1;
            return 1;
        }
        v->objs = grown;
        v->objs_cap = ncap;
    }
    struct selfcheck_obj *o = &v->objs[v->nobjs];
    o->name = strdup(info->dlpi_name ? info->dlpi_name : "");
    o->soname = selfcheck_mem_soname(v, info);
    if (!o->name) {
        free(o->soname);
        v->nomem = 1;
        return 1;
    }
    v->nobjs++;
    return 0;
}

static void selfcheck_view_free(struct selfcheck_view *v)
{
    for (size_t i = 0; i < v->nmaps; i++)
        free(v->maps[i].path);
    for (size_t i = 0; i < v->nobjs; i++) {
        free(v->objs[i].name);
        free(v->objs[i].soname);
    }
    free(v->maps);
    free(v->objs);
}

/* The first offender, in words. */
struct selfcheck_verdict {
    char *report;
    size_t report_len;
    int found;
};

__attribute__((format(printf, 2, 3))) static void selfcheck_refuse(struct selfcheck_verdict *r,
                                                                  const char *fmt, ...)
{
    if (r->found++)
        return;
    if (r->report_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->report, r->report_len, fmt, ap);
        va_end(ap);
    }
}

/* Whether the file at @path is CUDA, and why (a new string). A library is
 * judged by name and content; any other file only when it is one of the
 * NVIDIA driver's device nodes, a way to the GPU without any library. */
static int selfcheck_judge(struct lc_checker *c, const char *path, char **why_p)
{
    if (strncmp(path, "/dev/nvidia", 11) == 0)
        return asprintf(why_p, "an NVIDIA device node, the driver's way to the GPU") < 0 ? -ENOMEM
                                                                                        : 1;
    return lc_checker_classify_file(c, path, LC_CLASSIFY_SYMBOLS, why_p);
}

/* The objects ld.so lists: by the name it was loaded as, the SONAME in
 * memory, and the file behind the name. */
static void selfcheck_objects(struct lc_checker *c, const struct selfcheck_view *v,
                              struct selfcheck_verdict *r)
{
    for (size_t i = 0; i < v->nobjs && !r->found; i++) {
        const struct selfcheck_obj *o = &v->objs[i];
        const char *stem = o->soname ? lc_checker_library_stem(c, o->soname) : NULL;
        const char *named = o->name[0] ? lc_checker_library_stem(c, o->name) : NULL;
        char *why = NULL;
        if (named && !stem) {
            selfcheck_refuse(r,
                             "CUDA library mapped into stagingd: %s (matches forbidden '%s*'); "
                             "stagingd must stay CUDA-free",
                             o->name, named);
        } else if (stem) {
            selfcheck_refuse(r,
                             "CUDA library mapped into stagingd: %s (its SONAME %s matches "
                             "forbidden '%s*'); stagingd must stay CUDA-free",
                             o->name[0] ? o->name : "the program", o->soname, stem);
        } else if (o->name[0] == '/' && selfcheck_judge(c, o->name, &why) == 1) {
            selfcheck_refuse(r, "CUDA library mapped into stagingd: %s (%s); stagingd must stay "
                                "CUDA-free",
                             o->name, why);
        }
        free(why);
    }
}

/* Whether some object ld.so lists was loaded from the file of map @m. */
static int selfcheck_listed(const struct selfcheck_view *v, const struct selfcheck_map *m)
{
    for (size_t i = 0; i < v->nobjs; i++) {
        struct stat st;
        if (v->objs[i].name[0] == '/' && stat(v->objs[i].name, &st) == 0 &&
            st.st_dev == m->dev && st.st_ino == m->inode)
            return 1;
    }
    return 0;
}

/* Whether an ELF header is mapped at @addr. Read through /proc/self/mem: a
 * deleted file may also be truncated, and touching its pages would fault. */
static int selfcheck_is_elf_at(uintptr_t addr)
{
    int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned char magic[4];
    ssize_t n = pread(fd, magic, sizeof(magic), (off_t)addr);
    close(fd);
    return n == (ssize_t)sizeof(magic) && memcmp(magic, "\177ELF", 4) == 0;
}

/* Every file mapped, whoever mapped it: dlmopen() and LD_AUDIT modules live
 * in namespaces dl_iterate_phdr() does not show. */
static void selfcheck_mappings(struct lc_checker *c, const struct selfcheck_view *v,
                               struct selfcheck_verdict *r, unsigned int *files_p)
{
    for (size_t i = 0; i < v->nmaps && !r->found; i++) {
        const struct selfcheck_map *m = &v->maps[i];
        int dup = !m->path;
        for (size_t k = 0; k < i && !dup; k++)
            dup = v->maps[k].path && v->maps[k].dev == m->dev && v->maps[k].inode == m->inode;
        if (dup)
            continue;
        (*files_p)++;
        size_t len = strlen(m->path);
        if (len > 10 && strcmp(m->path + len - 10, " (deleted)") == 0) {
            /* Its file is gone; an ELF image there cannot be judged. */
            if (m->offset == 0 && m->readable && selfcheck_is_elf_at(m->start))
                selfcheck_refuse(r,
                                 "an ELF object is mapped into stagingd from a deleted file, %s "
                                 "at %#lx, which cannot be checked for CUDA; stagingd must stay "
                                 "CUDA-free",
                                 m->path, (unsigned long)m->start);
            continue;
        }
        char *why = NULL;
        if (selfcheck_judge(c, m->path, &why) == 1)
            selfcheck_refuse(r,
                             "CUDA library mapped into stagingd: %s (%s; found in /proc/self/maps"
                             "%s); stagingd must stay CUDA-free",
                             m->path, why,
                             selfcheck_listed(v, m) ? ""
                                                    : ", not among the objects ld.so lists: "
                                                      "dlmopen() or LD_AUDIT loaded it");
        free(why);
    }
}

/* The first finding of a full linkcheck run, for the report. */
struct selfcheck_capture {
    char line[512];
};

static void selfcheck_capture_line(void *arg, enum lc_severity severity, const char *line)
{
    struct selfcheck_capture *cap = arg;
    if (severity == LC_SEVERITY_FINDING && !cap->line[0])
        snprintf(cap->line, sizeof(cap->line), "%s", line);
}

/* linkcheck's whole check of a library the loader is told to load: what it
 * needs, its symbols, and the names in its bytes (a preloaded library that
 * dlopen()s the driver and closes it again before main() leaves only that).
 * Returns 1 with @cap filled when something fired. */
static int selfcheck_deep(struct lc_checker *c, const char *path, struct selfcheck_capture *cap)
{
    cap->line[0] = '\0';
    lc_checker_set_reporter(c, selfcheck_capture_line, cap);
    lc_checker_set_flags(c, LC_FLAG_SYMBOLS_RECURSIVE | LC_FLAG_STRINGS_RECURSIVE);
    int rc = lc_checker_check_file(c, path);
    lc_checker_set_reporter(c, NULL, NULL);
    return rc > 0;
}

/* One ':' or ' ' list of library names or paths the loader is told to load. */
static void selfcheck_loader_list(struct lc_checker *c, const char *what, const char *list,
                                  struct selfcheck_verdict *r)
{
    struct selfcheck_capture cap;
    for (const char *p = list; p && *p && !r->found;) {
        size_t len = strcspn(p, ": \t\n");
        char *entry = len ? strndup(p, len) : NULL;
        char *why = NULL;
        const char *stem = entry ? lc_checker_library_stem(c, entry) : NULL;
        if (stem)
            selfcheck_refuse(r, "%s names a CUDA library: %s (matches forbidden '%s*'); "
                                "stagingd refuses to start with it",
                             what, entry, stem);
        else if (entry && strchr(entry, '/') &&
                 lc_checker_classify_file(c, entry, LC_CLASSIFY_SYMBOLS, &why) == 1)
            selfcheck_refuse(r, "%s names a CUDA library: %s (%s); stagingd refuses to start "
                                "with it",
                             what, entry, why);
        else if (entry && strchr(entry, '/') && selfcheck_deep(c, entry, &cap))
            selfcheck_refuse(r, "%s names a library that reaches CUDA: %s (%s); stagingd "
                                "refuses to start with it",
                             what, entry, cap.line);
        free(why);
        free(entry);
        p += len;
        p += strspn(p, ": \t\n");
    }
}

static void selfcheck_environment(struct lc_checker *c, struct selfcheck_verdict *r)
{
    selfcheck_loader_list(c, "LD_PRELOAD", getenv("LD_PRELOAD"), r);
    selfcheck_loader_list(c, "LD_AUDIT", getenv("LD_AUDIT"), r);
    FILE *f = fopen("/etc/ld.so.preload", "re");
    if (!f)
        return;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    selfcheck_loader_list(c, "/etc/ld.so.preload", buf, r);
}

int sd_selfcheck_no_cuda(char *report, size_t report_len)
{
    struct selfcheck_view v = {0};
    struct lc_checker *c = NULL;
    int rc = selfcheck_read_maps(&v);
    if (rc == 0) {
        dl_iterate_phdr(selfcheck_visit, &v);
        rc = v.nomem ? -ENOMEM : 0;
    }
    /* The forbidden set as installed here, from file names only: this
     * process maps no CUDA file, not even to read its SONAME. */
    if (rc == 0 && (rc = lc_checker_create(&c)) == 0) {
        lc_checker_set_reporter(c, NULL, NULL);
        rc = lc_checker_forbid_installed(c, NULL, LC_INSTALLED_DEFAULT_ROOTS | LC_INSTALLED_DRIVER);
    }
    if (rc < 0) {
        if (report_len)
            snprintf(report, report_len, "the boundary self check could not run: %s",
                     strerror(-rc));
        lc_checker_destroy(c);
        selfcheck_view_free(&v);
        return rc;
    }
    struct selfcheck_verdict r = {report, report_len, 0};
    unsigned int files = 0;
    selfcheck_objects(c, &v, &r);
    selfcheck_mappings(c, &v, &r, &files);
    selfcheck_environment(c, &r);
    if (!r.found && report_len)
        snprintf(report, report_len,
                 "no CUDA library among %zu loaded objects and %u mapped files (%zu stems "
                 "forbidden), LD_PRELOAD and LD_AUDIT clean",
                 v.nobjs, files, lc_checker_stem_count(c));
    lc_checker_destroy(c);
    selfcheck_view_free(&v);
    return r.found ? -ENOTRECOVERABLE : 0;
}
