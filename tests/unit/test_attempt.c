/*
 * Unit tests of attempt: the processor argv (Data-Juicer in its three forms, command
 * templates), the environment a real child sees, start failures, and supervision with real
 * processes: a SIGKILLed worker, a
 * stop flag, a timeout, ticks and an abort through tick(); the processor's output through the
 * supervisor's pipe into process.log.
 *
 * This binary is its own supervisor: run as "test_attempt __supervise ...", it calls
 * es_attempt_supervise_main() like eshard-mpi does. ESHARD_BIN, when set, is used instead,
 * which tests the real binary's wiring.
 */
#include "testlib.h"

#include "eshard/attempt.h"
#include "eshard/buf.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/materialize.h"
#include "eshard/sha.h"
#include "eshard/template.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char RT[PATH_MAX];      /* the test folder, symlinks resolved */
static char J[PATH_MAX];       /* the job folder */
static char INPUT[PATH_MAX];   /* J/shards/<id>.jsonl */
static char SUP[PATH_MAX];     /* the supervisor executable */
static const char *SHARD = "part-00000-of-00001";
static int attempt_no;

static const char *INPUT_TEXT = "{\"text\":\"a\"}\n{\"text\":\"b\",\"n\":2}\n";

/* snprintf that may truncate (every buffer here is far larger than the test's paths). */
static void sfmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

/* The whole file as a malloc'd string ("" when missing). */
static char *slurp(const char *path)
{
	struct es_buf b = ES_BUF_INIT;
	es_log_quiet_begin();
	es_fs_read_file(path, &b, 0);
	es_log_quiet_end();
	char *s = strdup(b.data);
	es_buf_free(&b);
	return s;
}

static void mkdirs(const char *path)
{
	if (es_fs_mkdirs(path, 0755) != 0)
		exit(1);
}

static const char *pathf(char *out, const char *fmt, const char *a, const char *b)
{
	sfmt(out, PATH_MAX, fmt, a, b);
	return out;
}

/* A fresh attempt folder A with its token. */
static void new_attempt(char A[PATH_MAX], char tok[33])
{
	es_fs_token(tok);
	sfmt(A, PATH_MAX, "%s/attempts/%s/%04d-%s", J, SHARD, ++attempt_no, tok);
	mkdirs(A);
}

static void spec_init(struct es_attempt_spec *s, struct es_processor *p, const char *A, const char *tok)
{
	memset(s, 0, sizeof(*s));
	s->job_dir = J;
	s->job_id = "job";
	s->shard_id = SHARD;
	s->input_path = INPUT;
	s->attempt_dir = A;
	s->token = tok;
	s->proc = p;
	s->ray_address = "local";
	s->supervisor_exe = SUP;
	s->grace_secs = 1;
	s->tick_secs = 0.1;
}

static char *join_lines(char **v)
{
	struct es_buf b = ES_BUF_INIT;
	for (; *v; v++) {
		es_buf_adds(&b, *v);
		es_buf_addc(&b, '\n');
	}
	return es_buf_detach(&b, NULL);
}

/* The reference's option list after the program words, as one line per word. */
static char *dj_options(const char *A, const char *tok, const char *addr)
{
	struct es_buf b = ES_BUF_INIT;
	es_buf_printf(&b,
		      "--config\n%s/recipe.yaml\n--dataset_path\n%s\n--export_path\n%s/ray-output.jsonl\n"
		      "--executor_type\nray\n--ray_address\n%s\n--work_dir\n%s/work\n--job_id\njob_%s_%.12s\n"
		      "--event_log_dir\n%s/logs\n--checkpoint_dir\n%s/checkpoints\n--partition_dir\n%s/partitions\n",
		      J, INPUT, A, addr, A, SHARD, tok, A, A, A);
	return es_buf_detach(&b, NULL);
}

static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return 1;
	return 0;
}

