/* ELF64 reading: every table is bounds-checked against the image size and
 * copied out before use, so a hostile file can neither make us read past its
 * end nor through a misaligned pointer. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int elf_fail(struct lc__err *err, int rc,
                                                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return rc;
}

int lc__elf_range_ok(const struct lc__elf *elf, uint64_t off, uint64_t len)
{
    return off <= elf->size && len <= elf->size - off;
}

static const char *elf_segment_type_name(uint32_t type)
{
    switch (type) {
    case PT_LOAD:
        return "PT_LOAD";
    case PT_DYNAMIC:
        return "PT_DYNAMIC";
    case PT_INTERP:
        return "PT_INTERP";
    case PT_NOTE:
        return "PT_NOTE";
    case PT_PHDR:
        return "PT_PHDR";
    case PT_TLS:
        return "PT_TLS";
    default:
        return "segment";
    }
}

static const char *elf_dyn_tag_name(int64_t tag)
{
    switch (tag) {
    case DT_NEEDED:
        return "DT_NEEDED";
    case DT_SONAME:
        return "DT_SONAME";
    case DT_RPATH:
        return "DT_RPATH";
    case DT_RUNPATH:
        return "DT_RUNPATH";
    case DT_FILTER:
        return "DT_FILTER";
    case DT_AUXILIARY:
        return "DT_AUXILIARY";
    case DT_AUDIT:
        return "DT_AUDIT";
    case DT_DEPAUDIT:
        return "DT_DEPAUDIT";
    default:
        return NULL;
    }
}

/* The identification and file header: what kind of ELF this is. */
static int elf_read_header(struct lc__elf *elf, struct lc__err *err)
{
    const unsigned char *d = elf->data;
    if (elf->size == 0)
        return elf_fail(err, -ENOEXEC, "the file is empty (expected an ELF header)");
    if (elf->size < SELFMAG || memcmp(d, ELFMAG, SELFMAG) != 0) {
        char found[32] = "";
        for (size_t i = 0; i < elf->size && i < SELFMAG; i++)
            snprintf(found + 3 * i, sizeof(found) - 3 * i, "%02x ", d[i]);
        return elf_fail(err, -ENOEXEC,
                        "not an ELF file: expected the magic 7f 45 4c 46, found %s(%zu bytes)",
                        found, elf->size);
    }
    if (elf->size < EI_NIDENT)
        return elf_fail(err, -ENOEXEC, "truncated ELF identification: %zu bytes, expected %d",
                        elf->size, EI_NIDENT);
    if (d[EI_CLASS] == ELFCLASS32)
        return elf_fail(err, -ENOTSUP,
                        "unsupported ELF class ELFCLASS32: linkcheck reads ELFCLASS64 x86-64 only");
    if (d[EI_CLASS] != ELFCLASS64)
        return elf_fail(err, -ENOEXEC, "invalid ELF class %u: expected ELFCLASS64 (2)",
                        d[EI_CLASS]);
    if (d[EI_DATA] == ELFDATA2MSB)
        return elf_fail(err, -ENOTSUP,
                        "unsupported data encoding ELFDATA2MSB (big-endian): linkcheck reads "
                        "little-endian x86-64 only");
    if (d[EI_DATA] != ELFDATA2LSB)
        return elf_fail(err, -ENOEXEC, "invalid ELF data encoding %u: expected ELFDATA2LSB (1)",
                        d[EI_DATA]);
    if (d[EI_VERSION] != EV_CURRENT)
        return elf_fail(err, -ENOEXEC, "invalid ELF identification version %u: expected %d",
                        d[EI_VERSION], EV_CURRENT);
    if (elf->size < sizeof(Elf64_Ehdr))
        return elf_fail(err, -ENOEXEC, "truncated ELF header: %zu bytes, expected %zu", elf->size,
                        sizeof(Elf64_Ehdr));
    memcpy(&elf->eh, d, sizeof(elf->eh));
    if (elf->eh.e_machine != EM_X86_64)
        return elf_fail(err, -ENOTSUP,
                        "unsupported machine %u: linkcheck reads EM_X86_64 (%d) files only",
                        elf->eh.e_machine, EM_X86_64);
    if (elf->eh.e_type != ET_REL && elf->eh.e_type != ET_EXEC && elf->eh.e_type != ET_DYN)
        return elf_fail(err, -ENOTSUP,
                        "unsupported ELF type %u: expected ET_REL, ET_EXEC or ET_DYN",
                        elf->eh.e_type);
    if (elf->eh.e_version != EV_CURRENT)
        return elf_fail(err, -ENOEXEC, "invalid e_version %u: expected %d", elf->eh.e_version,
                        EV_CURRENT);
    return 0;
}

