/* Rule 3 on one image: every byte of the file, not only its data sections.
 * A name can hide in a note, in code (an .ascii in .text), in .dynstr next
 * to the symbol names, between sections, or as UTF-16/UTF-32 text converted
 * at run time; each is still there to read. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest wide string decoded around a ".so": PATH_MAX characters. */
#define STRINGS_WIDE_MAX 4096
/* Wide findings remembered to drop the same text read at another width. */
#define STRINGS_WIDE_SEEN 256

static int strings_section_is_data(const Elf64_Shdr *sh)
{
    return sh->sh_type == SHT_PROGBITS && (sh->sh_flags & SHF_ALLOC) &&
           !(sh->sh_flags & SHF_EXECINSTR) && sh->sh_size > 0;
}

void lc__elf_describe_offset(const struct lc__elf *elf, uint64_t off, char *where, size_t len)
{
    for (size_t pass = 0; pass < 2; pass++) {
        for (size_t i = 1; i < elf->shnum; i++) {
            const Elf64_Shdr *sh = &elf->shdrs[i];
            if (sh->sh_type == SHT_NOBITS || off < sh->sh_offset ||
                off - sh->sh_offset >= sh->sh_size)
                continue;
            if (pass == 0 && !strings_section_is_data(sh))
                continue;
            const char *name = lc__elf_section_name(elf, i);
            if (name && name[0])
                snprintf(where, len, "section %s", name);
            else
                snprintf(where, len, "section [%zu]", i);
            return;
        }
    }
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type == PT_LOAD && off >= ph->p_offset && off - ph->p_offset < ph->p_filesz) {
            snprintf(where, len, "segment [%zu] (PT_LOAD%s)", i,
                     elf->shnum ? ", outside every section" : "");
            return;
        }
    }
    snprintf(where, len, "%s", elf->shnum ? "file, outside every section and segment" : "file");
}

/* The scan's state, shared by its three passes. */
struct strings_scan {
    const struct lc__elf *elf;
    const char *const *stems;
    size_t nstems;
    const struct lc__string_skip *skip;
    lc__string_fn fn;
    void *arg;
    size_t found;
    struct {
        uint64_t start, end;
    } wide_seen[STRINGS_WIDE_SEEN];
    size_t nwide_seen;
};

static void strings_report(struct strings_scan *s, enum lc__string_kind kind, const char *str,
                           size_t len, size_t pos, const char *stem, const char *encoding,
                           uint64_t offset)
{
    /* Locating costs a pass over the headers; past the few a report
     * prints, a hostile file gets no more of them. */
    char where[96] = "";
    if (++s->found <= LC__STRING_FINDINGS_LOCATED)
        lc__elf_describe_offset(s->elf, offset, where, sizeof(where));
    s->fn(s->arg, kind, str, len, pos, stem, encoding, where, offset);
}

/* Whether the stem at file offset @at, in the string [start, end), lies in a
 * name the dynamic section hands the loader: rule 1 reports those. */
static int strings_loader_name(const struct strings_scan *s, uint64_t start, uint64_t end,
                               uint64_t at)
{
    if (!s->skip)
        return 0;
    for (size_t i = 0; i < s->skip->noffsets; i++) {
        uint64_t r = s->skip->offsets[i];
        if (r >= start && r < end && at >= r)
            return 1;
    }
    return 0;
}

/* Byte strings naming a library: each ".so" finds its string, which is
 * examined once, however many ".so" it holds. Linear in the file size. */
static void strings_narrow_libraries(struct strings_scan *s)
{
    const unsigned char *d = s->elf->data;
    size_t size = s->elf->size, at = 0;
    while (at + 3 <= size) {
        const unsigned char *hit = memmem(d + at, size - at, ".so", 3);
        if (!hit)
            break;
        size_t p = (size_t)(hit - d), start = p;
        while (start > at && d[start - 1])
            start--;
        const unsigned char *nul = memchr(d + p, '\0', size - p);
        size_t end = nul ? (size_t)(nul - d) : size;
        size_t pos;
        int stem = lc__string_find_stem((const char *)d + start, end - start, s->stems, s->nstems,
                                        &pos);
        if (stem >= 0 && !strings_loader_name(s, start, end, start + pos))
            strings_report(s, LC__STRING_LIBRARY, (const char *)d + start, end - start, pos,
                           s->stems[stem], "", start);
        at = end + 1;
    }
}

/* One wide encoding: @width bytes a character, the character's byte at
 * @lane (0: little-endian, width - 1: big-endian), the rest zero. */
struct strings_encoding {
    const char *name;
    size_t width;
    size_t lane;
};

/* Each little-endian encoding is followed by its big-endian twin. */
static const struct strings_encoding strings_encodings[] = {
    {"UTF-16LE", 2, 0},
    {"UTF-16BE", 2, 1},
    {"UTF-32LE", 4, 0},
    {"UTF-32BE", 4, 3},
};

/* The ASCII character of the unit at @off, or 0 when it is not one. */
static char strings_unit(const unsigned char *d, size_t size, size_t off,
                         const struct strings_encoding *e)
{
    if (off > size || size - off < e->width)
        return 0;
    for (size_t b = 0; b < e->width; b++)
        if (b != e->lane && d[off + b])
            return 0;
    unsigned char ch = d[off + e->lane];
    return ch >= 0x20 && ch < 0x7f ? (char)ch : 0;
}

static int strings_wide_seen(struct strings_scan *s, uint64_t start, uint64_t end)
{
    for (size_t i = 0; i < s->nwide_seen; i++)
        if (start < s->wide_seen[i].end && s->wide_seen[i].start < end)
            return 1;
    return 0;
}

