/* The driver's name as wide text, converted to bytes only at run time:
 * BD_WIDE 16 (UTF-16LE), 32 (UTF-32LE) or 61 (UTF-16BE, spelled out). */
#include <stdio.h>
#include <uchar.h>

#if BD_WIDE == 16
__attribute__((used)) const char16_t bd_wide_name[] = u"libcuda.so.1";
#elif BD_WIDE == 32
__attribute__((used)) const char32_t bd_wide_name[] = U"libcuda.so.1";
#else
__attribute__((used)) const unsigned char bd_wide_name[] = {
    0, 'l', 0, 'i', 0, 'b', 0, 'c', 0, 'u', 0, 'd', 0, 'a', 0, '.', 0, 's', 0, 'o', 0, '.', 0, '1',
    0, 0};
#endif

int main(void)
{
    printf("%zu\n", sizeof(bd_wide_name));
    return 0;
}
