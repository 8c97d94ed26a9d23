/* Linked with -Wl,--audit (DT_AUDIT) or -Wl,--depaudit naming the driver:
 * ld.so loads audit modules before anything else. */
#include <stdio.h>

int main(int argc, char **argv)
{
    printf("%d %s\n", argc, argv[0]);
    return 0;
}
