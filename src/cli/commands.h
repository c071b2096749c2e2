/* The commands of dpscale (commands.c); main() parses and dispatches. */
#ifndef DPS_COMMANDS_H
#define DPS_COMMANDS_H

#include "cli/cli.h"

int cmd_run(cli_args *a, int argc, char **argv); /* run and sweep */
int cmd_info(cli_args *a);
int cmd_model_info(cli_args *a); /* info --model FILE: model_info.c */
int cmd_links(cli_args *a);
int cmd_comm_bench(cli_args *a);
int cmd_predict(cli_args *a);   /* predict_cmd.c */
int cmd_predict_measure(cli_args *a); /* predict --measure: measure_cmd.c */
/* Prints the message of a usage error; returns exit status 2. */
int cmd_usage_error(void);

#endif
