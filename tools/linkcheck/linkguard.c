/* linkguard: the link-time half of layer 2 of the CUDA boundary
 * (docs/boundary.md). CMake runs a CUDA-free target's link through it
 * (RULE_LAUNCH_LINK, set by lease_prove_cuda_free()): it runs the link with
 * the linker's own trace of every file it reads (-Wl,--trace), then refuses
 * the link -- exit 1, output deleted -- when any input is CUDA: a forbidden
 * library by name, SONAME, real path or folder, an object or archive member
 * with a CUDA symbol or fat binary. The configure-time walk reads what CMake
 * was told; this reads what the linker received, whichever way it got there
 * (LINKER: flags, generator expressions, linker scripts, response files,
 * libraries --as-needed drops again).
 *
 * usage: linkguard [--target NAME] [--cuda-root DIR]... [--forbid-file FILE]
 *                  -- LINK COMMAND...
 * Exit status: the link's when it fails, 1 when an input is CUDA, 2 on a
 * usage error, else 0. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linkcheck/forbidden.h"
#include "linkcheck/linkcheck.h"

/* One file the linker read. */
struct guard_input {
    char *path;
    dev_t dev;
    ino_t ino;
    int script; /* not ELF and not an archive: a linker script */
};

struct guard {
    const char *target;
    char **argv; /* the link command */
    int argc;
    char *rsp;   /* the contents of its @response files, for naming culprits */
    struct guard_input *in;
    size_t nin, cap;
};

static void guard_usage(FILE *to)
{
    fprintf(to, "usage: linkguard [--target NAME] [--cuda-root DIR]... [--forbid-file FILE] "
                "-- LINK COMMAND...\n"
                "Runs the link with -Wl,--trace and fails it when any file it reads is CUDA.\n");
}

static int guard_read_fd(int fd, char **out_p, size_t *len_p)
{
    size_t len = 0, cap = 65536;
    char *out = malloc(cap);
    if (!out)
        return -ENOMEM;
    for (;;) {
        if (len + 4096 > cap) {
            char *grown = realloc(out, cap * 2);
            if (!grown) {
                free(out);
                return -ENOMEM;
            }
            out = grown;
            cap *= 2;
        }
        ssize_t n = read(fd, out + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
    *out_p = out;
    *len_p = len;
    return 0;
}

/* Runs @argv with its stdout captured in *out_p. Returns the exit status,
 * 128 + signal, or a negative errno when it could not start. */
static int guard_run(char **argv, char **out_p, size_t *len_p)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "linkguard: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    int rc = guard_read_fd(fds[0], out_p, len_p);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc < 0)
        return rc;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The file a trace line names: "path", "archive(member)", "(archive)member"
 * or "-lname (path)". A new string, or NULL. */
static char *guard_trace_path(const char *line)
{
    size_t len = strlen(line);
    if (len == 0)
        return NULL;
    if (line[0] == '(') {
        const char *close = strchr(line, ')');
        return close ? strndup(line + 1, (size_t)(close - line - 1)) : NULL;
    }
    if (line[len - 1] == ')') {
        const char *open = strstr(line, " (");
        if (line[0] == '-' && open)
            return strndup(open + 2, len - (size_t)(open - line) - 3);
        open = strchr(line, '(');
        if (open)
            return strndup(line, (size_t)(open - line));
    }
    return strdup(line);
}

static int guard_add_input(struct guard *g, char *path, const struct stat *st)
{
    for (size_t i = 0; i < g->nin; i++) {
        if (g->in[i].dev == st->st_dev && g->in[i].ino == st->st_ino) {
            free(path);
            return 0;
        }
    }
    if (g->nin == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        struct guard_input *in = realloc(g->in, cap * sizeof(*in));
        if (!in) {
            free(path);
            return -ENOMEM;
        }
        g->in = in;
        g->cap = cap;
    }
    g->in[g->nin++] = (struct guard_input){path, st->st_dev, st->st_ino, 0};
    return 0;
}

/* Splits the link's stdout into the trace (inputs) and everything else,
 * which goes on to our stdout. */
static int guard_parse_trace(struct guard *g, char *out)
{
    for (char *line = out, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = '\0';
        char *path = guard_trace_path(line);
        struct stat st;
        if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (guard_add_input(g, path, &st) < 0)
                return -ENOMEM;
            continue;
        }
        free(path);
        if (len)
            printf("%s\n", line);
    }
    return 0;
}

/* The contents of every @file argument, where a culprit may be named. */
static void guard_read_response_files(struct guard *g)
{
    size_t total = 0;
    for (int i = 1; i < g->argc; i++) {
        if (g->argv[i][0] != '@')
            continue;
        FILE *f = fopen(g->argv[i] + 1, "re");
        if (!f)
            continue;
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
            char *grown = realloc(g->rsp, total + n + 1);
            if (!grown)
                break;
            g->rsp = grown;
            memcpy(g->rsp + total, buf, n);
            total += n;
            g->rsp[total] = '\0';
        }
        fclose(f);
    }
}

