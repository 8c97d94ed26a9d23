/* A second translation unit including every lease-types header, built with
 * stricter flags than the project's (see CMakeLists.txt): it proves the
 * headers define nothing that clashes at link time and stay clean under
 * -pedantic -Wconversion -Wsign-conversion -Wcast-align=strict. */
#include "lease_types/lease_types.h"
#include "lease_types/socket.h"

#include "second_tu.h"

int lt_test_second_tu_validate(const void *buf, size_t len)
{
    uint16_t type = 0;
    enum lt_error e = lt_validate(buf, len, &type);
    return e == LT_OK ? (int)type : -(int)e;
}
