/*
 * ray_head_driver: plays one rank's part of --ray-mode per-rank for tests/dj/test_ray_head.sh.
 *
 *   ray_head_driver --ray RAY --rank R --ranks N --dir D [--base B] [--port-base P] [--crash]
 *
 * Starts a head (es_ray_head_start), writes D/info (key=value lines, atomically) and then
 * waits until D/stop exists. Then it writes D/result with what es_ray_head_alive() said just
 * before stopping, the stop's return code and time, a second (idempotent) stop's return code,
 * and the head's process count afterwards. With --crash it _exit()s right after D/info, to
 * play a rank that died without stopping its head. Exit status: 0, or 2 when start failed
 * (the message is on stderr and in D/error).
 */
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/ray.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_kv(const char *dir, const char *name, struct es_buf *b)
{
	struct es_buf path = ES_BUF_INIT;
	int rc = es_path_join(&path, dir, name);
	if (!rc)
		rc = es_fs_write_atomic(path.data, b->data, b->len);
	es_buf_free(&path);
	return rc;
}

static int parse_int(const char *s, int *out)
{
	int64_t v;
	if (es_parse_i64(s, &v) != 0 || v < 0 || v > 1000000)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	struct es_ray_opts o = { 0 };
	const char *dir = NULL;
	int crash = 0;
	o.ranks_on_host = 1;
	o.start_timeout_secs = 180;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--crash")) {
			crash = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "ray_head_driver: %s needs a value\n", a);
			return 2;
		}
		i++;
		int bad = 0;
		if (!strcmp(a, "--ray"))
			o.ray_exe = v;
		else if (!strcmp(a, "--base"))
			o.base_dir = v;
		else if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--rank"))
			bad = parse_int(v, &o.rank_on_host);
		else if (!strcmp(a, "--ranks"))
			bad = parse_int(v, &o.ranks_on_host);
		else if (!strcmp(a, "--port-base"))
			bad = parse_int(v, &o.port_base);
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "ray_head_driver: bad option %s %s\n", a, v);
			return 2;
		}
	}
	if (!dir) {
		fprintf(stderr, "ray_head_driver: --dir is required\n");
		return 2;
	}

	struct es_ray_head h;
	struct es_buf b = ES_BUF_INIT;
	double t0 = es_time_mono();
	if (es_ray_head_start(&o, &h) != 0) {
		es_buf_printf(&b, "%s\n", es_last_error());
		write_kv(dir, "error", &b);
		es_buf_free(&b);
		return 2;
	}
	es_buf_printf(&b, "address=%s\npgid=%d\nport=%d\nblock=%d\ntemp_dir=%s\ntoken=%s\nnum_cpus=%d\n"
		      "num_gpus=%d\nobject_store_bytes=%lld\nalive=%d\ncount=%d\nstart_secs=%.2f\nwatchdog=%d\n",
		      h.address, (int)h.pgid, h.port, h.port_block, h.temp_dir, h.token, h.num_cpus, h.num_gpus,
		      h.object_store_bytes, es_ray_head_alive(&h), es_ray_head_count(&h), es_time_mono() - t0,
		      (int)h.watchdog_pid);
	if (write_kv(dir, "info", &b) != 0) {
		es_buf_free(&b);
		return 2;
	}
	if (crash)
		_exit(0);

	struct es_buf stop = ES_BUF_INIT;
	es_path_join(&stop, dir, "stop");
	double deadline = es_time_mono() + 600;
	while (access(stop.data, F_OK) != 0 && es_time_mono() < deadline)
		es_sleep(0.1);

	int alive = es_ray_head_alive(&h);
	t0 = es_time_mono();
	int rc1 = es_ray_head_stop(&h);
	double secs = es_time_mono() - t0;
	int rc2 = es_ray_head_stop(&h);
	es_buf_reset(&b);
	es_buf_printf(&b, "alive_before_stop=%d\nstop_rc=%d\nstop_secs=%.2f\nstop2_rc=%d\nalive_after_stop=%d\n"
		      "count_after_stop=%d\n",
		      alive, rc1, secs, rc2, es_ray_head_alive(&h), es_ray_head_count(&h));
	int rc = write_kv(dir, "result", &b);
	es_buf_free(&b);
	es_buf_free(&stop);
	return rc ? 2 : 0;
}
