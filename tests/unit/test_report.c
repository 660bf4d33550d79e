/*
 * Unit tests of report: one attempt element per attempt folder with an attempt.json (and none
 * for a folder without one), statuses and colours by outcome, times from attempt.json in a job
 * folder without events (the reference's) and from the event log when there is one, escaping
 * of errors and log tails (no markup of the job can reach the page), bounded log tails, the
 * stragglers and the skew, no script and nothing fetched, nothing written but the output, no
 * output on stdout, and the errors for a missing or foreign job folder and a bad output path;
 * an output inside the job folder but its report.html is refused; a pipe and a character
 * device are written directly.
 */
#include "testlib.h"
#include "jobfix.h"

#include "eshard/clock.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/report.h"

#include <dirent.h>
#include <math.h>
#include <sys/wait.h>

static const char *T;

/* 2026-05-28T20:26:40+00:00: fixed, so the page's times can be checked. */
#define T0 1780000000.0

static const char *ERR = "Processor said <script>alert(1)</script> & \"quit\"";
static const char *ERR_ESC = "Processor said &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quit&quot;";

/* A listing of every path with its size and mtime, to prove the report changes nothing. */
static void snapshot(const char *dir, struct es_buf *out)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct es_strv names = ES_STRV_INIT;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			es_strv_push(&names, strdup(e->d_name));
	closedir(d);
	es_strv_sort_unique(&names);
	for (size_t i = 0; i < names.n; i++) {
		char p[4096];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, names.v[i]);
		if (lstat(p, &st))
			continue;
		es_buf_printf(out, "%s %lld %lld.%09ld\n", p, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
			      st.st_mtim.tv_nsec);
		if (S_ISDIR(st.st_mode))
			snapshot(p, out);
	}
	es_strv_free(&names);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0, len = strlen(needle);
	for (const char *p = strstr(hay, needle); p; p = strstr(p + len, needle))
		n++;
	return n;
}

static void iso(double t, char out[40])
{
	struct timespec ts = { (time_t)t, (long)((t - floor(t)) * 1e9) };
	es_time_iso(&ts, out);
}

/* attempts/<id>/<NNNN>-<token>/attempt.json for shard i; token NULL: a fresh one. finished < 0
 * leaves finished_at out; extra is more JSON members ("\"error\": ...", with a trailing ", "). */
static void attempt(struct jf *j, int i, int number, const char *token, const char *host, int pid,
		    const char *status, double claimed, double finished, const char *extra, char *dir, size_t dn)
{
	char tok[33], fin[80] = "", when[40], p[4096], text[8192];
	if (token)
		snprintf(tok, sizeof(tok), "%s", token);
	else
		es_fs_token(tok);
	snprintf(dir, dn, "%s/attempts/%s/%04d-%s", j->dir, j->id[i], number, tok);
	jf_mkdirs(dir);
	if (finished >= 0) {
		iso(finished, when);
		snprintf(fin, sizeof(fin), "\"finished_at\": \"%s\", ", when);
	}
	snprintf(text, sizeof(text), "{\"attempt_dir\": \"attempts/%s/%04d-%s\", \"attempt_number\": %d, "
		 "\"claimed_at_epoch\": %.6f, %s%s\"hostname\": \"%s\", \"pid\": %d, \"shard_id\": \"%s\", "
		 "\"status\": \"%s\", \"token\": \"%s\"}\n", j->id[i], number, tok, number, claimed, fin,
		 extra ? extra : "", host, pid, j->id[i], status, tok);
	snprintf(p, sizeof(p), "%s/attempt.json", dir);
	jf_writes(p, text);
}

static void failed_record(struct jf *j, int i, const char *error, const char *last_log)
{
	char p[2048], text[4096];
	snprintf(text, sizeof(text), "{\"failed_at\": \"2026-05-28T20:30:00+00:00\", \"failures\": 4, \"last_attempt\": 4, "
		 "\"last_error\": \"%s\", \"last_log\": \"%s\", \"shard_id\": \"%s\", \"status\": \"failed\"}\n",
		 error, last_log, j->id[i]);
	jf_path(j, p, sizeof(p), "state/failed/%s.json", j->id[i]);
	jf_writes(p, text);
}

/* A job folder as the reference leaves it (no state/events): 7 shards, 12 attempt folders
 * with an attempt.json and one without. */
