/* kn_cubin: checks that a buffer is a loadable, SASS-only CUDA cubin for one
 * GPU architecture that defines the kernels the agent will look up. Used at
 * build time by kernels/tools/cubincheck and again by the agent before it
 * hands an embedded image to the driver. Pure C over <elf.h>; every offset
 * and size read from the buffer is bounds-checked before use. */
#ifndef KERNELS_CUBIN_H
#define KERNELS_CUBIN_H

#include <stddef.h>
#include <stdint.h>

#define KN_EM_CUDA 190         /* e_machine of every cubin */
#define KN_CUDA_ABI_V1 7       /* e_ident[EI_ABIVERSION]: SM in e_flags bits 0-7 */
#define KN_CUDA_ABI_V2 8       /* e_ident[EI_ABIVERSION]: SM in e_flags bits 8-15 */
#define KN_STO_CUDA_ENTRY 0x10 /* st_other bit nvcc sets on __global__ entry points */

/* What a successful check learnt about the image. */
struct kn_cubin_facts {
    unsigned int arch;        /* SM as digits: 90 = sm_90 */
    unsigned int abi_version; /* e_ident[EI_ABIVERSION] */
    uint32_t e_flags;
    size_t kernel_count; /* kernel entry symbols in .symtab */
};

/* The SM arch (digits) encoded in @e_flags under CUDA ELF ABI @abi_version.
 * Returns 0 and writes *arch_p, -ENOTSUP for an unknown ABI version, or
 * -EBADMSG when the field is zero. */
int kn_cubin_arch_decode(unsigned int abi_version, uint32_t e_flags, unsigned int *arch_p);

/* Checks @size bytes at @data: an ELF64 little-endian ET_EXEC with e_machine
 * EM_CUDA, arch @expected_arch (0: any), every segment, section header,
 * name and symbol in bounds, no PTX or fatbin section, and each of @kernels
 * (@kernel_count names) defined as a kernel entry function.
 * Returns 0 and writes *facts_p (may be NULL), or a negative errno and a
 * one-line message saying what was expected and what was found in @err:
 *   -ENOEXEC  not a linked CUDA cubin (not ELF, fatbin, PTX text, other machine, ET_REL)
 *   -EBADMSG  truncated or malformed ELF
 *   -ENOTSUP  another GPU architecture, or an unknown CUDA ELF ABI version
 *   -EACCES   a PTX or fatbin section (something the driver could JIT-compile)
 *   -ENOENT   a kernel is missing
 *   -EINVAL   bad arguments */
int kn_cubin_check(const void *data, size_t size, unsigned int expected_arch,
                   const char *const *kernels, size_t kernel_count, struct kn_cubin_facts *facts_p,
                   char *err, size_t err_len);

/* Lists the kernel entry symbols (defined, global, STT_FUNC with
 * KN_STO_CUDA_ENTRY) of the cubin in @size bytes at @data whose names start
 * with @prefix ("" or NULL: all), reading it with the same bounds checks as
 * kn_cubin_check (any arch). Writes up to @max names to @names, pointers into
 * @data (valid while it is). Returns the number of matching kernels, which may
 * exceed @max, or a negative errno and a message in @err as kn_cubin_check. */
int kn_cubin_kernels_list(const void *data, size_t size, const char *prefix, const char **names,
                          size_t max, char *err, size_t err_len);

/* One kernel parameter as the cubin's .nv.info.<kernel> EIATTR_KPARAM_INFO
 * records it (what the driver copies at launch). */
struct kn_cubin_param {
    uint16_t ordinal; /* 0..n-1, the C parameter's position */
    uint16_t offset;  /* in the parameter buffer */
    uint16_t size;    /* bytes */
};

#define KN_CUBIN_PARAMS_MAX 256

/* What a cubin says about launching one kernel. */
struct kn_cubin_kernel_info {
    size_t nparams;
    struct kn_cubin_param params[KN_CUBIN_PARAMS_MAX]; /* by ordinal */
    uint32_t param_bytes; /* EIATTR_CBANK_PARAM_SIZE; 0 when absent */
    uint32_t max_threads; /* the launch bound (EIATTR_MAX_THREADS, x*y*z); 0: none */
};

/* Reads kernel @kernel's parameter table and launch bound from the cubin
 * in @size bytes at @data, with kn_cubin_check's bounds checks (any arch).
 * A kernel without a .nv.info.<kernel> section has no parameters. Returns
 * 0 and writes *@info_p, or a negative errno and a message in @err:
 * kn_cubin_check's codes (-ENOENT: no such kernel entry), -EBADMSG (an
 * attribute cut short, ordinals that are not 0..n-1), -E2BIG (over
 * KN_CUBIN_PARAMS_MAX parameters). */
int kn_cubin_kernel_info(const void *data, size_t size, const char *kernel,
                         struct kn_cubin_kernel_info *info_p, char *err, size_t err_len);

#endif /* KERNELS_CUBIN_H */
