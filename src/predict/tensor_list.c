/* The tensor list of a WORKLOAD file (see tensor_list.h): recursive descent
 * over list := item (',' item)*, item := COUNT | K 'x' '(' list ')'. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/tensor_list.h"

typedef struct parser {
    const char *p;
    size_t *out;
    int n;
    char *why;
    size_t why_len;
    int depth;
} parser;

static int fail(parser *ps, const char *what)
{
    snprintf(ps->why, ps->why_len, "%s at '%.24s'", what, *ps->p ? ps->p : "the end");
    return -1;
}

static void skip_space(parser *ps)
{
    while (isspace((unsigned char)*ps->p)) ps->p++;
}

static int number(parser *ps, uint64_t *v)
{
    skip_space(ps);
    if (!isdigit((unsigned char)*ps->p)) return fail(ps, "expected a whole number");
    *v = 0;
    while (isdigit((unsigned char)*ps->p)) {
        if (*v > (UINT64_C(1) << 50)) return fail(ps, "number too large");
        *v = *v * 10 + (uint64_t)(*ps->p++ - '0');
    }
    return 0;
}

static int push(parser *ps, size_t count)
{
    if (ps->n >= TENSOR_LIST_MAX) {
        char what[40];
        snprintf(what, sizeof what, "more than %d tensors", TENSOR_LIST_MAX);
        return fail(ps, what);
    }
    ps->out[ps->n++] = count;
    return 0;
}

static int list(parser *ps);

/* COUNT, or K x (LIST): the group's tensors copied K - 1 more times. */
static int item(parser *ps)
{
    uint64_t v;
    if (number(ps, &v)) return -1;
    skip_space(ps);
    if (*ps->p != 'x') return v ? push(ps, (size_t)v) : fail(ps, "a tensor of 0 elements");
    ps->p++;
    skip_space(ps);
    if (*ps->p != '(') return fail(ps, "expected '(' after 'K x'");
    if (v < 1 || ++ps->depth > 8) return fail(ps, v < 1 ? "a group repeated 0 times" : "groups nested too deep");
    ps->p++;
    int first = ps->n;
    if (list(ps)) return -1;
    skip_space(ps);
    if (*ps->p != ')') return fail(ps, "expected ')'");
    ps->p++;
    ps->depth--;
    int len = ps->n - first;
    for (uint64_t k = 1; k < v; k++)
        for (int i = 0; i < len; i++)
            if (push(ps, ps->out[first + i])) return -1;
    return 0;
}

static int list(parser *ps)
{
    if (item(ps)) return -1;
    for (skip_space(ps); *ps->p == ','; skip_space(ps)) {
        ps->p++;
        if (item(ps)) return -1;
    }
    return 0;
}

int tensor_list_parse(const char *text, size_t **counts, int *n, char *why, size_t why_len)
{
    parser ps = {.p = text, .out = malloc(TENSOR_LIST_MAX * sizeof(size_t)), .why = why,
                 .why_len = why_len};
    if (!ps.out) {
        snprintf(why, why_len, "out of host memory");
        return -1;
    }
    int rc = list(&ps);
    skip_space(&ps);
    if (!rc && *ps.p) rc = fail(&ps, "expected ',' or the end");
    if (rc) {
        free(ps.out);
        return -1;
    }
    *counts = ps.out;
    *n = ps.n;
    return 0;
}