static void make_reference_job(struct jf *j)
{
	int rows[] = { 3, 3, 3, 3, 3, 3, 3 };
	char d[4096], p[4200];
	jf_make(j, T, "refjob", 7, rows, NULL);
	/* Four done shards of 10 s and one of 100 s: the straggler. */
	const double start[] = { 0, 10, 5, 15, -1, 1 }, secs[] = { 10, 10, 10, 100, 0, 10 };
	const char *host[] = { "node-a", "node-a", "node-b", "node-b", "", "node-c" };
	const int pid[] = { 11, 11, 22, 22, 0, 33 };
	for (int i = 0; i < 6; i++) {
		if (i == 4)
			continue;
		jf_done_ex(j, i, host[i], 0, 0, 0, T0 + start[i], T0 + start[i] + secs[i]);
		snprintf(d, sizeof(d), "%s/%s", j->dir, j->attempt[i]);
		es_fs_remove_tree(d);
		attempt(j, i, i == 5 ? 2 : 1, NULL, host[i], pid[i], "done", T0 + start[i], T0 + start[i] + secs[i],
			"\"duration_secs\": 9.5, \"return_code\": 0, \"result\": {\"rows\": 3}, ", d, sizeof(d));
		snprintf(p, sizeof(p), "%s/processed.jsonl", d);
		jf_writes(p, "");
	}
	/* Shard 5's first attempt went stale (taken over at +1 s). */
	attempt(j, 5, 1, NULL, "node-c", 34, "stale", T0, -1, "\"stale_at\": \"2026-05-28T20:26:41+00:00\", ", d, sizeof(d));
	/* Shard 4 failed four times; the error and log hold markup. */
	for (int n = 1; n <= 4; n++) {
		char extra[512];
		snprintf(extra, sizeof(extra), "\"error\": \"Processor said <script>alert(1)</script> & \\\"quit\\\"\", "
			 "\"return_code\": 3, ");
		attempt(j, 4, n, NULL, n < 4 ? "node-a" : "node-b", n < 4 ? 11 : 22, "failed", T0 + 20 + n, T0 + 20.5 + n,
			extra, d, sizeof(d));
		snprintf(p, sizeof(p), "%s/process.log", d);
		if (n == 3) {
			struct es_buf log = ES_BUF_INIT;
			for (int k = 1; k < 100; k++)
				es_buf_printf(&log, "line %d <b>&</b>\n", k);
			es_buf_adds(&log, "bad \xff\x01 end\n");
			jf_write(p, log.data, log.len);
			es_buf_free(&log);
		} else if (n == 4) {
			struct es_buf log = ES_BUF_INIT;
			for (int k = 0; k < 20000; k++)
				es_buf_printf(&log, "noise %05d <i>\n", k);
			jf_write(p, log.data, log.len);
			es_buf_free(&log);
			char rel[600];
			snprintf(rel, sizeof(rel), "%s/process.log", d + strlen(j->dir) + 1);
			failed_record(j, 4, "Processor returned exit code 3 <&>", rel);
		}
	}
	/* Shard 2: a second attempt folder whose attempt.json cannot be read. */
	snprintf(d, sizeof(d), "%s/attempts/%s/0002-%032d", j->dir, j->id[2], 2);
	jf_mkdirs(d);
	snprintf(p, sizeof(p), "%s/attempt.json", d);
	jf_writes(p, "{\"status\": \"runn");
	/* Shard 6 runs on node-a: its lock holds the attempt's token (jf_lock's "%032d" of 6). */
	char tok[33];
	snprintf(tok, sizeof(tok), "%032d", 6);
	attempt(j, 6, 1, tok, "node-a", 11, "running", T0 + 22, -1, NULL, d, sizeof(d));
	jf_lock(j, 6, "node-a", 5, 3);
	/* A folder without attempt.json (a crash between mkdir and the write) is no attempt. */
	snprintf(d, sizeof(d), "%s/attempts/%s/0002-%032d", j->dir, j->id[6], 7);
	jf_mkdirs(d);
}

static char *render(const char *dir, const struct es_report_opts *o, struct es_report_info *info)
{
	struct es_buf b = ES_BUF_INIT;
	int rc = es_report_render(dir, o, &b, info);
	CHECK_INT_EQ(rc, 0);
	return es_buf_detach(&b, NULL);
}

/* The <title> of the attempt element of shard id, attempt number n ("" when none). */
static void tooltip_of(const char *html, const char *id, int n, char *out, size_t sz)
{
	char key[256];
	snprintf(key, sizeof(key), "data-shard=\"%s\" data-host=", id);
	out[0] = '\0';
	for (const char *p = strstr(html, key); p; p = strstr(p + 1, key)) {
		char num[48];
		snprintf(num, sizeof(num), "data-attempt=\"%d\"", n);
		const char *gt = strchr(p, '>'), *at = strstr(p, num);
		if (!gt || !at || at > gt)
			continue;
		const char *t = strstr(gt, "<title>"), *e = t ? strstr(t, "</title>") : NULL;
		if (t && e && (size_t)(e - t) < sz) {
			memcpy(out, t, (size_t)(e - t));
			out[e - t] = '\0';
		}
		return;
	}
}

/* Every href of the page is an in-page link (#id) to an element of the page: the number. */
static int check_links(const char *html)
{
	int n = 0;
	for (const char *p = strstr(html, "href=\""); p; p = strstr(p + 1, "href=\"")) {
		char id[96];
		size_t len = strcspn(p + 6, "\"");
		CHECK(p[6] == '#' && len < 80);
		if (p[6] != '#' || len >= 80)
			continue;
		snprintf(id, sizeof(id), "id=\"%.*s\"", (int)len - 1, p + 7);
		CHECK(strstr(html, id) != NULL);
		n++;
	}
	return n;
}

