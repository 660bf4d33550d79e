#include "args.h"
#include "commands_jobs.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/status.h"

#include <stdio.h>

int cmd_status(int argc, char **argv)
{
	const char *job_dir = NULL;
	int64_t lock_timeout = 0;
	int json = 0, all = 0;
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "lock-timeout-secs", ES_OPT_POS_INT, &lock_timeout, NULL, NULL, "a lock older than this is stale (default: the manifest's)" },
		{ "json", ES_OPT_FLAG, &json, NULL, NULL, "print the machine-readable object (takes precedence over --all)" },
		{ "all", ES_OPT_FLAG, &all, NULL, NULL, "one line per shard" },
	};
	static const struct es_cmd_help help = {
		"status",
		"Show how far a job is: pending, running, stale, done and failed shards. Read-only.",
		"A lock is stale when its mtime is older than --lock-timeout-secs (the reference rule) or\n"
		"than the manifest's policy.lease_secs (live owners refresh it every heartbeat_secs).\n"
		"Progress: rows/s = input rows of the done shards / (latest completed_at - earliest\n"
		"claimed_at of the attempts seen); ETA = rows left / that rate.\n"
		"Exit codes: 0 every shard done, 2 some shard failed or a done record is one merge would\n"
		"refuse (named in the output), or an error, 1 otherwise.",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!job_dir) {
		es_error(ES_EUSAGE, "eshard-mpi status: --job-dir is required");
		return 2;
	}
	struct es_manifest m;
	if ((rc = es_manifest_load(job_dir, &m)))
		return 2;
	struct es_status s;
	struct es_buf out = ES_BUF_INIT;
	rc = es_status_collect(&m, (double)lock_timeout, &s);
	if (!rc)
		rc = json ? es_status_format_json(&m, &s, &out) : es_status_format_text(&m, &s, all, &out);
	int code = 2;
	if (!rc) {
		fwrite(out.data, 1, out.len, stdout);
		code = es_status_exit(&s);
	}
	es_buf_free(&out);
	es_status_free(&s);
	es_manifest_free(&m);
	return code;
}
