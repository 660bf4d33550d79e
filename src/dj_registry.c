/*
 * dj_registry: operator kinds from Data-Juicer's own registry, asked through the helper
 * scripts/dj_op_kinds.py in one child process, or from the naming convention.
 *
 * The helper prints one JSON object on stdout: {"ops": {name: {"known", "mapper", "filter",
 * "global"}}, "data_juicer_version", "commit"}; exit 3 means Data-Juicer is not importable and
 * exit 4 that the custom operators could not be loaded. When some asked name is unknown, the
 * object also lists every registered name ("registered"), for a "did you mean" hint. Its message for a failure is its
 * first non-blank stderr line (the last one of a Python traceback).
 */
#include "dj_registry.h"
#include "eshard/buf.h"
#include "eshard/helper.h"
#include "eshard/log.h"
#include "eshard/proc.h"
#include "eshard/recipe.h"
#include "eshard/suggest.h"
#include "pyval.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


/* Importing Data-Juicer can take a minute on a cold network file system; ten minutes is generous. */
#define HELPER_TIMEOUT_SECS 600.0
#define HELPER_MAX_STDOUT ((size_t)4 << 20)
#define HELPER_MAX_STDERR ((size_t)64 << 10)

void es_dj_registry_free(struct es_dj_registry *r)
{
	free(r->reason);
	free(r->ops);
	free(r->version);
	free(r->commit);
	es_strv_free(&r->registered);
	memset(r, 0, sizeof(*r));
}

/* ---- the verdict on one operator ---- */

static int has_global_token(const char *name)
{
	/* The reference lower-cases the name; the tokens are ASCII, so ASCII folding is enough. */
	size_t len = strlen(name);
	char *low = malloc(len + 1);
	if (!low)
		return 1;
	for (size_t i = 0; i <= len; i++)
		low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
	int hit = strstr(low, "deduplicator") || strstr(low, "global_") || strstr(low, "full_dataset_");
	free(low);
	return hit;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);
	return ls > lx && !memcmp(s + ls - lx, suffix, lx);
}

/* The Data-Juicer naming convention (docs/design.md#recipe-checks). It differs from the
 * registry for names outside the convention and for custom operators: without the
 * registry, a custom operator is judged by its name like any other. */
static enum es_dj_verdict kind_by_name(const char *name)
{
	if (has_global_token(name))
		return ES_DJ_OP_WHOLE;
	if (ends_with(name, "_mapper") || ends_with(name, "_filter"))
		return ES_DJ_OP_OK;
	if (ends_with(name, "_selector") || ends_with(name, "_grouper") || ends_with(name, "_aggregator") ||
	    ends_with(name, "_pipeline"))
		return ES_DJ_OP_WHOLE;
	return ES_DJ_OP_UNKNOWN;
}

static int op_cmp(const void *a, const void *b)
{
	return strcmp(((const struct es_dj_op *)a)->name, ((const struct es_dj_op *)b)->name);
}

static enum es_dj_verdict kind_by_registry(const struct es_dj_registry *r, const char *name)
{
	struct es_dj_op key = { name, 0, 0, 0, 0 };
	const struct es_dj_op *k = bsearch(&key, r->ops, r->n, sizeof(*r->ops), op_cmp);
	if (!k || !k->known)
		return ES_DJ_OP_UNKNOWN;
	if (!(k->mapper || k->filter) || k->global || has_global_token(name))
		return ES_DJ_OP_WHOLE;
	return ES_DJ_OP_OK;
}

const char *es_dj_registry_suggest(const struct es_dj_registry *reg, const char *name)
{
	if (!reg->consulted || !reg->registered.n)
		return NULL;
	return es_closest_name(name, (const char *const *)reg->registered.v, reg->registered.n);
}

enum es_dj_verdict es_dj_registry_kind(const struct es_dj_registry *reg, const char *name)
{
	return reg->consulted ? kind_by_registry(reg, name) : kind_by_name(name);
}

/* ---- the helper process ---- */

/* What run_capture() hands back; free it with capture_free() whatever run_capture() said. */
struct capture {
	struct es_proc_result r;   /* stdout up to HELPER_MAX_STDOUT, stderr up to HELPER_MAX_STDERR */
	int spawn_errno;           /* the helper could not be started: why */
};
#define CAPTURE_INIT { { 0 }, 0 }

static void capture_free(struct capture *c)
{
	es_proc_result_free(&c->r);
}

/*
 * Run argv (argv[0] looked up in PATH) through proc with stdin from /dev/null and the child
 * environment of every child (no launcher identity), capture stdout and stderr, wait for it,
 * killing it after timeout_secs. A start failure is reported in c->spawn_errno, not as an
 * error.
 */
