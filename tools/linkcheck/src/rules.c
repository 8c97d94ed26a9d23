/* Rules 2 (CUDA symbols) and 3 (library names in data) on one parsed image. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 2, 3))) static int rules_fail(struct lc__err *err, const char *fmt,
                                                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return -ENOEXEC;
}

/* ---- rule 2: symbols ---------------------------------------------------- */

const char *lc__symbol_pattern_of(const char *name)
{
    if (name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z')
        return "cu[A-Z]*";
    if (strncmp(name, "cuda", 4) == 0)
        return "cuda*";
    /* nvcc's host stubs register kernels through __cudaRegisterFatBinary & co. */
    if (strncmp(name, "__cuda", 6) == 0)
        return "__cuda*";
    if (strncmp(name, "nvrtc", 5) == 0)
        return "nvrtc*";
    return NULL;
}

/* A symbol table's entries and the string table its names live in. */
struct rules_symtab {
    uint64_t off; /* file offset of entry 0 */
    size_t count; /* entries, including the null entry 0 */
    const char *strtab;
    size_t strsz; /* > 0, strtab[strsz - 1] == '\0' */
    const char *label;
};

static int rules_symtab_walk(const struct lc__elf *elf, const struct rules_symtab *t,
                             lc__symbol_fn fn, void *arg, struct lc__err *err)
{
    int examined = 0;
    for (size_t i = 1; i < t->count; i++) {
        Elf64_Sym sym;
        memcpy(&sym, elf->data + t->off + i * sizeof(sym), sizeof(sym));
        unsigned type = ELF64_ST_TYPE(sym.st_info);
        if (type == STT_SECTION || type == STT_FILE)
            continue;
        if (sym.st_name >= t->strsz)
            return rules_fail(err,
                              "%s symbol %zu: name offset 0x%x is past the end of its string "
                              "table (0x%zx bytes)",
                              t->label, i, sym.st_name, t->strsz);
        const char *name = t->strtab + sym.st_name;
        examined++;
        const char *pattern = lc__symbol_pattern_of(name);
        if (pattern && fn)
            fn(arg, name, sym.st_shndx != SHN_UNDEF, pattern, t->label);
    }
    return examined;
}

/* A SHT_SYMTAB or SHT_DYNSYM section, with its sh_link string table. */
static int rules_section_symtab(const struct lc__elf *elf, size_t index, struct rules_symtab *t,
                                struct lc__err *err)
{
    const Elf64_Shdr *sh = &elf->shdrs[index];
    const char *name = lc__elf_section_name(elf, index);
    t->label = name && name[0] ? name : (sh->sh_type == SHT_DYNSYM ? ".dynsym" : ".symtab");
    if (sh->sh_entsize != sizeof(Elf64_Sym) || sh->sh_size % sizeof(Elf64_Sym) != 0)
        return rules_fail(err,
                          "symbol table %s (section [%zu]): entry size %llu and size 0x%llx, "
                          "expected entries of %zu bytes",
                          t->label, index, (unsigned long long)sh->sh_entsize,
                          (unsigned long long)sh->sh_size, sizeof(Elf64_Sym));
    if (sh->sh_link == 0 || sh->sh_link >= elf->shnum)
        return rules_fail(err,
                          "symbol table %s (section [%zu]): sh_link %u is not a section index "
                          "(there are %zu sections)",
                          t->label, index, sh->sh_link, elf->shnum);
    const Elf64_Shdr *str = &elf->shdrs[sh->sh_link];
    if (str->sh_type != SHT_STRTAB || str->sh_size == 0 ||
        elf->data[str->sh_offset + str->sh_size - 1] != '\0')
        return rules_fail(err,
                          "symbol table %s (section [%zu]): sh_link %u is not a NUL-terminated "
                          "SHT_STRTAB (type 0x%x, 0x%llx bytes)",
                          t->label, index, sh->sh_link, str->sh_type,
                          (unsigned long long)str->sh_size);
    t->off = sh->sh_offset;
    t->count = (size_t)(sh->sh_size / sizeof(Elf64_Sym));
    t->strtab = (const char *)elf->data + str->sh_offset;
    t->strsz = (size_t)str->sh_size;
    return 0;
}

static int rules_read_u32(const struct lc__elf *elf, uint64_t vaddr, uint32_t *value_p)
{
    uint64_t off;
    if (lc__elf_vaddr_to_offset(elf, vaddr, 4, &off) < 0)
        return -ENOEXEC;
    memcpy(value_p, elf->data + off, 4);
    return 0;
}

/* How many entries DT_GNU_HASH implies: one past the end of the longest
 * chain, walked entry by entry so every read is bounds-checked. */
static int rules_gnu_hash_count(const struct lc__elf *elf, uint64_t addr, uint64_t *count_p)
{
    uint32_t nbuckets, symoffset, bloom_size;
    if (rules_read_u32(elf, addr, &nbuckets) || rules_read_u32(elf, addr + 4, &symoffset) ||
        rules_read_u32(elf, addr + 8, &bloom_size))
        return -ENOEXEC;
    uint64_t buckets = addr + 16 + (uint64_t)bloom_size * 8;
    uint64_t chains = buckets + (uint64_t)nbuckets * 4;
    uint32_t last = 0;
    for (uint32_t b = 0; b < nbuckets; b++) {
        uint32_t v;
        if (rules_read_u32(elf, buckets + (uint64_t)b * 4, &v))
            return -ENOEXEC;
        if (v > last)
            last = v;
    }
    if (last < symoffset) {
        *count_p = symoffset;
        return 0;
    }
    for (uint64_t i = last;; i++) {
        uint32_t h;
        if (rules_read_u32(elf, chains + (i - symoffset) * 4, &h))
            return -ENOEXEC;
        if (h & 1) {
            *count_p = i + 1;
            return 0;
        }
    }
}

/* The table the loader uses, DT_SYMTAB, sized by its hash tables. */
static int rules_dynamic_symtab(const struct lc__elf *elf, uint64_t symtab, struct rules_symtab *t,
                                struct lc__err *err)
{
    uint64_t count = 0, v;
    int sized = 0;
    if (lc__elf_dyn_get(elf, DT_HASH, &v) == 0) {
        uint32_t nchain;
        if (rules_read_u32(elf, v + 4, &nchain))
            return rules_fail(err, "DT_HASH at 0x%llx is not inside a PT_LOAD segment",
                              (unsigned long long)v);
        count = nchain;
        sized = 1;
    }
    if (lc__elf_dyn_get(elf, DT_GNU_HASH, &v) == 0) {
        uint64_t n;
        if (rules_gnu_hash_count(elf, v, &n) < 0)
            return rules_fail(err, "DT_GNU_HASH at 0x%llx runs outside the PT_LOAD segments",
                              (unsigned long long)v);
        if (n > count)
            count = n;
        sized = 1;
    }
    uint64_t strtab;
    if (!sized && lc__elf_dyn_get(elf, DT_STRTAB, &strtab) == 0 && strtab > symtab)
        count = (strtab - symtab) / sizeof(Elf64_Sym); /* the usual layout: symbols, then names */
    if (count > elf->size / sizeof(Elf64_Sym) ||
        lc__elf_vaddr_to_offset(elf, symtab, count * sizeof(Elf64_Sym), &t->off) < 0)
        return rules_fail(err,
                          "DT_SYMTAB at 0x%llx with %llu symbols is not inside the file bytes of "
                          "a PT_LOAD segment",
                          (unsigned long long)symtab, (unsigned long long)count);
    if (count > 0 && !elf->dynstr)
        return rules_fail(err, "DT_SYMTAB without a DT_STRTAB for its names");
    t->count = (size_t)count;
    t->strtab = elf->dynstr;
    t->strsz = elf->dynstr_size;
    t->label = "DT_SYMTAB";
    return 0;
}

int lc__rule_symbols(const struct lc__elf *elf, lc__symbol_fn fn, void *arg, struct lc__err *err)
{
    int examined = 0, rc;
    int dynsym_seen = 0;
    uint64_t symtab = 0;
    int has_dt_symtab = lc__elf_dyn_get(elf, DT_SYMTAB, &symtab) == 0;
    for (size_t i = 1; i < elf->shnum; i++) {
        uint32_t type = elf->shdrs[i].sh_type;
        if (type != SHT_SYMTAB && type != SHT_DYNSYM)
            continue;
        struct rules_symtab t;
        if ((rc = rules_section_symtab(elf, i, &t, err)) < 0)
            return rc;
        if ((rc = rules_symtab_walk(elf, &t, fn, arg, err)) < 0)
            return rc;
        examined += rc;
        if (type == SHT_DYNSYM && has_dt_symtab && elf->shdrs[i].sh_addr == symtab)
            dynsym_seen = 1;
    }
    /* Without a matching .dynsym section (stripped section headers, or a
     * crafted mismatch) read what the loader would read. */
    if (has_dt_symtab && !dynsym_seen) {
        struct rules_symtab t;
        if ((rc = rules_dynamic_symtab(elf, symtab, &t, err)) < 0)
            return rc;
        if ((rc = rules_symtab_walk(elf, &t, fn, arg, err)) < 0)
            return rc;
        examined += rc;
    }
    return examined;
}

/* ---- rule 3: strings ---------------------------------------------------- */

int lc__string_find_stem(const char *s, size_t len, const char *const *stems, size_t nstems,
                         size_t *pos_p)
{
    int best = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i < nstems; i++) {
        size_t n = strlen(stems[i]);
        if (n == 0 || n + 3 > len)
            continue;
        /* Only the first occurrence matters: a later one has less room for ".so". */
        const char *hit = memmem(s, len, stems[i], n);
        if (!hit)
            continue;
        size_t pos = (size_t)(hit - s);
        if (!memmem(hit + n, len - pos - n, ".so", 3))
            continue;
        if (best < 0 || pos < best_pos) {
            best = (int)i;
            best_pos = pos;
        }
    }
    if (best >= 0)
        *pos_p = best_pos;
    return best;
}

