/* `dpscale predict` (issue 16): reads a MACHINE and a WORKLOAD file,
 * predicts every --modes x --gpus configuration, prints the table and, when
 * --out or --name is given, writes predictions.csv into OUT/NAME. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "run/predict_out.h"
#include "core/util.h"

static int usage_error(void)
{
    fprintf(stderr, "dpscale: %s\n", dps_errmsg());
    return 2;
}

static dps_status check_args(const cli_args *a)
{
    const char *lack = !a->machine_path[0] ? "--machine FILE" : !a->workload_path[0] ? "--workload FILE"
                       : !a->gpus_set ? "--gpus LIST" : NULL;
    if (!lack) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "predict needs %s (dpscale predict --machine FILE --workload FILE "
                    "--gpus LIST; bench/predict/ has examples)", lack);
}

/* WORKLOAD-on-MACHINE, made a folder name: no '/', not starting with '.'. */
static void default_folder(const predict_machine *m, const predict_workload *w, char *buf, size_t len)
{
    char both[2 * DPS_NAME_MAX + 8];
    snprintf(both, sizeof both, "%s-on-%s", w->name, m->name);
    dps_strlcpy(buf, both, len);
    for (char *c = buf; *c; c++)
        if (*c == '/' || *c == ' ') *c = '_';
    if (buf[0] == '.') buf[0] = '_';
}

static dps_status write_folder(cli_args *a, const predict_machine *m, const predict_workload *w,
                               const predict_consts *c, const predict_row *rows, int n)
{
    char dir[2 * DPS_PATH_MAX];
    if (!a->name_set) default_folder(m, w, a->cfg.name, sizeof a->cfg.name);
    snprintf(dir, sizeof dir, "%s/%s", a->cfg.out_dir, a->cfg.name);
    DPS_TRY(dps_mkdirs(dir, "--out"));
    DPS_TRY(predict_write_csv(dir, m, w, c, rows, n));
    printf("# predictions.csv in %s\n", dir);
    return DPS_OK;
}

int cmd_predict(cli_args *a)
{
    predict_machine m;
    predict_workload w;
    predict_split s;
    predict_consts c;
    predict_consts_default(&c);
    if (check_args(a) || predict_machine_load(a->machine_path, &m) ||
        predict_workload_load(a->workload_path, &w) || predict_split_step(&m, &w, &s))
        return usage_error();
    dps_mode modes[MODE_COUNT] = {MODE_DP, MODE_DDP};
    int nmodes = a->sweep_modes_n ? a->sweep_modes_n : MODE_COUNT;
    if (a->sweep_modes_n) memcpy(modes, a->sweep_modes, sizeof modes);
    predict_row *rows = calloc((size_t)(nmodes * a->sweep_ngpus_n), sizeof *rows);
    if (!rows) {
        fprintf(stderr, "dpscale: out of host memory\n");
        return 1;
    }
    int n = 0;
    for (int g = 0; g < a->sweep_ngpus_n; g++)
        for (int k = 0; k < nmodes; k++)
            predict_config(&m, &w, &s, &c, modes[k], a->sweep_ngpus[g], &rows[n++]);
    predict_print(stdout, &m, &w, rows, n);
    dps_status rc = a->out_set || a->name_set ? write_folder(a, &m, &w, &c, rows, n) : DPS_OK;
    free(rows);
    if (rc == DPS_ERR_USAGE) return usage_error();
    if (rc) fprintf(stderr, "dpscale: %s\n", dps_errmsg());
    return rc ? 1 : 0;
}
