/* Helpers the command lines share around getopt_long (cli.h). */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"

void sd_cli__getopt_reset(void)
{
    optind = 0; /* GNU: start over, reinitialising the scan state */
    opterr = 0;
}

void sd_cli__getopt_error(int c, int argc, char **argv, char *buf, size_t len)
{
    /* getopt_long has consumed the offending word (and, for ':', knows the
     * option): it is argv[optind - 1]. */
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (c == ':')
        snprintf(buf, len, "%s: expected a value, found none", arg);
    else if (optopt && arg[0] == '-' && arg[1] != '-')
        snprintf(buf, len, "unknown option '-%c'", optopt);
    else
        snprintf(buf, len, "unknown argument '%s'", arg);
}
