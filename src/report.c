#include "eshard/report.h"
#include "eshard/claim.h"
#include "eshard/fs.h"
#include "eshard/jobpath.h"
#include "eshard/jobview.h"
#include "eshard/log.h"
#include "eshard/manifest.h"
#include "eshard/number.h"
#include "eshard/status.h"
#include "json.h"
#include "utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* By es_jv_status_names: failed red and preempted amber stand out from the rest. */
static const char *const status_colors[ES_JV_N] =  { "#2e9e44", "#d62728", "#a0a0a0", "#9467bd", "#8c564b",
						 "#f0a020", "#1f77b4", "#e377c2", "#7f7f7f" };

/* ---------------- HTML output ---------------- */

struct html {
	struct es_buf *b;
	int rc;
	const struct es_report_opts *o;
	long *anchor;   /* per manifest shard: the index in a of its last failed attempt shown, or -1 */
};

static void h_adds(struct html *h, const char *s)
{
	if (!h->rc)
		h->rc = es_buf_adds(h->b, s);
}

static void h_printf(struct html *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h_printf(struct html *h, const char *fmt, ...)
{
	if (h->rc)
		return;
	va_list ap;
	va_start(ap, fmt);
	h->rc = es_buf_vprintf(h->b, fmt, ap);
	va_end(ap);
}

/* Text for an element or an attribute: & < > " ' as entities, control characters but tab and
 * newline and bytes that are not UTF-8 as U+FFFD, so no byte of a log can end markup. */
static void h_escn(struct html *h, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (!h->rc && i < n) {
		unsigned char c = p[i];
		size_t adv = 1;
		const char *rep = NULL;
		char one[2] = { (char)c, 0 };
		switch (c) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&#39;"; break;
		default:
			if (c >= 0x80) {
				es_utf8_next(p + i, n - i, &adv);
				if (adv == 1)
					rep = "\xEF\xBF\xBD";
			} else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
				rep = "\xEF\xBF\xBD";
			} else {
				rep = one;
			}
		}
		h->rc = rep ? es_buf_adds(h->b, rep) : es_buf_add(h->b, p + i, adv);
		i += adv;
	}
}

static void h_esc(struct html *h, const char *s)
{
	if (s)
		h_escn(h, s, strlen(s));
}

/* "2026-12-02 08:37:05.108 UTC"; "unknown" for a time that is no date of the years 1970 to
 * 9999 (jobview keeps such times out, but a cast of one to time_t would be undefined). */
static void fmt_time(double t, char *out, size_t n)
{
	struct tm tm;
	time_t s = t >= 0 && t < 253402300800.0 ? (time_t)floor(t) : -1;
	if (s < 0 || !gmtime_r(&s, &tm)) {
		snprintf(out, n, "unknown");
		return;
	}
	char day[32];
	strftime(day, sizeof(day), "%Y-%m-%d %H:%M:%S", &tm);
	int ms = (int)((t - floor(t)) * 1000.0);
	snprintf(out, n, "%s.%03d UTC", day, ms > 999 ? 999 : ms);
}

