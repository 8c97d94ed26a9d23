/* lease-agent --cubin-dir: the embedded images plus a directory's cubins,
 * and the driver check both modes start with. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent.h"
#include "base/err.h"
#include "gpu/cu.h"
#include "gpu/extra_images.h"

int agent_driver_load(char *msg, size_t len)
{
    char err[512];
    int rc = ga_cu_load(err, sizeof err);
    if (rc < 0)
        snprintf(msg, len,
                 "no NVIDIA driver: %s; use lease-agent-host or --backend host to serve "
                 "without a GPU",
                 err);
    return rc;
}

int agent_images_prepare(const struct base_log_sink *log, const char *dir, struct agent_images *ai,
                         struct ga_device_opts *opts)
{
    *ai = (struct agent_images){0};
    if (!dir)
        return 0;
    char err[1024];
    unsigned int arch = kn_images[0].arch;
    int rc = ga_extra_images_load(dir, arch, &ai->extra, &ai->extra_count, err, sizeof(err));
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS, "--cubin-dir: %s", err);
        return rc;
    }
    base_log(log, BASE_LOG_INFO, AGENT_SUBSYS, "--cubin-dir %s: %zu extra image%s for sm_%u", dir,
             ai->extra_count, ai->extra_count == 1 ? "" : "s", arch);
    for (size_t i = 0; i < ai->extra_count; i++) {
        const struct kn_image *img = &ai->extra[i];
        char names[1024];
        size_t at = 0;
        names[0] = '\0';
        for (size_t k = 0; k < img->kernel_count && at < sizeof names; k++)
            at += base_fmt(names + at, sizeof names - at, "%s %s", k ? "," : "", img->kernels[k]);
        base_log(log, BASE_LOG_INFO, AGENT_SUBSYS,
                 "extra image '%s' (%s/%s.cubin, %zu bytes, sm_%u), kernels:%s", img->name, dir,
                 img->name, img->size, img->arch, names);
    }
    size_t count = 0;
    rc = ga_extra_images_combine(kn_images, kn_image_count, ai->extra, ai->extra_count, &ai->table,
                                 &count, err, sizeof(err));
    if (rc < 0) {
        base_log(log, BASE_LOG_ERROR, AGENT_SUBSYS, "--cubin-dir %s: %s", dir, err);
        ga_extra_images_free(ai->extra, ai->extra_count);
        *ai = (struct agent_images){0};
        return rc;
    }
    opts->images = ai->table;
    opts->image_count = count;
    opts->required_arch = arch;
    return 0;
}

void agent_images_release(struct agent_images *ai)
{
    free(ai->table);
    ga_extra_images_free(ai->extra, ai->extra_count);
    *ai = (struct agent_images){0};
}