static int has_key(const char *env, const char *key)
{
	char k[256];
	sfmt(k, sizeof(k), "%s=", key);
	size_t n = strlen(k);
	for (const char *p = env; p && *p;) {
		if (!strncmp(p, k, n))
			return 1;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

static int has_prefix_key(const char *env, const char *prefix)
{
	size_t n = strlen(prefix);
	for (const char *p = env; p && *p;) {
		if (!strncmp(p, prefix, n))
			return 1;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

/* ---- processes ---- */

/* 1 while pid exists and is not a zombie. */
static int pid_alive(long pid)
{
	char path[64], buf[512];
	sfmt(path, sizeof(path), "/proc/%ld/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* Live processes in process group pgid. */
static int group_alive(long pgid)
{
	int count = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char path[300], buf[512];
		sfmt(path, sizeof(path), "/proc/%s/stat", e->d_name);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		char *rp = strrchr(buf, ')');
		char state;
		long ppid, pgrp;
		if (rp && sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 && pgrp == pgid &&
		    state != 'Z' && state != 'X')
			count++;
	}
	if (d)
		closedir(d);
	return count;
}

static long read_pid(const char *path)
{
	char *s = slurp(path);
	long v = strtol(s, NULL, 10);
	free(s);
	return v;
}

static int wait_for_file(const char *path, double secs)
{
	double end = es_time_mono() + secs;
	while (es_time_mono() < end) {
		struct stat st;
		if (stat(path, &st) == 0 && st.st_size > 0)
			return 1;
		es_sleep(0.02);
	}
	return 0;
}

/* ---- argv ---- */

static void test_argv_dj(void)
{
	char A[PATH_MAX], tok[33], **argv, *cwd, *got, *opts, want[8192];
	size_t argc;
	struct es_processor p = { .kind = ES_PROC_DATA_JUICER };
	struct es_attempt_spec s;
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);

	/* Default: dj-process from PATH. */
	opts = dj_options(A, tok, "local");
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	got = join_lines(argv);
	sfmt(want, sizeof(want), "dj-process\n%s", opts);
	CHECK_STR_EQ(got, want);
	CHECK_INT_EQ((int)argc, 21);
	CHECK(cwd == NULL);
	free(got);
	es_argv_free(argv);
	free(opts);

	/* --dj-process: split on blanks; the effective address goes in. */
	p.dj_process = "python  -m\tdata_juicer.tools.process_data ";
	s.ray_address = "ray://head:10001";
	opts = dj_options(A, tok, "ray://head:10001");
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	got = join_lines(argv);
	sfmt(want, sizeof(want), "python\n-m\ndata_juicer.tools.process_data\n%s", opts);
	CHECK_STR_EQ(got, want);
	CHECK(cwd == NULL);
	free(got);
	es_argv_free(argv);
	free(opts);

	p.dj_process = "   ";
	es_log_quiet_begin();
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), ES_EINVAL);
	es_log_quiet_end();
	p.dj_process = NULL;

	/* --dj-root: <python> DIR/tools/process_data.py, cwd DIR (resolved). */
	char root[PATH_MAX], rel[PATH_MAX];
	pathf(root, "%s/%s", RT, "djroot");
	p.dj_root = root;
	p.python = "/usr/bin/python3.11";
	s.ray_address = "local";
	opts = dj_options(A, tok, "local");
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	got = join_lines(argv);
	sfmt(want, sizeof(want), "/usr/bin/python3.11\n%s/tools/process_data.py\n%s", root, opts);
	CHECK_STR_EQ(got, want);
	CHECK_STR_EQ(cwd, root);
	free(got);
	free(cwd);
	es_argv_free(argv);
	/* A relative root with a ".." is made absolute, and python defaults to python3. */
	pathf(rel, "%s/%s", RT, "djroot/tools/../../djroot");
	p.dj_root = rel;
	p.python = NULL;
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	CHECK_STR_EQ(argv[0], "python3");
	CHECK_STR_EQ(cwd, root);
	free(cwd);
	es_argv_free(argv);
	free(opts);
}

static void test_argv_command(void)
{
	char A[PATH_MAX], tok[33], **argv, *cwd, *got, want[8192];
	size_t argc;
	struct es_processor p = { .kind = ES_PROC_COMMAND };
	struct es_attempt_spec s;
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);

	p.command = "my-prog --in {input} --out \"{output}\" 'a b' \"x\\\"y\\\\z\\n\" c\\ d '' "
		    "{{lit}} pre{shard_id}post {job_dir}/x {attempt_dir} 'it''s' \"\" 'k\\q'";
	CHECK_INT_EQ(es_template_check(p.command), 0);
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	got = join_lines(argv);
	sfmt(want, sizeof(want),
		 "my-prog\n--in\n%s\n--out\n%s/ray-output.jsonl\na b\nx\"y\\z\\n\nc d\n\n{lit}\npre%spost\n"
		 "%s/x\n%s\nits\n\nk\\q\n",
		 INPUT, A, SHARD, J, A);
	CHECK_STR_EQ(got, want);
	CHECK_INT_EQ((int)argc, 16);
	CHECK(cwd == NULL);
	free(got);
	es_argv_free(argv);

	/* A value with blanks stays one word: the split happens before the substitution. */
	char spaced[PATH_MAX];
	pathf(spaced, "%s/%s", J, "shards/with space.jsonl");
	s.input_path = spaced;
	p.command = "cat {input}";
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), 0);
	CHECK_INT_EQ((int)argc, 2);
	CHECK_STR_EQ(argv[1], spaced);
	es_argv_free(argv);
	s.input_path = INPUT;

	/* At run time a bad template is bad job state, not a usage error. */
	p.command = "prog {nope}";
	es_log_quiet_begin();
	CHECK_INT_EQ(es_attempt_argv(&s, &argv, &argc, &cwd), ES_EINVAL);
	es_log_quiet_end();
}

/* ---- the child's environment and start-up, with real processes ---- */

static const char *FAKE_DJ =
	"A=$(dirname \"$DJ_PRODUCED_DATA_DIR\")\n"
	"env > \"$A/env.txt\"\n"
	"pwd > \"$A/pwd.txt\"\n"
	"for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$A/args.txt\"\n"
	"for f in 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$f ] && echo $f; done > \"$A/fds.txt\"\n"
	"o=$(readlink /proc/$$/fd/1) e=$(readlink /proc/$$/fd/2)\n"
	"printf '%s\\n%s\\n' \"$o\" \"$e\" > \"$A/stdio.txt\"\n"
	"echo 'hello stdout'\n"
	"echo 'hello stderr' >&2\n"
	"exit ${FAKE_EXIT:-0}\n";

