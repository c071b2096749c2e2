/* The unit test files' main (a group by name, all, or --list) and their shared helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"

be_stream *expect_stream(backend *be)
{
    be_stream *st = NULL;
    EXPECT(be && be->ops->stream_create(be, 0, &st) == DPS_OK);
    return st;
}

void expect_stream_free(backend *be, be_stream *st)
{
    if (be && st) be->ops->stream_destroy(be, st);
}

int failures;
static int skipped; /* groups that could not run here */

void expect_skip(const char *why)
{
    fprintf(stderr, "skipped: %s\n", why);
    skipped++;
}

/* The program's name without its folder, for messages. */
static const char *program(const char *argv0)
{
    const char *slash = strrchr(argv0, '/');
    return slash ? slash + 1 : argv0;
}

/* Runs the group named `name` (every group when NULL); how many ran. */
static int run_groups(const char *name)
{
    int ran = 0;
    for (size_t i = 0; i < expect_ngroups; i++)
        if (!name || strcmp(name, expect_groups[i].name) == 0) {
            expect_groups[i].fn();
            ran++;
        }
    return ran;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < expect_ngroups; i++) printf("%s\n", expect_groups[i].name);
        return 0;
    }
    int ran = run_groups(argc < 2 ? NULL : argv[1]);
    if (!ran) {
        fprintf(stderr, "%s: no group named '%s'\n", program(argv[0]), argc > 1 ? argv[1] : "");
        return 2;
    }
    if (failures) fprintf(stderr, "%d expectation(s) failed\n", failures);
    return failures ? 1 : skipped == ran ? 77 : 0;
}

dps_status parse(const char *line, cli_args *a)
{
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "dpscale %s", line);
    for (char *t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    return cli_parse(argc, argv, a);
}

const char *write_tmp(const char *name, const void *data, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/dpscale-suite-%d-%s", (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

void expect_data_refused(file_loader load, const char *data, size_t len, const char *needle)
{
    const char *path = write_tmp("bad", data, len);
    dps_status rc = load(path);
    char want[520];
    snprintf(want, sizeof want, "%.255s%.255s", path, needle);
    if (rc != DPS_ERR_USAGE || !strstr(dps_errmsg(), want)) {
        fprintf(stderr, "file '%.40s...': rc %d, message '%s', expected '%s'\n", data, rc,
                dps_errmsg(), want);
        failures++;
    }
    unlink(path);
}

void expect_file_refused(file_loader load, const char *text, const char *needle)
{
    expect_data_refused(load, text, strlen(text), needle);
}
