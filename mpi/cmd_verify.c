#include "args.h"
#include "commands.h"
#include "commands_jobs.h"

#include "eshard/log.h"
#include "eshard/stop.h"
#include "eshard/verify.h"

#include <stdlib.h>

int cmd_verify(int argc, char **argv)
{
	const char *job_dir = NULL, *output = NULL;
	int64_t expect_nodes = 1;
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "output", ES_OPT_STR, &output, NULL, "PATH", "the merged JSONL file (default <job-dir>/merged.jsonl, the one path in the job folder allowed)" },
		{ "expect-nodes", ES_OPT_POS_INT, &expect_nodes, NULL, NULL, "fewest distinct hostnames among the done records (default 1)" },
	};
	static const struct es_cmd_help help = {
		"verify",
		"Check that a job is complete and was done by enough hosts, merge it, re-read the output.",
		"Exit codes: 0 PASS; 1 the job is not complete yet and no shard failed (as status);\n"
		"2 some shard failed, too few hosts, or any other error. An existing output is replaced.",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!job_dir)
		return es_exit_code(es_error(ES_EUSAGE, "eshard-mpi verify: --job-dir is required"));
	if (expect_nodes > 1000000)
		return es_exit_code(es_error(ES_EUSAGE, "eshard-mpi verify: --expect-nodes is too large"));
	install_stop_handlers(); /* SIGTERM/SIGINT: stop at once, removing the temporary output */
	struct es_verify_result r;
	es_verify_run(job_dir, output, (int)expect_nodes, &r);
	free(r.output);
	return r.exit_code;
}
