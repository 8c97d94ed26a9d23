/* Loading the embedded cubins: each is re-checked (a SASS-only cubin for
 * this device's arch with its kernels), loaded, and every kernel resolved
 * and loaded now, so a missing or corrupt image fails start-up. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu_call.h"
#include "device_internal.h"
#include "kernels/cubin.h"
#include "kernels/images.h"

static int ga__module_load(struct ga_device *dev, struct ga_module *m, const struct kn_image *img)
{
    char why[512];
    int rc = kn_cubin_check(img->data, img->size, dev->info.arch, img->kernels, img->kernel_count,
                            NULL, why, sizeof(why));
    if (rc < 0) {
        ga__err("image '%s' (%zu bytes) refused before loading: %s", img->name, img->size, why);
        return -ENOEXEC;
    }
    /* A cubin needs no JIT; the log buffer is for the driver's reason if it
     * still refuses the image. */
    char log[1024] = "";
    CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)sizeof(log)};
    CUmodule module = NULL;
    rc = GA_CU(cuModuleLoadDataEx(&module, img->data, 2, keys, vals));
    if (rc < 0) {
        ga__err("image '%s' did not load%s%s", img->name, log[0] ? ": " : "", log);
        return rc;
    }
    m->module = module;
    m->image = img;
    m->functions = calloc(img->kernel_count ? img->kernel_count : 1, sizeof(*m->functions));
    if (!m->functions)
        return -ENOMEM;
    size_t k = 0;
    for (; k < img->kernel_count; k++) {
        CUfunction fn;
        CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
        int regs = 0, max_threads = 0;
        if ((rc = GA_CU(cuModuleGetFunction(&fn, m->module, img->kernels[k]))) < 0 ||
            (rc = GA_CU(cuFuncLoad(fn))) < 0 || (rc = GA_CU(cuFuncIsLoaded(&state, fn))) < 0)
            goto fail_kernel;
        if (state != CU_FUNCTION_LOADING_STATE_LOADED) {
            ga__err("kernel %s of image '%s': expected loaded after cuFuncLoad, found state %d",
                    img->kernels[k], img->name, (int)state);
            rc = -EIO;
            goto fail_kernel;
        }
        if ((rc = GA_CU(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn))) < 0 ||
            (rc = GA_CU(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                           fn))) < 0)
            goto fail_kernel;
        ga__info("image '%s': kernel %s loaded (%d registers, up to %d threads per block)",
                 img->name, img->kernels[k], regs, max_threads);
        m->functions[k] = fn;
    }
    return 0;
fail_kernel:
    ga__err("image '%s': kernel %s could not be resolved and loaded", img->name, img->kernels[k]);
    return rc == -ENOENT ? -ENOEXEC : rc; /* an image without its kernel is a bad image */
}

int ga__modules_load(struct ga_device *dev, const struct kn_image *images, size_t count)
{
    CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
    int rc = GA_CU(cuModuleGetLoadingMode(&mode));
    if (rc < 0)
        return rc;
    dev->modules = calloc(count, sizeof(*dev->modules));
    if (!dev->modules)
        return -ENOMEM;
    dev->module_count = count;
    size_t kernels = 0;
    for (size_t i = 0; i < count; i++) {
        rc = ga__module_load(dev, &dev->modules[i], &images[i]);
        if (rc < 0) {
            ga__modules_unload(dev);
            return rc;
        }
        kernels += images[i].kernel_count;
    }
    ga__info("loaded %zu image%s, %zu kernels, all resident (driver loading mode %s; every "
             "kernel loaded with cuFuncLoad)",
             count, count == 1 ? "" : "s", kernels,
             mode == CU_MODULE_EAGER_LOADING ? "EAGER" : "LAZY");
    return 0;
}

void ga__modules_unload(struct ga_device *dev)
{
    for (size_t i = 0; i < dev->module_count; i++) {
        struct ga_module *m = &dev->modules[i];
        if (m->module)
            GA_CU(cuModuleUnload(m->module));
        free(m->functions);
    }
    free(dev->modules);
    dev->modules = NULL;
    dev->module_count = 0;
}

int ga_device_kernel(const struct ga_device *dev, const char *image, const char *kernel,
                     CUfunction *fn_p)
{
    for (size_t i = 0; i < dev->module_count; i++) {
        const struct ga_module *m = &dev->modules[i];
        if (!m->image || strcmp(m->image->name, image) != 0)
            continue;
        for (size_t k = 0; k < m->image->kernel_count; k++) {
            if (strcmp(m->image->kernels[k], kernel) == 0) {
                *fn_p = m->functions[k];
                return 0;
            }
        }
    }
    return -ENOENT;
}
