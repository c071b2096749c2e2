/* Unit tests of core/: statistics, the CSV writer and its readers, number
 * parsing, and a results file looked up by column. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/csv.h"
#include "core/csv_read.h"
#include "core/csv_table.h"
#include "core/stats.h"
#include "core/util.h"

#include "expect.h"

static void test_stats(void)
{
    double x[] = {5, 1, 4, 2, 3}; /* unsorted on purpose */
    dps_stats s;
    stats_compute(x, 5, &s);
    EXPECT_NEAR(s.median, 3.0, 1e-12);
    EXPECT_NEAR(s.mean, 3.0, 1e-12);
    double q[] = {5, 1, 4, 2, 3};
    EXPECT_NEAR(stats_quantile_in_place(q, 5, 0.25), 2.0, 1e-12);
    EXPECT(q[0] == 1 && q[4] == 5 && isnan(stats_quantile_in_place(q, 0, 0.5)));
    EXPECT_NEAR(s.p10, 1.4, 1e-12);     /* numpy.percentile(x, 10) */
    EXPECT_NEAR(s.p90, 4.6, 1e-12);
    EXPECT_NEAR(s.stdev, sqrt(2.5), 1e-12);
    EXPECT_NEAR(s.min, 1.0, 0);
    EXPECT_NEAR(s.max, 5.0, 0);
    double y[] = {1, 2, 3, 4};
    stats_compute(y, 4, &s);
    EXPECT_NEAR(s.median, 2.5, 1e-12);
    EXPECT_NEAR(s.p10, 1.3, 1e-12);
    double one = 7.0;
    stats_compute(&one, 1, &s);
    EXPECT(s.median == 7.0 && s.p10 == 7.0 && s.p90 == 7.0 && s.stdev == 0.0);
    stats_compute(NULL, 0, &s);
    EXPECT(isnan(s.median));
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 4), 15.0, 1e-12);
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 2), 10.0, 1e-12);
    EXPECT_NEAR(stats_busbw_allreduce(10.0, 1), 0.0, 0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The records of text written by test_csv read back, field by field. */
static void test_csv_read(const char *path)
{
    char *data, field[32];
    size_t len, pos = 0;
    EXPECT(csv_read_file(path, &data, &len) == DPS_OK && data && len == strlen(data));
    if (!data) return;
    size_t n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = csv_record_len(data + pos, len - pos);
        EXPECT(n[i] > 0);
        if (i == 2) {
            EXPECT(csv_field(data + pos, n[i], 0, field, sizeof field) && !strcmp(field, "quote\"d"));
            EXPECT(csv_field(data + pos, n[i], 1, field, sizeof field) && !field[0]);
            EXPECT(csv_field(data + pos, n[i], 2, field, sizeof field) &&
                   !strcmp(field, "line break \xef\xbf\xbd\xef\xbf\xbd[0m"));
            EXPECT(!csv_field(data + pos, n[i], 3, field, sizeof field)); /* three fields */
            EXPECT(!csv_field(data + pos, n[i], 2, field, 4));             /* does not fit */
        }
        pos += n[i];
    }
    EXPECT(pos == len);
    EXPECT(csv_record_len("plain,1.5", 9) == 0);        /* cut short: no end */
    EXPECT(csv_record_len("\"a\nb\",1\n", 8) == 8); /* a newline inside quotes */
    free(data);
    char *none;
    EXPECT(csv_read_file("/nonexistent/dir/x.csv", &none, &len) == DPS_OK && !none && !len);
}

