/* linkcheck: the command line over linkcheck_lib. Exit status: 0 clean, 1 a
 * rule fired on some file, 2 usage error or a file that could not be checked
 * (and nothing fired). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linkcheck/linkcheck.h"

enum {
    OPT_FORBID = 256,
    OPT_LD_LIBRARY_PATH,
    OPT_ROOT,
    OPT_SYMBOLS_RECURSIVE,
    OPT_STRINGS_RECURSIVE,
    OPT_NO_SEARCH,
};

static void usage(FILE *to)
{
    fprintf(to,
            "usage: linkcheck [options] FILE...\n"
            "Proves that each ELF FILE never links, loads or names a CUDA library.\n"
            "  --forbid STEM             also forbid libraries named STEM*.so* (repeatable)\n"
            "  --ld-library-path[=DIRS]  search LD_LIBRARY_PATH (from the environment, or DIRS)\n"
            "                            where ld.so does: after DT_RPATH, before DT_RUNPATH\n"
            "  --root DIR                look for absolute search directories and\n"
            "                            /etc/ld.so.conf under DIR ($ORIGIN paths excepted)\n"
            "  --symbols-recursive       check the symbols of every loaded library too\n"
            "  --strings-recursive       check the strings of every loaded library too\n"
            "  --no-search               check DT_NEEDED names only, load nothing\n"
            "  -v, --verbose             say which library is loaded from where\n"
            "  -h, --help                show this help\n"
            "exit status: 0 clean, 1 a rule fired, 2 usage error or unreadable/malformed input\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"forbid", required_argument, NULL, OPT_FORBID},
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
    unsigned int flags = 0;
    int status = 2;
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
    lc_checker_set_flags(checker, flags);
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
    lc_checker_destroy(checker);
    return status;
}
