#include "args.h"
#include "commands.h"
#include "commands_jobs.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/merge.h"
#include "eshard/stop.h"

#include <stdlib.h>

int cmd_merge(int argc, char **argv)
{
	const char *job_dir = NULL, *output = NULL;
	int64_t lock_timeout = 0;
	int overwrite = 0;
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "output", ES_OPT_STR, &output, NULL, "PATH", "the merged JSONL file (default <job-dir>/merged.jsonl, as run and verify; in the job folder only that one)" },
		{ "lock-timeout-secs", ES_OPT_POS_INT, &lock_timeout, NULL, NULL, "only used for the counts of an incomplete job" },
		{ "overwrite", ES_OPT_FLAG, &overwrite, NULL, NULL, "replace an existing output" },
	};
	static const struct es_cmd_help help = {
		"merge",
		"Concatenate the shard results in manifest order into one JSONL file, checking each.",
		"Every line is validated; each result's rows and sha256 must match its done record. The\n"
		"output appears atomically and <job-dir>/merge.json records it. Exit codes: 0 merged,\n"
		"2 error (incomplete job, output exists, checksum mismatch, ...).",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!job_dir)
		return es_exit_code(es_error(ES_EUSAGE, "eshard-mpi merge: --job-dir is required"));
	struct es_buf def = ES_BUF_INIT;
	if (!output) {
		if (es_path_join(&def, job_dir, ES_MERGE_OUTPUT_NAME))
			return es_exit_code(ES_ENOMEM);
		output = def.data;
	}
	install_stop_handlers(); /* SIGTERM/SIGINT: stop at once, removing the temporary output */
	struct es_merge_result res;
	rc = es_merge_run(job_dir, output, overwrite, (double)lock_timeout, &res, 0);
	if (!rc)
		free(res.output);
	es_buf_free(&def);
	return es_exit_code(rc);
}
