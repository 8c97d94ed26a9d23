/* What second_tu.c exports to the suite. */
#ifndef TEST_LEASE_TYPES_SECOND_TU_H
#define TEST_LEASE_TYPES_SECOND_TU_H

#include <stddef.h>

/* lt_validate() compiled in another TU: the type on success, else -code. */
int lt_test_second_tu_validate(const void *buf, size_t len);

#endif