static void set_launcher_env(void)
{
	static const char *vars[] = {
		"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "PMIX_RANK=1", "PMI_RANK=1",
		"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_JOB_ID=42", "SLURM_LOCALID=0",
		"SLURMD_NODENAME=n1", "WORLD_SIZE=4", "RANK=1", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
		"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "DJ_ELASTIC_RUN_ID=r1",
		"DJ_ELASTIC_SHARD_CHILD=0", "PAI_JOB_ID=p1", "DLC_JOB_ID=d1", "JOB_ID=j1",
		"RAY_ADDRESS=ray://stale:1", "KEEP_ME=yes", "OMPI=not-a-prefix-match",
		"RANKING=kept", "PYTHONPATH=/old/pp",
	};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		char k[64];
		const char *eq = strchr(vars[i], '=');
		sfmt(k, sizeof(k), "%.*s", (int)(eq - vars[i]), vars[i]);
		setenv(k, eq + 1, 1);
	}
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HF_HOME");
}

static void check_clean_env(const char *env)
{
	static const char *gone_prefixes[] = { "OMPI_", "PMIX_", "PMI_", "SLURM_", "SLURMD_", "MASTER_" };
	for (size_t i = 0; i < sizeof(gone_prefixes) / sizeof(gone_prefixes[0]); i++)
		CHECK(!has_prefix_key(env, gone_prefixes[i]));
	static const char *gone[] = { "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
				      "DJ_ELASTIC_RUN_ID", "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID" };
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
		CHECK(!has_key(env, gone[i]));
	CHECK(has_line(env, "DJ_ELASTIC_SHARD_CHILD=1"));
	CHECK(!has_line(env, "DJ_ELASTIC_SHARD_CHILD=0"));
	CHECK(has_line(env, "KEEP_ME=yes"));
	CHECK(has_line(env, "OMPI=not-a-prefix-match"));
	CHECK(has_line(env, "RANKING=kept"));
}

static void test_env_dj_process(void)
{
	char A[PATH_MAX], tok[33], fake[PATH_MAX], cmd[PATH_MAX + 8], buf[PATH_MAX * 2];
	struct es_processor p = { .kind = ES_PROC_DATA_JUICER };
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	pathf(fake, "%s/%s", RT, "fake_dj.sh");
	write_file(fake, FAKE_DJ);
	sfmt(cmd, sizeof(cmd), "sh %s", fake);
	p.dj_process = cmd;
	set_launcher_env();

	/* A descriptor the worker leaked (not close-on-exec, as an MPI library may leave one)
	 * must not reach the child. */
	int leak = open("/dev/null", O_RDONLY);
	CHECK(leak >= 0 && dup2(leak, 7) == 7);
	close(leak);

	/* "local": no RAY_ADDRESS at all; caches under J/cache; PYTHONPATH untouched. */
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	write_file(pathf(buf, "%s/%s", A, "process.log"), "old content that must be truncated\n");
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 1);
	CHECK_INT_EQ(o.return_code, 0);
	CHECK_INT_EQ(o.timed_out + o.preempted + o.aborted, 0);
	CHECK(o.duration_secs > 0 && o.duration_secs < 10);
	/* Data-Juicer writes process.log itself, not through the supervisor's pipe (its threads'
	 * writes are bigger than a pipe keeps whole: supervise.c, open_output). */
	struct stat wst;
	CHECK(stat(pathf(buf, "%s/%s", A, "work"), &wst) == 0 && S_ISDIR(wst.st_mode)); /* Data-Juicer's */
	char *stdio = slurp(pathf(buf, "%s/%s", A, "stdio.txt"));
	char want[PATH_MAX * 3];
	sfmt(want, sizeof(want), "%s/process.log\n%s/process.log\n", A, A);
	CHECK_STR_EQ(stdio, want);
	free(stdio);
	char *env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	check_clean_env(env);
	CHECK(!has_key(env, "RAY_ADDRESS"));
	CHECK(has_line(env, pathf(buf, "DJ_PRODUCED_DATA_DIR=%s/%s", A, "produced")));
	CHECK(has_line(env, pathf(buf, "XDG_CACHE_HOME=%s/%s", J, "cache")));
	CHECK(has_line(env, pathf(buf, "HF_HOME=%s/%s", J, "cache/huggingface")));
	CHECK(has_line(env, "PYTHONPATH=/old/pp"));
	CHECK(!has_key(env, "ESHARD_SHARD_ID"));
	free(env);
	/* What the child got is exactly the recorded argv, after "sh <script>". */
	char *args = slurp(pathf(buf, "%s/%s", A, "args.txt"));
	char *opts = dj_options(A, tok, "local");
	CHECK_STR_EQ(args, opts);
	free(args);
	free(opts);
	char *log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK_STR_EQ(log, "hello stdout\nhello stderr\n");
	free(log);
	char *fds = slurp(pathf(buf, "%s/%s", A, "fds.txt"));
	CHECK_STR_EQ(fds, "");
	free(fds);
	close(7);
	struct stat st;
	sfmt(buf, sizeof(buf), "%s/work/job_%s_%.12s", A, SHARD, tok);
	CHECK(stat(buf, &st) == 0 && S_ISDIR(st.st_mode));
	char here[PATH_MAX];
	CHECK(getcwd(here, sizeof(here)) != NULL);
	char *pwd = slurp(pathf(buf, "%s/%s", A, "pwd.txt"));
	sfmt(buf, sizeof(buf), "%s\n", here);
	CHECK_STR_EQ(pwd, buf);
	free(pwd);

	/* Another address is passed on; a set XDG_CACHE_HOME is kept and HF_HOME follows it;
	 * an already set HF_HOME is kept as it is. */
	setenv("XDG_CACHE_HOME", "/x/cache", 1);
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	s.ray_address = "ray://head:10001";
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, 0);
	env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	CHECK(has_line(env, "RAY_ADDRESS=ray://head:10001"));
	CHECK(has_line(env, "XDG_CACHE_HOME=/x/cache"));
	CHECK(has_line(env, "HF_HOME=/x/cache/huggingface"));
	free(env);
	setenv("HF_HOME", "/hf", 1);
	setenv("XDG_CACHE_HOME", "", 1);
	char **ev;
	CHECK_INT_EQ(es_attempt_env(&s, NULL, &ev), 0);
	env = join_lines(ev);
	CHECK(has_line(env, "HF_HOME=/hf"));
	CHECK(has_line(env, "XDG_CACHE_HOME="));   /* set but empty counts as set, like setdefault */
	free(env);
	es_argv_free(ev);
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HF_HOME");

	/* Exit codes and signals come back like Python's returncode. */
	setenv("FAKE_EXIT", "3", 1);
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 1);
	CHECK_INT_EQ(o.return_code, 3);
	unsetenv("FAKE_EXIT");
	sfmt(cmd, sizeof(cmd), "sh -c kill${IFS}-TERM${IFS}$$");
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, -SIGTERM);
}

