/*
 * eshard-mpi: the command table. Only "run" initializes MPI; every other subcommand is a
 * plain single process that works without mpirun.
 */
#include "commands.h"
#include "commands_jobs.h"

#include "eshard/attempt.h"

#include "eshard/log.h"
#include "eshard/suggest.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "run", cmd_run, "the whole job under MPI: prepare, work on every rank, verify and merge" },
	{ "dlc", cmd_dlc, "the whole job as one instance of a worker-broadcast job (no mpirun)" },
	{ "prepare", cmd_prepare, "validate recipe and input, cut shards, publish the job folder" },
	{ "worker", cmd_worker, "claim and process shards until the job is terminal" },
	{ "status", cmd_status, "show the state of every shard (read-only)" },
	{ "retry", cmd_retry, "requeue failed shards" },
	{ "merge", cmd_merge, "verify every result and merge them in manifest order" },
	{ "verify", cmd_verify, "check owners and completeness, then merge and re-check the output" },
	{ "report", cmd_report, "write a self-contained HTML report of the job (read-only)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: eshard-mpi <command> [options]\n\n"
		   "Process a large JSONL dataset on many nodes: deterministic shards on a shared file\n"
		   "system, claimed through lock files, each run through Data-Juicer on a node-local Ray.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'eshard-mpi <command> --help' shows the options of a command; 'eshard-mpi --version'\n"
		   "the version.\n");
}

/* "unknown command 'X'", with the closest command when one is close. */
static int unknown_command(const char *name)
{
	const char *names[sizeof(commands) / sizeof(commands[0])];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		names[i] = commands[i].name;
	const char *near = es_closest_name(name, names, sizeof(names) / sizeof(names[0]));
	if (near)
		es_error(ES_EUSAGE, "unknown command '%s' (did you mean '%s'?)", name, near);
	else
		es_error(ES_EUSAGE, "unknown command '%s' (see eshard-mpi --help)", name);
	return 2;
}

int main(int argc, char **argv)
{
	/* A closed pipe on stdout must be an error we report, not a silent death. */
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("%s\n", es_version_line());
		return fflush(stdout) ? 2 : 0;
	}
	/* The child supervisor of a shard attempt (started by the worker, not by users). */
	if (!strcmp(argv[1], "__supervise"))
		return es_attempt_supervise_main(argc - 1, argv + 1);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name)) {
			int rc = commands[i].fn(argc - 1, argv + 1);
			if (fflush(stdout) != 0 && rc == 0) {
				es_error(ES_EIO, "cannot write to standard output");
				rc = 2;
			}
			return rc;
		}
	return unknown_command(argv[1]);
}
