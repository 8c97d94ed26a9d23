/* The agent's config file (docs/config.md): the format stagingd reads,
 * one "key = value" per line, '#' comments, each key the long option of
 * the same name. The file is read before the command line wherever
 * --config stands, so flags win; a refusal names the file and line. Any
 * program's getopt table works: lease-agent passes its own options and
 * the server's (gpu/cuda/agent_main.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bytes of one line, as stagingd's parser takes them. */
#define GA_CLI_CONFIG_LINE_MAX 4222
/* A config file is a page of settings; more is a wrong file. */
#define GA_CLI_CONFIG_FILE_MAX (1u << 20)

const char *const ga_server_cli_cmdline_only[] = {"config", "ready-fd", "help", "version", NULL};

int ga_server_cli_config_find(int argc, char **argv, const struct option *table,
                              const char **path_p, char *err, size_t errlen)
{
    int want = 0;
    for (const struct option *o = table; o->name; o++)
        if (strcmp(o->name, "config") == 0)
            want = o->val;
    const char *path = NULL;
    int rc = 0;
    opterr = 0;
    optind = 0; /* a full restart of getopt's state */
    for (;;) {
        int opt = getopt_long(argc, argv, "+:h", table, NULL);
        if (opt == -1)
            break;
        if (opt == want) {
            path = optarg;
        } else if (opt == ':' && optind > 0 && optind <= argc &&
                   strcmp(argv[optind - 1], "--config") == 0) {
            snprintf(err, errlen, "--config: expected a file, found nothing");
            rc = -EINVAL;
            break;
        }
        /* Anything else is the second pass's to apply or refuse. */
    }
    optind = 1;
    if (rc == 0)
        *path_p = path;
    return rc;
}

/* Trims blanks at both ends in place; returns the start. */
static char *ga_cli__trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int ga_cli__listed(const char *const *list, const char *name)
{
    for (size_t i = 0; list && list[i]; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* The whole file, NUL-terminated, into a malloc'ed buffer. */
static int ga_cli__slurp(const char *path, char **text_p, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        int rc = -errno;
        snprintf(err, errlen, "%s: cannot open the config file: %s", path, strerror(-rc));
        return rc;
    }
    char *text = malloc(GA_CLI_CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, GA_CLI_CONFIG_FILE_MAX + 1, f) : 0;
    int rc = 0;
    if (!text) {
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
    } else if (ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
    } else if (n > GA_CLI_CONFIG_FILE_MAX) {
        rc = -EFBIG;
        snprintf(err, errlen, "%s: expected a config file of at most %u bytes, found more", path,
                 GA_CLI_CONFIG_FILE_MAX);
    }
    fclose(f);
    if (rc < 0) {
        free(text);
        return rc;
    }
    text[n] = '\0';
    *text_p = text;
    return 0;
}

/* One "key = value" line (trimmed, not blank, not a comment) of @path. */
static int ga_cli__line(struct ga_server_cli *cli, const char *path, unsigned lineno, char *s,
                        const struct option *table, const char *const *cmdline_only,
                        ga_server_cli_apply_fn apply, void *ctx, char *err, size_t errlen)
{
    const char *prog = program_invocation_short_name;
    char *eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%u: expected 'key = value', found '%s'", path, lineno, s);
        return -EINVAL;
    }
    *eq = '\0';
    char *key = ga_cli__trim(s);
    char *value = ga_cli__trim(eq + 1);
    const struct option *o = NULL;
    for (const struct option *t = table; t->name; t++)
        if (strcmp(t->name, key) == 0)
            o = t;
    if (!o) {
        snprintf(err, errlen, "%s:%u: unknown key '%s' (see '%s --help')", path, lineno, key,
                 prog);
        return -EINVAL;
    }
    if (o->has_arg == no_argument || ga_cli__listed(ga_server_cli_cmdline_only, key) ||
        ga_cli__listed(cmdline_only, key)) {
        snprintf(err, errlen, "%s:%u: '%s' is a command-line option only", path, lineno, key);
        return -EINVAL;
    }
    char why[512];
    why[0] = '\0';
    cli->in_config = 1;
    int rc = apply(ctx, o->val, o->name, value, why, sizeof why);
    cli->in_config = 0;
    if (rc < 0) {
        /* The option's words say "--key: ..."; in a file it is "key". */
        const char *w = strncmp(why, "--", 2) == 0 ? why + 2 : why;
        snprintf(err, errlen, "%s:%u: %s", path, lineno, w[0] ? w : "refused");
        return -EINVAL;
    }
    return 0;
}

int ga_server_cli_config_load(struct ga_server_cli *cli, const char *path,
                              const struct option *table, const char *const *cmdline_only,
                              ga_server_cli_apply_fn apply, void *ctx, char *err, size_t errlen)
{
    char *text = NULL;
    int rc = ga_cli__slurp(path, &text, err, errlen);
    if (rc < 0)
        return rc;
    free(cli->config_text);
    cli->config_text = text; /* values point into it from now on */
    cli->config = path;
    unsigned lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        lineno++;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        if (strlen(line) > GA_CLI_CONFIG_LINE_MAX) {
            snprintf(err, errlen, "%s:%u: line longer than %u bytes", path, lineno,
                     GA_CLI_CONFIG_LINE_MAX);
            return -EINVAL;
        }
        char *s = ga_cli__trim(line);
        if (s[0] == '\0' || s[0] == '#')
            continue;
        rc = ga_cli__line(cli, path, lineno, s, table, cmdline_only, apply, ctx, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

size_t ga_server_cli_config_keys(size_t max, const char **keys_p)
{
    size_t n = 0;
    for (size_t i = 0; i < ga_server_cli_option_count; i++) {
        const struct option *o = &ga_server_cli_options[i];
        if (o->has_arg == no_argument || ga_cli__listed(ga_server_cli_cmdline_only, o->name))
            continue;
        if (n < max)
            keys_p[n] = o->name;
        n++;
    }
    return n;
}