static void test_csv(void)
{
    char dir[] = "/tmp/dpscale-csv-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/t.csv", dir);
    static const char *const cols[] = {"name", "value_ms", "note"};
    csv_buf b;
    csv_init(&b);
    csv_str(&b, "plain");
    csv_num(&b, 1.5, 2);
    csv_str(&b, "has,comma");
    csv_end_row(&b);
    csv_str(&b, "quote\"d");
    csv_num(&b, NAN, 2);
    csv_str(&b, "line\nbreak\t\xff\x1b[0m"); /* csv_clean_text: spaces, U+FFFD */
    csv_end_row(&b);
    csv_str(&b, " padded");
    csv_int(&b, -3);
    csv_empty(&b);
    csv_end_row(&b);
    EXPECT(csv_append(path, cols, 3, &b) == DPS_OK);
    const char *want = "name,value_ms,note\nplain,1.50,\"has,comma\"\n"
                       "\"quote\"\"d\",,line break \xef\xbf\xbd\xef\xbf\xbd[0m\n\" padded\",-3,\n";
    char *got = slurp(path);
    EXPECT(got && strcmp(got, want) == 0);
    test_csv_read(path);
    /* a second append adds rows without a second header */
    EXPECT(csv_append(path, cols, 3, &b) == DPS_OK);
    got = slurp(path);
    EXPECT(got && strlen(got) == 2 * strlen(want) - strlen("name,value_ms,note\n"));
    /* a file with other columns is refused and left alone */
    static const char *const other[] = {"name", "value_s"};
    EXPECT(csv_append(path, other, 2, &b) == DPS_ERR_USAGE);
    EXPECT(strstr(dps_errmsg(), "header differs") != NULL);
    csv_free(&b);
    unlink(path);
    rmdir(dir);
}

static void test_parse(void)
{
    uint64_t b;
    EXPECT(dps_parse_utc_iso8601("1970-01-02T00:00:01Z") == 86401.0);
    EXPECT(dps_parse_utc_iso8601("2024-02-29T12:00:00Z\"") == 1709208000.0);
    EXPECT(dps_parse_utc_iso8601("2024-02-29 12:00") == -1.0);
    EXPECT(dps_parse_bytes("4096", &b) == 0 && b == 4096);
    EXPECT(dps_parse_bytes("2K", &b) == 0 && b == 2048);
    EXPECT(dps_parse_bytes("3MiB", &b) == 0 && b == 3u << 20);
    EXPECT(dps_parse_bytes("1g", &b) == 0 && b == 1u << 30);
    EXPECT(dps_parse_bytes("5GB", &b) == 0 && b == 5ull << 30);
    EXPECT(dps_parse_bytes("-1", &b) == -1);
    EXPECT(dps_parse_bytes("1X", &b) == -1);
    EXPECT(dps_parse_bytes("", &b) == -1);
    EXPECT(dps_parse_bytes("99999999999999999999", &b) == -2);
    EXPECT(dps_parse_bytes("17179869184T", &b) == -2);
    int64_t v;
    EXPECT(dps_parse_i64("12", 0, 20, &v) == 0 && v == 12);
    EXPECT(dps_parse_i64("21", 0, 20, &v) == -2);
    EXPECT(dps_parse_i64(" 1", 0, 20, &v) == -1);
    EXPECT(dps_parse_i64("1 ", 0, 20, &v) == -1);
    EXPECT(dps_parse_i64("0x10", 0, 20, &v) == -1);
}

/* A results file looked up by column: quoted cells, numbers, damage named by line. */
static void test_csv_table(void)
{
    const char *path;
    const char *csv = "a,b,c\n1,\"x,\ny\",2.5\n3,z,oops\n";
    path = write_tmp("t.csv", csv, strlen(csv));
    csv_table t;
    int col;
    char cell[64];
    double x;
    EXPECT(csv_table_load(path, "hint", &t) == DPS_OK && t.nrows == 2 && t.ncols == 3);
    EXPECT(csv_table_col(&t, "b", &col) == DPS_OK && col == 1);
    EXPECT(strcmp(csv_table_cell(&t, 0, 1, cell, sizeof cell), "x,\ny") == 0);
    EXPECT(csv_table_num(&t, 0, 2, 0, 0, &x) == DPS_OK && x == 2.5);
    EXPECT(csv_table_num(&t, 1, 2, 0, 0, &x) == DPS_ERR_USAGE && strstr(dps_errmsg(), ":4: c = 'oops'"));
    EXPECT(csv_table_col(&t, "d", &col) == DPS_ERR_USAGE && strstr(dps_errmsg(), "no column 'd'"));
    csv_table_free(&t);
    unlink(path);
    path = write_tmp("cut.csv", "a,b\n1,\"2\n", 9);
    EXPECT(csv_table_load(path, "hint", &t) == DPS_ERR_USAGE && strstr(dps_errmsg(), ":2: the file ends inside a record"));
    unlink(path);
    EXPECT(csv_table_load("/nonexistent/x.csv", "run X", &t) == DPS_ERR_USAGE && strstr(dps_errmsg(), "missing or empty (run X)"));
}

EXPECT_GROUPS(GROUP(stats), GROUP(csv), GROUP(parse), GROUP(csv_table));
