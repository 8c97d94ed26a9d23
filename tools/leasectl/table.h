/* leasectl's human tables (table.c): a header row and rows of cells. */
#ifndef LEASECTL_TABLE_H
#define LEASECTL_TABLE_H

#include <stddef.h>
#include <stdio.h>

#define LCTL_TABLE_COLS 14

struct lctl_table {
    const char *indent;
    const char *head[LCTL_TABLE_COLS];
    unsigned ncols;
    char *(*rows)[LCTL_TABLE_COLS]; /* copies, freed by lctl_table_free */
    size_t nrows, cap;
    int failed; /* a row was lost for memory: printed tables are then short */
};

/* @head: a NULL-terminated list of column titles (kept by pointer). */
void lctl_table_init(struct lctl_table *t, const char *indent, const char *const *head);
/* One row: exactly ncols strings (NULL prints as ""), copied. */
void lctl_table_row(struct lctl_table *t, ...);
void lctl_table_print(struct lctl_table *t, FILE *out);
void lctl_table_free(struct lctl_table *t);

#endif /* LEASECTL_TABLE_H */
