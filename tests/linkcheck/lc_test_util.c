#include "lc_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int lc_test_run(const char *const *args, struct lc_test_run *run_p)
{
    size_t nargs = 0;
    while (args[nargs])
        nargs++;
    char **argv = calloc(nargs + 2, sizeof(*argv));
    if (!argv)
        return -ENOMEM;
    argv[0] = (char *)LC_TEST_LINKCHECK;
    for (size_t i = 0; i < nargs; i++)
        argv[i + 1] = (char *)args[i];
    int fds[2] = {-1, -1};
    if (pipe2(fds, O_CLOEXEC) < 0) {
        int rc = -errno;
        free(argv);
        return rc;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(fds[0]);
        close(fds[1]);
        free(argv);
        return rc;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    for (;;) {
        if (out && len + 1024 > cap) {
            char *grown = realloc(out, cap * 2);
            if (!grown) {
                free(out);
                out = NULL;
            } else {
                out = grown;
                cap *= 2;
            }
        }
        char sink[1024];
        ssize_t n = read(fds[0], out ? out + len : sink, out ? cap - len - 1 : sizeof(sink));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (out)
            len += (size_t)n;
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!out)
        return -ENOMEM;
    out[len] = '\0';
    run_p->out = out;
    run_p->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return 0;
}

void lc_test_run_free(struct lc_test_run *run)
{
    free(run->out);
    run->out = NULL;
}

int lc_test_run_sanitizer_fired(const struct lc_test_run *run)
{
    return strstr(run->out, "Sanitizer") != NULL || strstr(run->out, "runtime error") != NULL;
}

int lc_test_read_file(const char *path, unsigned char **data_p, size_t *size_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size ? size : 1);
    if (!data) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, data + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int rc = n < 0 ? -errno : -EIO;
            free(data);
            close(fd);
            return rc;
        }
        got += (size_t)n;
    }
    close(fd);
    *data_p = data;
    *size_p = size;
    return 0;
}

int lc_test_write_file(const char *path, const void *data, size_t size, int mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    const unsigned char *p = data;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, p + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = -errno;
            close(fd);
            return rc;
        }
        done += (size_t)n;
    }
    return close(fd) < 0 ? -errno : 0;
}

char *lc_test_mkdtemp(void)
{
    const char *tmp = getenv("TMPDIR");
    char *templ = NULL;
    if (asprintf(&templ, "%s/linkcheck-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp") < 0)
        return NULL;
    if (!mkdtemp(templ)) {
        free(templ);
        return NULL;
    }
    return templ;
}

static int lc_test_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void lc_test_rm_rf(const char *path)
{
    nftw(path, lc_test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int lc_test_mkdir_p(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -ENOMEM;
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(copy, 0755) < 0 && errno != EEXIST) {
            int rc = -errno;
            free(copy);
            return rc;
        }
        *p = '/';
    }
    int rc = mkdir(copy, 0755) < 0 && errno != EEXIST ? -errno : 0;
    free(copy);
    return rc;
}

char *lc_test_join(const char *a, const char *b)
{
    char *out = NULL;
    return asprintf(&out, "%s/%s", a, b) < 0 ? NULL : out;
}
