/* linkcheck internals shared by the library's files and its unit tests. */
#ifndef LINKCHECK_INTERNAL_H
#define LINKCHECK_INTERNAL_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>

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

/* ---- rules on one image (rules.c) --------------------------------------- */

/* The pattern a CUDA symbol name matches ("cu[A-Z]*", "cuda*", ...), or NULL. */
const char *lc__symbol_pattern_of(const char *name);

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

/* Called for each string naming a forbidden library; @where is a section name
 * or a segment description ("" past the first LC__STRING_FINDINGS_LOCATED),
 * @offset the string's file offset, @stem_pos where in it the stem starts. */
#define LC__STRING_FINDINGS_LOCATED 64
typedef void (*lc__string_fn)(void *arg, const char *s, size_t len, size_t stem_pos,
                              const char *stem, const char *where, uint64_t offset);

/* Runs rule 3 on @elf: allocated non-executable PROGBITS sections, plus any
 * PT_LOAD bytes no section covers (all PT_LOAD bytes when there are no section
 * headers). Returns the number of bytes scanned or -ENOMEM. */
long long lc__rule_strings(const struct lc__elf *elf, const char *const *stems, size_t nstems,
                           lc__string_fn fn, void *arg);

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

/* Frees every string and the list. */
void lc__strv_free(struct lc__strv *sv);

/* Appends the directories /etc/ld.so.conf names under @root (NULL for none)
 * to @dirs, following include lines (glob patterns, relative to the including
 * file) to a bounded depth and ignoring hwcap lines. A missing file adds
 * nothing. Returns 0 or -ENOMEM. */
int lc__ldconf_load(const char *root, struct lc__strv *dirs);

/* Parses one ld.so.conf-format file at @path into @dirs (see lc__ldconf_load). */
int lc__ldconf_parse_file(const char *root, const char *path, int depth, struct lc__strv *dirs);

#endif /* LINKCHECK_INTERNAL_H */
