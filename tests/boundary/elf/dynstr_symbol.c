/* A library that exports a symbol named "libcuda.so.1": the name sits in
 * .dynstr (and .strtab), where a scan of data sections never looks. */
#define BD_API __attribute__((visibility("default")))

BD_API int bd_hidden_name __asm__("libcuda.so.1");
int bd_hidden_name = 1;
