/* linkcheck: proves from an ELF file alone that a program never links, loads
 * or names CUDA (layer 3 of the boundary in DESIGN.md, docs/boundary.md).
 *
 * The rules, each a finding when it fires:
 *   1. needed: the file, or anything the dynamic loader would load for it
 *      (DT_NEEDED, DT_FILTER, DT_AUXILIARY, DT_AUDIT, DT_DEPAUDIT followed
 *      recursively with ld.so's search order, on every CPU: glibc-hwcaps,
 *      legacy hwcap folders and every $PLATFORM), is or needs a forbidden
 *      library, by name, SONAME or real path (see linkcheck/forbidden.h);
 *   2. symbols: it defines or imports a CUDA symbol (cu[A-Z]*, cuda*,
 *      __cuda*, nvrtc*, cublas*, nccl*, ...) in .dynsym or .symtab;
 *   3. strings: any of its bytes (any section, notes and code included, or
 *      none) hold a string naming a forbidden library, as bytes, UTF-16 or
 *      UTF-32 (a dlopen() bypass), or naming a CUDA entry point (a dlsym()
 *      bypass);
 *   4. imports: with an allow-list, it imports (or links in statically) a
 *      symbol the list lacks: dlopen and dlmopen are never on stagingd's.
 * The forbidden set is a fixed floor plus every library found installed with
 * a CUDA toolkit or the NVIDIA driver (lc_checker_forbid_installed()).
 *
 * Reads ELF64 little-endian x86-64 only; every offset and size in the file is
 * checked against the file's size. libc only. */
#ifndef LINKCHECK_LINKCHECK_H
#define LINKCHECK_LINKCHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a report line is. */
enum lc_severity {
    LC_SEVERITY_FINDING, /* a rule fired: "linkcheck: FAIL <file>: ..." */
    LC_SEVERITY_WARNING, /* e.g. a dependency not found: "linkcheck: warning <file>: ..." */
    LC_SEVERITY_ERROR,   /* unreadable, malformed or unsupported: "linkcheck: error <file>: ..." */
    LC_SEVERITY_OK,      /* the one-line summary of a clean file: "linkcheck: OK <file>: ..." */
    LC_SEVERITY_INFO,    /* verbose only: what was loaded from where */
};

/* Receives every report line, complete and without a trailing newline; the
 * line is only valid during the call. */
typedef void (*lc_report_fn)(void *arg, enum lc_severity severity, const char *line);

/* Flags for lc_checker_set_flags(). */
enum {
    LC_FLAG_SYMBOLS_RECURSIVE = 1u << 0, /* rule 2 also on every loaded library */
    LC_FLAG_STRINGS_RECURSIVE = 1u << 1, /* rule 3 also on every loaded library */
    LC_FLAG_NO_SEARCH = 1u << 2,         /* never touch the file system for DT_NEEDED:
                                          * names are still checked, nothing is loaded */
    LC_FLAG_VERBOSE = 1u << 3,           /* LC_SEVERITY_INFO lines for each loaded object */
    LC_FLAG_STRICT = 1u << 4,            /* a dependency not found is a finding: at run time
                                          * it could be anything */
};

/* How lc_checker_forbid_installed() looks. */
enum {
    LC_INSTALLED_DEFAULT_ROOTS = 1u << 0, /* also $CUDA_HOME, $CUDA_PATH, $CUDA_ROOT,
                                           * /usr/local/cuda*, /opt/cuda */
    LC_INSTALLED_DRIVER = 1u << 1,        /* the driver's folders, and nvidia-named
                                           * libraries in the system folders */
    LC_INSTALLED_SONAMES = 1u << 2,       /* read each library's SONAME, not only its name */
};

/* How lc_checker_classify_file() looks. */
enum {
    LC_CLASSIFY_SYMBOLS = 1u << 0, /* a CUDA symbol, defined or imported, makes it CUDA */
};

struct lc_checker;

/* Creates a checker with the default forbidden stems, no LD_LIBRARY_PATH, root
 * "/" and a reporter that writes findings and OK lines to stdout, the rest to
 * stderr. Returns 0 or -ENOMEM; free with lc_checker_destroy(). */
int lc_checker_create(struct lc_checker **checker_p);

/* Frees the checker and everything it owns; NULL is ignored. */
void lc_checker_destroy(struct lc_checker *checker);

