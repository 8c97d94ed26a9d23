/* The driver's name as the descriptor of an ELF note (SHT_NOTE). */
#include <stdint.h>
#include <stdio.h>

struct bd_note {
    uint32_t namesz, descsz, type;
    char name[8];
    char desc[16];
};

__attribute__((section(".note.lease.bypass"), used, aligned(4))) const struct bd_note bd_note = {
    6, 13, 1, "lease", "libcuda.so.1"};

int main(void)
{
    printf("%u\n", bd_note.type);
    return 0;
}
