/* linkcheck internals shared by the library's files and its unit tests. */
#ifndef LINKCHECK_INTERNAL_H
#define LINKCHECK_INTERNAL_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "linkcheck/linkcheck.h"

/* ---- ELF reading (elf.c) ------------------------------------------------ */

/* A bounds-checked view of one ELF64 LE x86-64 image in memory. Headers are
 * copied out of the image, so a misaligned table in a hostile file is never
 * dereferenced in place. */
struct lc__elf {
    const unsigned char *data;
    size_t size;
    Elf64_Ehdr eh;
    size_t phnum;    /* after PN_XNUM */
    size_t shnum;    /* after extended numbering; 0 when there are no section headers */
    size_t shstrndx; /* SHN_UNDEF (0) when the sections have no names */
    Elf64_Phdr *phdrs;
    Elf64_Shdr *shdrs;
    Elf64_Dyn *dyn; /* PT_DYNAMIC up to DT_NULL; NULL when not dynamic */
    size_t ndyn;
    const char *dynstr; /* inside data, ends with NUL; NULL when there is none */
    size_t dynstr_size;
};

/* Why an image cannot be read, for the caller's report. */
struct lc__err {
    char msg[512];
};

/* Parses and validates @data[0..size) (not copied: it must outlive @elf).
 * Returns 0; -ENOEXEC (not ELF, or malformed), -ENOTSUP (ELF, but not ELF64
 * LE x86-64 REL/EXEC/DYN) or -ENOMEM, with @err saying what was expected and
 * what was found. Free with lc__elf_close() after success. */
int lc__elf_open(struct lc__elf *elf, const void *data, size_t size, struct lc__err *err);

/* Frees what lc__elf_open() allocated; safe on a zeroed struct. */
void lc__elf_close(struct lc__elf *elf);

/* 1 when @data starts like a file the x86-64 loader could map as a library
 * of this class and machine, 0 when ld.so would skip it and search on (wrong
 * class or machine), -ENOEXEC when ld.so would fail on it. */
int lc__elf_loader_compatible(const void *data, size_t size);

/* 1 when [off, off+len) lies inside the image, else 0; overflow safe. */
int lc__elf_range_ok(const struct lc__elf *elf, uint64_t off, uint64_t len);

/* The string at @off in the dynamic string table, or NULL when @off is out
 * of range. */
const char *lc__elf_dynstr(const struct lc__elf *elf, uint64_t off);

/* The file offset holding @len bytes at virtual address @vaddr, found through
 * the PT_LOAD segments. Returns 0 or -ENOEXEC when no segment holds them. */
int lc__elf_vaddr_to_offset(const struct lc__elf *elf, uint64_t vaddr, uint64_t len,
                            uint64_t *off_p);

/* Section @index's name, or NULL when it has none; never out of bounds. */
const char *lc__elf_section_name(const struct lc__elf *elf, size_t index);

/* The value of the first dynamic entry with @tag in *value_p; 0 or -ENOENT. */
int lc__elf_dyn_get(const struct lc__elf *elf, int64_t tag, uint64_t *value_p);

/* Whether dynamic tag @tag names libraries the loader maps: DT_NEEDED,
 * DT_FILTER, DT_AUXILIARY, DT_AUDIT, DT_DEPAUDIT (the last two ':' lists). */
int lc__elf_tag_names_libraries(int64_t tag);

/* ---- rules on one image (rules.c, strings.c) ----------------------------- */

/* The pattern a CUDA symbol name matches ("cu[A-Z]*", "cuda*", "cublas*",
 * ...), or NULL. */
const char *lc__symbol_pattern_of(const char *name);

/* The pattern a string names a CUDA entry point by, as dlsym() would take it
 * ("cuInit", "cudaMalloc", "ncclCommInitRank"), or NULL. Stricter than
 * lc__symbol_pattern_of(): the whole of @s[0..len) must be an identifier with
 * an upper-case letter, digit or '_' right after the family prefix, so words
 * such as "cuda" or "cudart" in a message do not count. */
const char *lc__symbol_api_pattern_of(const char *s, size_t len);

/* Where the stem is in @s[0..len): the first occurrence of any of @stems
 * that is followed later in the same bytes by ".so". Returns the index of the
 * stem in @stems with its offset in *pos_p, or -1. */
int lc__string_find_stem(const char *s, size_t len, const char *const *stems, size_t nstems,
                         size_t *pos_p);

/* Called for each forbidden symbol; @table is ".dynsym", ".symtab" or
 * "DT_SYMTAB" (a dynamic symbol table found without section headers). */
typedef void (*lc__symbol_fn)(void *arg, const char *name, int defined, const char *pattern,
                              const char *table);

/* Runs rule 2 on @elf. Returns the number of symbols examined (findings go to
 * @fn) or -ENOEXEC with @err filled when a symbol table is malformed. */
int lc__rule_symbols(const struct lc__elf *elf, lc__symbol_fn fn, void *arg, struct lc__err *err);