/* Adds @stem (copied) to the forbidden library stems, matched like the
 * defaults (linkcheck/forbidden.h). Returns 0, -EINVAL for an empty stem or
 * one holding '/', -ENOMEM. */
int lc_checker_forbid(struct lc_checker *checker, const char *stem);

/* Adds the stems of every lib*.so* and lib*.a found in the library folders
 * of the CUDA toolkits under @roots (a ':' list, may be NULL: lib64, lib,
 * their stubs, targets/(arch)/lib, extras/CUPTI, nvvm) and, with
 * LC_INSTALLED_DRIVER, of the driver's libraries. The folders are kept: a
 * file in one is forbidden whatever its name. Generic names (libc, libm,
 * libstdc++, ...) are never added. Returns the number of stems added (0 on a
 * machine with neither: the fixed floor alone) or -ENOMEM. */
int lc_checker_forbid_installed(struct lc_checker *checker, const char *roots, unsigned int how);

/* Adds one stem per line of the file at @path ('#' starts a comment).
 * Returns the number added, -errno when unreadable, -EINVAL for a bad line. */
int lc_checker_forbid_file(struct lc_checker *checker, const char *path);

/* How many stems are forbidden now. */
size_t lc_checker_stem_count(const struct lc_checker *checker);

/* The stem that makes the library name @name (a file name, path, SONAME or
 * DT_NEEDED entry) forbidden, or NULL; valid while @checker lives. */
const char *lc_checker_library_stem(const struct lc_checker *checker, const char *name);

/* Turns on rule 4 with the allow-list in the file at @path: one symbol name
 * per line, '#' comments, a trailing '*' matches any suffix. Returns 0,
 * -errno when unreadable, -EINVAL for a bad line (reported). */
int lc_checker_allow_imports(struct lc_checker *checker, const char *path);

/* Whether the file at @path -- an ELF file or an ar archive; anything else
 * is not judged -- is or carries CUDA: its name, real path, folder (a toolkit
 * or driver library folder) or SONAME is forbidden, it needs a forbidden library by name, it holds a fat
 * binary section, or (with LC_CLASSIFY_SYMBOLS) it or an archive member
 * defines or imports a CUDA symbol. Returns 1 with *why_p set to a new
 * string saying why (caller frees), 0 when clean, -ENOEXEC when it is
 * neither ELF nor an archive (a linker script, say), another -errno when it
 * cannot be read. Reports nothing. */
int lc_checker_classify_file(struct lc_checker *checker, const char *path, unsigned int how,
                             char **why_p);

/* Searches @dirs (copied; a ':' or ';' separated list, an empty entry meaning
 * the current directory) where ld.so searches LD_LIBRARY_PATH. NULL turns the
 * step off again (the default). Returns 0 or -ENOMEM. */
int lc_checker_set_ld_library_path(struct lc_checker *checker, const char *dirs);

/* Prefixes @root (copied) to every absolute search directory and to
 * /etc/ld.so.conf, like a sysroot; NULL or "/" means none. $ORIGIN paths are
 * never prefixed. Returns 0, -EINVAL for an empty string, -ENOMEM. */
int lc_checker_set_root(struct lc_checker *checker, const char *root);

/* Replaces the flags (LC_FLAG_*). */
void lc_checker_set_flags(struct lc_checker *checker, unsigned int flags);

/* Sends report lines to @fn(@arg) instead of stdout/stderr; a NULL @fn drops
 * them. */
void lc_checker_set_reporter(struct lc_checker *checker, lc_report_fn fn, void *arg);

/* Checks the ELF file at @path and everything it loads. Returns the number of
 * findings (0: clean), or a negative errno when the check could not be
 * completed and nothing fired: -ENOENT/-EACCES/... when the file cannot be
 * read, -EISDIR, -ENOEXEC when it (or a library it loads) is not a
 * well-formed ELF file, -ENOTSUP when it is ELF but not ELF64 little-endian
 * x86-64, -ENOMEM. Every problem is also reported as a line. */
int lc_checker_check_file(struct lc_checker *checker, const char *path);

/* Same as lc_checker_check_file() for an image already in memory (not
 * copied, not modified). @name labels the report; $ORIGIN is the directory
 * part of @name when it has one, otherwise $ORIGIN entries are skipped. */
int lc_checker_check_buffer(struct lc_checker *checker, const char *name, const void *data,
                            size_t size);

#ifdef __cplusplus
}
#endif

#endif /* LINKCHECK_LINKCHECK_H */
