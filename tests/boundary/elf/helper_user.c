/* Needs libhelper.so (or libshim.so): nothing in this program is CUDA. */
#include <stdio.h>

int bd_helper_start(void);

int main(void)
{
    printf("%d\n", bd_helper_start());
    return 0;
}