static int run_capture(char *const argv[], double timeout_secs, struct capture *c)
{
	struct es_strv env = ES_STRV_INIT;
	struct es_env_spec es = { 0 };
	int rc = es_env_child(&es, &env);
	if (rc)
		return rc;
	struct es_proc_spec ps;
	es_proc_spec_init(&ps, argv);
	ps.envp = env.v;
	ps.fd[0] = ES_PROC_DEVNULL;
	ps.new_group = 1;
	rc = es_proc_capture(&ps, HELPER_MAX_STDOUT, HELPER_MAX_STDERR, timeout_secs, &c->r);
	if (!rc && !c->r.started)
		c->spawn_errno = c->r.err ? c->r.err : EIO;
	es_strv_free(&env);
	return rc;
}

/* The helper's message: its first non-empty stderr line without an "ERROR: " prefix (the
 * last one for a Python traceback, which names the exception). */
static char *stderr_line(const struct es_buf *err)
{
	const char *s = err->data, *end = err->data + err->len;
	const char *first = NULL, *last = NULL;
	size_t first_len = 0, last_len = 0;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t len = nl ? (size_t)(nl - s) : (size_t)(end - s);
		if (len && s[len - 1] == '\r')
			len--;
		if (!es_pyval_is_blank(s, len)) {
			if (!first) {
				first = s;
				first_len = len;
			}
			last = s;
			last_len = len;
		}
		s = nl ? nl + 1 : end;
	}
	if (!first)
		return strdup("(no message on stderr)");
	if (first_len >= 9 && !memcmp(first, "Traceback", 9)) {
		first = last;
		first_len = last_len;
	}
	while (first_len && (*first == ' ' || *first == '\t')) {
		first++;
		first_len--;
	}
	if (first_len >= 7 && !memcmp(first, "ERROR: ", 7)) {
		first += 7;
		first_len -= 7;
	}
	if (first_len > 500)
		first_len = 500;
	char *r = malloc(first_len + 1);
	if (r) {
		memcpy(r, first, first_len);
		r[first_len] = '\0';
	}
	return r;
}

static cJSON *parse_answer_json(const struct es_buf *out)
{
	cJSON *j = cJSON_ParseWithOpts(out->data, NULL, 1);
	if (j)
		return j;
	/* Something printed on stdout before the answer: take the last non-blank line. */
	size_t end = out->len;
	while (end && (out->data[end - 1] == '\n' || out->data[end - 1] == '\r' || out->data[end - 1] == ' '))
		end--;
	size_t start = end;
	while (start && out->data[start - 1] != '\n')
		start--;
	if (start == 0 || start == end)
		return NULL;
	char *line = strndup(out->data + start, end - start);
	if (!line)
		return NULL;
	j = cJSON_ParseWithOpts(line, NULL, 1);
	free(line);
	return j;
}

/* The optional list of every registered name; strings only (anything else is skipped). */
static int read_registered(const cJSON *j, struct es_dj_registry *reg)
{
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "registered"), *it;
	if (!cJSON_IsArray(all))
		return 0;
	cJSON_ArrayForEach(it, all)
		if (cJSON_IsString(it) && it->valuestring[0] && es_strv_push(&reg->registered, strdup(it->valuestring)))
			return -1;
	return 0;
}

/* Read the helper's answer for the (sorted, distinct) names. Returns 0, or -1 with a reason. */
static int read_answer(const struct es_buf *out, const char *const *names, size_t n, struct es_dj_registry *reg,
		       struct es_buf *why)
{
	cJSON *j = parse_answer_json(out);
	int rc = -1;
	if (!j || !cJSON_IsObject(j)) {
		es_buf_adds(why, "its output is not a JSON object");
		goto out;
	}
	cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "ops");
	if (!cJSON_IsObject(ops)) {
		es_buf_adds(why, "its output has no \"ops\" object");
		goto out;
	}
	cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "data_juicer_version");
	cJSON *commit = cJSON_GetObjectItemCaseSensitive(j, "commit");
	if (cJSON_IsString(ver) && ver->valuestring[0] && !(reg->version = strdup(ver->valuestring)))
		goto oom;
	if (cJSON_IsString(commit) && commit->valuestring[0] && !(reg->commit = strdup(commit->valuestring)))
		goto oom;
	reg->ops = calloc(n ? n : 1, sizeof(*reg->ops));
	if (!reg->ops)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_GetObjectItemCaseSensitive(ops, names[i]);
		cJSON *known = cJSON_GetObjectItemCaseSensitive(o, "known");
		if (!cJSON_IsObject(o) || !cJSON_IsBool(known)) {
			es_buf_printf(why, "its output has no answer for operator '%.200s'", names[i]);
			goto out;
		}
		struct es_dj_op *k = &reg->ops[reg->n++];
		k->name = names[i];
		k->known = cJSON_IsTrue(known);
		k->mapper = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "mapper"));
		k->filter = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "filter"));
		k->global = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "global"));
	}
	if (read_registered(j, reg))
		goto oom;
	rc = 0;
	goto out;
oom:
	es_buf_adds(why, "out of memory");
out:
	cJSON_Delete(j);
	return rc;
}

static int start_failed_is_fallback(int e)
{
	return e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR || e == ELOOP || e == EPERM ||
	       e == ENAMETOOLONG;
}