/* "0.42 s", "12.3 s", "4m05s", "2h03m10s" */
static void fmt_dur(double secs, char *out, size_t n)
{
	if (!(secs >= 0)) {
		snprintf(out, n, "unknown");
		return;
	}
	if (secs < 10) {
		snprintf(out, n, "%.2f s", secs);
		return;
	}
	if (secs < 60) {
		snprintf(out, n, "%.1f s", secs);
		return;
	}
	long long t = (long long)es_i64_of_double(round(secs));
	if (t < 3600)
		snprintf(out, n, "%lldm%02llds", t / 60, t % 60);
	else
		snprintf(out, n, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
}

/* 1, 2, 5 or 10 times the power of ten at or below raw: the "nice number" at or above raw. */
static double nice_125(double raw)
{
	double mag = pow(10, floor(log10(raw))), norm = raw / mag;
	return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

void es_report_ticks(double span, int want, struct es_report_ticks *t)
{
	if (!(span > 0) || !isfinite(span))
		span = 1e-3;
	t->unit = span < 1 ? 1e-3 : span < 120 ? 1 : span < 7200 ? 60 : 3600;
	t->unit_name = span < 1 ? "ms" : span < 120 ? "s" : span < 7200 ? "min" : "h";
	double stepu = nice_125(span / t->unit / (want > 0 ? want : 1));
	t->step = stepu * t->unit;
	t->decimals = stepu >= 1 ? 0 : (int)ceil(-log10(stepu) - 1e-9);
	t->n = (int)floor(span / t->step + 1e-9) + 1;
}

void es_report_tick_label(const struct es_report_ticks *t, double secs, char *out, size_t n)
{
	char num[48];
	snprintf(num, sizeof(num), "%.*f", t->decimals, secs / t->unit);
	size_t len = strlen(num);
	if (strchr(num, '.')) {
		while (len && num[len - 1] == '0')
			num[--len] = '\0';
		if (len && num[len - 1] == '.')
			num[--len] = '\0';
	}
	snprintf(out, n, "%s %s", strcmp(num, "-0") ? num : "0", t->unit_name);
}

/* A readable step for about `want` ticks over span seconds. */
static double nice_step(double span, int want)
{
	static const double steps[] = { 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
					3600, 7200, 10800, 21600, 43200, 86400 };
	double raw = span / (want > 0 ? want : 1);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (steps[i] >= raw)
			return steps[i];
	return 86400.0 * ceil(raw / 86400.0);
}

/* A readable step for a count axis. */
static double nice_count(double max, int want)
{
	double raw = max / (want > 0 ? want : 1);
	if (raw <= 1)
		return 1;
	return nice_125(raw);
}

static const char css[] =
	"body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:1400px}\n"
	"h1{font-size:22px;margin:0 0 4px}h3{font-size:14px;margin:16px 0 4px}p{font-size:14px;margin:6px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc;padding-bottom:4px}\n"
	".sub{color:#555;font-size:13px}.note{color:#555;font-size:12px;margin:4px 0}\n"
	".cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}\n"
	".card{border:1px solid #ccc;border-radius:6px;padding:8px 14px;min-width:150px}\n"
	".card b{display:block;font-size:20px}.card span{color:#555;font-size:12px}\n"
	"table{border-collapse:collapse;font-size:13px;margin:6px 0}\n"
	"th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f2f2f2}\n"
	"td.n{text-align:right;font-variant-numeric:tabular-nums}tr.slow td{background:#fff3d6}\n"
	".legend span{display:inline-block;margin-right:14px;font-size:13px}\n"
	".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}\n"
	"pre{background:#f6f6f6;border:1px solid #ddd;padding:6px;font-size:12px;overflow-x:auto;white-space:pre-wrap;max-height:320px}\n"
	"svg{display:block;margin:6px 0}svg text{font-family:sans-serif;font-size:11px;fill:#333}\n"
	"svg .lab{font-size:12px}svg .ax{stroke:#888;stroke-width:1}svg .grid{stroke:#e4e4e4;stroke-width:1}\n"
	"svg .in{fill:#fff;font-size:10px}svg .bar{fill:#4a78b5}svg .hot{fill:#f0a020}\n"
	"svg .cum{fill:none;stroke:#d62728;stroke-width:2}\n"
	".banner{font-size:18px;font-weight:bold;padding:10px 14px;border-radius:6px;margin:12px 0}\n"
	".banner.bad{background:#fdecea;border:2px solid #d62728;color:#a51b1c}\n"
	".banner.ok{background:#eaf6ec;border:1px solid #2e9e44;color:#1e6b2e}\n"
	".banner ul{margin:6px 0 0;padding-left:22px;font-size:13px;font-weight:normal;color:#222}\n"
	".banner li{margin:2px 0}.banner a{color:#a51b1c;font-weight:bold}\n"
	".card.bad{border:2px solid #d62728;background:#fdecea}.card.bad b{color:#d62728}\n";

static void put_style(struct html *h)
{
	h_adds(h, "<style>\n");
	h_adds(h, css);
	for (int s = 0; s < ES_JV_N; s++)
		h_printf(h, "g.attempt[data-status=\"%s\"] rect{fill:%s}\n", es_jv_status_names[s], status_colors[s]);
	h_adds(h, "g.attempt[data-backup=\"1\"] rect{stroke:#222;stroke-width:1.5;stroke-dasharray:3 2}\n");
	h_printf(h, "g.attempt path.mk{stroke:#fff;stroke-width:0.5}g.attempt[data-status=\"failed\"] path.mk{fill:%s}"
		    "g.attempt[data-status=\"preempted\"] path.mk{fill:%s}\n", status_colors[ES_JV_FAILED],
		 status_colors[ES_JV_PREEMPTED]);
	h_adds(h, "</style>\n");
}

static void card_cls(struct html *h, const char *cls, const char *value, const char *label)
{
	h_printf(h, "<div class=\"%s\"><b>", cls);
	h_esc(h, value);
	h_adds(h, "</b><span>");
	h_esc(h, label);
	h_adds(h, "</span></div>\n");
}

static void card(struct html *h, const char *value, const char *label)
{
	card_cls(h, "card", value, label);
}

static void put_summary(struct html *h, const struct es_jobview *r)
{
	const struct es_status_counts *c = &r->st.counts;
	char v[128], l[256], d[48];
	h_adds(h, "<h2>Summary</h2>\n<div class=\"cards\">\n");
	snprintf(v, sizeof(v), "%lld / %lld", (long long)c->done, (long long)c->total);
	snprintf(l, sizeof(l), "shards done (failed %lld, pending %lld, running %lld, stale %lld)", (long long)c->failed,
		 (long long)c->pending, (long long)c->running, (long long)c->stale);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)c->failed);
	card_cls(h, c->failed ? "card bad" : "card", v, "shards failed");
	snprintf(v, sizeof(v), "%zu", r->n_a);
	snprintf(l, sizeof(l), "attempts (%zu failed, %zu stale, %zu lost, %zu preempted; %zu backups, %zu of them won)",
		 r->by_status[ES_JV_FAILED], r->by_status[ES_JV_STALE], r->by_status[ES_JV_LOST], r->by_status[ES_JV_PREEMPTED],
		 r->n_backups, r->n_backups_won);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)r->m.total_rows);
	snprintf(l, sizeof(l), "rows in (%lld in done shards)", (long long)r->st.rows_done);
	card(h, v, l);
	snprintf(v, sizeof(v), "%lld", (long long)r->st.result_rows_done);
	card(h, v, "rows out (results of done shards)");
	fmt_dur(r->t0 >= 0 ? r->t1 - r->t0 : -1, d, sizeof(d));
	card(h, d, "wall time (first claim to last end)");
	snprintf(v, sizeof(v), "%zu / %zu", r->n_h, r->n_w);
	card(h, v, "hosts / workers");
	h_adds(h, "</div>\n");
	char a[48], b[48];
	fmt_time(r->t0, a, sizeof(a));
	fmt_time(r->t1, b, sizeof(b));
	h_printf(h, "<p class=\"note\">From %s to %s. ", a, b);
	if (r->n_event_files)
		h_printf(h, "Times from %zu event log(s) (%zu events) where an attempt has events, else from attempt.json.",
			 r->n_event_files, r->n_ev);
	else
		h_adds(h, "No event logs (a job folder of the reference implementation, or one that no eshard-mpi "
			  "worker ran): times from attempt.json.");
	if (r->bad_event_lines)
		h_printf(h, " %zu event line(s) or file(s) could not be read.", r->bad_event_lines);
	if (r->unreadable_attempts)
		h_printf(h, " %zu attempt.json file(s) could not be read.", r->unreadable_attempts);
	if (r->m.bad_lines > 0)
		h_printf(h, " %lld bad input line(s) were left out at prepare (--bad-lines skip; manifest bad_lines).", (long long)r->m.bad_lines);
	if (r->bad_times)
		h_printf(h, " %zu recorded time(s) were ignored: not finite, or outside the job's span (a node's clock may "
			    "be wrong).", r->bad_times);
	h_adds(h, "</p>\n");
}

