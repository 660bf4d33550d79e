#include "args.h"
#include "commands_jobs.h"

#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/prepare.h"
#include "eshard/status.h"

#include <stdio.h>
#include <unistd.h>

enum status_format { FMT_TEXT, FMT_JSON, FMT_PROMETHEUS };

/* A job folder whose prepare is under way (no manifest yet, a live stage folder beside it):
 * 1 with what to say of it in out, else 0. The manifest is looked for with an open, which NFS
 * answers fresh, so a job just published is not taken for one still being prepared. */
static int preparing(const char *job_dir, struct es_buf *out)
{
	struct es_buf man = ES_BUF_INIT, stage = ES_BUF_INIT;
	double idle = 0;
	int yes = !es_path_join(&man, job_dir, ES_JOB_MANIFEST) && es_fs_exists_fresh(man.data) == 0 &&
		  es_prepare_find_stage(job_dir, &stage, &idle) == 1;
	if (yes)
		es_buf_printf(out, "prepare is under way (stage folder %s, last change %.0f s ago)", stage.data, idle);
	es_buf_free(&man);
	es_buf_free(&stage);
	return yes;
}

/* A job still being prepared: for --watch a snapshot that says so (exit code 1, not done yet:
 * the watch goes on), for a single status the error that there is no manifest yet (2). */
static int snapshot_preparing(const char *job_dir, const char *why, int watching, struct es_buf *out, int *code)
{
	*code = watching ? 1 : 2;
	if (watching)
		return es_buf_printf(out, "Job %s has no manifest yet: %s; waiting\n", job_dir, why);
	return es_error(ES_ENOENT, "Job manifest not found in %s: %s ('eshard-mpi status --watch' waits for it)", job_dir,
			why);
}

/* One snapshot into out; its exit code in *code. Metrics exit 0 once they are printed: the
 * job's state is in them, and a collector's recipe (`... --prometheus > f.$$ && mv f.$$ f`)
 * must publish them whatever that state is. v is the view of the last snapshot (*have), kept
 * for --watch: each snapshot reads what changed since (jobview.h es_jobview_refresh). */
static int snapshot(const char *job_dir, double lock_timeout, enum status_format fmt, int all, int watching,
		    struct es_jobview *v, int *have, struct es_buf *out, int *code)
{
	struct es_buf why = ES_BUF_INIT;
	if (!*have && preparing(job_dir, &why)) {
		int prc = snapshot_preparing(job_dir, why.data, watching, out, code);
		es_buf_free(&why);
		return prc;
	}
	es_buf_free(&why);
	int rc = *have ? 0 : es_jobview_init(job_dir, lock_timeout, v);
	*have = 1;
	if (!rc)
		rc = es_jobview_refresh(v, 0);
	/* A kept view may defer a listing while events name the changes (jobview.h): --watch ends
	 * on a terminal job only once a refresh that lists every folder that changed agrees. */
	if (!rc && watching && v->st.terminal && !v->list_whole) {
		v->list_whole = 1;
		rc = es_jobview_refresh(v, 0);
		v->list_whole = 0;
	}
	if (!rc)
		rc = es_jobview_rate_status(v);
	if (!rc) {
		if (fmt == FMT_PROMETHEUS)
			rc = es_jobview_format_prometheus(v, out);
		else if (fmt == FMT_JSON)
			rc = es_status_format_json(&v->m, &v->st, out);
		else
			rc = es_status_format_text(&v->m, &v->st, all, out);
	}
	*code = rc ? 2 : fmt == FMT_PROMETHEUS ? 0 : es_status_exit(&v->st);
	/* --watch ends with the job: complete, or finished with failures. */
	if (!rc && v->st.terminal)
		*code |= 0x100;
	if (rc || !watching) {
		es_jobview_free(v);
		*have = 0;
	}
	return rc;
}

/* --watch: a snapshot every interval, until the job is terminal or count snapshots were shown.
 * On a terminal the screen is redrawn; otherwise each snapshot follows the last, after a line
 * "--- <time>". */