/* Like lc__rule_symbols(), but @fn gets every symbol, with a NULL pattern. */
int lc__rule_every_symbol(const struct lc__elf *elf, lc__symbol_fn fn, void *arg,
                          struct lc__err *err);

/* Called for each symbol of the dynamic symbol table (the loader's view). */
typedef void (*lc__dynsym_fn)(void *arg, const char *name, int defined);

/* Walks the dynamic symbol table only: .dynsym, or DT_SYMTAB without
 * section headers. Returns the number of symbols or -ENOEXEC with @err. */
int lc__rule_dynamic_symbols(const struct lc__elf *elf, lc__dynsym_fn fn, void *arg,
                             struct lc__err *err);

/* What a string names. */
enum lc__string_kind {
    LC__STRING_LIBRARY, /* a forbidden library: a dlopen() name */
    LC__STRING_SYMBOL,  /* a CUDA entry point: a dlsym() name */
};

/* Called for each string naming a forbidden library or a CUDA entry point;
 * @s is the string (decoded to bytes when @encoding is not "" but "UTF-16LE"
 * and the like), @stem the stem or symbol pattern, @where a section name or
 * a segment description ("" past the first LC__STRING_FINDINGS_LOCATED),
 * @offset the string's file offset, @stem_pos where in @s the stem starts. */
#define LC__STRING_FINDINGS_LOCATED 64
typedef void (*lc__string_fn)(void *arg, enum lc__string_kind kind, const char *s, size_t len,
                              size_t stem_pos, const char *stem, const char *encoding,
                              const char *where, uint64_t offset);

/* What rule 3 leaves to the other rules. */
struct lc__string_skip {
    const uint64_t *offsets; /* file offsets of the names the dynamic section
                              * hands the loader (DT_NEEDED, ...) */
    size_t noffsets;
    const char *const *symbols; /* CUDA symbols rule 2 already reported */
    size_t nsymbols;
};

/* Runs rule 3 on every byte of @elf: strings in any section or none, as
 * bytes, UTF-16 or UTF-32 (either byte order), naming a forbidden library;
 * and strings naming a CUDA entry point. @skip may be NULL. Returns the
 * number of bytes scanned or -ENOMEM. */
long long lc__rule_strings(const struct lc__elf *elf, const char *const *stems, size_t nstems,
                           const struct lc__string_skip *skip, lc__string_fn fn, void *arg);

/* Names where file offset @off lives ("section .rodata", "segment [2]
 * (PT_LOAD)", "file"), for reports. */
void lc__elf_describe_offset(const struct lc__elf *elf, uint64_t off, char *where, size_t len);

/* ---- ld.so search paths (search.c) -------------------------------------- */

/* What the dynamic string tokens expand to. */
struct lc__dst {
    const char *origin;   /* directory of the object, NULL when unknown */
    const char *lib;      /* $LIB */
    const char *platform; /* $PLATFORM */
};

/* Expands $ORIGIN, $LIB and $PLATFORM (also ${...}) in @entry into a new
 * string in *out_p (caller frees) and sets *uses_origin_p. Returns 0,
 * -ENOENT when $ORIGIN is used but unknown, -ENOMEM. */
int lc__dst_expand(const char *entry, const struct lc__dst *dst, char **out_p, int *uses_origin_p);

/* A growable list of strings. */
struct lc__strv {
    char **v;
    size_t n;
    size_t cap;
};

/* Appends a copy of @len bytes of @s. Returns 0 or -ENOMEM. */
int lc__strv_push(struct lc__strv *sv, const char *s, size_t len);

/* Whether @s is in @sv. */
int lc__strv_has(const struct lc__strv *sv, const char *s);

/* Frees every string and the list. */
void lc__strv_free(struct lc__strv *sv);

/* Appends the directories /etc/ld.so.conf names under @root (NULL for none)
 * to @dirs, following include lines (glob patterns, relative to the including
 * file) to a bounded depth and ignoring hwcap lines. A missing file adds
 * nothing. Returns 0 or -ENOMEM. */
int lc__ldconf_load(const char *root, struct lc__strv *dirs);

/* Parses one ld.so.conf-format file at @path into @dirs (see lc__ldconf_load). */
int lc__ldconf_parse_file(const char *root, const char *path, int depth, struct lc__strv *dirs);

/* ---- the checker's state (checker.c, search.c, family.c, imports.c) ------ */

#define LC__NONE SIZE_MAX

