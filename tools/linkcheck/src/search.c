/* The pieces of ld.so's library search that are pure string work: dynamic
 * string tokens and /etc/ld.so.conf. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ld.so.conf include nesting deeper than this is a loop, not a layout. */
#define SEARCH_LDCONF_MAX_DEPTH 16

int lc__strv_push(struct lc__strv *sv, const char *s, size_t len)
{
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 8;
        char **v = realloc(sv->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        sv->v = v;
        sv->cap = cap;
    }
    char *copy = strndup(s, len);
    if (!copy)
        return -ENOMEM;
    sv->v[sv->n++] = copy;
    return 0;
}

void lc__strv_free(struct lc__strv *sv)
{
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = sv->cap = 0;
}

/* Length of the token @name at @p ("ORIGIN" or "{ORIGIN}"), or 0 when @p
 * does not hold it; like ld.so, a bare token must not run on into more
 * identifier characters. */
static size_t search_dst_len(const char *p, const char *name)
{
    size_t n = strlen(name);
    if (p[0] == '{')
        return strncmp(p + 1, name, n) == 0 && p[n + 1] == '}' ? n + 2 : 0;
    if (strncmp(p, name, n) != 0 || isalnum((unsigned char)p[n]) || p[n] == '_')
        return 0;
    return n;
}

int lc__dst_expand(const char *entry, const struct lc__dst *dst, char **out_p, int *uses_origin_p)
{
    size_t cap = strlen(entry) + 1, len = 0;
    int uses_origin = 0;
    char *out = malloc(cap);
    if (!out)
        return -ENOMEM;
    for (const char *p = entry; *p;) {
        const char *repl = NULL;
        size_t skip = 0;
        if (*p == '$') {
            if ((skip = search_dst_len(p + 1, "ORIGIN"))) {
                if (!dst->origin) {
                    free(out);
                    return -ENOENT; /* ld.so drops the element */
                }
                repl = dst->origin;
                uses_origin = 1;
            } else if ((skip = search_dst_len(p + 1, "LIB"))) {
                repl = dst->lib;
            } else if ((skip = search_dst_len(p + 1, "PLATFORM"))) {
                repl = dst->platform;
            }
        }
        if (!repl) {
            if (len + 2 > cap) {
                char *grown = realloc(out, cap * 2);
                if (!grown) {
                    free(out);
                    return -ENOMEM;
                }
                out = grown;
                cap *= 2;
            }
            out[len++] = *p++;
            continue;
        }
        size_t rlen = strlen(repl);
        if (len + rlen + 1 > cap) {
            size_t want = cap * 2 > len + rlen + 1 ? cap * 2 : len + rlen + 1;
            char *grown = realloc(out, want);
            if (!grown) {
                free(out);
                return -ENOMEM;
            }
            out = grown;
            cap = want;
        }
        memcpy(out + len, repl, rlen);
        len += rlen;
        p += 1 + skip;
    }
    out[len] = '\0';
    *out_p = out;
    *uses_origin_p = uses_origin;
    return 0;
}

/* One directory line: "dir", "dir=TYPE" (old syntax), trailing '/' dropped. */
static int search_ldconf_add_dir(char *line, struct lc__strv *dirs)
{
    char *eq = strchr(line, '=');
    if (eq)
        *eq = '\0';
    size_t len = strlen(line);
    while (len > 0 && isspace((unsigned char)line[len - 1]))
        len--;
    while (len > 1 && line[len - 1] == '/')
        len--;
    if (len == 0)
        return 0;
    return lc__strv_push(dirs, line, len);
}

/* An include pattern: relative to the including file's directory, absolute
 * ones under @root. Files are read in glob's sorted order, as ldconfig does. */
static int search_ldconf_include(const char *root, const char *from, const char *pattern, int depth,
                                 struct lc__strv *dirs)
{
    char *full = NULL;
    int n;
    if (pattern[0] == '/') {
        n = asprintf(&full, "%s%s", root ? root : "", pattern);
    } else {
        const char *slash = strrchr(from, '/');
        int dirlen = slash ? (int)(slash - from) : 1;
        n = asprintf(&full, "%.*s/%s", dirlen, slash ? from : ".", pattern);
    }
    if (n < 0)
        return -ENOMEM;
    glob_t g;
    int rc = 0;
    int grc = glob(full, 0, NULL, &g);
    free(full);
    if (grc == GLOB_NOSPACE)
        return -ENOMEM;
    if (grc != 0)
        return 0; /* no match or unreadable: nothing to add */
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        rc = lc__ldconf_parse_file(root, g.gl_pathv[i], depth + 1, dirs);
    globfree(&g);
    return rc;
}

int lc__ldconf_parse_file(const char *root, const char *path, int depth, struct lc__strv *dirs)
{
    if (depth > SEARCH_LDCONF_MAX_DEPTH)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        *strchrnul(line, '#') = '\0';
        line[strcspn(line, "\n")] = '\0';
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            continue;
        if (strncmp(p, "include", 7) == 0 && (p[7] == ' ' || p[7] == '\t')) {
            char *save = NULL;
            for (char *pat = strtok_r(p + 8, " \t", &save); pat && rc == 0;
                 pat = strtok_r(NULL, " \t", &save))
                rc = search_ldconf_include(root, path, pat, depth, dirs);
        } else if (strncasecmp(p, "hwcap", 5) == 0 && (p[5] == ' ' || p[5] == '\t')) {
            continue; /* long obsolete; ldconfig ignores it too */
        } else {
            rc = search_ldconf_add_dir(p, dirs);
        }
    }
    free(line);
    fclose(f);
    return rc;
}

int lc__ldconf_load(const char *root, struct lc__strv *dirs)
{
    char *path = NULL;
    if (asprintf(&path, "%s/etc/ld.so.conf", root ? root : "") < 0)
        return -ENOMEM;
    int rc = lc__ldconf_parse_file(root, path, 0, dirs);
    free(path);
    return rc;
}
