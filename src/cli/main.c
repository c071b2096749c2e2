/* dpscale: entry point. Parses the command line and dispatches to the
 * commands (commands.c); the only place that exits. Exit status: 0 ok, 1 a
 * configuration failed, 2 bad input, 128 + signal when interrupted. */
#include <stdio.h>
#include <stdlib.h>

#include "dps_config.h"
#include "version.h"
#include "cli/cli.h"
#include "cli/commands.h"

int main(int argc, char **argv)
{
    cli_args *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, "dpscale: out of memory\n");
        return 1;
    }
    int status = 0;
    if (cli_parse(argc, argv, a) != DPS_OK) status = cmd_usage_error();
    else if (a->cmd == CMD_HELP) cli_usage(stdout);
    else if (a->cmd == CMD_VERSION) printf("dpscale %s (%s)\n", DPS_VERSION, DPS_GIT_DESCRIBE);
    else if (a->cmd == CMD_INFO) status = cmd_info(a);
    else if (a->cmd == CMD_COMM_BENCH) status = cmd_comm_bench(a);
    else if (a->cmd == CMD_LINKS) status = cmd_links(a);
    else if (a->cmd == CMD_PREDICT) status = cmd_predict(a);
    else status = cmd_run(a, argc, argv);
    free(a);
    return status;
}
