/*
 * The subcommands of eshard-mpi. Each returns the process exit code. Only "run" uses MPI.
 */
#ifndef ESHARD_COMMANDS_H
#define ESHARD_COMMANDS_H

#include "args.h"
#include "eshard/prepare.h"

int cmd_prepare(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_dlc(int argc, char **argv);

#include <signal.h>
#include "eshard/worker.h"
/* SIGTERM/SIGINT set a flag instead of killing the process (shared by worker and run). */
void install_stop_handlers(void);
volatile sig_atomic_t *stop_flag(void);
/* The path of this binary, for the child supervisor. */
const char *self_exe(void);
/* The worker's override options: fills opts[] and returns how many (<= 18). */
size_t worker_cli_options(struct es_worker_opts *o, struct es_opt *opts);
/* Checks what the table cannot (the Ray mode) and fills the derived fields. */
int worker_cli_finish(struct es_worker_opts *o, const char *cmd);

/* The most nodes --nodes takes: MPI counts ranks in an int (and 4 x that many shards fits). */
#define ES_MAX_NODES 2147483647

/* The options of prepare, shared with run: fills opts[] and returns how many. */
#define ES_PREPARE_MAX_OPTS 32
struct prepare_cli {
	struct es_prepare_opts o;
	const char *python, *dj_process, *dj_root, *process_cmd;
	const char *num_shards;      /* a count, or "auto" (the default) */
	const char *bad_lines;       /* --bad-lines: "strict" (the default) or "skip" */
	int64_t max_line_bytes, target_shard_mb;
	int keep_order, no_keep_order;
};
void prepare_cli_init(struct prepare_cli *c);
size_t prepare_cli_options(struct prepare_cli *c, struct es_opt *opts);
/* Checks what the table cannot (required options, exclusive processors) and fills c->o. */
int prepare_cli_finish(struct prepare_cli *c, const char *cmd);

#endif
