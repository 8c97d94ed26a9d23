/* kn_cubin: see include/kernels/cubin.h. */
#include "kernels/cubin.h"

#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where the SM arch lives in e_flags, as found by building the same kernel
 * with nvcc 13.0.88 for several targets and reading the headers:
 *
 *   target              EI_OSABI  EI_ABIVERSION  e_flags
 *   sm_75               0x41      8              0x06004b04
 *   sm_80               0x41      8              0x06005004
 *   sm_90, sm_90a       0x41      8              0x06005a04
 *   sm_100              0x41      8              0x06006402
 *   sm_120, 120a, 120f  0x41      8              0x06007802
 *
 * nvcc 13 writes the newer ABI (version 8) for every target: the SM number
 * is bits 8-15 (0x5a = 90, 0x78 = 120); the low byte holds other flags and
 * the "a"/"f" variants are not told apart in e_flags. The older ABI (version
 * 7, EI_OSABI 0x33, written by CUDA 12 and earlier; e.g. 0x00500550 for
 * sm_80) keeps the SM in bits 0-7, the virtual arch in bits 16-23 and the
 * texture/64-bit-address flags in bits 8-11, so reading bits 8-15 of an old
 * cubin would give 5 for sm_90. The ABI version decides which field to read;
 * any other version is refused rather than guessed. */
int kn_cubin_arch_decode(unsigned int abi_version, uint32_t e_flags, unsigned int *arch_p)
{
    unsigned int arch;
    if (abi_version == KN_CUDA_ABI_V1)
        arch = e_flags & 0xffu;
    else if (abi_version == KN_CUDA_ABI_V2)
        arch = (e_flags >> 8) & 0xffu;
    else
        return -ENOTSUP;
    if (arch == 0)
        return -EBADMSG;
    *arch_p = arch;
    return 0;
}

struct kn__elf {
    const unsigned char *b;
    size_t size;
    Elf64_Ehdr eh;
    size_t shnum;
    size_t shstrndx;
    Elf64_Shdr shstr;
    char *err;
    size_t err_len;
};

