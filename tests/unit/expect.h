/* What the unit test files share: the expectations, each file's table of
 * groups (main() is expect.c's) and the helpers of several layers' groups.
 * Usage of every test_<layer>: test_<layer> [GROUP | --list]; no GROUP runs
 * them all, --list prints their names one a line. */
#ifndef DPS_TESTS_EXPECT_H
#define DPS_TESTS_EXPECT_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "backend/backend.h"
#include "cli/cli.h"

extern int failures; /* the expectations that did not hold, so far */

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                              \
    do {                                                                    \
        double a_ = (a), b_ = (b);                                          \
        if (!(fabs(a_ - b_) <= (tol))) {                                    \
            fprintf(stderr, "%s:%d: %s = %.9g, expected %.9g (tol %g)\n",   \
                    __FILE__, __LINE__, #a, a_, b_, (double)(tol));         \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* The running group cannot run on this machine (why: no GPU, ...): said on
 * stderr; when every group that ran was skipped and no expectation failed,
 * the exit status is 77 (meson's skip). */
void expect_skip(const char *why);

/* One group: the meson test `unit NAME` runs test_NAME(). */
typedef struct expect_group {
    const char *name;
    void (*fn)(void);
} expect_group;

#define GROUP(name) {#name, test_##name}

/* A file's groups, at its end: EXPECT_GROUPS(GROUP(a), GROUP(b), ...);
 * tests/unit/list_groups.py reads the names from there for meson. */
#define EXPECT_GROUPS(...)                                                  \
    const expect_group expect_groups[] = {__VA_ARGS__};                     \
    const size_t expect_ngroups = sizeof expect_groups / sizeof expect_groups[0]

extern const expect_group expect_groups[];
extern const size_t expect_ngroups;

/* A stream on be's device 0 for a test's device operations (the backends
 * refuse a NULL one); NULL, with a failed expectation, when be is NULL or
 * none can be made. expect_stream_free gives it back (NULL allowed). */
be_stream *expect_stream(backend *be);
void expect_stream_free(backend *be, be_stream *st);

/* `dpscale LINE` (words split at spaces) through cli_parse. */
dps_status parse(const char *line, cli_args *a);

/* data (len bytes) in /tmp/dpscale-suite-<pid>-<name>; its path (static). */
const char *write_tmp(const char *name, const void *data, size_t len);

/* A loader of a text file the tests refuse: suite, machine, workload, calibration. */
typedef dps_status (*file_loader)(const char *path);

/* data (len bytes) in a file that `load` refuses with "<path><needle>". */
void expect_data_refused(file_loader load, const char *data, size_t len, const char *needle);
void expect_file_refused(file_loader load, const char *text, const char *needle);

#endif