/* Copies @count entries of @entsize bytes at @off into a new array. */
static int elf_copy_table(const struct lc__elf *elf, uint64_t off, size_t count, size_t entsize,
                          void **table_p)
{
    void *table = malloc(count * entsize);
    if (!table)
        return -ENOMEM;
    memcpy(table, elf->data + off, count * entsize);
    *table_p = table;
    return 0;
}

static int elf_read_section_headers(struct lc__elf *elf, struct lc__err *err)
{
    const Elf64_Ehdr *eh = &elf->eh;
    elf->shstrndx = eh->e_shstrndx;
    if (eh->e_shoff == 0) {
        if (eh->e_shnum != 0)
            return elf_fail(err, -ENOEXEC, "e_shnum is %u but e_shoff is 0 (no section headers)",
                            eh->e_shnum);
        elf->shstrndx = SHN_UNDEF;
        return 0;
    }
    if (eh->e_shentsize != sizeof(Elf64_Shdr))
        return elf_fail(err, -ENOEXEC, "e_shentsize is %u, expected %zu", eh->e_shentsize,
                        sizeof(Elf64_Shdr));
    if (!lc__elf_range_ok(elf, eh->e_shoff, sizeof(Elf64_Shdr)))
        return elf_fail(err, -ENOEXEC,
                        "section header table at e_shoff 0x%llx lies past the end of the file "
                        "(0x%zx bytes)",
                        (unsigned long long)eh->e_shoff, elf->size);
    /* Section 0 holds the real counts when they overflow the header fields. */
    Elf64_Shdr first;
    memcpy(&first, elf->data + eh->e_shoff, sizeof(first));
    uint64_t shnum = eh->e_shnum ? eh->e_shnum : first.sh_size;
    if (eh->e_shstrndx == SHN_XINDEX)
        elf->shstrndx = first.sh_link;
    if (shnum > (elf->size - eh->e_shoff) / sizeof(Elf64_Shdr))
        return elf_fail(err, -ENOEXEC,
                        "section header table of %llu entries at 0x%llx runs past the end of the "
                        "file (0x%zx bytes)",
                        (unsigned long long)shnum, (unsigned long long)eh->e_shoff, elf->size);
    elf->shnum = (size_t)shnum;
    if (elf->shnum == 0) {
        elf->shstrndx = SHN_UNDEF;
        return 0;
    }
    if (elf_copy_table(elf, eh->e_shoff, elf->shnum, sizeof(Elf64_Shdr), (void **)&elf->shdrs))
        return elf_fail(err, -ENOMEM, "out of memory copying %zu section headers", elf->shnum);
    return 0;
}

static int elf_read_program_headers(struct lc__elf *elf, struct lc__err *err)
{
    const Elf64_Ehdr *eh = &elf->eh;
    uint64_t phnum = eh->e_phnum;
    if (phnum == PN_XNUM) {
        if (elf->shnum == 0)
            return elf_fail(err, -ENOEXEC,
                            "e_phnum is PN_XNUM but there is no section 0 to hold the count");
        phnum = elf->shdrs[0].sh_info;
    }
    if (phnum == 0)
        return 0;
    if (eh->e_phoff == 0)
        return elf_fail(err, -ENOEXEC, "e_phnum is %llu but e_phoff is 0",
                        (unsigned long long)phnum);
    if (eh->e_phentsize != sizeof(Elf64_Phdr))
        return elf_fail(err, -ENOEXEC, "e_phentsize is %u, expected %zu", eh->e_phentsize,
                        sizeof(Elf64_Phdr));
    if (eh->e_phoff > elf->size || phnum > (elf->size - eh->e_phoff) / sizeof(Elf64_Phdr))
        return elf_fail(err, -ENOEXEC,
                        "program header table of %llu entries at e_phoff 0x%llx runs past the "
                        "end of the file (0x%zx bytes)",
                        (unsigned long long)phnum, (unsigned long long)eh->e_phoff, elf->size);
    elf->phnum = (size_t)phnum;
    if (elf_copy_table(elf, eh->e_phoff, elf->phnum, sizeof(Elf64_Phdr), (void **)&elf->phdrs))
        return elf_fail(err, -ENOMEM, "out of memory copying %zu program headers", elf->phnum);
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type == PT_NULL || ph->p_filesz == 0)
            continue;
        if (!lc__elf_range_ok(elf, ph->p_offset, ph->p_filesz))
            return elf_fail(err, -ENOEXEC,
                            "program header [%zu] (%s) covers file bytes 0x%llx+0x%llx, past the "
                            "end of the file (0x%zx bytes)",
                            i, elf_segment_type_name(ph->p_type), (unsigned long long)ph->p_offset,
                            (unsigned long long)ph->p_filesz, elf->size);
    }
    return 0;
}

