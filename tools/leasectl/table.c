/* Human tables: columns as wide as their widest cell, two spaces apart,
 * numbers right-aligned. See table.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

void lctl_table_init(struct lctl_table *t, const char *indent, const char *const *head)
{
    memset(t, 0, sizeof *t);
    t->indent = indent;
    while (head[t->ncols] && t->ncols < LCTL_TABLE_COLS) {
        t->head[t->ncols] = head[t->ncols];
        t->ncols++;
    }
}

void lctl_table_row(struct lctl_table *t, ...)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char *(*rows)[LCTL_TABLE_COLS] = realloc(t->rows, cap * sizeof *rows);
        if (!rows) {
            t->failed = 1;
            return;
        }
        t->rows = rows;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, t);
    for (unsigned c = 0; c < t->ncols; c++) {
        const char *v = va_arg(ap, const char *);
        t->rows[t->nrows][c] = strdup(v ? v : "");
    }
    va_end(ap);
    t->nrows++;
}

/* A cell is a number when it starts with a digit or is "-". */
static int lctl__numeric(const char *s)
{
    return (s[0] >= '0' && s[0] <= '9') || strcmp(s, "-") == 0;
}

void lctl_table_print(struct lctl_table *t, FILE *out)
{
    size_t w[LCTL_TABLE_COLS] = {0};
    for (unsigned c = 0; c < t->ncols; c++) {
        w[c] = strlen(t->head[c]);
        for (size_t r = 0; r < t->nrows; r++)
            if (t->rows[r][c] && strlen(t->rows[r][c]) > w[c])
                w[c] = strlen(t->rows[r][c]);
    }
    fputs(t->indent, out);
    for (unsigned c = 0; c < t->ncols; c++) {
        if (c + 1 < t->ncols)
            fprintf(out, "%-*s  ", (int)w[c], t->head[c]);
        else
            fputs(t->head[c], out);
    }
    fputc('\n', out);
    for (size_t r = 0; r < t->nrows; r++) {
        fputs(t->indent, out);
        for (unsigned c = 0; c < t->ncols; c++) {
            const char *v = t->rows[r][c] ? t->rows[r][c] : "?";
            int right = c > 0 && lctl__numeric(v);
            if (c + 1 == t->ncols && !right)
                fputs(v, out);
            else
                fprintf(out, right ? "%*s" : "%-*s", (int)w[c], v);
            if (c + 1 < t->ncols)
                fputs("  ", out);
        }
        fputc('\n', out);
    }
}

void lctl_table_free(struct lctl_table *t)
{
    for (size_t r = 0; r < t->nrows; r++)
        for (unsigned c = 0; c < t->ncols; c++)
            free(t->rows[r][c]);
    free(t->rows);
    memset(t, 0, sizeof *t);
}
