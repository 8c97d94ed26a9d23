/* Rule 4: a program's imports checked against an explicit allow-list. For
 * stagingd the list never holds dlopen or dlmopen, so a way into the loader
 * that rule 3 cannot read (a name built at run time) fails the build the day
 * it is written; dlsym stays (jemalloc asks it for pthread_create) and rule 3
 * refuses it a CUDA name. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Findings of this rule printed before the rest are counted. */
#define IMPORTS_PRINT_LIMIT 32

/* The loader's entry points: linked in statically, they are imports too. */
static const char *const imports_loader_entries[] = {
    "dlopen",  "dlmopen",     "dlsym",        "dlvsym",        "__libc_dlopen_mode",
    "_dl_open", "__libc_dlsym", "__libc_dlvsym", "_dl_sym",       "_dl_vsym",
};

static int imports_line_ok(const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '*')
            return p[1] == '\0' && p != s;
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '$' && *p != '@')
            return 0;
    }
    return 1;
}

int lc__imports_load(struct lc_checker *c, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0, lineno = 0;
    struct lc__strv list = {0};
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        lineno++;
        *strchrnul(line, '#') = '\0';
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        size_t len = strlen(p);
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            p[--len] = '\0';
        if (len == 0)
            continue;
        if (!imports_line_ok(p)) {
            fprintf(stderr,
                    "linkcheck: error %s:%d: expected one symbol name (a trailing '*' allowed), "
                    "found '%s'\n",
                    path, lineno, p);
            rc = -EINVAL;
            break;
        }
        rc = lc__strv_push(&list, p, len);
    }
    free(line);
    fclose(f);
    char *file = rc == 0 ? strdup(path) : NULL;
    if (rc == 0 && !file)
        rc = -ENOMEM;
    if (rc < 0) {
        lc__strv_free(&list);
        return rc;
    }
    lc__strv_free(&c->imports);
    free(c->imports_file);
    c->imports = list;
    c->imports_file = file;
    return 0;
}

int lc_checker_allow_imports(struct lc_checker *checker, const char *path)
{
    return lc__imports_load(checker, path);
}

static int imports_allowed(const struct lc_checker *c, const char *name)
{
    for (size_t i = 0; i < c->imports.n; i++) {
        const char *a = c->imports.v[i];
        size_t n = strlen(a);
        if (a[n - 1] == '*' ? strncmp(name, a, n - 1) == 0 : strcmp(name, a) == 0)
            return 1;
    }
    return 0;
}

struct imports_walk {
    struct lc_checker *c;
    size_t printed;
};

/* Reports @what ("imports dlopen"), a new string this takes. */
static void imports_refuse(struct imports_walk *w, char *what)
{
    struct lc_checker *c = w->c;
    c->findings++;
    c->imports_refused++;
    if (++w->printed <= IMPORTS_PRINT_LIMIT)
        lc__say(c, LC_SEVERITY_FINDING,
                "%s, which is not in its allowed imports (%s); a function that can reach the "
                "loader never belongs there, anything else may be added",
                what ? what : "imports a symbol", c->imports_file);
    free(what);
}

static void imports_on_dynsym(void *arg, const char *name, int defined)
{
    struct imports_walk *w = arg;
    if (defined || imports_allowed(w->c, name))
        return;
    char *shown = lc__escape(name, strlen(name), 160), *what = NULL;
    if (asprintf(&what, "imports %s", shown ? shown : "?") < 0)
        what = NULL;
    free(shown);
    imports_refuse(w, what);
}

static void imports_on_symbol(void *arg, const char *name, int defined, const char *pattern,
                              const char *table)
{
    struct imports_walk *w = arg;
    (void)pattern;
    if (!defined || imports_allowed(w->c, name))
        return;
    for (size_t i = 0; i < sizeof(imports_loader_entries) / sizeof(char *); i++) {
        if (strcmp(name, imports_loader_entries[i]) != 0)
            continue;
        char *what = NULL;
        if (asprintf(&what, "links in the loader's %s (defined in %s, statically)", name,
                     table) < 0)
            what = NULL;
        imports_refuse(w, what);
    }
}

int lc__rule_imports(struct lc_checker *c, const struct lc__elf *elf)
{
    struct imports_walk w = {c, 0};
    struct lc__err err;
    int rc = lc__rule_dynamic_symbols(elf, imports_on_dynsym, &w, &err);
    if (rc >= 0)
        rc = lc__rule_every_symbol(elf, imports_on_symbol, &w, &err);
    if (rc < 0) {
        lc__say(c, LC_SEVERITY_ERROR, "malformed ELF: %s", err.msg);
        return rc;
    }
    if (w.printed > IMPORTS_PRINT_LIMIT)
        lc__say(c, LC_SEVERITY_FINDING, "%zu more imports not allowed not shown",
                w.printed - IMPORTS_PRINT_LIMIT);
    return 0;
}