__attribute__((format(printf, 3, 4))) static int kn__fail(struct kn__elf *e, int rc,
                                                          const char *fmt, ...)
{
    if (e->err && e->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, e->err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Whether [off, off + len) lies inside a buffer of @size bytes. */
static int kn__in_bounds(size_t size, uint64_t off, uint64_t len)
{
    return off <= size && len <= size - off;
}

static void kn__shdr_read(const struct kn__elf *e, size_t i, Elf64_Shdr *sh)
{
    /* The whole table was bounds-checked in kn__sections_find. */
    memcpy(sh, e->b + e->eh.e_shoff + i * sizeof(*sh), sizeof(*sh));
}

/* The NUL-terminated string at @off of string table @tab, or NULL when it
 * starts or ends outside the table. */
static const char *kn__str(const struct kn__elf *e, const Elf64_Shdr *tab, uint64_t off)
{
    if (off >= tab->sh_size)
        return NULL;
    const char *s = (const char *)e->b + tab->sh_offset + off;
    if (!memchr(s, '\0', tab->sh_size - off))
        return NULL;
    return s;
}

static const char *kn__machine_name(unsigned int m)
{
    switch (m) {
    case EM_X86_64:
        return "x86-64";
    case EM_386:
        return "i386";
    case EM_AARCH64:
        return "AArch64";
    case EM_ARM:
        return "ARM";
    case EM_RISCV:
        return "RISC-V";
    case EM_PPC64:
        return "PowerPC64";
    case 224:
        return "AMDGPU";
    default:
        return "not a GPU";
    }
}

/* nvcc's PTX starts with a "//" banner; hand-written PTX has a .version
 * directive near the top. A cubin has NUL bytes in its first 64. */
static int kn__looks_like_ptx(const unsigned char *b, size_t size)
{
    if (size >= 2 && b[0] == '/' && b[1] == '/')
        return 1;
    size_t head = size < 4096 ? size : 4096;
    if (head < 8 || memchr(b, '\0', head))
        return 0;
    return memmem(b, head, ".version", 8) != NULL || memmem(b, head, ".target", 7) != NULL;
}

static int kn__ident_check(struct kn__elf *e)
{
    const unsigned char *b = e->b;
    if (e->size >= 4 && b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba)
        return kn__fail(e, -ENOEXEC,
                        "not a cubin: found a fatbin (magic 0xba55ed50), expected a "
                        "single-arch ELF cubin");
    if (kn__looks_like_ptx(b, e->size))
        return kn__fail(e, -ENOEXEC,
                        "not a cubin: found text that looks like PTX, expected an ELF "
                        "cubin (no PTX may be embedded)");
    if (e->size < SELFMAG || memcmp(b, ELFMAG, SELFMAG) != 0) {
        char found[32] = "nothing (empty file)";
        if (e->size)
            snprintf(found, sizeof(found), "%02x %02x %02x %02x%s", b[0], e->size > 1 ? b[1] : 0,
                     e->size > 2 ? b[2] : 0, e->size > 3 ? b[3] : 0, e->size < 4 ? " (short)" : "");
        return kn__fail(e, -ENOEXEC, "not an ELF file: expected magic 7f 45 4c 46, found %s",
                        found);
    }
    if (e->size < sizeof(Elf64_Ehdr))
        return kn__fail(e, -EBADMSG,
                        "truncated ELF: expected at least a %zu-byte ELF64 header, found %zu bytes",
                        sizeof(Elf64_Ehdr), e->size);
    memcpy(&e->eh, b, sizeof(e->eh));
    if (b[EI_CLASS] != ELFCLASS64 || b[EI_DATA] != ELFDATA2LSB)
        return kn__fail(e, -ENOEXEC,
                        "not a cubin: expected a 64-bit little-endian ELF (class 2, data 1), "
                        "found class %u, data %u",
                        b[EI_CLASS], b[EI_DATA]);
    if (e->eh.e_machine != KN_EM_CUDA)
        return kn__fail(e, -ENOEXEC, "not a cubin: expected e_machine EM_CUDA (%d), found %u (%s)",
                        KN_EM_CUDA, e->eh.e_machine, kn__machine_name(e->eh.e_machine));
    if (e->eh.e_type != ET_EXEC)
        return kn__fail(e, -ENOEXEC,
                        "not a loadable cubin: expected e_type ET_EXEC (%d), found %u%s", ET_EXEC,
                        e->eh.e_type,
                        e->eh.e_type == ET_REL ? " (relocatable device code; link it first)" : "");
    return 0;
}

static int kn__arch_check(struct kn__elf *e, unsigned int expected, unsigned int *arch_p)
{
    unsigned int abi = e->b[EI_ABIVERSION];
    int rc = kn_cubin_arch_decode(abi, e->eh.e_flags, arch_p);
    if (rc == -ENOTSUP)
        return kn__fail(e, rc,
                        "unknown CUDA ELF ABI: expected EI_ABIVERSION %d or %d, found %u "
                        "(e_flags 0x%08x)",
                        KN_CUDA_ABI_V1, KN_CUDA_ABI_V2, abi, (unsigned int)e->eh.e_flags);
    if (rc < 0)
        return kn__fail(e, rc, "malformed cubin: no SM arch in e_flags 0x%08x (ABI version %u)",
                        (unsigned int)e->eh.e_flags, abi);
    if (expected && *arch_p != expected)
        return kn__fail(e, -ENOTSUP,
                        "wrong GPU architecture: expected sm_%u, found sm_%u "
                        "(e_flags 0x%08x, CUDA ELF ABI version %u)",
                        expected, *arch_p, (unsigned int)e->eh.e_flags, abi);
    return 0;
}

/* Bounds-checks the section header table and the section name table. */
static int kn__sections_find(struct kn__elf *e)
{
    if (e->eh.e_shoff == 0)
        return kn__fail(e, -EBADMSG, "malformed cubin: expected section headers, found none");
    if (e->eh.e_shentsize != sizeof(Elf64_Shdr))
        return kn__fail(e, -EBADMSG, "malformed ELF: expected e_shentsize %zu, found %u",
                        sizeof(Elf64_Shdr), e->eh.e_shentsize);
    if (!kn__in_bounds(e->size, e->eh.e_shoff, sizeof(Elf64_Shdr)))
        return kn__fail(e, -EBADMSG,
                        "truncated ELF: section header table at offset %ju lies outside the "
                        "%zu-byte file",
                        (uintmax_t)e->eh.e_shoff, e->size);
    Elf64_Shdr sh0;
    memcpy(&sh0, e->b + e->eh.e_shoff, sizeof(sh0));
    uint64_t shnum = e->eh.e_shnum ? e->eh.e_shnum : sh0.sh_size; /* extended numbering */
    if (shnum == 0 || shnum > (e->size - e->eh.e_shoff) / sizeof(Elf64_Shdr))
        return kn__fail(e, -EBADMSG,
                        "truncated ELF: %ju section headers at offset %ju do not fit in the "
                        "%zu-byte file",
                        (uintmax_t)shnum, (uintmax_t)e->eh.e_shoff, e->size);
    e->shnum = (size_t)shnum;
    uint64_t shstrndx = e->eh.e_shstrndx == SHN_XINDEX ? sh0.sh_link : e->eh.e_shstrndx;
    if (shstrndx == SHN_UNDEF || shstrndx >= e->shnum)
        return kn__fail(e, -EBADMSG, "malformed ELF: section name table index %ju, expected 1..%zu",
                        (uintmax_t)shstrndx, e->shnum - 1);
    e->shstrndx = (size_t)shstrndx;
    kn__shdr_read(e, e->shstrndx, &e->shstr);
    if (e->shstr.sh_type != SHT_STRTAB ||
        !kn__in_bounds(e->size, e->shstr.sh_offset, e->shstr.sh_size))
        return kn__fail(e, -EBADMSG,
                        "malformed ELF: section name table (type %u, offset %ju, size %ju) is "
                        "not a string table inside the %zu-byte file",
                        e->shstr.sh_type, (uintmax_t)e->shstr.sh_offset,
                        (uintmax_t)e->shstr.sh_size, e->size);
    return 0;
}

/* Bounds-checks the program header table and every segment's file extent:
 * the driver loads segments, so a cut-off segment is a corrupt image. */
static int kn__segments_check(struct kn__elf *e)
{
    if (e->eh.e_phoff == 0 && e->eh.e_phnum == 0)
        return 0;
    if (e->eh.e_phentsize != sizeof(Elf64_Phdr))
        return kn__fail(e, -EBADMSG, "malformed ELF: expected e_phentsize %zu, found %u",
                        sizeof(Elf64_Phdr), e->eh.e_phentsize);
    if (e->eh.e_phnum == PN_XNUM)
        return kn__fail(e, -EBADMSG, "malformed cubin: extended program header count");
    if (!kn__in_bounds(e->size, e->eh.e_phoff, (uint64_t)e->eh.e_phnum * sizeof(Elf64_Phdr)))
        return kn__fail(e, -EBADMSG,
                        "truncated ELF: %u program headers at offset %ju lie outside the "
                        "%zu-byte file",
                        e->eh.e_phnum, (uintmax_t)e->eh.e_phoff, e->size);
    for (size_t i = 0; i < e->eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, e->b + e->eh.e_phoff + i * sizeof(ph), sizeof(ph));
        if (!kn__in_bounds(e->size, ph.p_offset, ph.p_filesz))
            return kn__fail(e, -EBADMSG,
                            "truncated ELF: segment %zu (offset %ju, %ju bytes) lies outside "
                            "the %zu-byte file",
                            i, (uintmax_t)ph.p_offset, (uintmax_t)ph.p_filesz, e->size);
    }
    return 0;
}

static int kn__name_forbidden(const char *name)
{
    /* .nv_debug_ptx_txt, .nv_fatbin, .nvFatBinSegment, __nv_relfatbin, ... */
    return strcasestr(name, "ptx") != NULL || strcasestr(name, "fatbin") != NULL;
}

/* Checks every section's name and extent; returns the index of the one
 * symbol table in *symtab_p (0: none). */
static int kn__sections_check(struct kn__elf *e, size_t *symtab_p)
{
    size_t symtab = 0;
    for (size_t i = 1; i < e->shnum; i++) {
        Elf64_Shdr sh;
        kn__shdr_read(e, i, &sh);
        const char *name = kn__str(e, &e->shstr, sh.sh_name);
        if (!name)
            return kn__fail(e, -EBADMSG,
                            "malformed ELF: section %zu's name offset %u lies outside the "
                            "%ju-byte name table",
                            i, sh.sh_name, (uintmax_t)e->shstr.sh_size);
        if (sh.sh_type != SHT_NOBITS && !kn__in_bounds(e->size, sh.sh_offset, sh.sh_size))
            return kn__fail(e, -EBADMSG,
                            "truncated ELF: section %zu '%s' (offset %ju, %ju bytes) lies "
                            "outside the %zu-byte file",
                            i, name, (uintmax_t)sh.sh_offset, (uintmax_t)sh.sh_size, e->size);
        if (kn__name_forbidden(name))
            return kn__fail(e, -EACCES,
                            "PTX or fatbin inside the cubin: expected SASS only, found section "
                            "%zu '%s' (something the driver could JIT-compile)",
                            i, name);
        if (sh.sh_type == SHT_SYMTAB) {
            if (symtab)
                return kn__fail(e, -EBADMSG,
                                "malformed cubin: expected one symbol table, found sections "
                                "%zu and %zu",
                                symtab, i);
            symtab = i;
        }
    }
    *symtab_p = symtab;
    return 0;
}

struct kn__symtab {
    Elf64_Shdr sh;
    Elf64_Shdr str;
    size_t count;
};

static int kn__symtab_open(struct kn__elf *e, size_t index, struct kn__symtab *st)
{
    kn__shdr_read(e, index, &st->sh);
    if (st->sh.sh_entsize != sizeof(Elf64_Sym) || st->sh.sh_size % sizeof(Elf64_Sym) != 0)
        return kn__fail(e, -EBADMSG,
                        "malformed ELF: symbol table entries of %ju bytes in %ju bytes, "
                        "expected %zu-byte entries",
                        (uintmax_t)st->sh.sh_entsize, (uintmax_t)st->sh.sh_size, sizeof(Elf64_Sym));
    if (st->sh.sh_link == SHN_UNDEF || st->sh.sh_link >= e->shnum)
        return kn__fail(e, -EBADMSG,
                        "malformed ELF: symbol table's string table index %u, expected 1..%zu",
                        st->sh.sh_link, e->shnum - 1);
    kn__shdr_read(e, st->sh.sh_link, &st->str);
    if (st->str.sh_type != SHT_STRTAB)
        return kn__fail(e, -EBADMSG,
                        "malformed ELF: symbol table links section %u of type %u, expected a "
                        "string table",
                        st->sh.sh_link, st->str.sh_type);
    /* Both extents were checked against the file in kn__sections_check. */
    st->count = st->sh.sh_size / sizeof(Elf64_Sym);
    return 0;
}

/* Reads symbol @i; returns its name when it is a kernel entry, else NULL. */
static int kn__symbol_read(struct kn__elf *e, const struct kn__symtab *st, size_t i,
                           const char **entry_p)
{
    Elf64_Sym sym;
    memcpy(&sym, e->b + st->sh.sh_offset + i * sizeof(sym), sizeof(sym));
    const char *name = kn__str(e, &st->str, sym.st_name);
    if (!name)
        return kn__fail(e, -EBADMSG,
                        "malformed ELF: symbol %zu's name offset %u lies outside the %ju-byte "
                        "string table",
                        i, sym.st_name, (uintmax_t)st->str.sh_size);
    int defined =
        sym.st_shndx != SHN_UNDEF && (sym.st_shndx >= SHN_LORESERVE || sym.st_shndx < e->shnum);
    int entry = ELF64_ST_TYPE(sym.st_info) == STT_FUNC && defined &&
                ELF64_ST_BIND(sym.st_info) != STB_LOCAL && (sym.st_other & KN_STO_CUDA_ENTRY);
    *entry_p = entry ? name : NULL;
    return 0;
}

/* Appends the names of every kernel entry to @out (truncated to fit). */
static void kn__entries_list(struct kn__elf *e, const struct kn__symtab *st, char *out,
                             size_t out_len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 1; i < st->count && used + 1 < out_len; i++) {
        const char *entry = NULL;
        if (kn__symbol_read(e, st, i, &entry) < 0 || !entry)
            continue;
        int n = snprintf(out + used, out_len - used, "%s%s", used ? ", " : "", entry);
        if (n < 0)
            break;
        used += (size_t)n < out_len - used ? (size_t)n : out_len - used - 1;
    }
    if (!used)
        snprintf(out, out_len, "none");
}