/* The tick labels of the <svg id="name"> axis, joined by '|'. */
static void tick_labels(const char *html, const char *name, char *out, size_t sz)
{
	static const char mid[] = "text-anchor=\"middle\">";
	static const char tick[] = "<text class=\"tick\" ";
	const size_t ml = sizeof(mid) - 1;
	char key[64];
	snprintf(key, sizeof(key), "<svg id=\"%s\"", name);
	const char *p = strstr(html, key), *end = p ? strstr(p, "</svg>") : NULL;
	out[0] = '\0';
	for (p = p ? strstr(p, tick) : NULL; p && p < end; p = strstr(p + 1, tick)) {
		p = strstr(p, mid);
		size_t len = strcspn(p + ml, "<"), have = strlen(out);
		if (have + len + 2 < sz)
			snprintf(out + have, sz - have, "%.*s|", (int)len, p + ml);
	}
}

/* 1 when the '|'-joined labels are all different. */
static int all_differ(const char *labels)
{
	struct es_strv v = ES_STRV_INIT;
	for (const char *t = labels; *t; t += strcspn(t, "|") + 1)
		es_strv_push(&v, strndup(t, strcspn(t, "|")));
	size_t n = v.n;
	es_strv_sort_unique(&v);
	int ok = n >= 3 && v.n == n;
	es_strv_free(&v);
	return ok;
}

