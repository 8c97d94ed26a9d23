/* Needs libprec.so; its RUNPATH says where to look. */
#include <stdio.h>

int bd_prec(void);

int main(void)
{
    printf("%d\n", bd_prec());
    return 0;
}
