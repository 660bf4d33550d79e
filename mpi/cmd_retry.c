#include "args.h"
#include "commands_jobs.h"

#include "eshard/log.h"
#include "eshard/retry.h"
#include "eshard/stop.h"

int cmd_retry(int argc, char **argv)
{
	const char *job_dir = NULL;
	int all_failed = 0;
	struct es_str_list ids = { 0 };
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "all-failed", ES_OPT_FLAG, &all_failed, NULL, NULL, "requeue every failed shard" },
		{ "shard-id", ES_OPT_STR_LIST, &ids, NULL, "ID", "requeue this shard if it failed (repeatable)" },
	};
	static const struct es_cmd_help help = {
		"retry",
		"Requeue failed shards: their failed record and attempts move to state/history.",
		"Give exactly one of --all-failed and --shard-id. A shard that still has a lock or is\n"
		"already done is refused before anything moves. Exit codes: 0 requeued (or nothing\n"
		"selected), 2 error.",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc) {
		es_str_list_free(&ids);
		return rc > 0 ? 0 : 2;
	}
	if (!job_dir)
		rc = es_error(ES_EUSAGE, "eshard-mpi retry: --job-dir is required");
	else if (all_failed && ids.n)
		rc = es_error(ES_EUSAGE, "eshard-mpi retry: --all-failed and --shard-id are mutually exclusive");
	else if (!all_failed && !ids.n)
		rc = es_error(ES_EUSAGE, "eshard-mpi retry: one of --all-failed or --shard-id is required");
	else
		rc = es_retry_run(job_dir, all_failed, ids.v, ids.n, 0);
	es_str_list_free(&ids);
	return es_exit_code(rc);
}