static void put_hosts(struct html *h, const struct es_jobview *r)
{
	double wall = r->t0 >= 0 ? r->t1 - r->t0 : 0;
	h_adds(h, "<h2>Hosts</h2>\n<table><tr><th>host</th><th>workers</th><th>attempts</th><th>shards done</th>"
		  "<th>failed attempts</th><th>rows in (done)</th><th>rows out</th><th>busy</th><th>rows/s</th>"
		  "<th>busy %</th><th>first claim</th></tr>\n");
	for (size_t i = 0; i < r->n_h; i++) {
		const struct es_jv_host *x = &r->h[i];
		char busy[48], first[48];
		fmt_dur(x->busy, busy, sizeof(busy));
		fmt_dur(x->first_claim - r->t0, first, sizeof(first));
		h_adds(h, "<tr><td>");
		h_esc(h, x->host);
		h_printf(h, "</td><td class=\"n\">%zu</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
			    "<td class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%s</td>",
			 x->n_workers, (long long)x->attempts, (long long)x->done, (long long)x->failed,
			 (long long)x->rows_in, (long long)x->rows_out, busy);
		if (x->busy_done > 0)
			h_printf(h, "<td class=\"n\">%.1f</td>", (double)x->rows_in / x->busy_done);
		else
			h_adds(h, "<td class=\"n\">-</td>");
		if (wall > 0)
			h_printf(h, "<td class=\"n\">%.0f%%</td>", 100.0 * x->busy / (wall * (double)x->n_workers));
		else
			h_adds(h, "<td class=\"n\">-</td>");
		h_printf(h, "<td class=\"n\">+%s</td></tr>\n", first);
	}
	h_adds(h, "</table>\n<p class=\"note\">A worker is one process (host and pid). busy: time inside attempts; "
		  "rows/s: input rows of the done shards per second inside done attempts; busy %: busy / (workers &times; "
		  "wall time); first claim: after the earliest claim of the job.</p>\n");
}

/* ---- SVG pieces ---- */

#define SVG_W 1320
#define SVG_LEFT 210
#define SVG_RIGHT 30

struct xaxis {
	double t0, span;      /* seconds since r->t0 at the left edge, and the width in seconds */
	double left, width;   /* pixels */
};

static double ax_x(const struct xaxis *x, double secs)
{
	return x->left + (secs - x->t0) / x->span * x->width;
}

/* Vertical grid lines from y0 to y1 and tick labels below y1. */
static void put_time_axis(struct html *h, const struct xaxis *x, double y0, double y1, const char *caption)
{
	struct es_report_ticks t;
	char lab[48];
	es_report_ticks(x->span, 10, &t);
	h_printf(h, "<line class=\"ax\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x->left, y1,
		 x->left + x->width, y1);
	for (int k = 0; k < t.n; k++) {
		double v = k * t.step, px = ax_x(x, v);
		es_report_tick_label(&t, v, lab, sizeof(lab));
		h_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<line class=\"ax\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
			 px, y0, px, y1, px, y1, px, y1 + 4, px, y1 + 16, lab);
	}
	h_printf(h, "<text class=\"lab\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x->left + x->width / 2, y1 + 32);
	h_esc(h, caption);
	h_adds(h, "</text>\n");
}

static void put_legend(struct html *h, const struct es_jobview *r)
{
	h_adds(h, "<div class=\"legend\">");
	for (int s = 0; s < ES_JV_N; s++)
		h_printf(h, "<span><i style=\"background:%s\"></i>%s (%zu)</span>", status_colors[s], es_jv_status_names[s],
			 r->by_status[s]);
	if (r->n_backups)
		h_printf(h, "<span><i style=\"border:1.5px dashed #222\"></i>backup attempts (%zu, %zu won)</span>",
			 r->n_backups, r->n_backups_won);
	h_printf(h, "<span><b style=\"color:%s\">&#9660;</b><b style=\"color:%s\">&#9660;</b> marks a failed or a "
		    "preempted attempt; every bar is at least 3 px wide</span>", status_colors[ES_JV_FAILED],
		 status_colors[ES_JV_PREEMPTED]);
	h_adds(h, "</div>\n");
}

/* What ended an attempt, for its tooltip and its failure heading: its error, or for a
 * preempted attempt (its attempt.json records no error) the stop that ended it; NULL when
 * nothing is recorded. */
static const char *why_of(const struct es_jv_attempt *a)
{
	if (a->error)
		return a->error;
	if (a->status == ES_JV_PREEMPTED)
		return "preempted: stopped by a signal (SIGTERM or SIGINT, from the scheduler or a user); not counted "
		       "as a failure, the shard was released for the next run";
	return NULL;
}