/* Section contents and names: every section with file bytes lies inside the
 * file, and every name is a terminated string in the name table. */
static int elf_check_sections(struct lc__elf *elf, struct lc__err *err)
{
    if (elf->shnum == 0)
        return 0;
    for (size_t i = 1; i < elf->shnum; i++) {
        const Elf64_Shdr *sh = &elf->shdrs[i];
        if (sh->sh_type == SHT_NULL || sh->sh_type == SHT_NOBITS || sh->sh_size == 0)
            continue;
        if (!lc__elf_range_ok(elf, sh->sh_offset, sh->sh_size))
            return elf_fail(err, -ENOEXEC,
                            "section [%zu] (type 0x%x) covers file bytes 0x%llx+0x%llx, past the "
                            "end of the file (0x%zx bytes)",
                            i, sh->sh_type, (unsigned long long)sh->sh_offset,
                            (unsigned long long)sh->sh_size, elf->size);
    }
    if (elf->shstrndx == SHN_UNDEF)
        return 0;
    if (elf->shstrndx >= elf->shnum)
        return elf_fail(err, -ENOEXEC, "e_shstrndx is %zu but there are only %zu sections",
                        elf->shstrndx, elf->shnum);
    const Elf64_Shdr *names = &elf->shdrs[elf->shstrndx];
    if (names->sh_type != SHT_STRTAB || names->sh_size == 0 ||
        elf->data[names->sh_offset + names->sh_size - 1] != '\0')
        return elf_fail(err, -ENOEXEC,
                        "section name table [%zu] is not a NUL-terminated SHT_STRTAB (type 0x%x, "
                        "0x%llx bytes)",
                        elf->shstrndx, names->sh_type, (unsigned long long)names->sh_size);
    for (size_t i = 0; i < elf->shnum; i++)
        if (elf->shdrs[i].sh_name >= names->sh_size)
            return elf_fail(err, -ENOEXEC,
                            "section [%zu] name offset 0x%x is past the end of the section name "
                            "table (0x%llx bytes)",
                            i, elf->shdrs[i].sh_name, (unsigned long long)names->sh_size);
    return 0;
}

int lc__elf_vaddr_to_offset(const struct lc__elf *elf, uint64_t vaddr, uint64_t len,
                            uint64_t *off_p)
{
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type != PT_LOAD || vaddr < ph->p_vaddr)
            continue;
        uint64_t delta = vaddr - ph->p_vaddr;
        if (delta > ph->p_filesz || len > ph->p_filesz - delta)
            continue;
        *off_p = ph->p_offset + delta; /* inside the file: segments were checked */
        return 0;
    }
    return -ENOEXEC;
}

/* The dynamic array as the loader sees it: through the PT_LOAD mapping of
 * PT_DYNAMIC's address, not its p_offset, and its strings through DT_STRTAB. */
static int elf_read_dynamic(struct lc__elf *elf, struct lc__err *err)
{
    const Elf64_Phdr *dynamic = NULL;
    for (size_t i = 0; i < elf->phnum; i++) {
        if (elf->phdrs[i].p_type != PT_DYNAMIC)
            continue;
        if (dynamic)
            return elf_fail(err, -ENOEXEC,
                            "more than one PT_DYNAMIC program header; the loader would use only "
                            "one, so the file is ambiguous");
        dynamic = &elf->phdrs[i];
    }
    if (!dynamic)
        return 0;
    size_t count = (size_t)(dynamic->p_filesz / sizeof(Elf64_Dyn));
    uint64_t off;
    if (count == 0 ||
        lc__elf_vaddr_to_offset(elf, dynamic->p_vaddr, count * sizeof(Elf64_Dyn), &off) < 0)
        return elf_fail(err, -ENOEXEC,
                        "PT_DYNAMIC at address 0x%llx (0x%llx bytes) is not inside the file bytes "
                        "of a PT_LOAD segment",
                        (unsigned long long)dynamic->p_vaddr,
                        (unsigned long long)dynamic->p_filesz);
    size_t n = 0;
    while (n < count) {
        Elf64_Dyn d;
        memcpy(&d, elf->data + off + n * sizeof(d), sizeof(d));
        n++;
        if (d.d_tag == DT_NULL)
            break;
    }
    if (elf_copy_table(elf, off, n, sizeof(Elf64_Dyn), (void **)&elf->dyn))
        return elf_fail(err, -ENOMEM, "out of memory copying %zu dynamic entries", n);
    elf->ndyn = n;

    uint64_t strtab, strsz;
    int has_strtab = lc__elf_dyn_get(elf, DT_STRTAB, &strtab) == 0;
    if (has_strtab) {
        if (lc__elf_dyn_get(elf, DT_STRSZ, &strsz) < 0 || strsz == 0)
            return elf_fail(err, -ENOEXEC, "DT_STRTAB without a non-zero DT_STRSZ");
        uint64_t stroff;
        if (lc__elf_vaddr_to_offset(elf, strtab, strsz, &stroff) < 0)
            return elf_fail(err, -ENOEXEC,
                            "DT_STRTAB at address 0x%llx (DT_STRSZ 0x%llx) is not inside the file "
                            "bytes of a PT_LOAD segment",
                            (unsigned long long)strtab, (unsigned long long)strsz);
        if (elf->data[stroff + strsz - 1] != '\0')
            return elf_fail(err, -ENOEXEC,
                            "the dynamic string table at 0x%llx does not end with a NUL byte",
                            (unsigned long long)stroff);
        elf->dynstr = (const char *)elf->data + stroff;
        elf->dynstr_size = (size_t)strsz;
    }
    for (size_t i = 0; i < elf->ndyn; i++) {
        const char *tag = elf_dyn_tag_name(elf->dyn[i].d_tag);
        if (!tag)
            continue;
        if (!has_strtab)
            return elf_fail(err, -ENOEXEC, "%s entry but no DT_STRTAB to hold its string", tag);
        if (elf->dyn[i].d_un.d_val >= elf->dynstr_size)
            return elf_fail(err, -ENOEXEC,
                            "%s string offset 0x%llx is past the end of the dynamic string table "
                            "(DT_STRSZ 0x%zx)",
                            tag, (unsigned long long)elf->dyn[i].d_un.d_val, elf->dynstr_size);
    }
    return 0;
}

