/* The results folder's copy of each model file its configurations trained,
 * models/NAME.model (config_model_copy_name, config.h), so that `predict
 * --from` reads the file's tensors, DDP's buckets and backward's pace from
 * the folder itself, wherever it is moved and whatever became of the file
 * the run was given. */
#ifndef DPS_MODEL_COPY_H
#define DPS_MODEL_COPY_H

#include <stddef.h>

#include "config/config.h"
#include "results/results.h"

/* Keeps the model file at path, trained as `model`, in the folder: copied
 * when the folder has no copy of that name, left when it has this one;
 * DPS_ERR_USAGE when it holds another file of the same name, whose runs
 * would then be predicted with the wrong tensors. */
dps_status model_copy_keep(const results_dir *r, const char *model, const char *path) DPS_MUST_USE;

#endif