static void test_env_dj_root(void)
{
	char A[PATH_MAX], tok[33], root[PATH_MAX], buf[PATH_MAX * 2];
	struct es_processor p = { .kind = ES_PROC_DATA_JUICER, .python = "/bin/sh" };
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	pathf(root, "%s/%s", RT, "djroot");
	mkdirs(pathf(buf, "%s/%s", root, "tools"));
	write_file(pathf(buf, "%s/%s", root, "tools/process_data.py"), FAKE_DJ);
	p.dj_root = root;
	set_launcher_env();

	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, 0);
	char *env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	check_clean_env(env);
	CHECK(has_line(env, pathf(buf, "PYTHONPATH=%s:%s", root, "/old/pp")));
	free(env);
	char *pwd = slurp(pathf(buf, "%s/%s", A, "pwd.txt"));
	sfmt(buf, sizeof(buf), "%s\n", root);
	CHECK_STR_EQ(pwd, buf);
	free(pwd);

	/* An empty PYTHONPATH gives just the root. */
	setenv("PYTHONPATH", "", 1);
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	CHECK(has_line(env, pathf(buf, "PYTHONPATH=%s%s", root, "")));
	free(env);
	unsetenv("PYTHONPATH");
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	CHECK(has_line(env, pathf(buf, "PYTHONPATH=%s%s", root, "")));
	free(env);
	setenv("PYTHONPATH", "/old/pp", 1);
}

static void test_command_processor(void)
{
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2], buf[PATH_MAX * 2];
	struct es_processor p = { .kind = ES_PROC_COMMAND };
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	pathf(script, "%s/%s", RT, "copy.sh");
	write_file(script, "env > \"$ESHARD_ATTEMPT_DIR/env.txt\"\ncp \"$1\" \"$2\"\necho copied\n");
	sfmt(tmpl, sizeof(tmpl), "sh '%s' {input} {output}", script);
	CHECK_INT_EQ(es_template_check(tmpl), 0);
	p.command = tmpl;
	set_launcher_env();

	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 1);
	CHECK_INT_EQ(o.return_code, 0);
	char *env = slurp(pathf(buf, "%s/%s", A, "env.txt"));
	check_clean_env(env);
	CHECK(has_line(env, pathf(buf, "ESHARD_SHARD_ID=%s%s", SHARD, "")));
	CHECK(has_line(env, pathf(buf, "ESHARD_ATTEMPT_DIR=%s%s", A, "")));
	free(env);
	/* The copy is a file export: it materializes to the input's bytes. */
	struct es_materialized m;
	CHECK_INT_EQ(es_materialize(J, A, NULL, &m), 0);
	char *out = slurp(pathf(buf, "%s/%s", A, "processed.jsonl"));
	CHECK_STR_EQ(out, INPUT_TEXT);
	free(out);
	CHECK_INT_EQ((int)m.n_files, 1);
	sfmt(buf, sizeof(buf), "attempts/%s/%04d-%s/ray-output.jsonl", SHARD, attempt_no, tok);
	CHECK_STR_EQ(m.files[0].path, buf);
	CHECK_INT_EQ((int)m.rows, 2);
	es_materialized_free(&m);
}