/* One object in the load graph: the file itself (index 0) or a library. */
struct lc__obj {
    char *name;    /* the DT_NEEDED string that loaded it; the label for index 0 */
    char *path;    /* where it was found */
    char *origin;  /* its directory, for $ORIGIN; NULL when unknown */
    char *soname;  /* NULL when it has none */
    char *rpath;   /* DT_RPATH, NULL when absent or overridden by DT_RUNPATH */
    char *runpath; /* DT_RUNPATH */
    int nodeflib;  /* DF_1_NODEFLIB: skip the default directories */
    int forbidden; /* found to be a forbidden library: never descended into */
    int conditional; /* found in a CPU-dependent folder (glibc-hwcaps, tls/, $PLATFORM) */
    const char *forbidden_stem;
    const char *forbidden_by; /* "SONAME", "file name" or "real path" */
    size_t parent;            /* the object whose DT_NEEDED loaded it; LC__NONE for index 0 */
    int has_id;
    dev_t dev;
    ino_t ino;
    struct lc__strv needed;  /* DT_NEEDED, DT_FILTER, DT_AUXILIARY, DT_AUDIT names in order */
    struct lc__strv aliases; /* other names it was asked for by */
};

/* A candidate file the search opened and mapped. */
struct lc__found {
    char *path;
    void *map;
    size_t size;
    dev_t dev;
    ino_t ino;
    int conditional; /* only some CPUs would load this one */
};

/* At most this many files one name can resolve to across CPUs. */
#define LC__MAX_CANDIDATES 16

struct lc_checker {
    struct lc__strv stems;
    size_t fixed_stems;         /* how many of stems are the built-in floor */
    struct lc__strv family_dirs; /* real paths of toolkit and driver library folders */
    struct lc__strv family_from; /* where derived stems came from, for the report */
    int family_looked;           /* lc_checker_forbid_installed() looked somewhere */
    struct lc__strv imports;     /* allowed imports; empty: no allow-list */
    char *imports_file;
    char *ld_library_path;
    char *root;
    unsigned int flags;
    lc_report_fn report;
    void *report_arg;

    /* One check's state, reset by lc__checker_begin(). */
    const char *file;
    struct lc__obj *objs;
    size_t nobjs;
    size_t cap;
    struct lc__strv conf_dirs;
    int conf_loaded;
    int first_error;
    size_t findings;
    size_t libraries_forbidden;
    size_t symbols_forbidden;
    size_t strings_forbidden;
    size_t symbol_strings_forbidden;
    size_t imports_refused;
    size_t not_found;
    long long symbols_examined;
    long long bytes_scanned;
    size_t printed; /* findings printed for the current rule and object */
    struct lc__strv reported_symbols; /* CUDA symbols reported for the current object */
};

/* Writes "linkcheck: <WORD> <file>: <message>" to the reporter. */
__attribute__((format(printf, 3, 4))) void lc__say(struct lc_checker *c,
                                                   enum lc_severity severity, const char *fmt,
                                                   ...);

/* "app -> libmid.so (/abs/libmid.so) -> <leaf>": how object @i was reached,
 * then @leaf when given. A new string or NULL. */
char *lc__chain(const struct lc_checker *c, size_t i, const char *leaf);

/* A printable, quote-safe copy of @len bytes of @s, cut at @max bytes. */
char *lc__escape(const char *s, size_t len, size_t max);

/* The stem that makes the library name @name forbidden, or NULL. */
const char *lc__checker_library_stem(const struct lc_checker *c, const char *name);

/* Finds every file ld.so could load for @name needed by object @loader, in
 * its order: CPU-dependent candidates (glibc-hwcaps, legacy hwcap folders,
 * $PLATFORM and $LIB variants) up to and including the first candidate
 * every CPU would take. Fills @found[0..] (at most LC__MAX_CANDIDATES) and
 * returns how many (0: not found) or a negative errno. */
int lc__search(struct lc_checker *c, size_t loader, const char *name, struct lc__found *found,
               size_t *tried);

/* Unmaps and frees one candidate; safe on a zeroed one. */
void lc__found_release(struct lc__found *f);

/* Whether @path (a file) lies in one of the toolkit or driver library
 * folders; the folder in *dir_p when it does. */
int lc__family_dir_of(const struct lc_checker *c, const char *path, const char **dir_p);

/* The reason the ELF image @elf is itself CUDA (its SONAME, a fat binary
 * section, DT_NEEDED on a forbidden name, a CUDA symbol when @symbols), as a
 * new string in *why_p; 0 when clean, 1 when forbidden, -ENOMEM. */
int lc__classify_image(const struct lc_checker *c, const struct lc__elf *elf, int symbols,
                       char **why_p);

/* Rules 2 and 3, as asked, on object @obj's image @elf, reported. Returns 0
 * or a negative errno (reported). */
int lc__image_rules(struct lc_checker *c, size_t obj, const struct lc__elf *elf, int symbols,
                    int strings);

/* Reports @elf's interpreter (PT_INTERP) when its name is forbidden. */
void lc__interp(struct lc_checker *c, const struct lc__elf *elf);

/* Rule 4, the allow-list of imports, on the checked file @elf. */
int lc__rule_imports(struct lc_checker *c, const struct lc__elf *elf);

/* Loads the allow-list in @path into @c. Returns 0, -errno, -EINVAL on a
 * malformed line (reported). */
int lc__imports_load(struct lc_checker *c, const char *path);

#endif /* LINKCHECK_INTERNAL_H */
