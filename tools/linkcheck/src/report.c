/* Report lines: "linkcheck: <WORD> <file>: <message>", quoting and the
 * chain of objects that reached a finding. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linkcheck/forbidden.h"

static const char *report_severity_word(enum lc_severity severity)
{
    switch (severity) {
    case LC_SEVERITY_FINDING:
        return "FAIL";
    case LC_SEVERITY_WARNING:
        return "warning";
    case LC_SEVERITY_ERROR:
        return "error";
    case LC_SEVERITY_OK:
        return "OK";
    case LC_SEVERITY_INFO:
    default:
        return "info";
    }
}

void lc__say(struct lc_checker *c, enum lc_severity severity, const char *fmt, ...)
{
    if (!c->report)
        return;
    if (severity == LC_SEVERITY_INFO && !(c->flags & LC_FLAG_VERBOSE))
        return;
    char *msg = NULL, *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0 || asprintf(&line, "linkcheck: %s %s: %s", report_severity_word(severity), c->file,
                          msg) < 0) {
        c->report(c->report_arg, LC_SEVERITY_ERROR, "linkcheck: error: out of memory reporting");
        free(msg);
        return;
    }
    c->report(c->report_arg, severity, line);
    free(msg);
    free(line);
}

char *lc__escape(const char *s, size_t len, size_t max)
{
    size_t shown = len < max ? len : max;
    char *out = malloc(shown * 4 + 4);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < shown; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            out[o++] = (char)ch;
        else
            o += (size_t)sprintf(out + o, "\\x%02x", ch);
    }
    if (shown < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

char *lc__chain(const struct lc_checker *c, size_t i, const char *leaf)
{
    size_t depth = 0;
    for (size_t j = i; j != LC__NONE; j = c->objs[j].parent)
        depth++;
    size_t *path = malloc(depth * sizeof(*path));
    if (!path)
        return NULL;
    size_t k = depth;
    for (size_t j = i; j != LC__NONE; j = c->objs[j].parent)
        path[--k] = j;
    char *out = strdup(lc_path_basename(c->objs[0].name));
    for (size_t d = 1; d < depth && out; d++) {
        const struct lc__obj *o = &c->objs[path[d]];
        char *next = NULL;
        if (asprintf(&next, "%s -> %s (%s)", out, o->name, o->path) < 0)
            next = NULL;
        free(out);
        out = next;
    }
    if (out && leaf) {
        char *next = NULL;
        if (asprintf(&next, "%s -> %s", out, leaf) < 0)
            next = NULL;
        free(out);
        out = next;
    }
    free(path);
    return out;
}