static void test_start_failures(void)
{
	char A[PATH_MAX], tok[33], buf[PATH_MAX * 2], want[PATH_MAX * 2];
	struct es_processor p = { .kind = ES_PROC_DATA_JUICER, .dj_process = "/nonexistent/dj-process" };
	struct es_attempt_spec s;
	struct es_attempt_outcome o;

	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 0);
	CHECK_INT_EQ(o.return_code, -1);
	CHECK_STR_EQ(o.start_error, "[Errno 2] No such file or directory: '/nonexistent/dj-process'");
	char *log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK_STR_EQ(log, "\nUnable to start Data-Juicer: [Errno 2] No such file or directory: "
			  "'/nonexistent/dj-process'\n");
	free(log);
	/* The work folder is made before the start, even when the start fails. */
	struct stat st;
	sfmt(buf, sizeof(buf), "%s/work/job_%s_%.12s", A, SHARD, tok);
	CHECK(stat(buf, &st) == 0 && S_ISDIR(st.st_mode));

	/* A missing --dj-root fails in chdir, and Python names the folder. */
	char root[PATH_MAX];
	pathf(root, "%s/%s", RT, "no-such-root");
	struct es_processor r = { .kind = ES_PROC_DATA_JUICER, .dj_root = root, .python = "/bin/sh" };
	new_attempt(A, tok);
	spec_init(&s, &r, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 0);
	sfmt(want, sizeof(want), "[Errno 2] No such file or directory: '%s'", root);
	CHECK_STR_EQ(o.start_error, want);

	/* A command processor says "processor". */
	struct es_processor c = { .kind = ES_PROC_COMMAND, .command = "/nonexistent/prog {input} {output}" };
	new_attempt(A, tok);
	spec_init(&s, &c, A, tok);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, -1);
	log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK_STR_EQ(log, "\nUnable to start processor: [Errno 2] No such file or directory: "
			  "'/nonexistent/prog'\n");
	free(log);

	/* No supervisor: the same kind of failure, naming the supervisor. */
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	s.supervisor_exe = "/nonexistent/eshard-mpi";
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 0);
	CHECK_INT_EQ(o.return_code, -1);
	CHECK_STR_EQ(o.start_error, "[Errno 2] No such file or directory: '/nonexistent/eshard-mpi'");

	/* A supervisor that does not know __supervise (here: /bin/false) is a start failure. */
	new_attempt(A, tok);
	spec_init(&s, &p, A, tok);
	s.supervisor_exe = "/bin/false";
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 0);
	CHECK(strstr(o.start_error, "exited with status 1 before starting it") != NULL);

	/* A setup failure (the attempt folder is a file) is an error, not an outcome. */
	char bad[PATH_MAX];
	pathf(bad, "%s/%s", RT, "not-a-folder");
	write_file(bad, "x");
	spec_init(&s, &p, bad, tok);
	es_log_quiet_begin();
	CHECK(es_attempt_run(&s, &o) < 0);
	es_log_quiet_end();
}

/* ---- supervision ---- */

/* The child writes its pid, starts a grandchild in a new session that writes its own pid,
 * then waits. With ignore_term, both ignore SIGTERM so that only SIGKILL ends them. */
static void write_tree_script(const char *path, int ignore_term)
{
	char text[1024];
	sfmt(text, sizeof(text),
		 "%s"
		 "setsid sh -c 'echo $$ > \"$0.tmp\"; mv \"$0.tmp\" \"$0\"; exec sleep 1000' \"$ESHARD_ATTEMPT_DIR/gc.pid\" &\n"
		 "echo $$ > \"$ESHARD_ATTEMPT_DIR/child.pid.tmp\"\n"
		 "mv \"$ESHARD_ATTEMPT_DIR/child.pid.tmp\" \"$ESHARD_ATTEMPT_DIR/child.pid\"\n"
		 "sleep 1000\n",
		 ignore_term ? "trap '' TERM\n" : "");
	write_file(path, text);
}

static void tree_spec(struct es_attempt_spec *s, struct es_processor *p, char A[PATH_MAX], char tok[33],
		      char *tmpl, const char *script)
{
	sfmt(tmpl, PATH_MAX * 2, "sh %s {input} {output}", script);
	p->kind = ES_PROC_COMMAND;
	p->command = tmpl;
	new_attempt(A, tok);
	spec_init(s, p, A, tok);
}

/* Both pids of the tree, once the script wrote them. */
static int tree_pids(const char *A, long *child, long *gc)
{
	char buf[PATH_MAX * 2];
	if (!wait_for_file(pathf(buf, "%s/%s", A, "child.pid"), 10) ||
	    !wait_for_file(pathf(buf, "%s/%s", A, "gc.pid"), 10))
		return 0;
	*child = read_pid(pathf(buf, "%s/%s", A, "child.pid"));
	*gc = read_pid(pathf(buf, "%s/%s", A, "gc.pid"));
	return *child > 0 && *gc > 0;
}

static int tree_gone(long child, long gc, double secs)
{
	double end = es_time_mono() + secs;
	do {
		if (!pid_alive(child) && !pid_alive(gc) && group_alive(child) == 0)
			return 1;
		es_sleep(0.05);
	} while (es_time_mono() < end);
	return 0;
}

static void test_worker_sigkill(void)
{
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2];
	struct es_processor p;
	struct es_attempt_spec s;
	pathf(script, "%s/%s", RT, "tree.sh");
	write_tree_script(script, 1);
	tree_spec(&s, &p, A, tok, tmpl, script);

	/* The worker side runs in a forked test process (single-threaded, no MPI here). */
	fflush(NULL);
	pid_t worker = fork();
	if (worker == 0) {
		struct es_attempt_outcome o;
		es_attempt_run(&s, &o);
		_exit(0);
	}
	CHECK(worker > 0);
	long child = 0, gc = 0;
	CHECK(tree_pids(A, &child, &gc));
	CHECK(pid_alive(child) && pid_alive(gc));
	double t0 = es_time_mono();
	kill(worker, SIGKILL);
	int st;
	waitpid(worker, &st, 0);
	/* Grace is 1 s and both ignore SIGTERM: gone within a couple of seconds, by SIGKILL. */
	CHECK(tree_gone(child, gc, 5));
	double took = es_time_mono() - t0;
	CHECK(took >= 0.9 && took < 5);
	char buf[PATH_MAX * 2];
	char *log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK(strstr(log, "stopping the processor: the worker is gone") != NULL);
	free(log);
}

