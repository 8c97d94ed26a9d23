/* The library names the CUDA-free side may never load, shared by linkcheck
 * (tools/linkcheck) and stagingd's start-up self check.
 *
 * The stems (forbidden_stems.def) are the hand-kept floor; linkcheck and the
 * self check add what they find installed (lc_checker_forbid_installed()).
 * Two ways to match:
 *   - a library's own name (file name, SONAME, DT_NEEDED entry): its last
 *     path component starts with a stem, ".so" or not, in any case
 *     ("libcuda", "libcublas.so.13", "/usr/lib/libnvidia-ml.so.580",
 *     "cuda" with its "lib" left off);
 *   - a string in data that could be handed to dlopen(): a stem followed,
 *     later in the same string, by ".so". The stems alone carry no ".so", so
 *     this table does not trip that rule in stagingd's own data.
 * Header-only, libc only. */
#ifndef LINKCHECK_FORBIDDEN_H
#define LINKCHECK_FORBIDDEN_H

#include <stddef.h>
#include <string.h>
#include <strings.h>

static const char *const lc_forbidden_stems[] = {
#define LC_STEM(s) s,
#include "linkcheck/forbidden_stems.def"
#undef LC_STEM
};

#define LC_FORBIDDEN_STEM_COUNT (sizeof(lc_forbidden_stems) / sizeof(lc_forbidden_stems[0]))

static inline const char *lc_path_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Whether @name (a string found in data) names a library built from @stem:
 * its last component starts with @stem and has ".so" after it. */
static inline int lc_name_matches_stem(const char *name, const char *stem)
{
    const char *base = lc_path_basename(name);
    size_t n = strlen(stem);
    return strncmp(base, stem, n) == 0 && strstr(base + n, ".so") != NULL;
}

/* Whether @name, a library's own name (file, SONAME, DT_NEEDED), is one
 * built from @stem: its last component starts with @stem, in any case, or
 * with @stem less its "lib" when it has none ("cuda" for "libcuda": ld.so
 * opens whatever file a name says). Short stems need their "lib", so a word
 * such as "npp..." alone is not taken for a library. */
static inline int lc_library_has_stem(const char *name, const char *stem)
{
    const char *base = lc_path_basename(name);
    size_t n = strlen(stem);
    if (n == 0)
        return 0;
    if (strncasecmp(base, stem, n) == 0)
        return 1;
    return n >= 7 && strncasecmp(stem, "lib", 3) == 0 && strncasecmp(base, "lib", 3) != 0 &&
           strncasecmp(base, stem + 3, n - 3) == 0;
}

/* The stem that makes the string @name forbidden, or NULL when it is allowed. */
static inline const char *lc_forbidden_stem_of(const char *name)
{
    for (size_t i = 0; i < LC_FORBIDDEN_STEM_COUNT; i++)
        if (lc_name_matches_stem(name, lc_forbidden_stems[i]))
            return lc_forbidden_stems[i];
    return NULL;
}

/* The stem that makes the library name @name forbidden, or NULL. */
static inline const char *lc_forbidden_library_stem_of(const char *name)
{
    for (size_t i = 0; i < LC_FORBIDDEN_STEM_COUNT; i++)
        if (lc_library_has_stem(name, lc_forbidden_stems[i]))
            return lc_forbidden_stems[i];
    return NULL;
}

#endif /* LINKCHECK_FORBIDDEN_H */
