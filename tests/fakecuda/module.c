/* fakecuda: modules, functions and launches. A module is a cubin: its kernel
 * names come from kernels/cubin/cubin.c's checked reader, its arch must be
 * the fake device's, and each kernel's parameter layout, launch bound,
 * register count and static shared memory are read from its .nv.info and
 * .nv.shared sections, as the driver reads them. A launch copies the
 * parameters as the driver does and queues the kernel's C emulation
 * (kernels.c), which must agree with the cubin's layout. */
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "kernels/cubin.h"

#define FK_IMAGE_MAX (256u << 20) /* larger "cubins" are refused, not read */
#define FK_KERNELS_MAX 256
#define FK_STATIC_SMEM_RESERVED 1024u /* counted in .nv.shared.<kernel>, not in the attribute */
#define FK_SMEM_PER_BLOCK 49152u      /* without the opt-in attribute */

/* .nv.info attributes (EIATTR_*), as nvcc 13 writes them. */
#define FK_EIFMT_SVAL 0x04
#define FK_EIFMT_HVAL 0x03
#define FK_EIATTR_MAX_THREADS 0x05
#define FK_EIATTR_KPARAM_INFO 0x17
#define FK_EIATTR_CBANK_PARAM_SIZE 0x19
#define FK_EIATTR_REGCOUNT 0x2f

/* ---- a bounds-checked view of the ELF sections ---- */

struct fk_elf {
    const unsigned char *b;
    size_t size;
    Elf64_Ehdr eh;
    Elf64_Shdr shstr;
};

static int fk_in(size_t size, uint64_t off, uint64_t len)
{
    return off <= size && len <= size - off;
}

static int fk_shdr(const struct fk_elf *e, size_t i, Elf64_Shdr *sh)
{
    uint64_t off = e->eh.e_shoff + (uint64_t)i * sizeof(*sh);
    if (i >= e->eh.e_shnum || !fk_in(e->size, off, sizeof(*sh)))
        return -1;
    memcpy(sh, e->b + off, sizeof(*sh));
    return 0;
}

static const char *fk_str(const struct fk_elf *e, const Elf64_Shdr *tab, uint32_t off)
{
    if (tab->sh_type == SHT_NOBITS || !fk_in(e->size, tab->sh_offset, tab->sh_size) ||
        off >= tab->sh_size)
        return NULL;
    const char *s = (const char *)e->b + tab->sh_offset + off;
    return memchr(s, '\0', (size_t)(tab->sh_size - off)) ? s : NULL;
}

/* The image's extent from its headers: the driver gets no size either.
 * Returns 0 or -1 when the headers themselves do not add up. */
static int fk_elf_open(struct fk_elf *e, const void *image)
{
    memset(e, 0, sizeof(*e));
    e->b = image;
    memcpy(&e->eh, image, sizeof(e->eh));
    if (e->eh.e_shentsize != sizeof(Elf64_Shdr) || e->eh.e_shnum == 0 ||
        e->eh.e_shoff > FK_IMAGE_MAX ||
        e->eh.e_shoff + (uint64_t)e->eh.e_shnum * sizeof(Elf64_Shdr) > FK_IMAGE_MAX)
        return -1;
    uint64_t end = e->eh.e_shoff + (uint64_t)e->eh.e_shnum * sizeof(Elf64_Shdr);
    if (e->eh.e_phnum) {
        uint64_t ph = e->eh.e_phoff + (uint64_t)e->eh.e_phnum * e->eh.e_phentsize;
        if (e->eh.e_phoff > FK_IMAGE_MAX || ph > FK_IMAGE_MAX)
            return -1;
        if (ph > end)
            end = ph;
    }
    e->size = (size_t)end;
    for (size_t i = 1; i < e->eh.e_shnum; i++) {
        Elf64_Shdr sh;
        fk_shdr(e, i, &sh);
        if (sh.sh_type == SHT_NOBITS)
            continue;
        if (sh.sh_offset > FK_IMAGE_MAX || sh.sh_size > FK_IMAGE_MAX - sh.sh_offset)
            return -1;
        if (sh.sh_offset + sh.sh_size > end)
            end = sh.sh_offset + sh.sh_size;
    }
    e->size = (size_t)end;
    return fk_shdr(e, e->eh.e_shstrndx, &e->shstr);
}

