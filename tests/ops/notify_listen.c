/* notify_listen SOCKET SECONDS -- PROGRAM ARGS...: plays systemd's side of
 * the readiness protocol. Binds a Unix datagram socket at SOCKET, starts
 * PROGRAM with NOTIFY_SOCKET=SOCKET, and prints every datagram it sends
 * (one "notify: LINE" per line) until one holds STOPPING=1, the program
 * exits, or SECONDS pass. Then it sends the program SIGTERM if it still
 * runs, waits for it and exits with its status (124 on the timeout). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: notify_listen SOCKET SECONDS -- PROGRAM ARGS...\n");
        return 2;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", argv[1]);
    unlink(argv[1]);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        perror("notify_listen: bind");
        return 2;
    }
    setenv("NOTIFY_SOCKET", argv[1], 1);
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[4], argv + 4);
        _exit(127);
    }
    time_t end = time(NULL) + atoi(argv[2]);
    int status = -1, stopping = 0;
    while (!stopping && time(NULL) < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
            if (n > 0) {
                buf[n] = '\0';
                for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l;
                     l = strtok_r(NULL, "\n", &save)) {
                    printf("notify: %s\n", l);
                    stopping |= strcmp(l, "STOPPING=1") == 0;
                }
                fflush(stdout);
            }
        }
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        status = -1;
    }
    int timed_out = !stopping && status == -1 && time(NULL) >= end;
    if (status == -1) {
        if (!stopping)
            kill(pid, SIGTERM);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    unlink(argv[1]);
    if (timed_out)
        return 124;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