static volatile sig_atomic_t stop_now;
static int ticks;

/* 1 once the tree script of attempt folder A has written both pids. */
static int tree_up(const char *A)
{
	char buf[PATH_MAX * 2];
	struct stat st;
	return stat(pathf(buf, "%s/%s", A, "child.pid"), &st) == 0 &&
	       stat(pathf(buf, "%s/%s", A, "gc.pid"), &st) == 0;
}

static int tick_count(void *arg)
{
	(void)arg;
	ticks++;
	return 0;
}

/* Set the stop flag from the third tick on, once the tree is up (as a signal handler would). */
static int tick_then_stop(void *arg)
{
	if (++ticks >= 3 && tree_up(arg))
		stop_now = 1;
	return 0;
}

/* Report a lost lease from the third tick on, once the tree is up. */
static int tick_abort(void *arg)
{
	return ++ticks >= 3 && tree_up(arg);
}

static void test_stop_flag(void)
{
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2], buf[PATH_MAX * 2];
	struct es_processor p;
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	long child, gc;

	/* A child that obeys SIGTERM: preempted, ended by SIGTERM, the whole tree gone on return
	 * (the setsid() grandchild included). */
	pathf(script, "%s/%s", RT, "tree-term.sh");
	write_tree_script(script, 0);
	tree_spec(&s, &p, A, tok, tmpl, script);
	stop_now = 0;
	ticks = 0;
	s.stop_flag = &stop_now;
	s.tick = tick_then_stop;
	s.tick_arg = A;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.started, 1);
	CHECK_INT_EQ(o.preempted, 1);
	CHECK_INT_EQ(o.timed_out + o.aborted, 0);
	CHECK_INT_EQ(o.return_code, -SIGTERM);
	CHECK(o.duration_secs < 5);
	CHECK(tree_pids(A, &child, &gc));
	CHECK(tree_gone(child, gc, 0));
	char *log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK(strstr(log, "stopping the processor: the worker asked") != NULL);
	free(log);

	/* A child that ignores SIGTERM gets SIGKILL after the grace period. */
	pathf(script, "%s/%s", RT, "tree-ignore.sh");
	write_tree_script(script, 1);
	tree_spec(&s, &p, A, tok, tmpl, script);
	stop_now = 0;
	ticks = 0;
	s.stop_flag = &stop_now;
	s.tick = tick_then_stop;
	s.tick_arg = A;
	s.grace_secs = 0.5;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.preempted, 1);
	CHECK_INT_EQ(o.return_code, -SIGKILL);
	CHECK(o.duration_secs >= 0.7 && o.duration_secs < 5);
	CHECK(tree_pids(A, &child, &gc));
	CHECK(tree_gone(child, gc, 0));

	/* A stop flag that is already set stops at once. */
	pathf(script, "%s/%s", RT, "tree-term.sh");
	tree_spec(&s, &p, A, tok, tmpl, script);
	stop_now = 1;
	s.stop_flag = &stop_now;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.preempted, 1);
	CHECK(o.duration_secs < 5);
	stop_now = 0;
}

static void test_timeout_and_ticks(void)
{
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2];
	struct es_processor p;
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	long child, gc;

	/* Timeout: stopped by the supervisor, reported as timed out. (Long enough for the tree
	 * to be up even on a loaded machine.) */
	pathf(script, "%s/%s", RT, "tree-term.sh");
	tree_spec(&s, &p, A, tok, tmpl, script);
	s.timeout_secs = 1.5;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.timed_out, 1);
	CHECK_INT_EQ(o.preempted + o.aborted, 0);
	CHECK_INT_EQ(o.return_code, -SIGTERM);
	CHECK(o.duration_secs >= 1.5 && o.duration_secs < 5);
	CHECK(tree_pids(A, &child, &gc));
	CHECK(tree_gone(child, gc, 0));

	/* Ticks come about every tick_secs while the child runs. */
	struct es_processor q = { .kind = ES_PROC_COMMAND, .command = "sh -c 'sleep 1' {input} {output}" };
	new_attempt(A, tok);
	spec_init(&s, &q, A, tok);
	ticks = 0;
	s.tick = tick_count;
	s.tick_secs = 0.1;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, 0);
	CHECK(ticks >= 6 && ticks <= (int)(o.duration_secs / 0.1) + 1);

	/* A nonzero tick (a lost lease) aborts. */
	tree_spec(&s, &p, A, tok, tmpl, script);
	ticks = 0;
	s.tick = tick_abort;
	s.tick_arg = A;
	s.tick_secs = 0.1;
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.aborted, 1);
	CHECK_INT_EQ(o.preempted + o.timed_out, 0);
	CHECK(ticks >= 3);
	CHECK(o.return_code < 0);
	CHECK(tree_pids(A, &child, &gc));
	CHECK(tree_gone(child, gc, 0));
}

