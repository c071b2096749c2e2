/* The host backend's strict mode: whether it is on (DPSCALE_STRICT=1 in
 * the environment), read in one place so that every check asks the same. */
#ifndef DPS_HOST_STRICT_H
#define DPS_HOST_STRICT_H

/* 1 when DPSCALE_STRICT is set to 1, else 0; read once per process. */
int host_strict(void);

#endif
