/* ga_extra_images: cubins loaded from a directory at start-up (kernels
 * shipped to remote workers), held to the same rules as the embedded ones:
 * a single-arch ELF cubin for the agent's arch, no PTX or fatbin, nothing
 * the driver could JIT-compile. Each file DIR/NAME.cubin becomes image NAME
 * whose kernels are all its `k_*` kernel entry symbols; DIR/NAME.kdesc, when
 * there is one, is its launch descriptor (kernels/kdesc.h), parsed and
 * checked against the cubin here, so a descriptor that disagrees with its
 * cubin fails start-up. Pure C: no driver
 * calls, so it is tested without a GPU; the agent passes the combined table
 * to ga_device_open, which loads everything eagerly. */
#ifndef GPU_EXTRA_IMAGES_H
#define GPU_EXTRA_IMAGES_H

#include <stddef.h>

struct kn_image;

#define GA_EXTRA_IMAGES_MAX 64               /* files per directory */
#define GA_EXTRA_IMAGE_MAX_BYTES (64u << 20) /* bytes per file */
#define GA_EXTRA_IMAGE_MAX_KERNELS 256       /* k_* kernels per image */

/* Reads every regular file named *.cubin in @dir (sorted by name; other
 * names are ignored), checks each for @arch with kn_cubin_check and lists
 * its k_* kernels; symlinks, non-regular files, oversized or bad cubins, a
 * cubin without k_* kernels, more than GA_EXTRA_IMAGES_MAX files, and a
 * kernel name found in two files are refused. On success *images_p (NULL
 * when the directory holds no cubin) and *count_p are the caller's: free
 * them with ga_extra_images_free. Returns the count, or a negative errno and
 * a message naming the file, what was expected and what was found in @err:
 * -ENOENT/-ENOTDIR/-EACCES (the directory; -ENOENT also for a cubin
 * without k_* kernels), -ELOOP (a symlink), -EINVAL (not a regular file, or
 * a descriptor that does not parse), -EPROTO (a descriptor that disagrees
 * with its cubin),
 * -EFBIG, -E2BIG (too many files or kernels), -EEXIST (a kernel in two
 * files), the kn_cubin_check codes, or -ENOMEM. */
int ga_extra_images_load(const char *dir, unsigned int arch, struct kn_image **images_p,
                         size_t *count_p, char *err, size_t err_len);

/* Frees what ga_extra_images_load returned; NULL is a no-op. */
void ga_extra_images_free(struct kn_image *images, size_t count);

/* Builds a table of the @base_count images at @base followed by the
 * @extra_count at @extra, refusing an image name or a kernel name that occurs
 * twice (-EEXIST, with a message in @err). The new table (*images_p, owned by
 * the caller, free() it) points at the originals' names and data: keep both
 * alive while it is in use (for a device, until ga_device_close). Returns 0,
 * -EEXIST, -EINVAL or -ENOMEM. */
int ga_extra_images_combine(const struct kn_image *base, size_t base_count,
                            const struct kn_image *extra, size_t extra_count,
                            struct kn_image **images_p, size_t *count_p, char *err, size_t err_len);

#endif /* GPU_EXTRA_IMAGES_H */