/* The section named @name, or -1. */
static int fk_section_find(const struct fk_elf *e, const char *name, Elf64_Shdr *sh_p)
{
    for (size_t i = 1; i < e->eh.e_shnum; i++) {
        Elf64_Shdr sh;
        if (fk_shdr(e, i, &sh) < 0)
            return -1;
        const char *n = fk_str(e, &e->shstr, sh.sh_name);
        if (n && strcmp(n, name) == 0) {
            *sh_p = sh;
            return 0;
        }
    }
    return -1;
}

/* Calls @fn on each attribute of a .nv.info section. */
static void fk_nvinfo_walk(const struct fk_elf *e, const Elf64_Shdr *sh,
                           void (*fn)(void *arg, unsigned int attr, const unsigned char *pay,
                                      uint16_t len),
                           void *arg)
{
    if (!fk_in(e->size, sh->sh_offset, sh->sh_size))
        return;
    const unsigned char *p = e->b + sh->sh_offset, *end = p + sh->sh_size;
    while (end - p >= 4) {
        unsigned int fmt = p[0], attr = p[1];
        uint16_t v;
        memcpy(&v, p + 2, 2);
        if (fmt == FK_EIFMT_SVAL) {
            if (end - p - 4 < v)
                return;
            fn(arg, attr, p + 4, v);
            p += 4 + v;
        } else {
            if (fmt == FK_EIFMT_HVAL)
                fn(arg, attr, p + 2, 2);
            p += 4;
        }
    }
}

static void fk_kernel_attr(void *arg, unsigned int attr, const unsigned char *pay, uint16_t len)
{
    struct CUfunc_st *f = arg;
    if (attr == FK_EIATTR_KPARAM_INFO && len >= 12 && f->nparams < FK_KPARAMS_MAX) {
        uint16_t ordinal, offset;
        uint32_t bits;
        memcpy(&ordinal, pay + 4, 2);
        memcpy(&offset, pay + 6, 2);
        memcpy(&bits, pay + 8, 4);
        if (f->nparams < 0)
            f->nparams = 0;
        f->params[f->nparams++] =
            (struct fk_kparam){.ordinal = ordinal, .offset = offset, .size = (uint16_t)(bits >> 18)};
    } else if (attr == FK_EIATTR_CBANK_PARAM_SIZE && len == 2) {
        uint16_t v;
        memcpy(&v, pay, 2);
        f->param_bytes = v;
    } else if (attr == FK_EIATTR_MAX_THREADS && len >= 12) {
        uint32_t d[3];
        memcpy(d, pay, 12);
        f->max_threads = d[0] * d[1] * d[2];
    }
}

struct fk_regs_arg {
    const struct fk_elf *e;
    Elf64_Shdr symtab, strtab;
    struct CUfunc_st **funcs;
    size_t n;
};

/* EIATTR_REGCOUNT in .nv.info: (symbol index, registers). */
static void fk_regs_attr(void *arg, unsigned int attr, const unsigned char *pay, uint16_t len)
{
    struct fk_regs_arg *a = arg;
    if (attr != FK_EIATTR_REGCOUNT || len < 8)
        return;
    uint32_t sym, regs;
    memcpy(&sym, pay, 4);
    memcpy(&regs, pay + 4, 4);
    Elf64_Sym s;
    uint64_t off = a->symtab.sh_offset + (uint64_t)sym * sizeof(s);
    if ((uint64_t)sym * sizeof(s) >= a->symtab.sh_size || !fk_in(a->e->size, off, sizeof(s)))
        return;
    memcpy(&s, a->e->b + off, sizeof(s));
    const char *name = fk_str(a->e, &a->strtab, s.st_name);
    for (size_t i = 0; name && i < a->n; i++)
        if (strcmp(a->funcs[i]->name, name) == 0)
            a->funcs[i]->regs = regs;
}