static int kn__kernels_check(struct kn__elf *e, size_t symtab, const char *const *kernels,
                             size_t kernel_count, size_t *entries_p)
{
    struct kn__symtab st = {.count = 0};
    if (!symtab) {
        if (kernel_count)
            return kn__fail(e, -ENOENT,
                            "kernel '%s' not found: expected a symbol table, found none",
                            kernels[0]);
        *entries_p = 0;
        return 0;
    }
    int rc = kn__symtab_open(e, symtab, &st);
    if (rc < 0)
        return rc;
    size_t entries = 0;
    for (size_t i = 1; i < st.count; i++) {
        const char *entry = NULL;
        rc = kn__symbol_read(e, &st, i, &entry);
        if (rc < 0)
            return rc;
        entries += entry != NULL;
    }
    for (size_t k = 0; k < kernel_count; k++) {
        int found = 0;
        for (size_t i = 1; i < st.count && !found; i++) {
            const char *entry = NULL;
            kn__symbol_read(e, &st, i, &entry); /* read cleanly above */
            found = entry && strcmp(entry, kernels[k]) == 0;
        }
        if (!found) {
            char present[256];
            kn__entries_list(e, &st, present, sizeof(present));
            return kn__fail(e, -ENOENT,
                            "kernel '%s' not found: expected a defined kernel entry symbol, "
                            "found kernels: %s",
                            kernels[k], present);
        }
    }
    *entries_p = entries;
    return 0;
}

