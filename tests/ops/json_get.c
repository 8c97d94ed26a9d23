/* json_get PATH [PATH...]: reads one JSON document on stdin (jansson) and
 * prints the value at each PATH (members and array indices joined by '.',
 * "agents.0.up"; "#" after a path gives an array's length) on its own line:
 * strings bare, numbers and true/false/null as JSON. Exit 1 when a path is
 * missing or the input is not JSON, so the shell tests can assert on
 * leasectl --json and stagingd's control replies. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *walk(json_t *v, const char *path, int *count_p)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    *count_p = n > 0 && buf[n - 1] == '#';
    if (*count_p)
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '.')
        buf[--n] = '\0';
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save)) {
        char *end;
        long i = strtol(k, &end, 10);
        v = json_is_array(v) && *end == '\0' ? json_array_get(v, (size_t)i) : json_object_get(v, k);
    }
    return v;
}

int main(int argc, char **argv)
{
    json_error_t je;
    json_t *doc = json_loadf(stdin, 0, &je);
    if (!doc) {
        fprintf(stderr, "json_get: not JSON: %s (line %d)\n", je.text, je.line);
        return 1;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        int count;
        json_t *v = walk(doc, argv[i], &count);
        if (!v) {
            fprintf(stderr, "json_get: no '%s'\n", argv[i]);
            rc = 1;
            continue;
        }
        if (count)
            printf("%zu\n", json_is_array(v) ? json_array_size(v) : json_object_size(v));
        else if (json_is_string(v))
            printf("%s\n", json_string_value(v));
        else {
            char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            printf("%s\n", s ? s : "?");
            free(s);
        }
    }
    json_decref(doc);
    return rc;
}