static int watch(const char *job_dir, double lock_timeout, enum status_format fmt, int all, double interval,
		 int64_t count)
{
	int tty = isatty(STDOUT_FILENO), code = 2, have = 0;
	struct es_buf out = ES_BUF_INIT;
	struct es_jobview v;
	for (int64_t n = 0; !count || n < count; n++) {
		if (n)
			es_sleep(interval);
		es_buf_reset(&out);
		if (snapshot(job_dir, lock_timeout, fmt, all, 1, &v, &have, &out, &code))
			break;
		char now[40];
		es_time_now_iso(now);
		if (tty)
			printf("\033[H\033[J");
		printf("--- %s\n", now);
		fwrite(out.data, 1, out.len, stdout);
		fflush(stdout);
		if (code & 0x100)
			break;
	}
	if (have)
		es_jobview_free(&v);
	es_buf_free(&out);
	return code & 0xff;
}

int cmd_status(int argc, char **argv)
{
	const char *job_dir = NULL;
	int64_t lock_timeout = 0, count = 0;
	int json = 0, all = 0, prometheus = 0, watching = 0;
	double interval = 2;
	struct es_opt opts[] = {
		{ "job-dir", ES_OPT_STR, &job_dir, NULL, "DIR", "the job folder (required)" },
		{ "lock-timeout-secs", ES_OPT_POS_INT, &lock_timeout, NULL, NULL, "a lock older than this is stale (default: the manifest's)" },
		{ "json", ES_OPT_FLAG, &json, NULL, NULL, "print the machine-readable object (takes precedence over --all)" },
		{ "all", ES_OPT_FLAG, &all, NULL, NULL, "one line per shard" },
		{ "prometheus", ES_OPT_FLAG, &prometheus, NULL, NULL, "print metrics in the Prometheus text format (node_exporter's textfile collector)" },
		{ "watch", ES_OPT_FLAG, &watching, NULL, NULL, "show a snapshot every --interval seconds until the job is terminal (redrawn on a terminal)" },
		{ "interval", ES_OPT_POS_NUM, &interval, NULL, "S", "--watch: seconds between snapshots (default 2)" },
		{ "count", ES_OPT_POS_INT, &count, NULL, NULL, "--watch: stop after this many snapshots" },
	};
	static const struct es_cmd_help help = {
		"status",
		"Show how far a job is: pending, running, stale, done and failed shards. Read-only.",
		"A lock is stale when its mtime is older than --lock-timeout-secs (the reference rule) or\n"
		"than the manifest's policy.lease_secs (live owners refresh it every heartbeat_secs).\n"
		"Failed and retried shards are shown with the error, log path and last log lines of the\n"
		"attempt that failed. Progress: rows/s = input rows of the done shards per second of work\n"
		"(time when some attempt ran, so downtime between submissions does not count) over the last\n"
		"minute of work; ETA = rows left / that rate, only while shards run. A job still being\n"
		"prepared (no manifest yet, its stage folder .<name>.preparing.<hex> beside it): --watch\n"
		"says so and waits for it, a single status exits 2 saying so.\n"
		"Cost: the listings of state/done, state/failed, state/locks, attempts/ and state/events,\n"
		"then what they show (a done shard's record, result size and attempt.json, a failed\n"
		"shard's record and log, a running shard's lock); a pending shard costs nothing of its\n"
		"own. --json, --all and --prometheus read the same; --watch reads again only what\n"
		"changed. A listing can be stale on a caching client: status is a view, merge and\n"
		"verify look every shard up.\n"
		"Exit codes: 0 every shard done, 2 some shard failed or a done record is one merge would\n"
		"refuse (named in the output), or an error, 1 otherwise (--watch: of the last snapshot);\n"
		"with --prometheus 0 whenever the metrics were printed (the job's state is in them), 2 on\n"
		"an error.",
	};
	int rc = es_args_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (!job_dir) {
		es_error(ES_EUSAGE, "eshard-mpi status: --job-dir is required");
		return 2;
	}
	if (json && prometheus) {
		es_error(ES_EUSAGE, "eshard-mpi status: --json and --prometheus are two formats; give one");
		return 2;
	}
	if (!watching && count) {
		es_error(ES_EUSAGE, "eshard-mpi status: --count needs --watch");
		return 2;
	}
	enum status_format fmt = prometheus ? FMT_PROMETHEUS : json ? FMT_JSON : FMT_TEXT;
	if (watching)
		return watch(job_dir, (double)lock_timeout, fmt, all, interval, count);
	struct es_buf out = ES_BUF_INIT;
	struct es_jobview v;
	int code, have = 0;
	if (!snapshot(job_dir, (double)lock_timeout, fmt, all, 0, &v, &have, &out, &code))
		fwrite(out.data, 1, out.len, stdout);
	es_buf_free(&out);
	return code & 0xff;
}