static void test_reference_job(void)
{
	struct jf j;
	make_reference_job(&j);
	struct es_report_opts o = { T0 + 130, 0, 0, 0, NULL };
	struct es_report_info info;
	char *html = render(j.dir, &o, &info);
	if (!html)
		return;
	CHECK_INT_EQ(count(html, "class=\"attempt\""), 12);
	CHECK_INT_EQ(info.attempts, 12);
	CHECK_INT_EQ(info.hosts, 4); /* node-a, node-b, node-c and (unknown) */
	CHECK_INT_EQ(info.workers, 5);
	CHECK_INT_EQ(info.events, 0);
	CHECK_INT_EQ(info.shards_total, 7);
	CHECK_INT_EQ(info.shards_done, 5);
	CHECK_INT_EQ(info.shards_failed, 1);
	CHECK_INT_EQ(count(html, "data-status=\"done\" data-attempt="), 5);
	CHECK_INT_EQ(count(html, "data-status=\"failed\" data-attempt="), 4);
	CHECK_INT_EQ(count(html, "data-status=\"stale\" data-attempt="), 1);
	CHECK_INT_EQ(count(html, "data-status=\"running\" data-attempt="), 1);
	CHECK_INT_EQ(count(html, "data-status=\"lost\" data-attempt="), 1); /* the unreadable attempt.json */
	CHECK(strstr(html, "1 attempt.json file(s) could not be read") != NULL);
	CHECK(strstr(html, "No event logs") != NULL);
	/* Colours by outcome. */
	CHECK(strstr(html, "g.attempt[data-status=\"done\"] rect{fill:#2e9e44}") != NULL);
	CHECK(strstr(html, "g.attempt[data-status=\"failed\"] rect{fill:#d62728}") != NULL);

	/* Times from attempt.json: claimed_at_epoch and finished_at. */
	char tip[4096];
	tooltip_of(html, j.id[3], 1, tip, sizeof(tip));
	CHECK(strstr(tip, "start 2026-05-28 20:26:55.000 UTC") != NULL);
	CHECK(strstr(tip, "end 2026-05-28 20:28:35.000 UTC") != NULL);
	CHECK(strstr(tip, "duration 1m40s (processor 9.50 s)") != NULL);
	CHECK(strstr(tip, "host node-b, pid 22") != NULL);
	CHECK(strstr(tip, "rows in 3, rows out 3") != NULL);
	CHECK(strstr(tip, "times from attempt.json") != NULL);
	/* The stale attempt ends when it was marked stale. */
	tooltip_of(html, j.id[5], 1, tip, sizeof(tip));
	CHECK(strstr(tip, "status stale") != NULL);
	CHECK(strstr(tip, "duration 1.00 s") != NULL);
	/* The running attempt holds its lock: drawn up to now. */
	tooltip_of(html, j.id[6], 1, tip, sizeof(tip));
	CHECK(strstr(tip, "(still running: now)") != NULL);
	CHECK(strstr(tip, "duration 1m48s") != NULL);

	/* Escaping: the error in the tooltip and the failure list, the failed record's error. */
	tooltip_of(html, j.id[4], 2, tip, sizeof(tip));
	CHECK(strstr(tip, ERR_ESC) != NULL);
	CHECK(strstr(tip, "exit code 3") != NULL);
	CHECK(strstr(html, ERR) == NULL);
	CHECK(strstr(html, "<script") == NULL);
	CHECK(strstr(html, "Processor returned exit code 3 &lt;&amp;&gt;") != NULL);
	CHECK_INT_EQ(count(html, ERR_ESC), 4 + 4); /* 4 tooltips and 4 failure headings */
	/* The log tail: the last 20 lines, escaped, bytes that are no text replaced. */
	CHECK(strstr(html, "line 81 &lt;b&gt;&amp;&lt;/b&gt;\n") != NULL);
	CHECK(strstr(html, "line 99 &lt;b&gt;") != NULL);
	CHECK(strstr(html, "line 80 ") == NULL);
	CHECK(strstr(html, "bad \xEF\xBF\xBD\xEF\xBF\xBD end") != NULL);
	CHECK(strstr(html, "<b>&</b>") == NULL && strstr(html, "<i>\n") == NULL);
	/* The 300 KB log is cut to its last 20 lines. */
	CHECK(strstr(html, "noise 19999 &lt;i&gt;") != NULL);
	CHECK(strstr(html, "noise 19980 &lt;i&gt;") != NULL);
	CHECK(strstr(html, "noise 19979 ") == NULL);
	CHECK(strlen(html) < 120000);
	CHECK(strstr(html, "No process.log.") != NULL); /* attempts 1 and 2 have none */

	/* Stragglers: 100 s against a median of 10 s. */
	CHECK(strstr(html, "Median duration of a done attempt: 10.0 s; 1 shard(s) took more than twice that.") != NULL);
	char row[256];
	snprintf(row, sizeof(row), "<tr class=\"slow\"><td>%s</td><td>node-b</td>", j.id[3]);
	CHECK(strstr(html, row) != NULL);
	CHECK_INT_EQ(count(html, "<tr class=\"slow\">"), 1);
	/* Skew: node-b's first claim is 5 s after node-a's, node-c pid 33's 1 s. */
	CHECK(strstr(html, ">+5.000 s</text>") != NULL);
	CHECK(strstr(html, "<svg id=\"throughput\"") != NULL);
	CHECK(strstr(html, "<svg id=\"durations\"") != NULL);
	CHECK(strstr(html, "<svg id=\"timeline\"") != NULL);
	/* Summary: rows in and out, wall time from the first claim to now (the running attempt). */
	CHECK(strstr(html, "<b>21</b><span>rows in (15 in done shards)</span>") != NULL);
	CHECK(strstr(html, "<b>15</b><span>rows out (results of done shards)</span>") != NULL);
	CHECK(strstr(html, "<b>2m10s</b><span>wall time") != NULL);
	CHECK(strstr(html, "<b>5 / 7</b>") != NULL);
	/* Self-contained: nothing to fetch, no script, no font. */
	CHECK(strstr(html, "src=") == NULL && strstr(html, "url(") == NULL);
	CHECK_INT_EQ(check_links(html), 2); /* the banner's and the failure list's link to shard 4's log */
	/* The banner: the shard, its error's first line and a link to its last failed attempt. */
	CHECK(strstr(html, "Job not finished, with failures so far: 1 failed shard(s)") != NULL);
	const char *an = strstr(html, "<li><a href=\"#fail-"), *tg = NULL;
	if (an) {
		char want[160];
		snprintf(want, sizeof(want), "id=\"%.*s\">%s attempt 4 on node-b", (int)strcspn(an + 14, "\""), an + 14, j.id[4]);
		tg = strstr(html, want);
	}
	CHECK(an && tg && an < strstr(html, "<h2>Summary</h2>"));
	/* The reason: the record's error, then the last line of the log (none reads like an error). */
	CHECK(strstr(html, "</a>: Processor returned exit code 3 &lt;&amp;&gt;; log: noise 19999 &lt;i&gt;</li>") != NULL);
	CHECK(strstr(html, "@import") == NULL && strstr(html, "@font-face") == NULL);
	CHECK(strstr(html, "<!DOCTYPE html>") == html);
	free(html);
}

/* Issue 32: the axis ticks are 1, 2 or 5 x 10^k in a unit that fits, at any time scale. */
static void test_ticks(void)
{
	static const struct {
		double span, step;
		const char *unit, *first, *second, *last;
		int n;
	} c[] = {
		{ 0.05, 0.005, "ms", "0 ms", "5 ms", "50 ms", 11 },
		{ 0.8, 0.1, "ms", "0 ms", "100 ms", "800 ms", 9 },
		{ 7, 1, "s", "0 s", "1 s", "7 s", 8 },
		{ 95, 10, "s", "0 s", "10 s", "90 s", 10 },
		{ 3 * 3600.0, 1800, "h", "0 h", "0.5 h", "3 h", 7 },
		{ 2 * 86400.0, 18000, "h", "0 h", "5 h", "45 h", 10 },
		{ 600, 60, "min", "0 min", "1 min", "10 min", 11 },
		{ 0, 0.0001, "ms", "0 ms", "0.1 ms", "1 ms", 11 }, /* no span: 1 ms */
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct es_report_ticks t;
		char a[48], b[48], z[48];
		es_report_ticks(c[i].span, 10, &t);
		es_report_tick_label(&t, 0, a, sizeof(a));
		es_report_tick_label(&t, t.step, b, sizeof(b));
		es_report_tick_label(&t, (t.n - 1) * t.step, z, sizeof(z));
		CHECK(fabs(t.step - c[i].step) < c[i].step * 1e-9);
		CHECK_STR_EQ(t.unit_name, c[i].unit);
		CHECK_INT_EQ(t.n, c[i].n);
		CHECK_STR_EQ(a, c[i].first);
		CHECK_STR_EQ(b, c[i].second);
		CHECK_STR_EQ(z, c[i].last);
		/* No two ticks read the same. */
		for (int k = 1; k < t.n; k++) {
			es_report_tick_label(&t, (k - 1) * t.step, a, sizeof(a));
			es_report_tick_label(&t, k * t.step, b, sizeof(b));
			CHECK(strcmp(a, b) != 0);
		}
	}
}

