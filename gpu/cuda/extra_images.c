/* ga_extra_images: see include/gpu/extra_images.h. */
#include "gpu/extra_images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "kernels/cubin.h"
#include "kernels/images.h"
#include "kernels/kdesc.h"

#define GA__CUBIN_SUFFIX ".cubin"
#define GA__CUBIN_SUFFIX_LEN 6

static int ga__cubin_name(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return n > GA__CUBIN_SUFFIX_LEN &&
           strcmp(d->d_name + n - GA__CUBIN_SUFFIX_LEN, GA__CUBIN_SUFFIX) == 0;
}

static int ga__name_cmp(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name); /* bytewise: the order does not follow the locale */
}

static void ga__image_free(struct kn_image *img)
{
    free((void *)img->name);
    free((void *)img->data);
    free((void *)img->kernels);
    free((void *)img->kdesc);
}

/* The first image name or kernel name that occurs twice in @t. */
static int ga__names_unique(const struct kn_image *t, size_t n, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0)
                return base_errf(err, err_len, -EEXIST,
                                 "image name '%s' occurs twice: expected each image name "
                                 "once",
                                 t[i].name);
            for (size_t a = 0; a < t[i].kernel_count; a++)
                for (size_t b = 0; b < t[j].kernel_count; b++)
                    if (strcmp(t[i].kernels[a], t[j].kernels[b]) == 0)
                        return base_errf(err, err_len, -EEXIST,
                                         "kernel '%s' of image '%s' is also in image '%s': "
                                         "expected each kernel name once",
                                         t[i].kernels[a], t[i].name, t[j].name);
        }
    }
    return 0;
}

/* Reads the regular file @name of @dfd (at most @max bytes) into a 64-byte
 * aligned buffer with a NUL after its bytes. */