static int fk_kparam_cmp(const void *x, const void *y)
{
    const struct fk_kparam *a = x, *b = y;
    return (int)a->ordinal - (int)b->ordinal;
}

/* Fills @f from the cubin and binds its emulation when the layouts agree. */
static void fk_func_describe(const struct fk_elf *e, struct CUfunc_st *f)
{
    char sec[160];
    Elf64_Shdr sh;
    f->nparams = -1;
    f->max_threads = 1024;
    snprintf(sec, sizeof(sec), ".nv.info.%s", f->name);
    if (fk_section_find(e, sec, &sh) == 0)
        fk_nvinfo_walk(e, &sh, fk_kernel_attr, f);
    if (f->nparams < 0)
        f->nparams = 0;
    qsort(f->params, (size_t)f->nparams, sizeof(f->params[0]), fk_kparam_cmp);
    snprintf(sec, sizeof(sec), ".nv.shared.%s", f->name);
    if (fk_section_find(e, sec, &sh) == 0)
        f->static_smem = sh.sh_size >= FK_STATIC_SMEM_RESERVED
                             ? (unsigned int)sh.sh_size - FK_STATIC_SMEM_RESERVED
                             : (unsigned int)sh.sh_size;
    const struct fk_kernel *k = fk__kernel_find(f->name);
    if (!k || k->nparams != (unsigned int)f->nparams)
        return;
    for (unsigned int i = 0; i < k->nparams; i++)
        if (k->params[i].offset != f->params[i].offset || k->params[i].size != f->params[i].size)
            return;
    f->emu = k;
}

static void fk_regs_read(const struct fk_elf *e, struct CUfunc_st **funcs, size_t n)
{
    struct fk_regs_arg a = {.e = e, .funcs = funcs, .n = n};
    Elf64_Shdr info;
    if (fk_section_find(e, ".symtab", &a.symtab) < 0 || fk_section_find(e, ".strtab", &a.strtab) ||
        fk_section_find(e, ".nv.info", &info) < 0)
        return;
    fk_nvinfo_walk(e, &info, fk_regs_attr, &a);
}

/* ---- loading ---- */

static int fk_looks_like_text(const unsigned char *b)
{
    for (size_t i = 0; i < 64 && b[i]; i++)
        if (b[i] < 0x09 || b[i] > 0x7e)
            return 0;
    return 1;
}

static void fk_jit_log(unsigned int n, const CUjit_option *opts, void **vals, const char *msg)
{
    char *buf = NULL;
    size_t len = 0;
    for (unsigned int i = 0; opts && vals && i < n; i++) {
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            buf = vals[i];
        else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            len = (size_t)(uintptr_t)vals[i];
    }
    if (buf && len)
        snprintf(buf, len, "fakecuda: %s", msg);
}