/* Issue 32: a job that finished with 12 failed shards shows so on its first screen (a red
 * banner, 10 shards with the first line of their error and a link to their log, "and 2
 * more"); failed and preempted attempts of milliseconds in a job of hours are drawn 3 px wide
 * with a marker; a preempted attempt says what stopped it; a complete job has no red banner. */
static void test_failed_job(void)
{
	int rows[13];
	struct jf j;
	char d[4096], p[4200];
	for (int i = 0; i < 13; i++)
		rows[i] = 2;
	jf_make(&j, T, "failjob", 13, rows, NULL);
	jf_done_ex(&j, 0, "node-a", 0, 0, 0, T0 + 1, T0 + 3 * 3600);
	attempt(&j, 0, 2, NULL, "node-b", 8, "preempted", T0, T0 + 0.004, NULL, d, sizeof(d));
	for (int i = 1; i < 13; i++) {
		attempt(&j, i, 4, NULL, "node-b", 8, "failed", T0 + 60 * i, T0 + 60 * i + 0.01,
			"\"error\": \"Processor returned exit code 3\", \"return_code\": 3, ", d, sizeof(d));
		snprintf(p, sizeof(p), "%s/process.log", d);
		jf_writes(p, "Traceback <x>\nValueError: bad row\n");
		failed_record(&j, i, "ValueError: bad row <7>\\nsecond line", "x/process.log");
	}
	struct es_report_opts o = { T0 + 4 * 3600, 0, 0, 0, NULL };
	char *html = render(j.dir, &o, NULL);
	if (!html)
		return;
	const char *ban = strstr(html, "<div class=\"banner bad\" id=\"failures\">"), *sum = strstr(html, "<h2>Summary</h2>");
	const char *ban_end = ban ? strstr(ban, "</div>") : NULL;
	CHECK(ban && sum && ban_end && ban_end < sum);
	CHECK(strstr(html, ">Job finished with failures: 12 failed shard(s)\n<ul>") != NULL);
	if (ban && ban_end) {
		char *b = strndup(ban, (size_t)(ban_end - ban));
		CHECK_INT_EQ(count(b, "<li><a href=\"#fail-"), 10);
		CHECK_INT_EQ(count(b, "</a>: ValueError: bad row &lt;7&gt;</li>"), 10);
		CHECK(strstr(b, "second line") == NULL);
		CHECK(strstr(b, "<li>and 2 more (see Failed attempts below)</li>") != NULL);
		free(b);
	}
	CHECK_INT_EQ(check_links(html), 10 + 12);
	CHECK(strstr(html, "<div class=\"card bad\"><b>12</b><span>shards failed</span>") != NULL);
	/* 10 ms failures and a 4 ms preemption in a 4-hour span: 3 px bars with a marker. */
	CHECK_INT_EQ(count(html, "width=\"3.00\" height=\"14\" rx=\"2\"/><path class=\"mk\""), 13);
	CHECK(strstr(html, "g.attempt[data-status=\"preempted\"] rect{fill:#f0a020}") != NULL);
	char tip[4096];
	tooltip_of(html, j.id[0], 2, tip, sizeof(tip));
	CHECK(strstr(tip, "status preempted") != NULL);
	CHECK(strstr(tip, "\npreempted: stopped by a signal (SIGTERM or SIGINT") != NULL);
	CHECK(strstr(html, "(no error recorded)") == NULL);
	char labels[2048];
	tick_labels(html, "timeline", labels, sizeof(labels));
	CHECK(all_differ(labels));
	CHECK(strstr(labels, "0 h|0.5 h|1 h|") == labels);
	free(html);

	/* A complete job of 60 ms: no red banner, a green one; ticks of 10 ms. */
	struct jf g;
	jf_make(&g, T, "goodjob", 2, rows, NULL);
	jf_done_ex(&g, 0, "node-a", 0, 0, 0, T0, T0 + 0.03);
	jf_done_ex(&g, 1, "node-a", 0, 0, 0, T0 + 0.03, T0 + 0.06);
	o.now = T0 + 1;
	html = render(g.dir, &o, NULL);
	if (!html)
		return;
	CHECK(strstr(html, "banner bad") == NULL && strstr(html, "failures") == NULL);
	CHECK(strstr(html, "<div class=\"banner ok\" id=\"complete\">Job complete: all 2 shard(s) done</div>") != NULL);
	CHECK(strstr(html, "<div class=\"card\"><b>0</b><span>shards failed</span>") != NULL);
	CHECK_INT_EQ(check_links(html), 0);
	tick_labels(html, "timeline", labels, sizeof(labels));
	CHECK(all_differ(labels));
	CHECK(strstr(labels, "0 ms|10 ms|20 ms|") == labels);
	free(html);
}

