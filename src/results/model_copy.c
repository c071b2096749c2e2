/* A results folder's models/ (see model_copy.h): each model file copied in
 * whole, byte for byte, before its configurations run. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "results/model_copy.h"
#include "results/results_txn.h"
#include "core/util.h"

/* The folder's models/, made if need be and opened (never through a link). */
static dps_status open_models_dir(const results_dir *r, int *fd)
{
    if (mkdirat(r->dir_fd, MODEL_COPY_DIR, 0777) != 0 && errno != EEXIST)
        return dps_fail(DPS_ERR_USAGE, "%s/%s: cannot create the folder of model files: %s",
                        r->dir, MODEL_COPY_DIR, strerror(errno));
    *fd = openat(r->dir_fd, MODEL_COPY_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0)
        return dps_fail(DPS_ERR_USAGE, "%s/%s: cannot open the folder of model files: %s",
                        r->dir, MODEL_COPY_DIR, errno == ELOOP || errno == ENOTDIR
                        ? "it is a symbolic link or not a folder; remove it" : strerror(errno));
    return DPS_OK;
}

/* The whole file at path into *data (*data NULL when there is none). */
static dps_status read_source(const char *path, char **data, size_t *len)
{
    const char *base;
    int fd = dps_open_parent(path, &base);
    if (fd < 0)
        return dps_fail(DPS_ERR_USAGE, "%s: cannot open its folder: %s", path, strerror(errno));
    dps_status rc = dps_read_file_at(fd, base, path, data, len);
    close(fd);
    if (!rc && !*data) rc = dps_fail(DPS_ERR_USAGE, "%s: no such model file", path);
    return rc;
}

typedef struct bytes {
    const char *data;
    size_t len;
} bytes;

static void put_bytes(FILE *f, void *ctx)
{
    const bytes *b = ctx;
    fwrite(b->data, 1, b->len, f);
}

dps_status model_copy_keep(const results_dir *r, const char *model, const char *path)
{
    char name[DPS_NAME_MAX + 8], shown[DPS_PATH_MAX + DPS_NAME_MAX + 16];
    if (!config_model_copy_name(model, name, sizeof name)[0])
        return dps_fail(DPS_ERR_USAGE, "model %s: name too long for its copy in %s/%s", model,
                        r->dir, MODEL_COPY_DIR);
    snprintf(shown, sizeof shown, "%s/%s/%s", r->dir, MODEL_COPY_DIR, name);
    char *src = NULL, *have = NULL;
    size_t nsrc = 0, nhave = 0;
    int fd = -1;
    dps_status rc = read_source(path, &src, &nsrc);
    if (!rc) rc = results_check_folder(r);
    if (!rc) rc = open_models_dir(r, &fd);
    if (!rc) rc = dps_read_file_at(fd, name, shown, &have, &nhave);
    if (!rc && have && (nhave != nsrc || memcmp(have, src, nsrc) != 0))
        rc = dps_fail(DPS_ERR_USAGE, "%s: the folder's configurations of %s trained another "
                      "file than %s (predict --from reads the copy): write to another folder "
                      "(--name), or give this model another name (its file's `name` line)",
                      shown, model, path);
    else if (!rc && !have)
        rc = dps_replace_file_at(fd, name, shown, put_bytes, &(bytes){src, nsrc});
    if (fd >= 0) close(fd);
    free(src);
    free(have);
    return rc;
}