static CUresult fk_module_build(const void *image, struct CUmod_st **mod_p, char *why,
                                size_t why_len)
{
    const unsigned char *b = image;
    static const unsigned char magic[4] = {0x7f, 'E', 'L', 'F'};
    uint32_t word;
    memcpy(&word, b, 4);
    if (word == 0xba55ed50u) {
        snprintf(why, why_len, "fat binaries are not emulated: load the cubin itself");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (memcmp(b, magic, 4) != 0) {
        if (fk_looks_like_text(b) && (strstr((const char *)b, ".version") ||
                                      strncmp((const char *)b, "//", 2) == 0)) {
            snprintf(why, why_len, "a PTX image: the fake never JIT-compiles");
            return fk.cfg.ptx_jit_disabled ? CUDA_ERROR_JIT_COMPILATION_DISABLED
                                           : CUDA_ERROR_NOT_SUPPORTED;
        }
        snprintf(why, why_len, "not an ELF image");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    struct fk_elf e;
    if (b[EI_CLASS] != ELFCLASS64 || fk_elf_open(&e, image) < 0) {
        snprintf(why, why_len, "ELF headers out of bounds");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const char *names[FK_KERNELS_MAX];
    int n = kn_cubin_kernels_list(e.b, e.size, "", names, FK_KERNELS_MAX, why, why_len);
    if (n == -EACCES)
        return CUDA_ERROR_NOT_SUPPORTED; /* PTX inside: why says so */
    if (n < 0)
        return CUDA_ERROR_INVALID_IMAGE;
    if (n > FK_KERNELS_MAX) {
        snprintf(why, why_len, "%d kernels: the fake reads at most %d", n, FK_KERNELS_MAX);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    unsigned int arch = 0;
    if (kn_cubin_arch_decode(b[EI_ABIVERSION], e.eh.e_flags, &arch) < 0) {
        snprintf(why, why_len, "unknown CUDA ELF ABI version %u", b[EI_ABIVERSION]);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (arch != fk.cfg.arch) {
        snprintf(why, why_len, "a cubin for sm_%u on an sm_%u device", arch, fk.cfg.arch);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    struct CUmod_st *m = calloc(1, sizeof(*m));
    struct CUfunc_st **funcs = calloc((size_t)n + 1, sizeof(*funcs));
    if (!m || !funcs)
        goto oom;
    for (int i = 0; i < n; i++) {
        struct CUfunc_st *f = calloc(1, sizeof(*f));
        if (!f)
            goto oom;
        funcs[i] = f;
        f->mod = m;
        snprintf(f->name, sizeof(f->name), "%s", names[i]);
        fk_func_describe(&e, f);
    }
    fk_regs_read(&e, funcs, (size_t)n);
    m->arch = arch;
    m->nfuncs = (size_t)n;
    m->funcs = funcs;
    *mod_p = m;
    return CUDA_SUCCESS;
oom:
    for (int i = 0; funcs && i < n; i++)
        free(funcs[i]);
    free(funcs);
    free(m);
    snprintf(why, why_len, "out of memory");
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues)
{
    static const char fn[] = "cuModuleLoadDataEx";
    CUresult rc = fk__enter(fn, FK_CTX | FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    if (!module || !image || (numOptions && (!options || !optionValues)))
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    char why[512] = "";
    struct CUmod_st *m = NULL;
    if ((rc = fk_module_build(image, &m, why, sizeof(why))) != CUDA_SUCCESS) {
        fk__log("%s: image refused: %s -> %s", fn, why, fk__error_name(rc));
        fk_jit_log(numOptions, options, optionValues, why);
        return fk__leave(fn, rc);
    }
    m->ctx_id = fk.ctx.id;
    m->alive = 1;
    m->next_all = fk.modules;
    fk.modules = m;
    *module = m;
    return fk__leave(fn, CUDA_SUCCESS);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return cuModuleLoadDataEx(module, image, 0, NULL, NULL);
}

static CUresult fk_module_resolve(CUmodule h, struct CUmod_st **m_p)
{
    if (!h || !fk__is_module(h))
        return CUDA_ERROR_INVALID_HANDLE;
    if (h->ctx_id != fk.ctx.id || !fk.ctx.active)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!h->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    *m_p = h;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult rc = fk__enter("cuModuleUnload", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUmod_st *m = NULL;
    if ((rc = fk_module_resolve(hmod, &m)) == CUDA_SUCCESS)
        m->alive = 0;
    return fk__leave("cuModuleUnload", rc);
}

void fk__modules_teardown(struct CUctx_st *ctx)
{
    for (struct CUmod_st *m = fk.modules; m; m = m->next_all)
        if (m->ctx_id == ctx->id)
            m->alive = 0;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc = fk__enter("cuModuleGetFunction", FK_LIVE);
    if (rc)
        return rc;
    struct CUmod_st *m = NULL;
    if (!hfunc || !name)
        return fk__leave("cuModuleGetFunction", CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk_module_resolve(hmod, &m)) != CUDA_SUCCESS)
        return fk__leave("cuModuleGetFunction", rc);
    for (size_t i = 0; i < m->nfuncs; i++) {
        if (strcmp(m->funcs[i]->name, name) == 0) {
            *hfunc = m->funcs[i];
            return fk__leave("cuModuleGetFunction", CUDA_SUCCESS);
        }
    }
    return fk__leave("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND);
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    CUresult rc = fk__enter("cuModuleGetLoadingMode", 0);
    if (rc)
        return rc;
    if (!mode)
        return fk__leave("cuModuleGetLoadingMode", CUDA_ERROR_INVALID_VALUE);
    *mode = fk.cfg.eager ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return fk__leave("cuModuleGetLoadingMode", CUDA_SUCCESS);
}

/* A function whose module is loaded in the live context. Locked. */
static CUresult fk_func_resolve(CUfunction h, struct CUfunc_st **f_p)
{
    if (!h || !fk__is_function(h))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUmod_st *m = NULL;
    CUresult rc = fk_module_resolve(h->mod, &m);
    if (rc == CUDA_SUCCESS)
        *f_p = h;
    return rc;
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    static const char fn[] = "cuFuncGetAttribute";
    CUresult rc = fk__enter(fn, 0);
    if (rc)
        return rc;
    struct CUfunc_st *f = NULL;
    if (!pi)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk_func_resolve(hfunc, &f)) != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = (int)f->max_threads;
        break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *pi = (int)f->static_smem;
        break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = (int)f->regs;
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = (int)f->mod->arch;
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = (int)(FK_SMEM_PER_BLOCK - f->static_smem);
        break;
    default:
        rc = fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED, "function attribute %d is not emulated",
                        (int)attrib);
    }
    return fk__leave(fn, rc);
}

CUresult cuFuncLoad(CUfunction function)
{
    CUresult rc = fk__enter("cuFuncLoad", FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUfunc_st *f = NULL;
    return fk__leave("cuFuncLoad", fk_func_resolve(function, &f));
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    CUresult rc = fk__enter("cuFuncIsLoaded", FK_LIVE);
    if (rc)
        return rc;
    struct CUfunc_st *f = NULL;
    if (!state)
        return fk__leave("cuFuncIsLoaded", CUDA_ERROR_INVALID_VALUE);
    /* A resolved function is loaded, lazy mode included (measured). */
    if ((rc = fk_func_resolve(function, &f)) == CUDA_SUCCESS)
        *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return fk__leave("cuFuncIsLoaded", rc);
}

/* Blocks of @f with @threads threads and @smem dynamic bytes that fit one
 * multiprocessor: the least of the thread, block, register and shared
 * memory limits of the fake device's arch. */
static int fk_occupancy(const struct CUfunc_st *f, int threads, size_t smem)
{
    const int sm_threads = fk__sm_threads(), sm_smem = fk__sm_smem();
    if (threads <= 0 || (unsigned int)threads > f->max_threads ||
        smem + f->static_smem > FK_SMEM_PER_BLOCK)
        return 0;
    int warps = (threads + 31) / 32;
    int n = 32;
    if (sm_threads / (warps * 32) < n)
        n = sm_threads / (warps * 32);
    unsigned int regs = f->regs ? f->regs : 16;
    int regs_per_warp = (int)((regs * 32 + 255) / 256 * 256);
    if (65536 / (regs_per_warp * warps) < n)
        n = 65536 / (regs_per_warp * warps);
    int per_block = (int)(f->static_smem + smem) + (int)FK_STATIC_SMEM_RESERVED;
    if (sm_smem / per_block < n)
        n = sm_smem / per_block;
    return n;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                     int blockSize, size_t dynamicSMemSize)
{
    static const char fn[] = "cuOccupancyMaxActiveBlocksPerMultiprocessor";
    CUresult rc = fk__enter(fn, FK_LIVE);
    if (rc)
        return rc;
    struct CUfunc_st *f = NULL;
    if (!numBlocks || blockSize <= 0)
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    if ((rc = fk_func_resolve(func, &f)) != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    *numBlocks = fk_occupancy(f, blockSize, dynamicSMemSize);
    return fk__leave(fn, CUDA_SUCCESS);
}

/* ---- launches ---- */

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    static const char fn[] = "cuLaunchKernel";
    CUresult rc = fk__enter(fn, FK_LIVE | FK_ENQUEUE);
    if (rc)
        return rc;
    struct CUfunc_st *k = NULL;
    struct CUstream_st *s = NULL;
    if ((rc = fk_func_resolve(f, &k)) != CUDA_SUCCESS ||
        (rc = fk__stream_resolve(fn, hStream, &s)) != CUDA_SUCCESS)
        return fk__leave(fn, rc);
    uint64_t threads = (uint64_t)blockDimX * blockDimY * blockDimZ;
    if (!gridDimX || !gridDimY || !gridDimZ || gridDimX > 2147483647u || gridDimY > 65535 ||
        gridDimZ > 65535 || !threads || blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
        threads > k->max_threads || (uint64_t)sharedMemBytes + k->static_smem > FK_SMEM_PER_BLOCK ||
        (k->nparams > 0 && !kernelParams))
        return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
    if (extra)
        return fk__leave(fn, fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED,
                                        "%s: parameters through 'extra' are not emulated",
                                        k->name));
    if (!k->emu) {
        const struct fk_kernel *spec = fk__kernel_find(k->name);
        return fk__leave(fn, fk__refuse(fn, CUDA_ERROR_NOT_SUPPORTED,
                                        spec ? "kernel %s: the cubin's parameter layout differs "
                                               "from the emulation's; update "
                                               "tests/fakecuda/kernels.c with the .cu source"
                                             : "kernel %s is not emulated: add it to "
                                               "tests/fakecuda/kernels.c",
                                        k->name));
    }
    struct fk_launch *l = calloc(1, sizeof(*l));
    struct fk_op *op = l ? fk__op_new(FK_OP_KERNEL) : NULL;
    if (!op) {
        free(l);
        return fk__leave(fn, CUDA_ERROR_OUT_OF_MEMORY);
    }
    *l = (struct fk_launch){.fn = k,
                            .grid = {gridDimX, gridDimY, gridDimZ},
                            .block = {blockDimX, blockDimY, blockDimZ},
                            .smem = sharedMemBytes,
                            .param_bytes = k->param_bytes};
    /* By value, now: the caller's variables may be gone when it runs. */
    for (int i = 0; i < k->nparams; i++) {
        const struct fk_kparam *p = &k->params[i];
        if ((size_t)p->offset + p->size > sizeof(l->params) || !kernelParams[i]) {
            free(l);
            free(op);
            return fk__leave(fn, CUDA_ERROR_INVALID_VALUE);
        }
        memcpy(l->params + p->offset, kernelParams[i], p->size);
    }
    if (k->emu->check && (rc = k->emu->check(l)) != CUDA_SUCCESS) {
        free(l);
        free(op);
        return fk__leave(fn, rc);
    }
    op->u.launch = l;
    return fk__leave(fn, fk__enqueue(s, op));
}

CUresult fk__launch_run(const struct fk_launch *l)
{
    struct CUfunc_st *f = l->fn;
    unsigned int n = __atomic_add_fetch(&f->launches, 1, __ATOMIC_RELAXED);
    if (fk.cfg.fault_kernel[0] && strcmp(fk.cfg.fault_kernel, f->name) == 0 &&
        n == fk.cfg.fault_nth) {
        fk__log("FAKECUDA_FAULT_KERNEL: launch %u of %s faults on purpose: "
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                n, f->name);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return f->emu->run(l);
}
