/* The host backend's strict mode switch (host_strict.h): DPSCALE_STRICT=1. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host_strict.h"

static int strict;
static pthread_once_t strict_once = PTHREAD_ONCE_INIT;

static void read_strict(void)
{
    const char *v = getenv("DPSCALE_STRICT");
    strict = v && strcmp(v, "1") == 0;
}

int host_strict(void)
{
    pthread_once(&strict_once, read_strict);
    return strict;
}
