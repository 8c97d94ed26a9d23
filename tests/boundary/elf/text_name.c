/* The driver's name inside executable code (.text), not data. */
#include <stdio.h>

__asm__(".pushsection .text\n"
        ".globl bd_text_name\n"
        "bd_text_name:\n"
        ".asciz \"libcuda.so.1\"\n"
        ".popsection\n");

extern const char bd_text_name[];

int main(void)
{
    printf("%c\n", bd_text_name[0]);
    return 0;
}