/* The tooltip of one attempt. */
static void put_tooltip(struct html *h, const struct es_jobview *r, const struct es_jv_attempt *a)
{
	char t1[48], t2[48], d[48], p[48];
	fmt_time(a->claim, t1, sizeof(t1));
	fmt_time(a->end, t2, sizeof(t2));
	fmt_dur(a->end - a->claim, d, sizeof(d));
	h_adds(h, "<title>");
	h_esc(h, a->shard);
	h_printf(h, " attempt %d (%.8s)\nhost ", a->number, a->token);
	h_esc(h, a->host);
	h_printf(h, ", pid %lld\nstatus %s%s", (long long)a->pid, es_jv_status_names[a->status], a->backup ? " (a backup attempt)" : "");
	if (a->raw_status) {
		h_adds(h, " (attempt.json: ");
		h_esc(h, a->raw_status);
		h_adds(h, ")");
	}
	h_printf(h, "\nstart %s\nend %s%s\nduration %s", t1, t2,
		 a->end_kind == ES_JV_END_LIVE ? " (still running: now)" :
		 a->end_kind == ES_JV_END_UNKNOWN ? " (not recorded)" : "", d);
	if (a->proc_secs >= 0) {
		fmt_dur(a->proc_secs, p, sizeof(p));
		h_printf(h, " (processor %s)", p);
	}
	h_printf(h, "\n+%.3f s after the first claim", a->claim - r->t0);
	if (a->rows_in >= 0)
		h_printf(h, "\nrows in %lld", (long long)a->rows_in);
	if (a->rows_out >= 0)
		h_printf(h, ", rows out %lld", (long long)a->rows_out);
	if (a->has_rc)
		h_printf(h, "\nexit code %lld", (long long)a->rc);
	const char *why = why_of(a);
	if (why) {
		size_t n = strlen(why);
		h_adds(h, a->error ? "\nerror: " : "\n");
		h_escn(h, why, n > 600 ? 600 : n);
		if (n > 600)
			h_adds(h, "...");
	}
	h_printf(h, "\ntimes from %s</title>", a->timed_by_events ? "the event log" : "attempt.json");
}

#define ROW_H 20

static void put_timeline(struct html *h, const struct es_jobview *r)
{
	h_adds(h, "<h2>Timeline</h2>\n");
	put_legend(h, r);
	if (!r->n_a) {
		h_adds(h, "<p>No attempt yet.</p>\n");
		return;
	}
	double top = 8, height = top + (double)r->n_w * ROW_H;
	struct xaxis x = { 0, r->t1 - r->t0 > 1e-3 ? r->t1 - r->t0 : 1e-3, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 height + 46);
	for (size_t k = 0; k < r->n_w; k++) {
		const struct es_jv_worker *w = &r->w[k];
		double y = top + (double)k * ROW_H;
		int first = !k || r->w[k - 1].host_index != w->host_index;
		if (w->host_index % 2 == 0)
			h_printf(h, "<rect x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f4f6fa\"/>\n", y, SVG_W,
				 ROW_H);
		if (first && k)
			h_printf(h, "<line x1=\"0\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#bbb\"/>\n", y, SVG_W, y);
		h_printf(h, "<text class=\"lab\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8, y + 14);
		if (first) {
			h_adds(h, "<tspan font-weight=\"bold\">");
			h_escn(h, w->host, strlen(w->host) > 24 ? 24 : strlen(w->host));
			h_adds(h, "</tspan> ");
		}
		h_printf(h, "pid %lld</text>\n", (long long)w->pid);
	}
	put_time_axis(h, &x, top, height, "time since the first claim");
	for (size_t i = 0; i < r->n_a; i++) {
		const struct es_jv_attempt *a = &r->a[i];
		double x0 = ax_x(&x, a->claim - r->t0), x1 = ax_x(&x, a->end - r->t0);
		double y = top + (double)a->worker * ROW_H + 3, wpx = x1 - x0 < 3 ? 3 : x1 - x0;
		h_adds(h, "<g class=\"attempt\" data-shard=\"");
		h_esc(h, a->shard);
		h_adds(h, "\" data-host=\"");
		h_esc(h, a->host);
		h_printf(h, "\" data-status=\"%s\" data-attempt=\"%d\" data-pid=\"%lld\"%s>", es_jv_status_names[a->status],
			 a->number, (long long)a->pid, a->backup ? " data-backup=\"1\"" : "");
		put_tooltip(h, r, a);
		h_printf(h, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" rx=\"2\"/>", x0, y, wpx, ROW_H - 6);
		/* A triangle over the bar: a failure or a preemption of milliseconds in a job of hours
		 * is still seen. */
		if (a->status == ES_JV_FAILED || a->status == ES_JV_PREEMPTED)
			h_printf(h, "<path class=\"mk\" d=\"M%.2f %.1fL%.2f %.1fH%.2fZ\"/>", x0 + wpx / 2, y + 4,
				 x0 + wpx / 2 - 4.5, y - 3, x0 + wpx / 2 + 4.5);
		if (wpx > 34 && a->shard_index >= 0)
			h_printf(h, "<text class=\"in\" x=\"%.2f\" y=\"%.1f\">%ld</text>", x0 + 3, y + 11, a->shard_index);
		h_adds(h, "</g>\n");
	}
	h_adds(h, "</svg>\n<p class=\"note\">One row per worker process, grouped by host; one bar per attempt from its "
		  "claim to its end, labelled with the shard's index when it is wide enough. Hover a bar for its "
		  "times, rows and error, or what stopped it.</p>\n");
}

/* A count axis on the left from y_base (0) up by height pixels for values 0..max. */
static void put_count_axis(struct html *h, double left, double right, double y_base, double height, double max,
			   const char *fmt_unit)
{
	double step = nice_count(max, 4);
	for (double v = 0; v <= max + 1e-9; v += step) {
		double y = y_base - v / max * height;
		h_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
			 left, y, right, y, left - 6, y + 4, v);
	}
	h_printf(h, "<text class=\"lab\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
		 left - 48, y_base - height / 2, left - 48, y_base - height / 2, fmt_unit);
}

