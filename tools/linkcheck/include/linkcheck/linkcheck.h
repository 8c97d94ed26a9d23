/* linkcheck: proves from an ELF file alone that a program never links, loads
 * or names CUDA (layer 3 of the boundary in DESIGN.md).
 *
 * Three rules, each a finding when it fires:
 *   1. needed: the file, or anything the dynamic loader would load for it
 *      (DT_NEEDED followed recursively with ld.so's search order), needs a
 *      forbidden library (see linkcheck/forbidden.h);
 *   2. symbols: the file defines or imports a CUDA symbol (cu[A-Z]*, cuda*,
 *      __cuda*, nvrtc*) in .dynsym or .symtab;
 *   3. strings: its allocated data holds a string naming a forbidden library,
 *      the argument of a dlopen() that would bypass rule 1.
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
};

struct lc_checker;

/* Creates a checker with the default forbidden stems, no LD_LIBRARY_PATH, root
 * "/" and a reporter that writes findings and OK lines to stdout, the rest to
 * stderr. Returns 0 or -ENOMEM; free with lc_checker_destroy(). */
int lc_checker_create(struct lc_checker **checker_p);

/* Frees the checker and everything it owns; NULL is ignored. */
void lc_checker_destroy(struct lc_checker *checker);

/* Adds @stem (copied) to the forbidden library stems, matched like the
 * defaults: a name whose last component starts with the stem and has ".so"
 * after it. Returns 0, -EINVAL for an empty stem or one holding '/', -ENOMEM. */
int lc_checker_forbid(struct lc_checker *checker, const char *stem);

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
