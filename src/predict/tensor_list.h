/* A list of parameter tensors' element counts as a WORKLOAD file writes it:
 * numbers separated by commas, a group repeated as `K x (LIST)` (groups
 * nest): "38597376, 786432, 12 x (768, 768, 1769472, 2304), 768". */
#ifndef DPS_TENSOR_LIST_H
#define DPS_TENSOR_LIST_H

#include <stddef.h>

#define TENSOR_LIST_MAX 65536 /* tensors in a list */

/* The counts of text in *counts (malloc'd, caller frees) and *n; on a
 * malformed list returns -1 and a reason in why (the counts freed). */
int tensor_list_parse(const char *text, size_t **counts, int *n, char *why, size_t why_len);

#endif