int kn_cubin_check(const void *data, size_t size, unsigned int expected_arch,
                   const char *const *kernels, size_t kernel_count, struct kn_cubin_facts *facts_p,
                   char *err, size_t err_len)
{
    struct kn__elf e = {.b = data, .size = size, .err = err, .err_len = err_len};
    if (err && err_len)
        err[0] = '\0';
    if (!data && size)
        return kn__fail(&e, -EINVAL, "no image: expected a buffer, found NULL");
    for (size_t k = 0; k < kernel_count; k++)
        if (!kernels || !kernels[k] || !kernels[k][0])
            return kn__fail(&e, -EINVAL, "kernel name %zu is empty", k);

    unsigned int arch = 0;
    size_t symtab = 0, entries = 0;
    int rc = kn__ident_check(&e);
    if (rc == 0)
        rc = kn__arch_check(&e, expected_arch, &arch);
    if (rc == 0)
        rc = kn__segments_check(&e);
    if (rc == 0)
        rc = kn__sections_find(&e);
    if (rc == 0)
        rc = kn__sections_check(&e, &symtab);
    if (rc == 0)
        rc = kn__kernels_check(&e, symtab, kernels, kernel_count, &entries);
    if (rc < 0)
        return rc;
    if (facts_p) {
        facts_p->arch = arch;
        facts_p->abi_version = e.b[EI_ABIVERSION];
        facts_p->e_flags = e.eh.e_flags;
        facts_p->kernel_count = entries;
    }
    return 0;
}