/* "libcuda.so.1" -> "cuda", the name -l would take; NULL when not lib*. */
static char *guard_lib_name(const char *base)
{
    if (strncmp(base, "lib", 3) != 0)
        return NULL;
    size_t len = strcspn(base + 3, ".");
    return len ? strndup(base + 3, len) : NULL;
}

/* Whether @text holds "-l<name>" or "-l <name>" or "--library=<name>" ending
 * at a separator. */
static int guard_names_lib(const char *text, const char *name)
{
    static const char *const forms[] = {"-l", "-l ", "-l,", "--library=", "--library,"};
    size_t n = strlen(name);
    for (const char *p = text; p && (p = strstr(p, name)); p++) {
        char end = p[n];
        if (end && end != ' ' && end != ',' && end != '\n' && end != '\t' && end != '"')
            continue;
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
            size_t fl = strlen(forms[f]);
            if ((size_t)(p - text) >= fl && strncmp(p - fl, forms[f], fl) == 0)
                return 1;
        }
    }
    return 0;
}

/* How input @in came onto the link line, for the report (a new string). */
static char *guard_how(const struct guard *g, const struct guard_input *in)
{
    const char *base = lc_path_basename(in->path);
    char *out = NULL;
    for (int i = 1; i < g->argc && !out; i++) {
        struct stat st;
        const char *a = g->argv[i];
        const char *comma = strrchr(a, ',');
        const char *file = strncmp(a, "-Wl,", 4) == 0 && comma ? comma + 1 : a;
        if (stat(file, &st) == 0 && st.st_dev == in->dev && st.st_ino == in->ino &&
            asprintf(&out, "named on the link line as '%s'", a) < 0)
            out = NULL;
    }
    char *name = guard_lib_name(base);
    for (int i = 1; i < g->argc && !out && name; i++) {
        if (guard_names_lib(g->argv[i], name) ||
            (strncmp(g->argv[i], "-l:", 3) == 0 && strcmp(g->argv[i] + 3, base) == 0))
            if (asprintf(&out, "found for '%s' on the link line", g->argv[i]) < 0)
                out = NULL;
    }
    if (!out && g->rsp && (strstr(g->rsp, in->path) || strstr(g->rsp, base)) &&
        asprintf(&out, "named in a response file (@file) on the link line") < 0)
        out = NULL;
    if (!out && name && g->rsp && guard_names_lib(g->rsp, name) &&
        asprintf(&out, "found for -l%s in a response file (@file) on the link line", name) < 0)
        out = NULL;
    for (size_t i = 0; i < g->nin && !out; i++) {
        if (!g->in[i].script)
            continue;
        FILE *f = fopen(g->in[i].path, "re");
        char text[8192];
        size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
        if (f)
            fclose(f);
        text[n] = '\0';
        if ((strstr(text, base) || (name && guard_names_lib(text, name))) &&
            asprintf(&out, "pulled in by the linker script %s", g->in[i].path) < 0)
            out = NULL;
    }
    free(name);
    if (!out)
        out = strdup("not named on the link line: added by the compiler driver, a linker script "
                     "or a search path");
    return out;
}

/* The file the link writes: "-o FILE" or "-oFILE". */
static const char *guard_output(const struct guard *g)
{
    for (int i = 1; i < g->argc; i++) {
        if (strcmp(g->argv[i], "-o") == 0 && i + 1 < g->argc)
            return g->argv[i + 1];
        if (strncmp(g->argv[i], "-o", 2) == 0 && g->argv[i][2])
            return g->argv[i] + 2;
    }
    return NULL;
}