static int ga__file_read(int dfd, const char *dir, const char *name, size_t max,
                         unsigned char **data_p, size_t *size_p, char *err, size_t err_len)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return base_errf(err, err_len, -errno, "%s/%s: cannot stat: %s", dir, name,
                         strerror(errno));
    if (S_ISLNK(st.st_mode))
        return base_errf(err, err_len, -ELOOP,
                         "%s/%s: expected a regular file, found a symbolic link", dir, name);
    if (!S_ISREG(st.st_mode))
        return base_errf(err, err_len, -EINVAL,
                         "%s/%s: expected a regular file, found file type 0%o", dir, name,
                         (unsigned int)(st.st_mode & S_IFMT));
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return base_errf(err, err_len, -errno, "%s/%s: cannot open: %s", dir, name,
                         strerror(errno));
    int rc = 0;
    unsigned char *buf = NULL;
    /* Re-checked on the open file: it may have been replaced since fstatat. */
    if (fstat(fd, &st) < 0) {
        rc = base_errf(err, err_len, -errno, "%s/%s: cannot stat: %s", dir, name, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = base_errf(err, err_len, -EINVAL, "%s/%s: expected a regular file, found type 0%o", dir,
                       name, (unsigned int)(st.st_mode & S_IFMT));
        goto out;
    }
    if (st.st_size > (off_t)max) {
        rc = base_errf(err, err_len, -EFBIG, "%s/%s: expected at most %zu bytes, found %jd bytes",
                       dir, name, max, (intmax_t)st.st_size);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    if (posix_memalign((void **)&buf, 64, (size + 64) & ~(size_t)63) != 0) {
        buf = NULL;
        rc =
            base_errf(err, err_len, -ENOMEM, "%s/%s: out of memory for %zu bytes", dir, name, size);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = base_errf(err, err_len, n < 0 ? -errno : -EIO,
                           "%s/%s: expected %zu bytes, read %zu: %s", dir, name, size, got,
                           n < 0 ? strerror(errno) : "end of file");
            goto out;
        }
        got += (size_t)n;
    }
    buf[size] = '\0';
    *data_p = buf;
    *size_p = size;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

/* DIR/@name.kdesc beside the cubin, when there is one: read, parsed and
 * checked against @cubin, so a descriptor that disagrees fails start-up.
 * *@text_p NULL: no descriptor (no kernel of the image may be launched). */
static int ga__kdesc_read(int dfd, const char *dir, const char *name, const unsigned char *cubin,
                          size_t cubin_size, unsigned char **text_p, size_t *len_p, char *err,
                          size_t err_len)
{
    char file[512];
    if (snprintf(file, sizeof file, "%s.kdesc", name) >= (int)sizeof file)
        return base_errf(err, err_len, -ENAMETOOLONG, "%s/%s.kdesc: name too long", dir, name);
    struct stat st;
    if (fstatat(dfd, file, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
        *text_p = NULL;
        *len_p = 0;
        return 0;
    }
    unsigned char *text = NULL;
    size_t len = 0;
    int rc = ga__file_read(dfd, dir, file, KN_KDESC_MAX_BYTES, &text, &len, err, err_len);
    if (rc < 0)
        return rc;
    char why[512];
    struct kn_kdesc desc;
    rc = kn_kdesc_parse((const char *)text, len, &desc, why, sizeof why);
    if (rc == 0) {
        rc = kn_kdesc_check_cubin(&desc, cubin, cubin_size, why, sizeof why);
        kn_kdesc_free(&desc);
        if (rc < 0) {
            free(text);
            return base_errf(err, err_len, rc, "%s/%s disagrees with %s.cubin: %s", dir, file,
                             name, why);
        }
    } else {
        free(text);
        return base_errf(err, err_len, rc, "%s/%s refused: %s", dir, file, why);
    }
    *text_p = text;
    *len_p = len;
    return 0;
}

/* Reads, checks and lists the kernels of DIR/@file into @img. */
static int ga__extra_image_read(int dfd, const char *dir, const char *file, unsigned int arch,
                                struct kn_image *img, char *err, size_t err_len)
{
    unsigned char *data = NULL;
    size_t size = 0;
    int rc = ga__file_read(dfd, dir, file, GA_EXTRA_IMAGE_MAX_BYTES, &data, &size, err, err_len);
    if (rc < 0)
        return rc;
    char why[512];
    struct kn_cubin_facts facts;
    rc = kn_cubin_check(data, size, arch, NULL, 0, &facts, why, sizeof(why));
    if (rc < 0) {
        base_errf(err, err_len, rc, "%s/%s (%zu bytes) refused: %s", dir, file, size, why);
        goto fail_data;
    }
    const char **kernels = calloc(GA_EXTRA_IMAGE_MAX_KERNELS + 1, sizeof(*kernels));
    if (!kernels) {
        rc = base_errf(err, err_len, -ENOMEM, "%s/%s: out of memory", dir, file);
        goto fail_data;
    }
    rc = kn_cubin_kernels_list(data, size, "k_", kernels, GA_EXTRA_IMAGE_MAX_KERNELS, why,
                               sizeof(why));
    if (rc < 0) {
        base_errf(err, err_len, rc, "%s/%s refused: %s", dir, file, why);
        goto fail_kernels;
    }
    if (rc == 0 || rc > GA_EXTRA_IMAGE_MAX_KERNELS) {
        base_errf(err, err_len, rc ? -E2BIG : -ENOENT,
                  "%s/%s refused: expected 1 to %d kernel entries named k_*, found %d (of "
                  "%zu kernel entries)",
                  dir, file, GA_EXTRA_IMAGE_MAX_KERNELS, rc, facts.kernel_count);
        rc = rc ? -E2BIG : -ENOENT;
        goto fail_kernels;
    }
    size_t count = (size_t)rc;
    char *name = strndup(file, strlen(file) - GA__CUBIN_SUFFIX_LEN);
    if (!name) {
        rc = base_errf(err, err_len, -ENOMEM, "%s/%s: out of memory", dir, file);
        goto fail_kernels;
    }
    unsigned char *kdesc = NULL;
    size_t kdesc_len = 0;
    if ((rc = ga__kdesc_read(dfd, dir, name, data, size, &kdesc, &kdesc_len, err, err_len)) < 0)
        goto fail_name;
    *img = (struct kn_image){.name = name,
                             .data = data,
                             .size = size,
                             .arch = facts.arch,
                             .kernels = kernels,
                             .kernel_count = count,
                             .kdesc = (const char *)kdesc,
                             .kdesc_len = kdesc_len};
    return 0;

fail_name:
    free(name);
fail_kernels:
    free(kernels);
fail_data:
    free(data);
    return rc;
}

int ga_extra_images_load(const char *dir, unsigned int arch, struct kn_image **images_p,
                         size_t *count_p, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!dir || !dir[0] || !images_p || !count_p)
        return base_errf(err, err_len, -EINVAL,
                         "extra images: expected a directory and output pointers, found "
                         "NULL or an empty name");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return base_errf(err, err_len, -errno,
                         "extra images: expected a readable directory %s, found: %s", dir,
                         strerror(errno));
    struct dirent **list = NULL;
    int n = scandir(dir, &list, ga__cubin_name, ga__name_cmp);
    if (n < 0) {
        int rc = base_errf(err, err_len, -errno, "extra images: cannot list %s: %s", dir,
                           strerror(errno));
        close(dfd);
        return rc;
    }
    int rc = 0;
    struct kn_image *images = NULL;
    size_t count = 0;
    if (n > GA_EXTRA_IMAGES_MAX) {
        rc = base_errf(err, err_len, -E2BIG,
                       "extra images: expected at most %d *.cubin files in %s, found %d",
                       GA_EXTRA_IMAGES_MAX, dir, n);
        goto out;
    }
    if (n > 0 && !(images = calloc((size_t)n, sizeof(*images)))) {
        rc = base_errf(err, err_len, -ENOMEM, "extra images: out of memory");
        goto out;
    }
    for (; count < (size_t)n; count++) {
        rc =
            ga__extra_image_read(dfd, dir, list[count]->d_name, arch, &images[count], err, err_len);
        if (rc < 0)
            goto out;
    }
    char why[512];
    if ((rc = ga__names_unique(images, count, why, sizeof(why))) < 0) {
        base_errf(err, err_len, rc, "extra images in %s: %s", dir, why);
        goto out;
    }
    *images_p = images;
    *count_p = count;
    rc = (int)count;
    images = NULL;
    count = 0;
out:
    ga_extra_images_free(images, count);
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
    close(dfd);
    return rc;
}

void ga_extra_images_free(struct kn_image *images, size_t count)
{
    if (!images)
        return;
    for (size_t i = 0; i < count; i++)
        ga__image_free(&images[i]);
    free(images);
}

int ga_extra_images_combine(const struct kn_image *base, size_t base_count,
                            const struct kn_image *extra, size_t extra_count,
                            struct kn_image **images_p, size_t *count_p, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    size_t total = base_count + extra_count;
    if (!images_p || !count_p || (base_count && !base) || (extra_count && !extra) || !total)
        return base_errf(err, err_len, -EINVAL,
                         "combining images: expected at least one image and output "
                         "pointers, found none");
    struct kn_image *t = calloc(total, sizeof(*t));
    if (!t)
        return base_errf(err, err_len, -ENOMEM, "combining images: out of memory");
    if (base_count)
        memcpy(t, base, base_count * sizeof(*t));
    if (extra_count)
        memcpy(t + base_count, extra, extra_count * sizeof(*t));
    int rc = ga__names_unique(t, total, err, err_len);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *images_p = t;
    *count_p = total;
    return 0;
}
