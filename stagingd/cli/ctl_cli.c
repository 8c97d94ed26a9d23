/* `stagingd ctl`: one command line to a running daemon's control socket,
 * its reply printed (stagingd/daemon/control.c serves it). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"

static void ctl_usage(FILE *to)
{
    fprintf(to, "usage: stagingd ctl --control SOCK COMMAND [ARG...]\n"
                "  commands: stats [json] | leases | segments | job [STORE] [verify|scan|both] |\n"
                "            quit | help\n");
}

int sd_ctl_cli(int argc, char **argv)
{
    static const struct option opts[] = {
        {"control", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int c;
    sd_cli__getopt_reset();
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'c') {
            path = optarg;
        } else if (c == 'h') {
            ctl_usage(stdout);
            return 0;
        } else {
            char why[256];
            sd_cli__getopt_error(c, argc, argv, why, sizeof why);
            fprintf(stderr, "stagingd ctl: %s\n", why);
            ctl_usage(stderr);
            return 2;
        }
    }
    /* The words left (getopt moved them behind the options) are the command. */
    char line[SD_CTL_LINE_MAX];
    size_t len = 0;
    for (int i = optind; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (len + n + 2 > sizeof line) {
            fprintf(stderr, "stagingd ctl: command longer than %zu bytes\n", sizeof line - 2);
            return 2;
        }
        if (len)
            line[len++] = ' ';
        memcpy(line + len, argv[i], n);
        len += n;
    }
    if (!path || len == 0) {
        fprintf(stderr, "stagingd ctl: expected --control SOCK and a command, found %s\n",
                path ? "no command" : "no --control");
        ctl_usage(stderr);
        return 2;
    }
    line[len++] = '\n';
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) == 0 || strlen(path) >= sizeof addr.sun_path) {
        fprintf(stderr, "stagingd ctl: %s: path too long\n", path);
        return 2;
    }
    memcpy(addr.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "stagingd ctl: cannot connect to %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    if (send(fd, line, len, MSG_NOSIGNAL) != (ssize_t)len) {
        fprintf(stderr, "stagingd ctl: send to %s failed: %s\n", path, strerror(errno));
        close(fd);
        return 1;
    }
    /* Print lines until the final "ok" or "error: ..." line. */
    char buf[SD_CTL_LINE_MAX];
    size_t have = 0;
    int status = -1;
    while (status < 0) {
        ssize_t n = recv(fd, buf + have, sizeof buf - have - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "stagingd ctl: %s closed the connection before \"ok\" or \"error\"\n",
                    path);
            status = 1;
            break;
        }
        have += (size_t)n;
        char *nl;
        while (status < 0 && (nl = memchr(buf, '\n', have)) != NULL) {
            *nl = '\0';
            if (strcmp(buf, "ok") == 0)
                status = 0;
            else if (strncmp(buf, "error", 5) == 0) {
                fflush(stdout);
                fprintf(stderr, "%s\n", buf);
                status = 1;
            } else {
                printf("%s\n", buf);
            }
            size_t used = (size_t)(nl - buf) + 1;
            have -= used;
            memmove(buf, nl + 1, have);
        }
        if (have == sizeof buf - 1) {
            fwrite(buf, 1, have, stdout);
            have = 0;
        }
    }
    close(fd);
    return status;
}