int lc__elf_open(struct lc__elf *elf, const void *data, size_t size, struct lc__err *err)
{
    memset(elf, 0, sizeof(*elf));
    elf->data = data;
    elf->size = size;
    err->msg[0] = '\0';
    int rc = elf_read_header(elf, err);
    if (rc == 0)
        rc = elf_read_section_headers(elf, err);
    if (rc == 0)
        rc = elf_read_program_headers(elf, err);
    if (rc == 0)
        rc = elf_check_sections(elf, err);
    if (rc == 0)
        rc = elf_read_dynamic(elf, err);
    if (rc < 0)
        lc__elf_close(elf);
    return rc;
}

void lc__elf_close(struct lc__elf *elf)
{
    free(elf->phdrs);
    free(elf->shdrs);
    free(elf->dyn);
    elf->phdrs = NULL;
    elf->shdrs = NULL;
    elf->dyn = NULL;
    elf->phnum = elf->shnum = elf->ndyn = 0;
    elf->dynstr = NULL;
    elf->dynstr_size = 0;
}

int lc__elf_loader_compatible(const void *data, size_t size)
{
    const unsigned char *d = data;
    if (size < EI_NIDENT || memcmp(d, ELFMAG, SELFMAG) != 0)
        return -ENOEXEC;
    if (d[EI_CLASS] != ELFCLASS64)
        return 0; /* ld.so: "wrong ELF class", keeps searching */
    if (d[EI_DATA] != ELFDATA2LSB || size < sizeof(Elf64_Ehdr))
        return -ENOEXEC;
    Elf64_Half machine;
    memcpy(&machine, d + offsetof(Elf64_Ehdr, e_machine), sizeof(machine));
    return machine == EM_X86_64; /* another machine: skipped the same way */
}

const char *lc__elf_dynstr(const struct lc__elf *elf, uint64_t off)
{
    if (!elf->dynstr || off >= elf->dynstr_size)
        return NULL;
    return elf->dynstr + off;
}

const char *lc__elf_section_name(const struct lc__elf *elf, size_t index)
{
    if (elf->shstrndx == SHN_UNDEF || index >= elf->shnum)
        return NULL;
    const Elf64_Shdr *names = &elf->shdrs[elf->shstrndx];
    return (const char *)elf->data + names->sh_offset + elf->shdrs[index].sh_name;
}

int lc__elf_dyn_get(const struct lc__elf *elf, int64_t tag, uint64_t *value_p)
{
    for (size_t i = 0; i < elf->ndyn; i++) {
        if (elf->dyn[i].d_tag == tag) {
            *value_p = elf->dyn[i].d_un.d_val;
            return 0;
        }
    }
    return -ENOENT;
}

int lc__elf_tag_names_libraries(int64_t tag)
{
    return tag == DT_NEEDED || tag == DT_FILTER || tag == DT_AUXILIARY || tag == DT_AUDIT ||
           tag == DT_DEPAUDIT;
}