/* Wide strings naming a library: found through their ".so", decoded to
 * bytes around it and matched like byte strings. */
static int strings_wide_libraries(struct strings_scan *s, const struct strings_encoding *e)
{
    const unsigned char *d = s->elf->data;
    size_t size = s->elf->size, w = e->width;
    unsigned char needle[12] = {0};
    for (size_t k = 0; k < 3; k++)
        needle[k * w + e->lane] = (unsigned char)".so"[k];
    char *buf = malloc(2 * STRINGS_WIDE_MAX + 1);
    if (!buf)
        return -ENOMEM;
    size_t at = 0;
    while (at + 3 * w <= size) {
        const unsigned char *hit = memmem(d + at, size - at, needle, 3 * w);
        if (!hit)
            break;
        size_t p = (size_t)(hit - d);
        size_t start = p, n_before = 0;
        while (start >= w && n_before < STRINGS_WIDE_MAX && strings_unit(d, size, start - w, e)) {
            start -= w;
            n_before++;
        }
        size_t end = p, len = 0;
        for (size_t q = start; q < p; q += w)
            buf[len++] = strings_unit(d, size, q, e);
        char ch;
        while (len < 2 * STRINGS_WIDE_MAX && (ch = strings_unit(d, size, end, e))) {
            buf[len++] = ch;
            end += w;
        }
        if (end < p + 3 * w)
            end = p + 3 * w; /* ".so" itself is always units */
        buf[len] = '\0';
        size_t pos;
        int stem = lc__string_find_stem(buf, len, s->stems, s->nstems, &pos);
        if (stem >= 0 && !strings_wide_seen(s, start, end)) {
            if (s->nwide_seen < STRINGS_WIDE_SEEN) {
                s->wide_seen[s->nwide_seen].start = start;
                s->wide_seen[s->nwide_seen].end = end;
                s->nwide_seen++;
            }
            /* Big-endian text reads as little-endian one byte on; the
             * alignment says which it was. */
            const char *name = e->name;
            uint64_t at_off = start;
            if (e->lane == 0 && start % w != 0 && start >= w - 1 &&
                strings_unit(d, size, start - (w - 1), e + 1) == d[start]) {
                name = e[1].name;
                at_off = start - (w - 1);
            }
            strings_report(s, LC__STRING_LIBRARY, buf, len, pos, s->stems[stem], name, at_off);
        }
        at = end > p + 1 ? end : p + 1;
    }
    free(buf);
    return 0;
}

static int strings_symbol_reported(const struct strings_scan *s, const char *str, size_t len)
{
    if (!s->skip)
        return 0;
    for (size_t i = 0; i < s->skip->nsymbols; i++)
        if (strlen(s->skip->symbols[i]) == len && memcmp(s->skip->symbols[i], str, len) == 0)
            return 1;
    return 0;
}

/* Byte strings that are a CUDA entry point's name in [from, to), the
 * argument dlsym() would take. A symbol rule 2 reported is not reported
 * again. */
static void strings_symbol_names_in(struct strings_scan *s, size_t from, size_t to)
{
    const unsigned char *d = s->elf->data;
    size_t at = from;
    while (at < to) {
        const unsigned char *nul = memchr(d + at, '\0', to - at);
        size_t len = nul ? (size_t)(nul - (d + at)) : to - at;
        const char *str = (const char *)d + at;
        if (len >= 4 && (str[0] == 'c' || str[0] == 'n' || str[0] == '_')) {
            const char *pattern = lc__symbol_api_pattern_of(str, len);
            if (pattern && !strings_symbol_reported(s, str, len))
                strings_report(s, LC__STRING_SYMBOL, str, len, 0, pattern, "", at);
        }
        at += len + 1;
    }
}

/* Only bytes the loader maps can reach dlsym(): the PT_LOAD segments, or
 * the allocated sections of an object file. Debug information and .strtab
 * name every identifier of the program and are never mapped. */
static void strings_symbol_names(struct strings_scan *s)
{
    const struct lc__elf *elf = s->elf;
    int loads = 0;
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type != PT_LOAD || ph->p_filesz == 0)
            continue;
        loads = 1;
        strings_symbol_names_in(s, (size_t)ph->p_offset, (size_t)(ph->p_offset + ph->p_filesz));
    }
    if (loads)
        return;
    for (size_t i = 1; i < elf->shnum; i++) {
        const Elf64_Shdr *sh = &elf->shdrs[i];
        if ((sh->sh_flags & SHF_ALLOC) && sh->sh_type != SHT_NOBITS && sh->sh_type != SHT_NULL &&
            sh->sh_size > 0)
            strings_symbol_names_in(s, (size_t)sh->sh_offset,
                                    (size_t)(sh->sh_offset + sh->sh_size));
    }
}

long long lc__rule_strings(const struct lc__elf *elf, const char *const *stems, size_t nstems,
                           const struct lc__string_skip *skip, lc__string_fn fn, void *arg)
{
    struct strings_scan *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->elf = elf;
    s->stems = stems;
    s->nstems = nstems;
    s->skip = skip;
    s->fn = fn;
    s->arg = arg;
    int rc = 0;
    if (fn) {
        strings_narrow_libraries(s);
        for (size_t e = 0; e < sizeof(strings_encodings) / sizeof(strings_encodings[0]) && !rc;
             e++)
            rc = strings_wide_libraries(s, &strings_encodings[e]);
        strings_symbol_names(s);
    }
    free(s);
    return rc < 0 ? rc : (long long)elf->size;
}
