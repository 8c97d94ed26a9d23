/* linkcheck: the command line over linkcheck_lib. Exit status: 0 clean, 1 a
 * rule fired on some file, 2 usage error or a file that could not be checked
 * (and nothing fired). Every loaded library is checked as the file is, and
 * the forbidden set includes what is installed, unless told otherwise. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linkcheck/linkcheck.h"

enum {
    OPT_FORBID = 256,
    OPT_FORBID_FILE,
    OPT_CUDA_ROOT,
    OPT_NO_INSTALLED,
    OPT_LD_LIBRARY_PATH,
    OPT_ROOT,
    OPT_SYMBOLS_RECURSIVE,
    OPT_STRINGS_RECURSIVE,
    OPT_SHALLOW,
    OPT_NO_SEARCH,
    OPT_STRICT,
    OPT_ALLOWED_IMPORTS,
};

static void usage(FILE *to)
{
    fprintf(to,
            "usage: linkcheck [options] FILE...\n"
            "Proves that each ELF FILE never links, loads or names a CUDA library.\n"
            "  --forbid STEM             also forbid libraries named STEM* (repeatable)\n"
            "  --forbid-file FILE        also forbid the stems in FILE, one a line\n"
            "  --cuda-root DIR           also forbid every library of the toolkit at DIR\n"
            "                            (repeatable; $CUDA_HOME, /usr/local/cuda* and the\n"
            "                            driver's libraries are always read)\n"
            "  --no-installed            forbid the fixed stems only, read nothing installed\n"
            "  --ld-library-path[=DIRS]  search LD_LIBRARY_PATH (from the environment, or DIRS)\n"
            "                            where ld.so does: after DT_RPATH, before DT_RUNPATH\n"
            "  --root DIR                look for absolute search directories and\n"
            "                            /etc/ld.so.conf under DIR ($ORIGIN paths excepted)\n"
            "  --shallow                 check the symbols and strings of FILE only; by\n"
            "                            default every library it loads is checked too\n"
            "  --symbols-recursive       after --shallow: the loaded libraries' symbols too\n"
            "  --strings-recursive       after --shallow: the loaded libraries' strings too\n"
            "  --no-search               check DT_NEEDED names only, load nothing\n"
            "  --strict                  a dependency not found is a finding, not a warning\n"
            "  --allowed-imports FILE    every symbol FILE imports must be listed in FILE\n"
            "  -v, --verbose             say which library is loaded from where\n"
            "  -h, --help                show this help\n"
            "exit status: 0 clean, 1 a rule fired, 2 usage error or unreadable/malformed input\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"forbid", required_argument, NULL, OPT_FORBID},
        {"forbid-file", required_argument, NULL, OPT_FORBID_FILE},
        {"cuda-root", required_argument, NULL, OPT_CUDA_ROOT},
        {"no-installed", no_argument, NULL, OPT_NO_INSTALLED},
        {"shallow", no_argument, NULL, OPT_SHALLOW},
        {"strict", no_argument, NULL, OPT_STRICT},
        {"allowed-imports", required_argument, NULL, OPT_ALLOWED_IMPORTS},
        {"ld-library-path", optional_argument, NULL, OPT_LD_LIBRARY_PATH},
        {"root", required_argument, NULL, OPT_ROOT},
        {"symbols-recursive", no_argument, NULL, OPT_SYMBOLS_RECURSIVE},
        {"strings-recursive", no_argument, NULL, OPT_STRINGS_RECURSIVE},
        {"no-search", no_argument, NULL, OPT_NO_SEARCH},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct lc_checker *checker = NULL;
    int rc = lc_checker_create(&checker);
    if (rc < 0) {
        fprintf(stderr, "linkcheck: error: cannot create a checker: %s\n", strerror(-rc));
        return 2;
    }
    unsigned int flags = 0, recursive = LC_FLAG_SYMBOLS_RECURSIVE | LC_FLAG_STRINGS_RECURSIVE;
    int status = 2, installed = 1;
    char *roots = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
        switch (opt) {
        case OPT_FORBID:
            rc = lc_checker_forbid(checker, optarg);
            if (rc < 0) {
                fprintf(stderr,
                        "linkcheck: error: --forbid expects a library name stem such as "
                        "'libfoo', found '%s' (%s)\n",
                        optarg, strerror(-rc));
                goto out;
            }
            break;
        case OPT_FORBID_FILE:
            rc = lc_checker_forbid_file(checker, optarg);
            if (rc < 0) {
                fprintf(stderr, "linkcheck: error: --forbid-file %s: %s\n", optarg,
                        rc == -EINVAL ? "expected one library name stem a line" : strerror(-rc));
                goto out;
            }
            break;
        case OPT_CUDA_ROOT: {
            char *grown = NULL;
            if (asprintf(&grown, "%s%s%s", roots ? roots : "", roots ? ":" : "", optarg) < 0)
                goto out;
            free(roots);
            roots = grown;
            break;
        }
        case OPT_NO_INSTALLED:
            installed = 0;
            break;
        case OPT_SHALLOW:
            recursive = 0;
            break;
        case OPT_STRICT:
            flags |= LC_FLAG_STRICT;
            break;
        case OPT_ALLOWED_IMPORTS:
            rc = lc_checker_allow_imports(checker, optarg);
            if (rc < 0) {
                if (rc != -EINVAL)
                    fprintf(stderr, "linkcheck: error: --allowed-imports %s: %s\n", optarg,
                            strerror(-rc));
                goto out;
            }
            break;
        case OPT_LD_LIBRARY_PATH:
            rc = lc_checker_set_ld_library_path(checker,
                                                optarg ? optarg : getenv("LD_LIBRARY_PATH"));
            if (rc < 0)
                goto out;
            break;
        case OPT_ROOT:
            rc = lc_checker_set_root(checker, optarg);
            if (rc < 0) {
                fprintf(stderr, "linkcheck: error: --root expects a directory, found '%s'\n",
                        optarg);
                goto out;
            }
            break;
        case OPT_SYMBOLS_RECURSIVE:
            flags |= LC_FLAG_SYMBOLS_RECURSIVE;
            break;
        case OPT_STRINGS_RECURSIVE:
            flags |= LC_FLAG_STRINGS_RECURSIVE;
            break;
        case OPT_NO_SEARCH:
            flags |= LC_FLAG_NO_SEARCH;
            break;
        case 'v':
            flags |= LC_FLAG_VERBOSE;
            break;
        case 'h':
            usage(stdout);
            status = 0;
            goto out;
        default:
            usage(stderr);
            goto out;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "linkcheck: error: expected at least one FILE, found none\n");
        usage(stderr);
        goto out;
    }
    /* The forbidden set as installed here: a toolkit or driver library is
     * forbidden under any name a stem list would miss. */
    rc = installed ? lc_checker_forbid_installed(checker, roots,
                                                 LC_INSTALLED_DEFAULT_ROOTS | LC_INSTALLED_DRIVER |
                                                     LC_INSTALLED_SONAMES)
                   : lc_checker_forbid_installed(checker, roots, LC_INSTALLED_SONAMES);
    if (rc < 0) {
        fprintf(stderr, "linkcheck: error: reading the installed CUDA libraries: %s\n",
                strerror(-rc));
        goto out;
    }
    lc_checker_set_flags(checker, flags | recursive);
    int fired = 0, failed = 0;
    for (int i = optind; i < argc; i++) {
        rc = lc_checker_check_file(checker, argv[i]);
        if (rc > 0)
            fired = 1;
        else if (rc < 0)
            failed = 1;
    }
    status = fired ? 1 : failed ? 2 : 0;
out:
    free(roots);
    lc_checker_destroy(checker);
    return status;
}