/* Event logs give the times when an attempt has events; a torn last line is no error. */
static void test_events(void)
{
	int rows[] = { 4, 4 };
	struct jf j;
	char d[4096], p[4200], tokA[33], tokB[33];
	jf_make(&j, T, "evjob", 2, rows, NULL);
	snprintf(tokA, sizeof(tokA), "%s", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	snprintf(tokB, sizeof(tokB), "%s", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
	attempt(&j, 0, 1, tokA, "node-x", 5, "done", T0, T0 + 50, "\"result\": {\"rows\": 4}, ", d, sizeof(d));
	attempt(&j, 1, 1, tokB, "node-y", 6, "done", T0 + 2, T0 + 12, NULL, d, sizeof(d));
	snprintf(p, sizeof(p), "%s/state/events", j.dir);
	jf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/state/events/node-x.5.12345678.jsonl", j.dir);
	char text[4096];
	snprintf(text, sizeof(text),
		 "{\"event\": \"claim\", \"host\": \"node-x\", \"pid\": 5, \"shard\": \"%s\", \"attempt\": 1, \"time\": %.3f, \"token\": \"%s\"}\n"
		 "{\"event\": \"start\", \"host\": \"node-x\", \"pid\": 5, \"shard\": \"%s\", \"attempt\": 1, \"time\": %.3f, \"token\": \"%s\", \"rows\": 4}\n"
		 "{\"event\": \"done\", \"host\": \"node-x\", \"pid\": 5, \"shard\": \"%s\", \"attempt\": 1, \"time\": %.3f, \"token\": \"%s\", \"rows\": 7, \"duration\": 2.5}\n"
		 "{\"event\": \"claim\", \"host\": \"node-x\", \"pid\": 5, \"shard\": \"%s\", \"time\": %.3f, \"tok",
		 j.id[0], T0 + 1, tokA, j.id[0], T0 + 1.5, tokA, j.id[0], T0 + 4, tokA, j.id[1], T0 + 9);
	jf_writes(p, text);
	struct es_report_info info;
	char *html = render(j.dir, NULL, &info);
	if (!html)
		return;
	CHECK_INT_EQ(count(html, "class=\"attempt\""), 2);
	CHECK_INT_EQ(info.events, 3);
	CHECK(strstr(html, "Times from 1 event log(s) (3 events)") != NULL);
	CHECK(strstr(html, "1 event line(s) or file(s) could not be read") != NULL);
	char tip[4096];
	tooltip_of(html, j.id[0], 1, tip, sizeof(tip));
	CHECK(strstr(tip, "start 2026-05-28 20:26:41.000 UTC") != NULL);
	CHECK(strstr(tip, "end 2026-05-28 20:26:44.000 UTC") != NULL);
	CHECK(strstr(tip, "duration 3.00 s (processor 2.50 s)") != NULL);
	CHECK(strstr(tip, "rows out 7") != NULL);
	CHECK(strstr(tip, "times from the event log") != NULL);
	tooltip_of(html, j.id[1], 1, tip, sizeof(tip));
	CHECK(strstr(tip, "duration 10.0 s") != NULL);
	CHECK(strstr(tip, "times from attempt.json") != NULL);
	free(html);
}

/* Issue 35, item 3: a job whose logs hold what bad clocks write (jobfix.h jf_bad_clock): the
 * wall time, the axes and the dates come from the good times, and the page says how many times
 * it ignored. */
static void test_bad_clock(void)
{
	struct jf j;
	double now = es_time_epoch();
	int bad = jf_bad_clock(&j, T, "clock", now);
	struct es_report_opts o = { now, 0, 0, 0, NULL };
	char *html = render(j.dir, &o, NULL);
	if (!html)
		return;
	/* From an hour before the job was made (made - 3600 = now - 4200) to now - 40. */
	CHECK(strstr(html, "<b>1h09m20s</b><span>wall time (first claim to last end)</span>") != NULL);
	char want[160], y0[16], y1[16];
	snprintf(want, sizeof(want), " %d recorded time(s) were ignored: not finite, or outside the job's span", bad);
	CHECK(strstr(html, want) != NULL);
	/* No time of 1970, no date of another year than the job's, no negative integer anywhere. */
	time_t t0 = (time_t)(now - 4200), t1 = (time_t)now;
	struct tm tm;
	strftime(y0, sizeof(y0), "%Y-", gmtime_r(&t0, &tm));
	strftime(y1, sizeof(y1), "%Y-", gmtime_r(&t1, &tm));
	CHECK(strstr(html, "1970-") == NULL);
	for (const char *p = strstr(html, " UTC"); p; p = strstr(p + 1, " UTC"))
		CHECK(p - html >= 23 && (!strncmp(p - 23, y0, 5) || !strncmp(p - 23, y1, 5)));
	CHECK(strstr(html, "-9223372036854775808") == NULL);
	for (const char *p = strchr(html, '-'); p; p = strchr(p + 1, '-'))
		CHECK(!(p[1] >= '1' && p[1] <= '9' && (p[-1] == ' ' || p[-1] == '>' || p[-1] == 'h' || p[-1] == 'm')));
	free(html);
}

/* An empty job (no attempt yet) still gets a page. */
static void test_empty_job(void)
{
	int rows[] = { 2 };
	struct jf j;
	jf_make(&j, T, "empty", 1, rows, NULL);
	char *html = render(j.dir, NULL, NULL);
	if (!html)
		return;
	CHECK_INT_EQ(count(html, "class=\"attempt\""), 0);
	CHECK(strstr(html, "No attempt yet.") != NULL);
	CHECK(strstr(html, "</html>\n") != NULL);
	free(html);
}

/* Only the output is written, atomically (no temporary left); nothing on stdout. */
static void test_writes_only_the_output(void)
{
	struct jf j;
	int rows[] = { 2, 2 };
	jf_make(&j, T, "quiet", 2, rows, NULL);
	jf_done(&j, 0, "node-q");
	struct es_buf before = ES_BUF_INIT, after = ES_BUF_INIT, outdir = ES_BUF_INIT;
	snapshot(j.dir, &before);
	char od[2048], out[2100], cap[2100];
	snprintf(od, sizeof(od), "%s/out", T);
	jf_mkdirs(od);
	snprintf(out, sizeof(out), "%s/report.html", od);
	snprintf(cap, sizeof(cap), "%s/stdout.txt", T);
	fflush(stdout);
	int saved = dup(1), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 1);
	close(fd);
	struct es_report_info info;
	int rc = es_report_write(j.dir, out, NULL, &info);
	rc |= es_report_write(j.dir, out, NULL, &info); /* replacing it is fine */
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	CHECK_INT_EQ(rc, 0);
	struct stat st;
	CHECK(stat(cap, &st) == 0 && st.st_size == 0);
	snapshot(j.dir, &after);
	CHECK_STR_EQ(after.data, before.data);
	snapshot(od, &outdir);
	CHECK(strncmp(outdir.data, out, strlen(out)) == 0);
	CHECK_INT_EQ(count(outdir.data, "\n"), 1);
	size_t n = 0;
	char *html = jf_read(out, &n);
	CHECK(html && strstr(html, "</html>\n") && n == strlen(html));
	free(html);
	/* Into the job folder itself (what run does): nothing else changes there. */
	char in[2100];
	snprintf(in, sizeof(in), "%s/report.html", j.dir);
	CHECK_INT_EQ(es_report_write(j.dir, in, NULL, NULL), 0);
	CHECK(jf_exists(in));
	unlink(in);
	es_buf_reset(&after);
	snapshot(j.dir, &after);
	CHECK_STR_EQ(after.data, before.data);
	es_buf_free(&before);
	es_buf_free(&after);
	es_buf_free(&outdir);
}

static void test_errors(void)
{
	struct jf j;
	int rows[] = { 1 };
	jf_make(&j, T, "errs", 1, rows, NULL);
	char p[2048], out[2100];
	snprintf(out, sizeof(out), "%s/err-out.html", T);
	es_log_quiet_begin();
	snprintf(p, sizeof(p), "%s/nothing-here", T);
	CHECK_INT_EQ(es_report_write(p, out, NULL, NULL), ES_ENOENT);
	CHECK(strstr(es_last_error(), "Job manifest not found") != NULL);
	snprintf(p, sizeof(p), "%s/foreign", T);
	jf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/foreign/manifest.json", T);
	jf_writes(p, "{\"schema_version\": 3, \"shards\": [{\"id\": \"a\", \"path\": \"shards/a.jsonl\"}]}\n");
	snprintf(p, sizeof(p), "%s/foreign", T);
	CHECK(es_report_write(p, out, NULL, NULL) < 0);
	CHECK(strstr(es_last_error(), "schema_version") != NULL);
	CHECK(!jf_exists(out));
	/* An output that is a folder, or in a folder that does not exist. */
	CHECK_INT_EQ(es_report_write(j.dir, T, NULL, NULL), ES_EUSAGE);
	CHECK(strstr(es_last_error(), "Report output is a folder") != NULL);
	snprintf(p, sizeof(p), "%s/newdir/", T);
	CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), ES_EUSAGE);
	snprintf(p, sizeof(p), "%s/no-such-folder/r.html", T);
	CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), ES_EUSAGE);
	CHECK(strstr(es_last_error(), "Report output folder does not exist") != NULL);
	CHECK_INT_EQ(es_report_write(j.dir, "", NULL, NULL), ES_EUSAGE);
	es_log_quiet_end();
	snprintf(p, sizeof(p), "%s/no-such-folder", T);
	CHECK(!jf_exists(p));
}

