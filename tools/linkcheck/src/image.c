/* The rules on one image, reported: 2 (symbols), 3 (strings) and the
 * interpreter's name, with the chain that reached the image. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Findings of one rule on one object printed before the rest are counted. */
#define IMAGE_PRINT_LIMIT 32
/* How much of a string found in data a report line quotes. */
#define IMAGE_QUOTE_MAX 160
#define IMAGE_QUOTE_LEAD 32

/* ---- rules on one image, reported ---------------------------------------- */

/* What the current image is, for report lines: "" for the file itself,
 * "library libx.so (/path) " for a loaded one. */
struct image_subject {
    struct lc_checker *c;
    size_t obj;
    char *prefix;
    char *chain;
};

static int image_subject_init(struct image_subject *s, struct lc_checker *c, size_t obj)
{
    s->c = c;
    s->obj = obj;
    s->prefix = NULL;
    s->chain = NULL;
    if (obj == 0)
        return (s->prefix = strdup("")) ? 0 : -ENOMEM;
    s->chain = lc__chain(c, obj, NULL);
    if (!s->chain ||
        asprintf(&s->prefix, "library %s (%s) ", c->objs[obj].name, c->objs[obj].path) < 0) {
        free(s->chain);
        s->prefix = s->chain = NULL;
        return -ENOMEM;
    }
    return 0;
}

static void image_subject_free(struct image_subject *s)
{
    free(s->prefix);
    free(s->chain);
}

static void image_on_symbol(void *arg, const char *name, int defined, const char *pattern,
                              const char *table)
{
    struct image_subject *s = arg;
    struct lc_checker *c = s->c;
    c->findings++;
    c->symbols_forbidden++;
    /* Rule 3 leaves these names to this rule; a few are plenty to remember. */
    if (c->reported_symbols.n < 256 && !lc__strv_has(&c->reported_symbols, name))
        (void)lc__strv_push(&c->reported_symbols, name, strlen(name));
    if (++c->printed > IMAGE_PRINT_LIMIT)
        return;
    char *shown = lc__escape(name, strlen(name), IMAGE_QUOTE_MAX);
    lc__say(c, LC_SEVERITY_FINDING, "%s%s forbidden symbol %s (pattern '%s') in %s%s%s",
                s->prefix, defined ? "defines" : "imports", shown ? shown : "?", pattern, table,
                s->chain ? ", reached via " : "", s->chain ? s->chain : "");
    free(shown);
}

static void image_on_string(void *arg, enum lc__string_kind kind, const char *str, size_t len,
                              size_t stem_pos, const char *stem, const char *encoding,
                              const char *where, uint64_t offset)
{
    struct image_subject *s = arg;
    struct lc_checker *c = s->c;
    c->findings++;
    if (kind == LC__STRING_SYMBOL)
        c->symbol_strings_forbidden++;
    else
        c->strings_forbidden++;
    if (++c->printed > IMAGE_PRINT_LIMIT)
        return;
    /* A long string is quoted from a little before the stem. */
    size_t from = 0;
    if (len > IMAGE_QUOTE_MAX && stem_pos > IMAGE_QUOTE_LEAD)
        from = stem_pos - IMAGE_QUOTE_LEAD;
    char *shown = lc__escape(str + from, len - from, IMAGE_QUOTE_MAX);
    if (kind == LC__STRING_SYMBOL)
        lc__say(c, LC_SEVERITY_FINDING,
                "%snames CUDA entry point in string \"%s\" (pattern '%s', what dlsym() would "
                "be asked for) in %s at file offset 0x%llx%s%s",
                s->prefix, shown ? shown : "?", stem, where, (unsigned long long)offset,
                s->chain ? ", reached via " : "", s->chain ? s->chain : "");
    else
        lc__say(c, LC_SEVERITY_FINDING,
                "%snames forbidden library in %s%sstring \"%s%s\" (stem '%s') in %s at file "
                "offset 0x%llx%s%s",
                s->prefix, encoding, encoding[0] ? " " : "", from ? "..." : "",
                shown ? shown : "?", stem, where, (unsigned long long)offset,
                s->chain ? ", reached via " : "", s->chain ? s->chain : "");
    free(shown);
}