int kn_cubin_kernels_list(const void *data, size_t size, const char *prefix, const char **names,
                          size_t max, char *err, size_t err_len)
{
    struct kn__elf e = {.b = data, .size = size, .err = err, .err_len = err_len};
    if (err && err_len)
        err[0] = '\0';
    if ((!data && size) || (!names && max))
        return kn__fail(&e, -EINVAL, "no image or no name array: expected buffers, found NULL");
    size_t plen = prefix ? strlen(prefix) : 0;
    unsigned int arch = 0;
    size_t symtab = 0;
    int rc = kn__ident_check(&e);
    if (rc == 0)
        rc = kn__arch_check(&e, 0, &arch);
    if (rc == 0)
        rc = kn__segments_check(&e);
    if (rc == 0)
        rc = kn__sections_find(&e);
    if (rc == 0)
        rc = kn__sections_check(&e, &symtab);
    if (rc < 0 || !symtab)
        return rc;
    struct kn__symtab st = {.count = 0};
    if ((rc = kn__symtab_open(&e, symtab, &st)) < 0)
        return rc;
    size_t found = 0;
    for (size_t i = 1; i < st.count; i++) {
        const char *entry = NULL;
        if ((rc = kn__symbol_read(&e, &st, i, &entry)) < 0)
            return rc;
        if (!entry || strncmp(entry, prefix ? prefix : "", plen) != 0)
            continue;
        if (found < max)
            names[found] = entry;
        found++;
    }
    if (found > INT32_MAX)
        return kn__fail(&e, -E2BIG, "too many kernels: found %zu", found);
    return (int)found;
}

/* ---- parameter tables ---------------------------------------------------- */

/* .nv.info attributes (EIATTR_*), as nvcc 13 writes them: a format byte, an
 * attribute byte, then for EIFMT_SVAL a u16 length and that many bytes, for
 * the other formats a 2-byte value (4 bytes in all). */
#define KN__EIFMT_SVAL 0x04
#define KN__EIATTR_MAX_THREADS 0x05
#define KN__EIATTR_KPARAM_INFO 0x17
#define KN__EIATTR_CBANK_PARAM_SIZE 0x19

