/* Rule 2 (CUDA symbols) on one parsed image, the dynamic symbol walk rule 4
 * reads imports with, and the matchers rule 3 uses. */
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

/* The CUDA family's API prefixes past the driver's and runtime's own: a
 * prefix counts when an upper-case letter, digit or '_' follows it
 * ("cublasCreate_v2", "ncclCommInitRank"), so an ordinary word does not. */
static const struct {
    const char *prefix;
    const char *pattern;
} rules_family_prefixes[] = {
    {"cublas", "cublas*"},       {"cufft", "cufft*"},         {"curand", "curand*"},
    {"cusparse", "cusparse*"},   {"cusolver", "cusolver*"},   {"cudnn", "cudnn*"},
    {"cutensor", "cutensor*"},   {"cudss", "cudss*"},         {"cupti", "cupti*"},
    {"nccl", "nccl*"},           {"nvml", "nvml*"},           {"nvJitLink", "nvJitLink*"},
    {"nvPTXCompiler", "nvPTXCompiler*"}, {"nvFatbin", "nvFatbin*"}, {"nvvm", "nvvm*"},
    {"nvjpeg", "nvjpeg*"},       {"nvtx", "nvtx*"},           {"nvshmem", "nvshmem*"},
    {"nvcomp", "nvcomp*"},
};

static int rules_api_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* NPP's entry points: "npp", a few lower-case letters (the domain), then an
 * upper-case one: nppiMalloc_8u_C1, nppsSum_32f, nppGetLibVersion. */
static int rules_is_npp(const char *name, size_t len)
{
    if (len < 4 || strncmp(name, "npp", 3) != 0)
        return 0;
    for (size_t i = 3; i < len && i < 8; i++) {
        if (name[i] >= 'A' && name[i] <= 'Z')
            return 1;
        if (name[i] < 'a' || name[i] > 'z')
            return 0;
    }
    return 0;
}

static const char *rules_family_pattern_of(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(rules_family_prefixes) / sizeof(rules_family_prefixes[0]);
         i++) {
        size_t n = strlen(rules_family_prefixes[i].prefix);
        if (len > n && strncmp(name, rules_family_prefixes[i].prefix, n) == 0 &&
            rules_api_char(name[n]))
            return rules_family_prefixes[i].pattern;
    }
    if (rules_is_npp(name, len))
        return "npp*";
    return NULL;
}

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
    return rules_family_pattern_of(name, strlen(name));
}

const char *lc__symbol_api_pattern_of(const char *s, size_t len)
{
    if (len < 4 || len > 128)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || rules_api_char(ch)) || (i == 0 && ch >= '0' && ch <= '9'))
            return NULL;
    }
    if (s[0] == 'c' && s[1] == 'u' && s[2] >= 'A' && s[2] <= 'Z')
        return "cu[A-Z]*";
    if (strncmp(s, "cuda", 4) == 0 && len > 4 && rules_api_char(s[4]))
        return "cuda*";
    if (len > 6 && strncmp(s, "__cuda", 6) == 0 && rules_api_char(s[6]))
        return "__cuda*";
    if (len > 5 && strncmp(s, "nvrtc", 5) == 0 && rules_api_char(s[5]))
        return "nvrtc*";
    return rules_family_pattern_of(s, len);
}

/* A symbol table's entries and the string table its names live in. */
struct rules_symtab {
    uint64_t off; /* file offset of entry 0 */
    size_t count; /* entries, including the null entry 0 */
    const char *strtab;
    size_t strsz; /* > 0, strtab[strsz - 1] == '\0' */
    const char *label;
};

/* Hands @fn the CUDA symbols of table @t, or every symbol when @all. */
static int rules_symtab_walk(const struct lc__elf *elf, const struct rules_symtab *t, int all,
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
        const char *pattern = all ? NULL : lc__symbol_pattern_of(name);
        if ((pattern || all) && fn)
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

static int rules_symbols(const struct lc__elf *elf, int all, lc__symbol_fn fn, void *arg,
                         struct lc__err *err)
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
        if ((rc = rules_symtab_walk(elf, &t, all, fn, arg, err)) < 0)
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
        if ((rc = rules_symtab_walk(elf, &t, all, fn, arg, err)) < 0)
            return rc;
        examined += rc;
    }
    return examined;
}

int lc__rule_symbols(const struct lc__elf *elf, lc__symbol_fn fn, void *arg, struct lc__err *err)
{
    return rules_symbols(elf, 0, fn, arg, err);
}

int lc__rule_every_symbol(const struct lc__elf *elf, lc__symbol_fn fn, void *arg,
                          struct lc__err *err)
{
    return rules_symbols(elf, 1, fn, arg, err);
}

/* Hands every entry of the dynamic symbol table to @fn. */
static int rules_dynsym_walk(const struct lc__elf *elf, const struct rules_symtab *t,
                             lc__dynsym_fn fn, void *arg, struct lc__err *err)
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
        if (!name[0])
            continue;
        examined++;
        fn(arg, name, sym.st_shndx != SHN_UNDEF);
    }
    return examined;
}

int lc__rule_dynamic_symbols(const struct lc__elf *elf, lc__dynsym_fn fn, void *arg,
                             struct lc__err *err)
{
    uint64_t symtab = 0;
    int has_dt_symtab = lc__elf_dyn_get(elf, DT_SYMTAB, &symtab) == 0;
    int rc;
    /* The loader reads DT_SYMTAB; a .dynsym section at that address is the
     * same table with a checked size. */
    for (size_t i = 1; i < elf->shnum; i++) {
        if (elf->shdrs[i].sh_type != SHT_DYNSYM ||
            (has_dt_symtab && elf->shdrs[i].sh_addr != symtab))
            continue;
        struct rules_symtab t;
        if ((rc = rules_section_symtab(elf, i, &t, err)) < 0)
            return rc;
        return rules_dynsym_walk(elf, &t, fn, arg, err);
    }
    if (!has_dt_symtab)
        return 0;
    struct rules_symtab t;
    if ((rc = rules_dynamic_symtab(elf, symtab, &t, err)) < 0)
        return rc;
    return rules_dynsym_walk(elf, &t, fn, arg, err);
}

/* ---- rule 3: the stem matcher (the scan is in strings.c) ---------------- */

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
