/* Needs the family library under whatever name it was linked against. */
#include <stdio.h>

int bd_family_marker(void);

int main(void)
{
    printf("%d\n", bd_family_marker());
    return 0;
}