static int kn__param_cmp(const void *a, const void *b)
{
    const struct kn_cubin_param *x = a, *y = b;
    return (int)x->ordinal - (int)y->ordinal;
}

/* Reads one .nv.info.<kernel> section into @info. */
static int kn__nvinfo_read(struct kn__elf *e, const Elf64_Shdr *sh, const char *kernel,
                           struct kn_cubin_kernel_info *info)
{
    /* The extent was checked in kn__sections_check. */
    const unsigned char *p = e->b + sh->sh_offset, *end = p + sh->sh_size;
    while (end - p >= 4) {
        unsigned int fmt = p[0], attr = p[1];
        uint16_t v;
        memcpy(&v, p + 2, 2);
        if (fmt != KN__EIFMT_SVAL) {
            if (attr == KN__EIATTR_CBANK_PARAM_SIZE)
                info->param_bytes = v;
            p += 4;
            continue;
        }
        if (end - p - 4 < v)
            return kn__fail(e, -EBADMSG,
                            "malformed cubin: kernel %s's attribute 0x%02x claims %u bytes, "
                            "%td are left in its .nv.info section",
                            kernel, attr, v, end - p - 4);
        const unsigned char *pay = p + 4;
        if (attr == KN__EIATTR_KPARAM_INFO && v >= 12) {
            if (info->nparams == KN_CUBIN_PARAMS_MAX)
                return kn__fail(e, -E2BIG, "kernel %s: more than %d parameters", kernel,
                                KN_CUBIN_PARAMS_MAX);
            struct kn_cubin_param *q = &info->params[info->nparams++];
            uint32_t bits;
            memcpy(&q->ordinal, pay + 4, 2);
            memcpy(&q->offset, pay + 6, 2);
            memcpy(&bits, pay + 8, 4);
            q->size = (uint16_t)(bits >> 18); /* the top 14 bits */
        } else if (attr == KN__EIATTR_MAX_THREADS && v >= 12) {
            uint32_t d[3];
            memcpy(d, pay, 12);
            uint64_t n = (uint64_t)d[0] * d[1] * d[2];
            info->max_threads = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        }
        p = pay + v;
    }
    qsort(info->params, info->nparams, sizeof info->params[0], kn__param_cmp);
    for (size_t i = 0; i < info->nparams; i++)
        if (info->params[i].ordinal != i)
            return kn__fail(e, -EBADMSG,
                            "malformed cubin: kernel %s's parameter ordinals are not 0..%zu "
                            "(found %u at position %zu)",
                            kernel, info->nparams - 1, info->params[i].ordinal, i);
    return 0;
}

int kn_cubin_kernel_info(const void *data, size_t size, const char *kernel,
                         struct kn_cubin_kernel_info *info_p, char *err, size_t err_len)
{
    struct kn__elf e = {.b = data, .size = size, .err = err, .err_len = err_len};
    if (err && err_len)
        err[0] = '\0';
    if ((!data && size) || !kernel || !kernel[0] || !info_p)
        return kn__fail(&e, -EINVAL, "no image, kernel name or result: expected all three");
    unsigned int arch = 0;
    size_t symtab = 0, entries = 0;
    int rc = kn__ident_check(&e);
    if (rc == 0)
        rc = kn__arch_check(&e, 0, &arch);
    if (rc == 0)
        rc = kn__segments_check(&e);
    if (rc == 0)
        rc = kn__sections_find(&e);
    if (rc == 0)
        rc = kn__sections_check(&e, &symtab);
    if (rc == 0)
        rc = kn__kernels_check(&e, symtab, &kernel, 1, &entries);
    if (rc < 0)
        return rc;
    struct kn_cubin_kernel_info info;
    memset(&info, 0, sizeof info);
    char want[160];
    snprintf(want, sizeof want, ".nv.info.%s", kernel);
    for (size_t i = 1; i < e.shnum; i++) {
        Elf64_Shdr sh;
        kn__shdr_read(&e, i, &sh);
        const char *name = kn__str(&e, &e.shstr, sh.sh_name); /* checked above */
        if (!name || strcmp(name, want) != 0 || sh.sh_type == SHT_NOBITS)
            continue;
        if ((rc = kn__nvinfo_read(&e, &sh, kernel, &info)) < 0)
            return rc;
        break;
    }
    *info_p = info;
    return 0;
}