/* A byte range of the file and the half-open interval arithmetic on it. */
struct rules_range {
    uint64_t start;
    uint64_t end;
};

static int rules_range_cmp(const void *a, const void *b)
{
    const struct rules_range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Sorts and merges overlapping or touching ranges in place; returns the new count. */
static size_t rules_ranges_merge(struct rules_range *r, size_t n)
{
    if (n == 0)
        return 0;
    qsort(r, n, sizeof(*r), rules_range_cmp);
    size_t out = 0;
    for (size_t i = 1; i < n; i++) {
        if (r[i].start <= r[out].end) {
            if (r[i].end > r[out].end)
                r[out].end = r[i].end;
        } else {
            r[++out] = r[i];
        }
    }
    return out + 1;
}

static int rules_section_is_data(const Elf64_Shdr *sh)
{
    return sh->sh_type == SHT_PROGBITS && (sh->sh_flags & SHF_ALLOC) &&
           !(sh->sh_flags & SHF_EXECINSTR) && sh->sh_size > 0;
}

/* Names where a string at file offset @off lives, for the report. */
static void rules_describe(const struct lc__elf *elf, uint64_t off, char *where, size_t len)
{
    for (size_t pass = 0; pass < 2; pass++) {
        for (size_t i = 1; i < elf->shnum; i++) {
            const Elf64_Shdr *sh = &elf->shdrs[i];
            if (sh->sh_type == SHT_NOBITS || off < sh->sh_offset ||
                off - sh->sh_offset >= sh->sh_size)
                continue;
            if (pass == 0 && !rules_section_is_data(sh))
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
    snprintf(where, len, "file");
}

/* A growable array of ranges. */
struct rules_ranges {
    struct rules_range *r;
    size_t n;
    size_t cap;
};

static int rules_ranges_push(struct rules_ranges *rs, uint64_t start, uint64_t end)
{
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 16;
        struct rules_range *r = realloc(rs->r, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        rs->r = r;
        rs->cap = cap;
    }
    rs->r[rs->n].start = start;
    rs->r[rs->n].end = end;
    rs->n++;
    return 0;
}

/* The ranges to scan: data sections, plus PT_LOAD bytes no section covers
 * (a string hidden between sections is still mapped and dlopen-able). Both
 * sides are merged first, so overlapping headers in a hostile file cost
 * nothing extra. */
static int rules_string_ranges(const struct lc__elf *elf, struct rules_ranges *scan)
{
    struct rules_ranges covered = {0}, loads = {0};
    int rc = 0;
    for (size_t i = 1; i < elf->shnum && rc == 0; i++) {
        const Elf64_Shdr *sh = &elf->shdrs[i];
        if (sh->sh_type != SHT_NULL && sh->sh_type != SHT_NOBITS && sh->sh_size > 0)
            rc = rules_ranges_push(&covered, sh->sh_offset, sh->sh_offset + sh->sh_size);
        if (rc == 0 && rules_section_is_data(sh))
            rc = rules_ranges_push(scan, sh->sh_offset, sh->sh_offset + sh->sh_size);
    }
    for (size_t i = 0; i < elf->phnum && rc == 0; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type == PT_LOAD && ph->p_filesz > 0)
            rc = rules_ranges_push(&loads, ph->p_offset, ph->p_offset + ph->p_filesz);
    }
    if (rc < 0)
        goto out;
    covered.n = rules_ranges_merge(covered.r, covered.n);
    loads.n = rules_ranges_merge(loads.r, loads.n);
    size_t c = 0;
    for (size_t l = 0; l < loads.n && rc == 0; l++) {
        uint64_t at = loads.r[l].start, end = loads.r[l].end;
        while (c < covered.n && covered.r[c].end <= at)
            c++;
        for (size_t k = c; k < covered.n && at < end && rc == 0; k++) {
            if (covered.r[k].start >= end)
                break;
            if (covered.r[k].start > at)
                rc = rules_ranges_push(scan, at, covered.r[k].start);
            if (covered.r[k].end > at)
                at = covered.r[k].end;
        }
        if (at < end && rc == 0)
            rc = rules_ranges_push(scan, at, end);
    }
    if (rc == 0)
        scan->n = rules_ranges_merge(scan->r, scan->n);
out:
    free(covered.r);
    free(loads.r);
    return rc;
}

long long lc__rule_strings(const struct lc__elf *elf, const char *const *stems, size_t nstems,
                           lc__string_fn fn, void *arg)
{
    struct rules_ranges ranges = {0};
    int rc = rules_string_ranges(elf, &ranges);
    if (rc < 0) {
        free(ranges.r);
        return rc;
    }
    long long scanned = 0;
    size_t found = 0;
    for (size_t r = 0; r < ranges.n; r++) {
        const char *base = (const char *)elf->data;
        uint64_t at = ranges.r[r].start, end = ranges.r[r].end;
        scanned += (long long)(end - at);
        while (at < end) {
            const char *s = base + at;
            const char *nul = memchr(s, '\0', (size_t)(end - at));
            size_t len = nul ? (size_t)(nul - s) : (size_t)(end - at);
            size_t pos;
            int stem = len ? lc__string_find_stem(s, len, stems, nstems, &pos) : -1;
            if (stem >= 0 && fn) {
                /* Locating costs a pass over the headers; past the few a
                 * report prints, a hostile file gets no more of them. */
                char where[96] = "";
                if (++found <= LC__STRING_FINDINGS_LOCATED)
                    rules_describe(elf, at, where, sizeof(where));
                fn(arg, s, len, pos, stems[stem], where, at);
            }
            at += len + 1;
        }
    }
    free(ranges.r);
    return scanned;
}