static void test_leftovers_after_exit(void)
{
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2], buf[PATH_MAX * 2];
	struct es_processor p;
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
	/* The child exits 0 at once but leaves a setsid() daemon: the exit code is kept and the
	 * daemon does not outlive the attempt. */
	pathf(script, "%s/%s", RT, "leave.sh");
	write_file(script,
		   "setsid sh -c 'echo $$ > \"$0.tmp\"; mv \"$0.tmp\" \"$0\"; exec sleep 1000' \"$ESHARD_ATTEMPT_DIR/gc.pid\" &\n"
		   "while [ ! -s \"$ESHARD_ATTEMPT_DIR/gc.pid\" ]; do sleep 0.05; done\n"
		   "exit 0\n");
	tree_spec(&s, &p, A, tok, tmpl, script);
	CHECK_INT_EQ(es_attempt_run(&s, &o), 0);
	CHECK_INT_EQ(o.return_code, 0);
	CHECK_INT_EQ(o.timed_out + o.preempted + o.aborted, 0);
	long gc = read_pid(pathf(buf, "%s/%s", A, "gc.pid"));
	CHECK(gc > 0 && !pid_alive(gc));
	char *log = slurp(pathf(buf, "%s/%s", A, "process.log"));
	CHECK(strstr(log, "left 1 process(es) behind") != NULL);
	free(log);
}

/* ---- the processor's output ---- */

/* The lines of writer name in log ("<name> <n> ..."): 1 when they are exactly 1 .. count, in
 * that order, each whole. */
static int writer_in_order(const char *log, const char *name, int count)
{
	size_t len = strlen(name);
	int next = 1;
	for (const char *l = log; *l;) {
		if (!strncmp(l, name, len) && l[len] == ' ') {
			char *end;
			if (strtol(l + len + 1, &end, 10) != next || (*end != ' ' && *end != '\n'))
				return 0;
			next++;
		}
		const char *nl = strchr(l, '\n');
		l = nl ? nl + 1 : l + strlen(l);
	}
	return next == count + 1;
}