/* File offsets of the names the dynamic section hands the loader, which
 * rule 1 reports; rule 3 does not report them twice. */
static int image_loader_names(const struct lc__elf *elf, uint64_t **offs_p, size_t *n_p)
{
    uint64_t *offs = NULL;
    size_t n = 0;
    uint64_t strtab;
    if (elf->dynstr && lc__elf_dyn_get(elf, DT_STRTAB, &strtab) == 0) {
        uint64_t base = (uint64_t)((const unsigned char *)elf->dynstr - elf->data);
        offs = malloc((elf->ndyn + 1) * sizeof(*offs));
        if (!offs)
            return -ENOMEM;
        for (size_t i = 0; i < elf->ndyn; i++) {
            int64_t tag = elf->dyn[i].d_tag;
            if ((lc__elf_tag_names_libraries(tag) || tag == DT_SONAME) &&
                elf->dyn[i].d_un.d_val < elf->dynstr_size)
                offs[n++] = base + elf->dyn[i].d_un.d_val;
        }
    }
    *offs_p = offs;
    *n_p = n;
    return 0;
}

static void image_print_overflow(struct lc_checker *c, const char *what)
{
    if (c->printed > IMAGE_PRINT_LIMIT)
        lc__say(c, LC_SEVERITY_FINDING, "%zu more %s not shown",
                    c->printed - IMAGE_PRINT_LIMIT, what);
}

/* Rules 2 and 3 on object @obj's image, as the flags ask. */
int lc__image_rules(struct lc_checker *c, size_t obj, const struct lc__elf *elf,
                               int symbols, int strings)
{
    struct image_subject s;
    if (image_subject_init(&s, c, obj) < 0)
        return -ENOMEM;
    int rc = 0;
    if (symbols) {
        struct lc__err err;
        c->printed = 0;
        int n = lc__rule_symbols(elf, image_on_symbol, &s, &err);
        image_print_overflow(c, "forbidden symbols");
        if (n < 0) {
            lc__say(c, LC_SEVERITY_ERROR, "%smalformed ELF: %s%s%s", s.prefix, err.msg,
                        s.chain ? ", reached via " : "", s.chain ? s.chain : "");
            rc = n;
        } else {
            c->symbols_examined += n;
        }
    }
    if (strings) {
        c->printed = 0;
        struct lc__string_skip skip = {NULL, 0, (const char *const *)c->reported_symbols.v,
                                       c->reported_symbols.n};
        uint64_t *offs = NULL;
        long long n = image_loader_names(elf, &offs, &skip.noffsets);
        skip.offsets = offs;
        if (n == 0)
            n = lc__rule_strings(elf, (const char *const *)c->stems.v, c->stems.n, &skip,
                                 image_on_string, &s);
        free(offs);
        image_print_overflow(c, "strings naming forbidden libraries or CUDA entry points");
        if (n < 0 && rc == 0)
            rc = (int)n;
        else if (n > 0)
            c->bytes_scanned += n;
    }
    lc__strv_free(&c->reported_symbols);
    image_subject_free(&s);
    return rc;
}

/* The interpreter is loaded before anything else: its name counts too. */
void lc__interp(struct lc_checker *c, const struct lc__elf *elf)
{
    for (size_t i = 0; i < elf->phnum; i++) {
        const Elf64_Phdr *ph = &elf->phdrs[i];
        if (ph->p_type != PT_INTERP || ph->p_filesz == 0)
            continue;
        const char *s = (const char *)elf->data + ph->p_offset;
        size_t len = strnlen(s, (size_t)ph->p_filesz);
        char *name = strndup(s, len);
        const char *stem = name ? lc__checker_library_stem(c, name) : NULL;
        if (stem) {
            char *shown = lc__escape(name, len, IMAGE_QUOTE_MAX);
            c->findings++;
            c->libraries_forbidden++;
            lc__say(c, LC_SEVERITY_FINDING,
                        "its interpreter (PT_INTERP) %s is a forbidden library (stem '%s')",
                        shown ? shown : "?", stem);
            free(shown);
        }
        free(name);
    }
}