/* The report never replaces a file of the job: every output inside the job folder (after ".."
 * and links) but <job>/report.html is refused, and the job folder is left as it was. */
static void test_output_in_job_folder(void)
{
	struct jf j;
	int rows[] = { 1, 1 };
	jf_make(&j, T, "inside", 2, rows, NULL);
	jf_done(&j, 0, "node-a");
	char p[2300], alias[2100];
	snprintf(alias, sizeof(alias), "%s/inside-alias", T);
	CHECK_INT_EQ(symlink("inside", alias), 0);
	struct es_buf before = ES_BUF_INIT, after = ES_BUF_INIT;
	snapshot(j.dir, &before);
	static const char *const refused[] = { "manifest.json", "state/done/part-00000-of-00002.json", "shards/../recipe.yaml",
					       "merged.jsonl", "state/new.html", "" };
	es_log_quiet_begin();
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", i % 2 ? alias : j.dir, refused[i]);
		if (!CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), ES_EUSAGE))
			fprintf(stderr, "  output: %s\n", p);
		CHECK(strstr(es_last_error(), "is inside the job folder") != NULL);
	}
	es_log_quiet_end();
	snapshot(j.dir, &after);
	CHECK_STR_EQ(after.data, before.data);
	snprintf(p, sizeof(p), "%s/report.html", alias);
	CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), 0);
	snprintf(p, sizeof(p), "%s/report.html", j.dir);
	CHECK(jf_exists(p));
	unlink(p);
	es_buf_free(&before);
	es_buf_free(&after);
}