static void put_throughput(struct html *h, const struct es_jobview *r)
{
	h_adds(h, "<h2>Throughput</h2>\n");
	if (!r->by_status[ES_JV_DONE]) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	double span = r->t1 - r->t0 > 1e-3 ? r->t1 - r->t0 : 1e-3;
	double step = nice_step(span, 40);
	size_t nb = (size_t)ceil(span / step);
	if (nb < 1)
		nb = 1;
	double *rows = calloc(nb, sizeof(*rows)), max = 0, total = 0;
	if (!rows) {
		h->rc = es_error(ES_ENOMEM, "out of memory making the report (throughput)");
		return;
	}
	for (size_t i = 0; i < r->n_a; i++) {
		const struct es_jv_attempt *a = &r->a[i];
		if (a->status != ES_JV_DONE || a->rows_in < 0)
			continue;
		/* An end before the first time (a live end at now, behind a clock that ran ahead) goes
		 * to the first bucket: a negative double cast to size_t is undefined. */
		double at = floor((a->end - r->t0) / step);
		size_t b = at > 0 ? (at < (double)nb ? (size_t)at : nb - 1) : 0;
		rows[b] += (double)a->rows_in;
		total += (double)a->rows_in;
	}
	for (size_t b = 0; b < nb; b++)
		max = rows[b] > max ? rows[b] : max;
	if (max <= 0)
		max = 1;
	double top = 14, base = 214, ph = base - top;
	struct xaxis x = { 0, (double)nb * step, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"throughput\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 base + 46);
	put_count_axis(h, x.left, x.left + x.width, base, ph, max, "rows per bucket");
	put_time_axis(h, &x, top, base, "time since the first claim");
	struct es_buf pts = ES_BUF_INIT;
	double cum = 0;
	es_buf_printf(&pts, "%.1f,%.1f", x.left, base);
	for (size_t b = 0; b < nb; b++) {
		double x0 = ax_x(&x, (double)b * step), x1 = ax_x(&x, (double)(b + 1) * step);
		double bh = rows[b] / max * ph;
		if (rows[b] > 0)
			h_printf(h, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\">"
				    "<title>%.0f rows in [%.1f s, %.1f s)</title></rect>\n",
				 x0 + 1, base - bh, x1 - x0 - 2 > 1 ? x1 - x0 - 2 : 1, bh, rows[b], (double)b * step,
				 (double)(b + 1) * step);
		cum += rows[b];
		es_buf_printf(&pts, " %.1f,%.1f", x1, base - cum / total * ph);
	}
	h_printf(h, "<polyline class=\"cum\" points=\"%s\"/>\n", pts.data);
	h_printf(h, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#d62728\" style=\"fill:#d62728\">"
		    "cumulative: %.0f rows</text>\n", x.left + x.width, top - 2, total);
	es_buf_free(&pts);
	free(rows);
	char st[48];
	fmt_dur(step, st, sizeof(st));
	h_printf(h, "</svg>\n<p class=\"note\">Bars: input rows of the shards whose done attempt ended in each %s "
		    "bucket. Line: rows done so far, up to %.0f (its scale is its own). Mean: %.1f rows/s over the wall time.</p>\n",
		 st, total, total / span);
}

static void put_histogram(struct html *h, const struct es_jobview *r, const double *d, size_t n)
{
	h_adds(h, "<h2>Shard durations</h2>\n");
	if (!n) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	double maxd = d[n - 1] > 1e-3 ? d[n - 1] : 1e-3;
	double bw = nice_step(maxd, 15);
	size_t nb = (size_t)floor(maxd / bw) + 1, *cnt = calloc(nb, sizeof(*cnt)), maxc = 1;
	if (!cnt) {
		h->rc = es_error(ES_ENOMEM, "out of memory making the report (histogram)");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		size_t b = (size_t)floor(d[i] / bw);
		cnt[b < nb ? b : nb - 1]++;
	}
	for (size_t b = 0; b < nb; b++)
		maxc = cnt[b] > maxc ? cnt[b] : maxc;
	double top = 18, base = 200, ph = base - top;
	struct xaxis x = { 0, (double)nb * bw, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"durations\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 base + 46);
	put_count_axis(h, x.left, x.left + x.width, base, ph, (double)maxc, "done attempts");
	put_time_axis(h, &x, top, base, "duration of the done attempt (claim to end)");
	for (size_t b = 0; b < nb; b++) {
		double x0 = ax_x(&x, (double)b * bw), x1 = ax_x(&x, (double)(b + 1) * bw);
		double bh = (double)cnt[b] / (double)maxc * ph;
		int hot = r->median > 0 && (double)b * bw > 2 * r->median;
		if (!cnt[b])
			continue;
		h_printf(h, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\">"
			    "<title>%zu attempt(s) of [%.2f s, %.2f s)</title></rect>"
			    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
			 hot ? "hot" : "bar", x0 + 1, base - bh, x1 - x0 - 2 > 1 ? x1 - x0 - 2 : 1, bh, cnt[b],
			 (double)b * bw, (double)(b + 1) * bw, (x0 + x1) / 2, base - bh - 3, cnt[b]);
	}
	free(cnt);
	char md[48], mx[48];
	fmt_dur(r->median, md, sizeof(md));
	fmt_dur(d[n - 1], mx, sizeof(mx));
	h_printf(h, "</svg>\n<p class=\"note\">%zu done attempts; median %s, longest %s. Orange bins start past twice "
		    "the median.</p>\n", n, md, mx);
}

static void put_skew(struct html *h, const struct es_jobview *r)
{
	h_adds(h, "<h2>Start-up skew</h2>\n");
	if (!r->n_w) {
		h_adds(h, "<p>No claim yet.</p>\n");
		return;
	}
	double maxo = 0;
	size_t last = 0;
	for (size_t k = 0; k < r->n_w; k++)
		if (r->w[k].first_claim - r->t0 > maxo) {
			maxo = r->w[k].first_claim - r->t0;
			last = k;
		}
	char d[48];
	fmt_dur(maxo, d, sizeof(d));
	h_printf(h, "<p>The first claims of the %zu worker(s) on %zu host(s) were %s apart", r->n_w, r->n_h, d);
	if (r->n_w > 1 && maxo > 0) {
		h_adds(h, " (the last: ");
		h_esc(h, r->w[last].host);
		h_printf(h, " pid %lld)", (long long)r->w[last].pid);
	}
	h_adds(h, ".</p>\n");
	/* At least one second wide, so that milliseconds of skew do not look like a long wait. */
	double top = 6, bottom = top + (double)r->n_w * ROW_H;
	struct xaxis x = { 0, maxo * 1.15 > 1 ? maxo * 1.15 : 1, SVG_LEFT, SVG_W - SVG_LEFT - SVG_RIGHT };
	h_printf(h, "<svg id=\"skew\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\">\n", SVG_W,
		 bottom + 46);
	put_time_axis(h, &x, top, bottom, "first claim, after the earliest claim of the job");
	h_printf(h, "<line class=\"ax\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", SVG_LEFT, top, SVG_LEFT,
		 bottom);
	for (size_t k = 0; k < r->n_w; k++) {
		const struct es_jv_worker *w = &r->w[k];
		double y = top + (double)k * ROW_H, off = w->first_claim - r->t0, bw = ax_x(&x, off) - x.left;
		h_printf(h, "<text class=\"lab\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8, y + 14);
		h_escn(h, w->host, strlen(w->host) > 24 ? 24 : strlen(w->host));
		h_printf(h, " pid %lld</text><rect class=\"bar\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\"/>"
			    "<text x=\"%.1f\" y=\"%.1f\">+%.3f s</text>\n",
			 (long long)w->pid, SVG_LEFT, y + 3, bw, ROW_H - 6, SVG_LEFT + bw + 6, y + 14, off);
	}
	h_adds(h, "</svg>\n<p class=\"note\">Each worker's first claim after the earliest claim of the job "
		  "(the hosts' own clocks: skew between their clocks shows here too).</p>\n");
}

static int att_dur_desc(const void *x, const void *y)
{
	double a = es_jv_duration(*(const struct es_jv_attempt *const *)x), b = es_jv_duration(*(const struct es_jv_attempt *const *)y);
	return (a < b) - (a > b);
}

static void put_stragglers(struct html *h, const struct es_jobview *r, size_t n_done)
{
	h_adds(h, "<h2>Stragglers</h2>\n");
	if (!n_done) {
		h_adds(h, "<p>No shard done yet.</p>\n");
		return;
	}
	const struct es_jv_attempt **v = malloc(n_done * sizeof(*v));
	size_t n = 0, over = 0;
	if (!v) {
		h->rc = es_error(ES_ENOMEM, "out of memory making the report (stragglers)");
		return;
	}
	for (size_t i = 0; i < r->n_a && n < n_done; i++)
		if (r->a[i].status == ES_JV_DONE && es_jv_duration(&r->a[i]) >= 0)
			v[n++] = &r->a[i];
	qsort(v, n, sizeof(*v), att_dur_desc);
	for (size_t i = 0; i < n; i++)
		over += r->median > 0 && es_jv_duration(v[i]) > 2 * r->median;
	char md[48];
	fmt_dur(r->median, md, sizeof(md));
	h_printf(h, "<p>Median duration of a done attempt: %s; %zu shard(s) took more than twice that.</p>\n", md, over);
	h_adds(h, "<table><tr><th>shard</th><th>host</th><th>pid</th><th>attempt</th><th>duration</th>"
		  "<th>&times; median</th><th>rows in</th></tr>\n");
	size_t show = n < 10 ? n : 10;
	if (over > show)
		show = over < 50 ? over : 50;
	for (size_t i = 0; i < show; i++) {
		char d[48];
		double du = es_jv_duration(v[i]);
		fmt_dur(du, d, sizeof(d));
		h_printf(h, "<tr%s><td>", r->median > 0 && du > 2 * r->median ? " class=\"slow\"" : "");
		h_esc(h, v[i]->shard);
		h_adds(h, "</td><td>");
		h_esc(h, v[i]->host);
		h_printf(h, "</td><td class=\"n\">%lld</td><td class=\"n\">%d</td><td class=\"n\">%s</td>"
			    "<td class=\"n\">%.2f</td><td class=\"n\">%lld</td></tr>\n",
			 (long long)v[i]->pid, v[i]->number, d, r->median > 0 ? du / r->median : 0,
			 (long long)v[i]->rows_in);
	}
	h_adds(h, "</table>\n<p class=\"note\">The slowest done attempts; highlighted: over twice the median.</p>\n");
	free(v);
}

/* The last lines of a log, at most o->log_tail_bytes of it, into out; 1 when cut. */
static int log_tail(const struct html *h, const char *path, struct es_buf *out, int *missing)
{
	size_t maxb = h->o->log_tail_bytes ? h->o->log_tail_bytes : 4096;
	int lines = h->o->log_tail_lines > 0 ? h->o->log_tail_lines : 20;
	int cut = es_fs_read_tail(path, lines, maxb, out);
	*missing = cut < 0;
	return cut > 0;
}

static void put_one_failure(struct html *h, const struct es_jobview *r, size_t i, struct es_buf *tail)
{
	const struct es_jv_attempt *a = &r->a[i];
	char t[48];
	fmt_time(a->end, t, sizeof(t));
	h_printf(h, "<h3 id=\"fail-%zu\">", i);
	h_esc(h, a->shard);
	h_printf(h, " attempt %d on ", a->number);
	h_esc(h, a->host);
	h_printf(h, " (pid %lld), ended %s</h3>\n<p>", (long long)a->pid, t);
	if (a->has_rc)
		h_printf(h, "Exit code %lld. ", (long long)a->rc);
	h_esc(h, why_of(a) ? why_of(a) : "(no error recorded)");
	h_adds(h, "</p>\n");
	struct es_buf p = ES_BUF_INIT;
	int missing = 1, cut = 0;
	if (!es_path_join(&p, a->dir, ES_ATTEMPT_LOG))
		cut = log_tail(h, p.data, tail, &missing);
	es_buf_free(&p);
	if (missing) {
		h_adds(h, "<p class=\"note\">No process.log.</p>\n");
		return;
	}
	h_printf(h, "<p class=\"note\">%s of process.log:</p>\n<pre>", cut ? "The last lines" : "All");
	h_escn(h, tail->data, tail->len);
	h_adds(h, "</pre>\n");
}

/* The failed attempts shown with their log (the first max_failed_logs of them). */
static size_t max_failed_logs(const struct html *h)
{
	return h->o->max_failed_logs ? h->o->max_failed_logs : 50;
}

/* h->anchor: for each shard of the manifest, its last failed attempt that put_failures shows
 * with its log (the first max_failed_logs failed attempts), or -1; one pass, so that a job of
 * many failed shards costs no shards x attempts. */
static int find_anchors(struct html *h, const struct es_jobview *r)
{
	size_t shown = 0;
	h->anchor = malloc((r->m.n_shards ? r->m.n_shards : 1) * sizeof(*h->anchor));
	if (!h->anchor)
		return h->rc = es_error(ES_ENOMEM, "out of memory making the report (links)");
	for (size_t k = 0; k < r->m.n_shards; k++)
		h->anchor[k] = -1;
	for (size_t i = 0; i < r->n_a && shown < max_failed_logs(h); i++) {
		const struct es_jv_attempt *a = &r->a[i];
		if (a->status != ES_JV_FAILED)
			continue;
		shown++;
		if (a->shard_index >= 0 && (size_t)a->shard_index < r->m.n_shards)
			h->anchor[a->shard_index] = (long)i;
	}
	return 0;
}

/* The name of shard k of the manifest, linked to the log tail of its last failed attempt when
 * one is shown. */
static void put_shard_link(struct html *h, const struct es_jobview *r, size_t k)
{
	long i = k < r->m.n_shards ? h->anchor[k] : -1;
	if (i >= 0)
		h_printf(h, "<a href=\"#fail-%ld\">", i);
	h_esc(h, r->st.shards[k].shard_id);
	if (i >= 0)
		h_adds(h, "</a>");
}

/* The first line of a shard's error, at most 200 bytes of it (cut between characters). */
static void put_first_line(struct html *h, const char *s)
{
	size_t n = strcspn(s, "\r\n");
	int cut = n > 200;
	if (cut) {
		n = 200;
		while (n && es_utf8_is_cont((unsigned char)s[n]))
			n--;
	}
	h_escn(h, s, n);
	if (cut)
		h_adds(h, "...");
}

/* Why a failed shard failed, in one line: the first line of its error, then the error line of
 * the log of its attempt a (-1: none) when that says more. */
static void put_reason(struct html *h, const struct es_jobview *r, const char *error, long a)
{
	char line[256] = "";
	struct es_buf p = ES_BUF_INIT;
	if (a >= 0 && !es_path_join(&p, r->a[a].dir, ES_ATTEMPT_LOG))
		es_fs_log_error_line(p.data, line, sizeof(line));
	es_buf_free(&p);
	const char *why = error ? error : a >= 0 ? why_of(&r->a[a]) : NULL;
	put_first_line(h, why ? why : "(no error recorded)");
	if (line[0] && !(why && strstr(why, line))) {
		h_adds(h, "; log: ");
		h_esc(h, line);
	}
}

/* The failed shards as list items, at most max of them, each linked to its log tail: with
 * reasons, the first line of its error and its log's error line (the banner); else its failed
 * record's last_error as it is (the Failed attempts section). Returns how many it listed. */
static size_t put_failed_shards(struct html *h, const struct es_jobview *r, size_t max, int reasons)
{
	size_t listed = 0;
	for (size_t i = 0; i < r->st.n_shards && listed < max; i++) {
		const struct es_shard_status *s = &r->st.shards[i];
		if (s->state != ES_SHARD_FAILED)
			continue;
		h_adds(h, "<li>");
		put_shard_link(h, r, i);
		h_adds(h, ": ");
		if (reasons)
			put_reason(h, r, s->error, h->anchor[i]);
		else
			h_esc(h, s->error ? s->error : "(no last_error in the failed record)");
		h_adds(h, "</li>\n");
		listed++;
	}
	return listed;
}

/* The first screen of a job with failed shards: a red banner that says so, and which shards
 * failed, why, and where their logs are. A complete job gets a green one. */
static void put_banner(struct html *h, const struct es_jobview *r)
{
	const struct es_status_counts *c = &r->st.counts;
	if (!c->failed) {
		if (r->st.complete)
			h_printf(h, "<div class=\"banner ok\" id=\"complete\">Job complete: all %lld shard(s) done</div>\n",
				 (long long)c->total);
		return;
	}
	h_printf(h, "<div class=\"banner bad\" id=\"failures\">Job %s: %lld failed shard(s)\n<ul>\n",
		 r->st.terminal ? "finished with failures" : "not finished, with failures so far", (long long)c->failed);
	size_t listed = put_failed_shards(h, r, 10, 1);
	if ((int64_t)listed < c->failed)
		h_printf(h, "<li>and %lld more (see Failed attempts below)</li>\n", (long long)(c->failed - (int64_t)listed));
	h_adds(h, "</ul></div>\n");
}

static void put_failures(struct html *h, const struct es_jobview *r)
{
	size_t maxn = max_failed_logs(h), shown = 0;
	h_printf(h, "<h2>Failed attempts (%zu)</h2>\n", r->by_status[ES_JV_FAILED]);
	if (r->st.counts.failed) {
		h_adds(h, "<p>Failed shards:</p>\n<ul>\n");
		put_failed_shards(h, r, SIZE_MAX, 0);
		h_adds(h, "</ul>\n");
	}
	if (!r->by_status[ES_JV_FAILED]) {
		h_adds(h, "<p>No failed attempt.</p>\n");
		return;
	}
	struct es_buf tail = ES_BUF_INIT;
	for (size_t i = 0; i < r->n_a && !h->rc; i++) {
		const struct es_jv_attempt *a = &r->a[i];
		if (a->status != ES_JV_FAILED)
			continue;
		if (shown++ < maxn)
			put_one_failure(h, r, i, &tail);
	}
	es_buf_free(&tail);
	if (shown > maxn)
		h_printf(h, "<p class=\"note\">%zu more failed attempts are not shown.</p>\n", shown - maxn);
}

static void put_page(struct html *h, const struct es_jobview *r, const double *durs, size_t n_durs)
{
	char now[48];
	fmt_time(r->now, now, sizeof(now));
	h_adds(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>eshard-mpi report: ");
	h_esc(h, r->m.job_id);
	h_adds(h, "</title>\n");
	put_style(h);
	h_adds(h, "</head>\n<body>\n<h1>eshard-mpi report: ");
	h_esc(h, r->m.job_id);
	h_adds(h, "</h1>\n<div class=\"sub\">");
	h_esc(h, r->m.job_dir);
	h_printf(h, " &middot; %lld shards &middot; made %s &middot; %s</div>\n", (long long)r->m.n_shards, now,
		 r->st.complete ? "complete" : r->st.terminal ? "finished with failures" : "not finished");
	if (find_anchors(h, r))
		return;
	put_banner(h, r);
	put_summary(h, r);
	put_hosts(h, r);
	put_timeline(h, r);
	put_throughput(h, r);
	put_histogram(h, r, durs, n_durs);
	put_skew(h, r);
	put_stragglers(h, r, n_durs);
	put_failures(h, r);
	h_adds(h, "</body>\n</html>\n");
}

/* ---------------- the entry points ---------------- */

int es_report_render(const char *job_dir, const struct es_report_opts *opts, struct es_buf *out,
		     struct es_report_info *info)
{
	static const struct es_report_opts defaults;
	const struct es_report_opts *o = opts ? opts : &defaults;
	struct es_jobview own, *v = o->view ? o->view : &own;
	int rc = o->view ? es_jobview_refresh(v, o->now) : es_jobview_load(job_dir, o->now, 0, v);
	if (!rc) {
		size_t n = 0;
		double *durs = es_jobview_done_durations(v, &n);
		if (!durs) {
			rc = es_error(ES_ENOMEM, "out of memory making the report (durations)");
		} else {
			struct html h = { out, 0, o, NULL };
			put_page(&h, v, durs, n);
			free(h.anchor);
			if (h.rc)
				rc = es_error(ES_ENOMEM, "out of memory writing the report of %s", v->m.job_dir);
		}
		free(durs);
	}
	if (!rc && info) {
		*info = (struct es_report_info){ v->n_a, v->n_h, v->n_w, v->n_ev, v->st.counts.total, v->st.counts.done,
						 v->st.counts.failed };
	}
	if (!o->view)
		es_jobview_free(v);
	return rc;
}

/* The output must not be a file the job needs (es_fs_check_output; resolved gets its path),
 * and must name a FIFO or character device (*stream: a pipe such as /dev/stdout, a terminal,
 * /dev/null), or a file in a folder that exists. */
static int check_output(const char *job_dir, const char *output, struct es_buf *resolved, int *stream)
{
	struct stat st;
	*stream = 0;
	if (!output || !*output)
		return es_error(ES_EUSAGE, "the report needs an output file name");
	int rc = es_fs_check_output(output, job_dir, ES_REPORT_NAME, resolved);
	if (rc)
		return rc;
	/* The name as given, links followed: /dev/stdout is a link to /proc/self/fd/1, whose
	 * target, for a pipe, is no path at all ("pipe:[123]"). */
	if (stat(output, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
		*stream = 1;
		return 0;
	}
	if (output[strlen(output) - 1] == '/' || (stat(resolved->data, &st) == 0 && S_ISDIR(st.st_mode)))
		return es_error(ES_EUSAGE, "Report output is a folder: %s (give the name of an .html file)", output);
	const char *slash = strrchr(resolved->data, '/');
	struct es_buf dir = ES_BUF_INIT;
	rc = es_buf_add(&dir, resolved->data, slash == resolved->data ? 1 : (size_t)(slash - resolved->data));
	if (!rc && !(stat(dir.data, &st) == 0 && S_ISDIR(st.st_mode)))
		rc = es_error(ES_EUSAGE, "Report output folder does not exist: %s", dir.data);
	es_buf_free(&dir);
	return rc;
}

/* A stream has no folder to hold a temporary that a rename would publish: write it as it is. */
static int write_stream(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	int rc = es_fs_write_all(fd, data, len, path);
	if (close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", path);
	return rc;
}

int es_report_write(const char *job_dir, const char *output, const struct es_report_opts *opts,
		    struct es_report_info *info)
{
	struct es_buf html = ES_BUF_INIT, path = ES_BUF_INIT;
	int stream;
	int rc = check_output(job_dir, output, &path, &stream);
	if (!rc)
		rc = es_report_render(job_dir, opts, &html, info);
	if (!rc)
		rc = stream ? write_stream(output, html.data, html.len) : es_fs_write_atomic(path.data, html.data, html.len);
	es_buf_free(&html);
	es_buf_free(&path);
	return rc;
}
