/* The library names the CUDA-free side may never load, shared by linkcheck
 * (tools/linkcheck) and stagingd's start-up self check.
 *
 * A name is forbidden when its last path component starts with one of the
 * stems and has ".so" somewhere after the stem: "libcuda.so.1",
 * "/usr/lib/libnvidia-ml.so.580", "libcudart.so.13". The stems alone carry no
 * ".so", so this table does not trip linkcheck's rule against library names
 * in read-only data. Header-only, libc only. */
#ifndef LINKCHECK_FORBIDDEN_H
#define LINKCHECK_FORBIDDEN_H

#include <stddef.h>
#include <string.h>

/* "libcuda" also covers libcudart and libcudadebugger. */
static const char *const lc_forbidden_stems[] = {
    "libcuda",
    "libnvrtc",
    "libnvidia-",
    "libnvJitLink",
};

#define LC_FORBIDDEN_STEM_COUNT (sizeof(lc_forbidden_stems) / sizeof(lc_forbidden_stems[0]))

static inline const char *lc_path_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Whether @name (a soname or a path) names a library built from @stem. */
static inline int lc_name_matches_stem(const char *name, const char *stem)
{
    const char *base = lc_path_basename(name);
    size_t n = strlen(stem);
    return strncmp(base, stem, n) == 0 && strstr(base + n, ".so") != NULL;
}

/* The stem that makes @name forbidden, or NULL when it is allowed. */
static inline const char *lc_forbidden_stem_of(const char *name)
{
    for (size_t i = 0; i < LC_FORBIDDEN_STEM_COUNT; i++)
        if (lc_name_matches_stem(name, lc_forbidden_stems[i]))
            return lc_forbidden_stems[i];
    return NULL;
}

#endif /* LINKCHECK_FORBIDDEN_H */