/* A stream has no folder for a temporary: a pipe (as /dev/stdout is when piped) and a character
 * device are written directly, the page whole. They are named through /proc/self/fd, as
 * /dev/stdout leads there: a temporary cannot be made in /proc, so code that wrongly writes
 * atomically fails there, where in /dev (as root) it would replace the device. */
static void test_streams(void)
{
	struct jf j;
	int rows[] = { 1 };
	jf_make(&j, T, "stream", 1, rows, NULL);
	char p[64];
	int nfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	CHECK(nfd >= 0);
	snprintf(p, sizeof(p), "/proc/self/fd/%d", nfd);
	CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), 0);
	close(nfd);
	int pfd[2];
	if (!CHECK(pipe(pfd) == 0))
		return;
	pid_t child = fork();
	if (child == 0) { /* the reader: exit 0 when it got the whole page */
		close(pfd[1]);
		struct es_buf got = ES_BUF_INIT;
		int rc = es_fs_read_fd(pfd[0], &got, (size_t)64 << 20, "pipe");
		_exit(!rc && strstr(got.data, "<!DOCTYPE html>") == got.data && strstr(got.data, "</html>\n") ? 0 : 1);
	}
	close(pfd[0]);
	snprintf(p, sizeof(p), "/proc/self/fd/%d", pfd[1]);
	CHECK_INT_EQ(es_report_write(j.dir, p, NULL, NULL), 0);
	close(pfd[1]);
	int status = -1;
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Issue 29: run's rank 0 renders the report from the view it already holds (report.h view):
 * the same page as a report that reads the job anew, without reading an attempt.json again. */
static void test_kept_view(void)
{
	struct jf j;
	struct es_jobview v;
	make_reference_job(&j);
	struct es_report_opts o = { T0 + 130, 0, 0, 0, NULL };
	struct es_report_info a, b;
	char *fresh = render(j.dir, &o, &a);
	CHECK_INT_EQ(es_jobview_load(j.dir, T0 + 130, 0, &v), 0);
	o.view = &v;
	test_watched = "attempt.json";
	test_watched_opens = 0;
	char *kept = render(j.dir, &o, &b);
	int opens = test_watched_opens;
	test_watched = NULL;
	if (fresh && kept)
		CHECK_STR_EQ(kept, fresh);
	CHECK_INT_EQ(b.attempts, a.attempts);
	CHECK_INT_EQ(b.shards_done, a.shards_done);
	if (!CHECK_INT_EQ(opens, 0))
		fprintf(stderr, "  %d attempt.json opens rendering from a kept view\n", opens);
	CHECK_INT_EQ(v.n_a, b.attempts); /* the view is the caller's still */
	es_jobview_free(&v);
	free(fresh);
	free(kept);
}

int main(void)
{
	T = test_tmpdir();
	test_reference_job();
	test_ticks();
	test_failed_job();
	test_events();
	test_bad_clock();
	test_empty_job();
	test_writes_only_the_output();
	test_errors();
	test_output_in_job_folder();
	test_streams();
	test_kept_view();
	return test_done();
}