static int guard_check(struct guard *g, struct lc_checker *checker, const char *output)
{
    size_t bad = 0, scripts = 0;
    for (size_t i = 0; i < g->nin; i++) {
        char *why = NULL;
        int rc = lc_checker_classify_file(checker, g->in[i].path, LC_CLASSIFY_SYMBOLS, &why);
        if (rc == -ENOEXEC) {
            g->in[i].script = 1;
            scripts++;
        }
        if (rc == 1) {
            char *how = guard_how(g, &g->in[i]);
            fprintf(stderr,
                    "linkguard: FAIL %s: CUDA boundary violated at link time: the link of %s "
                    "reads %s: %s; %s\n",
                    g->target, output ? output : "?", g->in[i].path, why ? why : "?",
                    how ? how : "?");
            free(how);
            bad++;
        } else if (rc < 0 && rc != -ENOEXEC) {
            fprintf(stderr, "linkguard: warning %s: cannot read link input %s: %s\n", g->target,
                    g->in[i].path, strerror(-rc));
        }
        free(why);
    }
    if (bad) {
        char link_txt[4096];
        snprintf(link_txt, sizeof(link_txt), "CMakeFiles/%s.dir/link.txt", g->target);
        fprintf(stderr,
                "linkguard: FAIL %s: %zu of %zu link inputs are CUDA; %s must stay CUDA-free "
                "(the whole link line: %s%s)\n",
                g->target, bad, g->nin, g->target,
                access(link_txt, R_OK) == 0 ? "" : "the build tool's verbose output, not ",
                link_txt);
        return 1;
    }
    printf("linkguard: OK %s: none of the %zu files the linker read is CUDA (%zu linker scripts; "
           "%zu stems forbidden)\n",
           g->target, g->nin, scripts, lc_checker_stem_count(checker));
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"target", required_argument, NULL, 't'},
        {"cuda-root", required_argument, NULL, 'r'},
        {"forbid-file", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct guard g = {.target = "the target"};
    struct lc_checker *checker = NULL;
    char *roots = NULL, *out = NULL;
    int status = 2, opt, rc;
    if (lc_checker_create(&checker) < 0) {
        fprintf(stderr, "linkguard: error: out of memory\n");
        return 2;
    }
    lc_checker_set_reporter(checker, NULL, NULL);
    while ((opt = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
        if (opt == 't') {
            g.target = optarg;
        } else if (opt == 'r') {
            char *grown = NULL;
            if (asprintf(&grown, "%s%s%s", roots ? roots : "", roots ? ":" : "", optarg) < 0)
                goto done;
            free(roots);
            roots = grown;
        } else if (opt == 'f') {
            if ((rc = lc_checker_forbid_file(checker, optarg)) < 0) {
                fprintf(stderr, "linkguard: error: --forbid-file %s: %s\n", optarg,
                        strerror(-rc));
                goto done;
            }
        } else {
            guard_usage(opt == 'h' ? stdout : stderr);
            status = opt == 'h' ? 0 : 2;
            goto done;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "linkguard: error: expected a link command after '--', found none\n");
        guard_usage(stderr);
        goto done;
    }
    g.argc = argc - optind;
    g.argv = calloc((size_t)g.argc + 2, sizeof(char *));
    if (!g.argv)
        goto done;
    memcpy(g.argv, argv + optind, (size_t)g.argc * sizeof(char *));
    const char *driver = lc_path_basename(g.argv[0]);
    if (strstr(driver, "nvcc")) {
        fprintf(stderr,
                "linkguard: FAIL %s: CUDA boundary violated at link time: it is linked by %s, "
                "which links the CUDA runtime in; a CUDA-free target links with the C compiler "
                "(LINKER_LANGUAGE C, no .cu sources)\n",
                g.target, g.argv[0]);
        status = 1;
        goto done;
    }
    /* The linker prints each file it opens, in order, on its stdout. */
    g.argv[g.argc] = "-Wl,--trace";
    size_t len = 0;
    int link = guard_run(g.argv, &out, &len);
    if (link < 0) {
        fprintf(stderr, "linkguard: error: cannot run %s: %s\n", g.argv[0], strerror(-link));
        goto done;
    }
    const char *output = guard_output(&g);
    if (link != 0) {
        fwrite(out, 1, len, stdout);
        status = link;
        goto done;
    }
    if (guard_parse_trace(&g, out) < 0)
        goto done;
    if (g.nin == 0) {
        fprintf(stderr,
                "linkguard: FAIL %s: the link printed no trace of the files it read, so nothing "
                "proves it CUDA-free (did -Wl,--trace reach the linker?)\n",
                g.target);
        status = 1;
    } else {
        rc = lc_checker_forbid_installed(checker, roots,
                                         LC_INSTALLED_DEFAULT_ROOTS | LC_INSTALLED_DRIVER |
                                             LC_INSTALLED_SONAMES);
        if (rc < 0) {
            fprintf(stderr, "linkguard: error: reading the installed CUDA libraries: %s\n",
                    strerror(-rc));
            goto done;
        }
        guard_read_response_files(&g);
        status = guard_check(&g, checker, output);
    }
    /* A refused output must not look up to date to the next build. */
    if (status != 0 && output)
        unlink(output);
done:
    fflush(stdout);
    for (size_t i = 0; i < g.nin; i++)
        free(g.in[i].path);
    free(g.in);
    free(g.rsp);
    free(g.argv);
    free(out);
    free(roots);
    lc_checker_destroy(checker);
    return status;
}