/* Where line (a whole line) starts in log, or -1. */
static long line_at(const char *log, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = log; (p = strstr(p, line)) != NULL; p++)
		if ((p == log || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return (long)(p - log);
	return -1;
}

/* w NAME COUNT [TAIL]: lines "NAME 1 out", "NAME 2 err", ... to stdout and stderr in turn. */
static const char *WRITER_SH =
	"w() {\n"
	"	i=1\n"
	"	while [ $i -le $2 ]; do\n"
	"		echo \"$1 $i out$3\"\n"
	"		i=$((i + 1))\n"
	"		echo \"$1 $i err$3\" >&2\n"
	"		i=$((i + 1))\n"
	"	done\n"
	"}\n";

/* One attempt of a shell script processor, for the output tests below. */
struct tree_case {
	char A[PATH_MAX], tok[33], script[PATH_MAX], tmpl[PATH_MAX * 2];
	struct es_processor p;
	struct es_attempt_spec s;
	struct es_attempt_outcome o;
};

/* The script RT/name holding text, and the spec that runs it (tree_spec). */
static struct es_attempt_spec *tree_case(struct tree_case *c, const char *name, const char *text)
{
	pathf(c->script, "%s/%s", RT, name);
	write_file(c->script, text);
	tree_spec(&c->s, &c->p, c->A, c->tok, c->tmpl, c->script);
	return &c->s;
}

static void test_output_pipe(void)
{
	char buf[PATH_MAX * 2], text[2048];
	struct tree_case c;
	/* Three children at once, one of them writing 1.1 MB (far more than a pipe holds), and a
	 * grandchild that writes only once the processor has exited and the supervisor, having
	 * noted what was left behind, sent it SIGTERM (which it catches, to write to its end). The
	 * processor says what its descriptors 0, 1 and 2 are and whether it holds the log. */
	sfmt(text, sizeof(text),
	     "%s"
	     "pad=%0100d\n"
	     "echo \"fds $(readlink /proc/$$/fd/0) $(readlink /proc/$$/fd/1) $(readlink /proc/$$/fd/2)\"\n"
	     "readlink /proc/self/fd/1\n"
	     "echo \"log held $(ls -l /proc/$$/fd | grep -c process.log)\"\n"
	     "w a 400 & pa=$!\n"
	     "w b 600 & pb=$!\n"
	     "w big 11000 \" $pad\" & pbig=$!\n"
	     "(trap 'term=1' TERM; while kill -0 $$ 2>/dev/null || [ -z \"$term\" ]; do sleep 0.01; done; w gc 100) &\n"
	     "wait $pa $pb $pbig\n",
	     WRITER_SH, 0);
	tree_case(&c, "writers.sh", text)->grace_secs = 5;
	CHECK_INT_EQ(es_attempt_run(&c.s, &c.o), 0);
	CHECK_INT_EQ(c.o.started, 1);
	CHECK_INT_EQ(c.o.return_code, 0);
	char *log = slurp(pathf(buf, "%s/%s", c.A, "process.log"));
	CHECK(strlen(log) > 1100000);
	char in[64] = "", out[64] = "", err[64] = "";
	const char *fds = strstr(log, "fds ");
	CHECK(fds && sscanf(fds, "fds %63s %63s %63s", in, out, err) == 3);
	CHECK_STR_EQ(in, "/dev/null");
	CHECK(!strncmp(out, "pipe:", 5));
	CHECK_STR_EQ(err, out);
	CHECK(line_at(log, out) >= 0);
	CHECK(has_line(log, "log held 0"));
	CHECK(writer_in_order(log, "a", 400));
	CHECK(writer_in_order(log, "b", 600));
	CHECK(writer_in_order(log, "big", 11000));
	CHECK(writer_in_order(log, "gc", 100));
	const char *left = strstr(log, "\n[eshard-mpi] the processor exited and left ");
	CHECK(left && left - log < line_at(log, "gc 1 out"));
	free(log);
}

static int tick_when_ready(void *arg)
{
	char buf[PATH_MAX * 2];
	struct stat st;
	if (stat(pathf(buf, "%s/%s", arg, "ready"), &st) == 0)
		stop_now = 1;
	return 0;
}

static void note_asked(void *arg)
{
	char buf[PATH_MAX * 2];
	write_file(pathf(buf, "%s/%s", arg, "asked"), "");
}

static void test_output_before_notes(void)
{
	char buf[PATH_MAX * 2];
	struct tree_case c;
	/* The processor stops the supervisor, writes while nothing copies its pipe, and lets the
	 * supervisor go on only once the worker asked for the stop: the supervisor then sees the
	 * stop request and the unread lines at once. They still come before its note. */
	struct es_attempt_spec *s = tree_case(&c, "stopped.sh",
		   "kill -STOP $PPID\n"
		   "i=1; while [ $i -le 300 ]; do echo \"s $i\"; i=$((i + 1)); done\n"
		   ": > \"$ESHARD_ATTEMPT_DIR/ready\"\n"
		   "while [ ! -e \"$ESHARD_ATTEMPT_DIR/asked\" ]; do sleep 0.01; done\n"
		   "sleep 0.2\n"
		   "kill -CONT $PPID\n"
		   "exec sleep 1000\n");
	stop_now = 0;
	s->stop_flag = &stop_now;
	s->tick = tick_when_ready;
	s->on_stop = note_asked;
	s->tick_arg = c.A;
	CHECK_INT_EQ(es_attempt_run(s, &c.o), 0);
	CHECK_INT_EQ(c.o.preempted, 1);
	CHECK_INT_EQ(c.o.return_code, -SIGTERM);
	char *log = slurp(pathf(buf, "%s/%s", c.A, "process.log"));
	CHECK(writer_in_order(log, "s", 300));
	long last = line_at(log, "s 300"), stop = line_at(log, "[eshard-mpi] stopping the processor: the worker asked");
	CHECK(last >= 0 && stop > last);
	free(log);
	stop_now = 0;
}

/* A log that cannot be written (a full disk: here /dev/full) loses the output, not the run. */
static void test_output_full_disk(void)
{
	char buf[PATH_MAX * 2], text[1024];
	struct tree_case c;
	sfmt(text, sizeof(text),
	     "%s"
	     "set -e\n"
	     "w lost 20000 \" %0100d\"\n"
	     "echo ok > \"$ESHARD_ATTEMPT_DIR/finished\"\n",
	     WRITER_SH, 0);
	tree_case(&c, "full.sh", text);
	CHECK(symlink("/dev/full", pathf(buf, "%s/%s", c.A, "process.log")) == 0);
	CHECK_INT_EQ(es_attempt_run(&c.s, &c.o), 0);
	CHECK_INT_EQ(c.o.started, 1);
	CHECK_INT_EQ(c.o.return_code, 0);
	char *fin = slurp(pathf(buf, "%s/%s", c.A, "finished"));
	CHECK_STR_EQ(fin, "ok\n");
	free(fin);
	/* A command is given no A/work: none is made (two MKDIR a shard at a file server). */
	struct stat st;
	CHECK(stat(pathf(buf, "%s/%s", c.A, "work"), &st) != 0 && errno == ENOENT);
}

int main(int argc, char **argv)
{
	/* The supervisor role, as in eshard-mpi's command table. */
	if (argc > 1 && !strcmp(argv[1], "__supervise"))
		return es_attempt_supervise_main(argc - 1, argv + 1);

	const char *T = test_tmpdir();
	if (!realpath(T, RT)) {
		perror(T);
		return 1;
	}
	const char *bin = getenv("ESHARD_BIN");
	if (bin && *bin) {
		sfmt(SUP, sizeof(SUP), "%s", bin);
	} else {
		ssize_t n = readlink("/proc/self/exe", SUP, sizeof(SUP) - 1);
		if (n <= 0) {
			perror("/proc/self/exe");
			return 1;
		}
		SUP[n] = '\0';
	}
	char buf[PATH_MAX * 2];
	pathf(J, "%s/%s", RT, "job");
	mkdirs(pathf(buf, "%s/%s", J, "shards"));
	mkdirs(pathf(buf, "%s/%s", J, "attempts"));
	write_file(pathf(buf, "%s/%s", J, "recipe.yaml"), "process: []\n");
	sfmt(INPUT, sizeof(INPUT), "%s/shards/%s.jsonl", J, SHARD);
	write_file(INPUT, INPUT_TEXT);

	test_argv_dj();
	test_argv_command();
	test_env_dj_process();
	test_env_dj_root();
	test_command_processor();
	test_start_failures();
	test_worker_sigkill();
	test_stop_flag();
	test_timeout_and_ticks();
	test_leftovers_after_exit();
	test_output_pipe();
	test_output_before_notes();
	test_output_full_disk();
	return test_done();
}
