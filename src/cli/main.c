/* dpscale: entry point. Parses the command line and dispatches to the
 * commands (commands.c); the only place that exits. Exit status: 0 ok, 1 a
 * configuration failed, 2 bad input, 128 + signal when interrupted. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "build_config.h"
#include "version.h"
#include "cli/cli.h"
#include "model/net.h"
#include "cli/commands.h"

/* Descriptors 0, 1 and 2 open before anything else is: one that is closed
 * would be the next file opened (the results folder's lock), and the table
 * would be written into it. Closed ones read and write /dev/null. */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int null = open("/dev/null", O_RDWR);
            if (null >= 0 && null != fd) { /* a lower one was closed too: it got that */
                dup2(null, fd);
                close(null);
            }
        }
}

/* A reader of stdout that goes away (`dpscale sweep | head`) only ends the
 * printing: SIGPIPE ignored, a write then fails with EPIPE instead of
 * killing a process that may be writing the results folder. */
static void process_init(void)
{
    std_fds_open();
    signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv)
{
    process_init();
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
    else if (a->cmd == CMD_PREDICT && a->measure) status = cmd_predict_measure(a);
    else if (a->cmd == CMD_PREDICT) status = cmd_predict(a);
    else status = cmd_run(a, argc, argv);
    net_unload_all();
    free(a);
    return status;
}