/* What the helper's run means: 0 with reg->consulted set, 0 with a fallback reason, or an
 * error. */
static int judge_run(const char *python, const char *helper, const struct capture *c, const char *const *names,
		     size_t n_names, struct es_dj_registry *reg)
{
	struct es_buf why = ES_BUF_INIT;
	char *line = NULL;
	int rc = 0;
	if (c->spawn_errno) {
		if (!start_failed_is_fallback(c->spawn_errno)) {
			rc = es_error(ES_EIO, "cannot start the Data-Juicer registry helper %s with '%s': %s",
				      helper, python, strerror(c->spawn_errno));
			goto out;
		}
		es_buf_printf(&why, "cannot start '%s': %s", python, strerror(c->spawn_errno));
		reg->reason = es_buf_detach(&why, NULL);
		goto out;
	}
	line = stderr_line(&c->r.err_text);
	if (!line) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if (c->r.timed_out) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s did not answer within %.0f seconds: %s",
			      helper, HELPER_TIMEOUT_SECS, line);
		goto out;
	}
	if (c->r.overflow) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s printed more than %zu bytes", helper,
			      HELPER_MAX_STDOUT);
		goto out;
	}
	if (WIFSIGNALED(c->r.status)) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s was killed by signal %d: %s", helper,
			      WTERMSIG(c->r.status), line);
		goto out;
	}
	int code = WIFEXITED(c->r.status) ? WEXITSTATUS(c->r.status) : -1;
	if (code == 3 || code == 126 || code == 127) {
		/* 3: Data-Juicer is not importable; 126/127: a wrapper (pyenv shim, env) could
		 * not find or run the interpreter. Either way there is no registry to ask. */
		reg->reason = strdup(line);
		if (!reg->reason)
			rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if (code == 4) {
		rc = es_error(ES_EINVAL, "Data-Juicer registry helper %s could not load the custom operators: %s",
			      helper, line);
		goto out;
	}
	if (code != 0) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s failed with exit status %d: %s", helper, code,
			      line);
		goto out;
	}
	if (read_answer(&c->r.out, names, n_names, reg, &why)) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s gave no usable answer (%s); stderr: %s", helper,
			      why.data, line);
		goto out;
	}
	reg->consulted = 1;
out:
	free(line);
	es_buf_free(&why);
	return rc;
}

int es_dj_registry_consult(const char *python, const char *helper, char *const *custom, size_t n_custom,
			   const char *const *names, size_t n_names, struct es_dj_registry *reg)
{
	if (!helper || !*helper) {
		reg->reason = strdup("no registry helper is configured");
		return reg->reason ? 0 : es_error(ES_ENOMEM, "out of memory");
	}
	if (!n_names)
		return 0;
	if (!python || !*python)
		python = "python3";
	struct es_strv argv = ES_STRV_INIT;
	int rc = es_strv_push(&argv, strdup(python));
	if (!rc)
		rc = es_strv_push(&argv, strdup(helper));
	for (size_t i = 0; !rc && i < n_custom; i++) {
		rc = es_strv_push(&argv, strdup("--custom-path"));
		if (!rc)
			rc = es_strv_push(&argv, strdup(custom[i]));
	}
	if (!rc)
		rc = es_strv_push(&argv, strdup("--"));
	for (size_t i = 0; !rc && i < n_names; i++)
		rc = es_strv_push(&argv, strdup(names[i]));
	struct capture c = CAPTURE_INIT;
	if (!rc)
		rc = run_capture(argv.v, HELPER_TIMEOUT_SECS, &c);
	es_strv_free(&argv);
	if (!rc)
		rc = judge_run(python, helper, &c, names, n_names, reg);
	capture_free(&c);
	return rc;
}

/* ---- the Data-Juicer identity and the helper's place ---- */

char *es_recipe_dj_identity(const char *python, const char *helper)
{
	if (!helper)
		return NULL;
	char *argv[] = { (char *)(python && *python ? python : "python3"), (char *)helper, (char *)"--version", NULL };
	struct capture c = CAPTURE_INIT;
	char *id = NULL;
	if (!run_capture(argv, HELPER_TIMEOUT_SECS, &c) && !c.spawn_errno && !c.r.timed_out && WIFEXITED(c.r.status) &&
	    WEXITSTATUS(c.r.status) == 0) {
		cJSON *j = parse_answer_json(&c.r.out);
		const cJSON *commit = cJSON_GetObjectItemCaseSensitive(j, "commit");
		const cJSON *version = cJSON_GetObjectItemCaseSensitive(j, "data_juicer_version");
		if (cJSON_IsString(commit) && *commit->valuestring)
			id = strdup(commit->valuestring);
		else if (cJSON_IsString(version) && *version->valuestring)
			id = strdup(version->valuestring);
		cJSON_Delete(j);
	}
	capture_free(&c);
	return id;
}

const char *es_recipe_default_helper(void)
{
	return es_helper_path("ESHARD_DJ_HELPER", "dj_op_kinds.py");
}
