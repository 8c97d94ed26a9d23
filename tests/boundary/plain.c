/* The control: compiles with stagingd's flags, so a failure of
 * includes_cuda.c is the poison header firing, not a broken command. */
#include <stdint.h>
int boundary_plain(void);
int boundary_plain(void)
{
    return (int)sizeof(uint64_t);
}
