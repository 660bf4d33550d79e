#include "args.h"
#include "commands_jobs.h"

#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/report.h"
#include "eshard/stop.h"

#include <stdio.h>
#include <sys/stat.h>

/* Is path the file that stdout writes to (--output /dev/stdout)? Then the summary line goes
 * to stderr, not after the page's last line. */
static int is_stdout(const char *path)
{
	struct stat a, b;
	return stat(path, &a) == 0 && fstat(1, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int cmd_report(int argc, char **argv)
{
	const char *job_dir = NULL, *output = NULL;
	int64_t lines = 0, max_logs = 0;
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "output", ES_OPT_STR, &output, NULL, "PATH", "the HTML file to write (default <job-dir>/report.html; replaced atomically; a pipe such as /dev/stdout is written directly; in the job folder only <job-dir>/report.html)" },
		{ "log-lines", ES_OPT_POS_INT, &lines, NULL, NULL, "lines of each failed attempt's process.log (default 20)" },
		{ "max-failed-logs", ES_OPT_POS_INT, &max_logs, NULL, NULL, "failed attempts shown with their log (default 50)" },
	};
	static const struct es_cmd_help help = {
		"report",
		"Write one self-contained HTML page that shows how the job ran. Reads the job folder only (but for a default --output).",
		"The page has inline CSS and SVG only (no script, font or network), so it opens from a\n"
		"shared folder on an offline cluster: a summary and per-host table, a timeline of every\n"
		"attempt on every host (hover a bar for its times, rows and error), throughput over time,\n"
		"a histogram of shard durations, the start-up skew of the workers, the stragglers, and\n"
		"every failed attempt with the end of its process.log. Times come from state/events\n"
		"when present, else from attempt.json (a reference job folder works too).\n"
		"Exit codes: 0 written, 2 error (missing or foreign job folder, output is a folder or inside\n"
		"the job folder but not its report.html, ...).",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!job_dir)
		return es_exit_code(es_error(ES_EUSAGE, "eshard-mpi report: --job-dir is required"));
	struct es_buf def = ES_BUF_INIT;
	if (!output) {
		if (es_path_join(&def, job_dir, ES_REPORT_NAME)) {
			es_buf_free(&def);
			return es_exit_code(ES_ENOMEM);
		}
		output = def.data;
	}
	struct es_report_opts o = { 0, (int)(lines > 100000 ? 100000 : lines), 0, (size_t)max_logs, NULL };
	struct es_report_info info;
	rc = es_report_write(job_dir, output, &o, &info);
	if (!rc)
		fprintf(is_stdout(output) ? stderr : stdout,
			"Wrote %s: %zu attempts of %lld shards (%lld done, %lld failed) on %zu host(s), %zu worker(s)\n",
			output, info.attempts, (long long)info.shards_total, (long long)info.shards_done,
			(long long)info.shards_failed, info.hosts, info.workers);
	es_buf_free(&def);
	return es_exit_code(rc);
}
