/*
 * recipe: recipe validation (REFERENCE.md §4) and the operator-kind check, over the YAML
 * tree of yaml.c (yamltree.h).
 *
 * The file has three parts:
 *  2. a few Python semantics over that tree: truthiness, key equality, str() and repr();
 *  3. the Data-Juicer registry helper (one child process) and the naming-convention fallback;
 *  4. the validation itself, in the reference's order and wording.
 */
#include "eshard/recipe.h"
#include "eshard/buf.h"
#include "eshard/fs.h"
#include "eshard/log.h"
#include "eshard/util.h"
#include "pyval.h"
#include "yamltree.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Importing Data-Juicer can take a minute on a cold network file system; ten minutes is generous. */
#define HELPER_TIMEOUT_SECS 600.0
#define HELPER_MAX_STDOUT ((size_t)4 << 20)
#define HELPER_MAX_STDERR ((size_t)64 << 10)
/* ------------------------------------------------------------------------------------------ */
/* 3. Operator kinds: the Data-Juicer registry helper, or the naming convention               */
/* ------------------------------------------------------------------------------------------ */

struct op_kind {
	const char *name;
	int known, mapper, filter, global;
};

struct registry {
	int consulted;
	char *reason;              /* why the registry was not consulted */
	struct op_kind *ops;       /* sorted by name */
	size_t n;
	char *version, *commit;
};

static void registry_free(struct registry *r)
{
	free(r->reason);
	free(r->ops);
	free(r->version);
	free(r->commit);
	memset(r, 0, sizeof(*r));
}

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

enum verdict { OP_OK, OP_WHOLE, OP_UNKNOWN };

/* The Data-Juicer naming convention (REFERENCE.md §4, option (c)). It differs from the
 * registry for names outside the convention and for custom operators: without the
 * registry, a custom operator is judged by its name like any other. */
static enum verdict kind_by_name(const char *name)
{
	if (has_global_token(name))
		return OP_WHOLE;
	if (ends_with(name, "_mapper") || ends_with(name, "_filter"))
		return OP_OK;
	if (ends_with(name, "_selector") || ends_with(name, "_grouper") || ends_with(name, "_aggregator") ||
	    ends_with(name, "_pipeline"))
		return OP_WHOLE;
	return OP_UNKNOWN;
}

static int op_cmp(const void *a, const void *b)
{
	return strcmp(((const struct op_kind *)a)->name, ((const struct op_kind *)b)->name);
}

static enum verdict kind_by_registry(const struct registry *r, const char *name)
{
	struct op_kind key = { name, 0, 0, 0, 0 };
	const struct op_kind *k = bsearch(&key, r->ops, r->n, sizeof(*r->ops), op_cmp);
	if (!k || !k->known)
		return OP_UNKNOWN;
	if (!(k->mapper || k->filter) || k->global || has_global_token(name))
		return OP_WHOLE;
	return OP_OK;
}

struct capture {
	struct es_buf out, err;
	int spawn_errno;           /* posix_spawnp() failed with this */
	int status;                /* waitpid() status */
	int overflow, timed_out;
};

static void drain(int *fd, struct es_buf *b, size_t max, int *overflow, int *open_fds)
{
	char chunk[65536];
	ssize_t r = read(*fd, chunk, sizeof(chunk));
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (r <= 0) {
		close(*fd);
		*fd = -1;
		(*open_fds)--;
		return;
	}
	if (b->len + (size_t)r > max) {
		if (overflow)
			*overflow = 1;
		return; /* stderr past its cap is dropped; stdout past its cap ends the run */
	}
	if (es_buf_add(b, chunk, (size_t)r) && overflow)
		*overflow = 1;
}

/* Run argv (argv[0] looked up in PATH) with stdin from /dev/null, capture stdout and stderr,
 * wait for it. A start failure is reported in c->spawn_errno, not as an error. */
static int run_capture(char *const argv[], struct capture *c)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, rc = 0;
	if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		rc = es_error_errno(ES_EIO, "cannot create a pipe for the Data-Juicer registry helper");
		goto close_all;
	}
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	sigset_t none, dflt;
	sigemptyset(&none);
	sigemptyset(&dflt);
	sigaddset(&dflt, SIGPIPE);
	sigaddset(&dflt, SIGINT);
	sigaddset(&dflt, SIGTERM);
	sigaddset(&dflt, SIGHUP);
	sigaddset(&dflt, SIGQUIT);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dflt);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid;
	int e = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	if (e) {
		c->spawn_errno = e;
		goto close_all;
	}
	struct pollfd fds[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
	int open_fds = 2;
	double deadline = es_time_mono() + HELPER_TIMEOUT_SECS;
	while (open_fds && !c->overflow) {
		double left = deadline - es_time_mono();
		if (left <= 0) {
			c->timed_out = 1;
			break;
		}
		int r = poll(fds, 2, left > 1000.0 ? 1000000 : (int)(left * 1000.0) + 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = es_error_errno(ES_EIO, "cannot wait for the Data-Juicer registry helper");
			break;
		}
		if (fds[0].fd >= 0 && fds[0].revents)
			drain(&fds[0].fd, &c->out, HELPER_MAX_STDOUT, &c->overflow, &open_fds);
		if (fds[1].fd >= 0 && fds[1].revents)
			drain(&fds[1].fd, &c->err, HELPER_MAX_STDERR, NULL, &open_fds);
	}
	po[0] = fds[0].fd;
	pe[0] = fds[1].fd;
	if (open_fds)
		kill(pid, SIGKILL);
	while (waitpid(pid, &c->status, 0) < 0) {
		if (errno != EINTR) {
			if (!rc)
				rc = es_error_errno(ES_EIO, "cannot wait for the Data-Juicer registry helper");
			break;
		}
	}
close_all:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
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

/* Read the helper's answer for the (sorted, distinct) names. Returns 0, or -1 with a reason. */
static int read_answer(const struct es_buf *out, const char *const *names, size_t n, struct registry *reg,
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
		struct op_kind *k = &reg->ops[reg->n++];
		k->name = names[i];
		k->known = cJSON_IsTrue(known);
		k->mapper = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "mapper"));
		k->filter = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "filter"));
		k->global = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "global"));
	}
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

/* Ask the helper once about every operator name. 0 with reg->consulted set, 0 with a
 * fallback reason, or an error. */
static int consult_registry(const struct es_recipe_opts *opts, char **custom, size_t n_custom,
			    const char *const *names, size_t n_names, struct registry *reg)
{
	const char *python = opts->python && *opts->python ? opts->python : "python3";
	const char *helper = opts->helper;
	size_t argc = 0;
	char **argv = calloc(2 * n_custom + n_names + 4, sizeof(*argv));
	if (!argv)
		return es_error(ES_ENOMEM, "out of memory");
	argv[argc++] = (char *)python;
	argv[argc++] = (char *)helper;
	for (size_t i = 0; i < n_custom; i++) {
		argv[argc++] = (char *)"--custom-path";
		argv[argc++] = custom[i];
	}
	argv[argc++] = (char *)"--";
	for (size_t i = 0; i < n_names; i++)
		argv[argc++] = (char *)names[i];
	argv[argc] = NULL;

	struct capture c;
	memset(&c, 0, sizeof(c));
	es_buf_init(&c.out, 0);
	es_buf_init(&c.err, 0);
	struct es_buf why = ES_BUF_INIT;
	char *line = NULL;
	int rc = run_capture(argv, &c);
	free(argv);
	if (rc)
		goto out;
	if (c.spawn_errno) {
		if (!start_failed_is_fallback(c.spawn_errno)) {
			rc = es_error(ES_EIO, "cannot start the Data-Juicer registry helper %s with '%s': %s",
				      helper, python, strerror(c.spawn_errno));
			goto out;
		}
		es_buf_printf(&why, "cannot start '%s': %s", python, strerror(c.spawn_errno));
		reg->reason = es_buf_detach(&why, NULL);
		goto out;
	}
	line = stderr_line(&c.err);
	if (!line) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	if (c.timed_out) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s did not answer within %.0f seconds: %s",
			      helper, HELPER_TIMEOUT_SECS, line);
		goto out;
	}
	if (c.overflow) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s printed more than %zu bytes", helper,
			      HELPER_MAX_STDOUT);
		goto out;
	}
	if (WIFSIGNALED(c.status)) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s was killed by signal %d: %s", helper,
			      WTERMSIG(c.status), line);
		goto out;
	}
	int code = WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
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
	if (read_answer(&c.out, names, n_names, reg, &why)) {
		rc = es_error(ES_EIO, "Data-Juicer registry helper %s gave no usable answer (%s); stderr: %s", helper,
			      why.data, line);
		goto out;
	}
	reg->consulted = 1;
out:
	free(line);
	es_buf_free(&why);
	es_buf_free(&c.out);
	es_buf_free(&c.err);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* 4. Validation                                                                               */
/* ------------------------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_nul(const struct es_ynode *n) { return memchr(n->text, '\0', n->len) != NULL; }

/* The one operator of process[i]: all keys of the constructed dict must be equal. */
struct one_op {
	const struct es_ynode *name, *args;
	size_t keys;               /* 0, 1, or 2 meaning "more than one" */
};

static int one_op_pair(void *ctx, const struct es_ynode *k, const struct es_ynode *v)
{
	struct one_op *o = ctx;
	if (!o->name) {
		o->name = k;
		o->args = v;
		o->keys = 1;
		return 0;
	}
	if (!es_pyval_eq(o->name, k)) {
		o->keys = 2;
		return 1;
	}
	o->args = v; /* a repeated key: the last value wins, the first key stays */
	return 0;
}

static void op_of(const struct es_ynode *item, struct one_op *o)
{
	memset(o, 0, sizeof(*o));
	if (item->kind == ES_Y_MAP)
		es_yaml_walk(item, one_op_pair, o);
}

static int resolve_custom_path(const char *base, const char *p, struct es_buf *out)
{
	struct es_buf x = ES_BUF_INIT, j = ES_BUF_INIT;
	int rc = es_fs_expand_user(p, &x);
	if (!rc && x.data[0] != '/' && base && *base) {
		rc = es_path_join(&j, base, x.data);
		if (!rc)
			rc = es_fs_resolve(j.data, out);
	} else if (!rc) {
		rc = es_fs_resolve(x.data, out);
	}
	es_buf_free(&x);
	es_buf_free(&j);
	return rc;
}

/* custom_operator_paths, else custom-operator-paths (the first truthy one; a str is a
 * one-item list), resolved against opts->base_dir or the CWD. */
static int custom_paths(const struct es_ynode *root, const struct es_recipe_opts *opts, struct es_strv *out)
{
	const char *key = "custom_operator_paths";
	const struct es_ynode *v = es_yaml_get(root, key);
	if (!es_pyval_truthy(v)) {
		key = "custom-operator-paths";
		v = es_yaml_get(root, key);
	}
	if (!es_pyval_truthy(v))
		return 0;
	const struct es_ynode *const *items = (const struct es_ynode *const *)&v;
	size_t n = 1;
	if (v->kind == ES_Y_SEQ) {
		items = (const struct es_ynode *const *)v->kid;
		n = v->n;
	}
	struct es_buf path = ES_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		if (items[i]->kind != ES_Y_STR || has_nul(items[i])) {
			char *r = es_pyval_repr(items[i]);
			rc = es_error(ES_EINVAL, "%s must be a path or a list of paths; got %s", key, r ? r : "?");
			free(r);
			break;
		}
		rc = resolve_custom_path(opts->base_dir, items[i]->text, &path);
		if (!rc)
			rc = es_strv_push(out, strdup(path.data));
	}
	es_buf_free(&path);
	return rc;
}

static int op_error(int code, const char *fmt, const struct es_ynode *name)
{
	char *r = es_pyval_repr(name);
	int rc = es_error(code, fmt, r ? r : "?");
	free(r);
	return rc;
}

static char *op_warning(const char *fmt, const struct es_ynode *name)
{
	char *r = es_pyval_repr(name);
	if (!r)
		return NULL;
	struct es_buf b = ES_BUF_INIT;
	int rc = es_buf_printf(&b, fmt, r);
	free(r);
	if (rc) {
		es_buf_free(&b);
		return NULL;
	}
	return es_buf_detach(&b, NULL);
}

static int validate(const struct es_ynode *root, const char *path, const struct es_recipe_opts *opts,
		    struct es_recipe *out)
{
	struct es_strv warnings = ES_STRV_INIT, media = ES_STRV_INIT, index = ES_STRV_INIT, custom = ES_STRV_INIT;
	struct registry reg;
	memset(&reg, 0, sizeof(reg));
	const char **names = NULL;
	size_t n_names = 0;
	int rc = 0;

	if (!root || root->kind != ES_Y_MAP)
		return es_error(ES_EINVAL, "Recipe must be a YAML mapping: %s", path);

	/* 1. executor_type: "default" (also when missing) or "ray"; anything else, null too. */
	const struct es_ynode *et = es_yaml_get(root, "executor_type");
	const char *executor = "default";
	if (et) {
		if (es_yaml_is_str(et, "default") || es_yaml_is_str(et, "ray")) {
			executor = et->text;
		} else {
			char *r = es_pyval_repr(et);
			rc = es_error(ES_EINVAL, "Elastic sharding supports recipes for executor_type=default or ray; "
					  "got executor_type=%s", r ? r : "?");
			free(r);
			goto out;
		}
	}

	/* 2. process must be a list. */
	const struct es_ynode *process = es_yaml_get(root, "process");
	if (!process || process->kind != ES_Y_SEQ) {
		rc = es_error(ES_EINVAL, "Recipe must define an explicit process list");
		goto out;
	}

	/* 3-4. Custom operator paths and the registry, asked once about every operator name. */
	if ((rc = custom_paths(root, opts, &custom)))
		goto out;
	names = calloc(process->n ? process->n : 1, sizeof(*names));
	if (!names) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < process->n; i++) {
		struct one_op o;
		op_of(process->kid[i], &o);
		if (o.keys == 1 && o.name->kind == ES_Y_STR && !has_nul(o.name))
			names[n_names++] = o.name->text;
	}
	if (n_names > 1) {
		qsort(names, n_names, sizeof(*names), cmp_str);
		size_t w = 1;
		for (size_t i = 1; i < n_names; i++)
			if (strcmp(names[i], names[w - 1]))
				names[w++] = names[i];
		n_names = w;
	}
	if (opts->helper && *opts->helper && n_names) {
		if ((rc = consult_registry(opts, custom.v, custom.n, names, n_names, &reg)))
			goto out;
	} else if (!opts->helper || !*opts->helper) {
		reg.reason = strdup("no registry helper is configured");
		if (!reg.reason) {
			rc = es_error(ES_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (!reg.consulted) {
		/* Without the registry the custom operators cannot be loaded; at least their paths
		 * must exist, as Data-Juicer's loader would require. */
		for (size_t i = 0; i < custom.n; i++) {
			int ex = es_fs_exists(custom.v[i]);
			if (ex < 0) {
				rc = ex;
				goto out;
			}
			if (!ex) {
				rc = es_error(ES_EINVAL, "Custom operator path does not exist: %s", custom.v[i]);
				goto out;
			}
		}
		if (n_names) {
			struct es_buf w = ES_BUF_INIT;
			if (es_buf_printf(&w, "Data-Juicer registry was not consulted (%s); operator kinds were "
					  "checked by their names only", reg.reason ? reg.reason : "unknown reason")) {
				es_buf_free(&w);
				rc = ES_ENOMEM;
				goto out;
			}
			if ((rc = es_strv_push(&warnings, es_buf_detach(&w, NULL))))
				goto out;
		}
	}

	/* 5. The executor is always Ray for shard workers. */
	if (!strcmp(executor, "default") &&
	    (rc = es_strv_push(&warnings, strdup("recipe executor_type=default will be overridden with "
					     "executor_type=ray for shard workers"))))
		goto out;

	/* 6. Every operator, in order. */
	for (size_t i = 0; i < process->n; i++) {
		struct one_op o;
		op_of(process->kid[i], &o);
		if (o.keys != 1) {
			rc = es_error(ES_EINVAL, "process[%zu] must contain exactly one operator", i);
			goto out;
		}
		const struct es_ynode *args = es_pyval_truthy(o.args) ? o.args : NULL; /* op_args or {} */
		if (args && args->kind != ES_Y_MAP) {
			rc = op_error(ES_EINVAL, "Arguments for operator %s must be a mapping", o.name);
			goto out;
		}
		enum verdict v = OP_UNKNOWN;
		if (o.name->kind == ES_Y_STR && !has_nul(o.name))
			v = reg.consulted ? kind_by_registry(&reg, o.name->text) : kind_by_name(o.name->text);
		if (v == OP_UNKNOWN) {
			rc = op_error(ES_EINVAL, "Unknown operator %s; cannot prove it is shard-safe", o.name);
			goto out;
		}
		if (v == OP_WHOLE) {
			rc = op_error(ES_EINVAL, "Operator %s requires or may require whole-dataset semantics "
					  "and is not supported by this demo", o.name);
			goto out;
		}
		if (args && es_pyval_truthy(es_yaml_get(args, "stats_export_path"))) {
			rc = op_error(ES_EINVAL, "Operator %s sets stats_export_path, which would cause "
					  "cross-shard output collisions", o.name);
			goto out;
		}
		const struct es_ynode *ik = args ? es_yaml_get(args, "index_key") : NULL;
		if (ik && ik->kind != ES_Y_NULL) {
			if (ik->kind != ES_Y_STR || ik->len == 0 || has_nul(ik)) {
				rc = op_error(ES_EINVAL, "Operator %s has an invalid index_key", o.name);
				goto out;
			}
			if ((rc = es_strv_push(&index, strdup(ik->text))))
				goto out;
		}
		if (args && es_pyval_truthy(es_yaml_get(args, "save_dir")) &&
		    (rc = es_strv_push(&warnings, op_warning("operator %s uses an explicit save_dir; the caller must "
							 "ensure generated filenames do not collide across shards",
							 o.name))))
			goto out;
	}

	/* 7. Media keys: non-empty strings, de-duplicated in order. */
	static const char *const media_cfg[3][2] = {
		{ "image_key", "images" }, { "audio_key", "audios" }, { "video_key", "videos" },
	};
	for (size_t i = 0; i < 3; i++) {
		const struct es_ynode *v = es_yaml_get(root, media_cfg[i][0]);
		const char *value = media_cfg[i][1];
		if (v) {
			if (v->kind != ES_Y_STR || v->len == 0 || has_nul(v)) {
				rc = es_error(ES_EINVAL, "%s must be a non-empty string", media_cfg[i][0]);
				goto out;
			}
			value = v->text;
		}
		int dup = 0;
		for (size_t j = 0; j < media.n && !dup; j++)
			dup = !strcmp(media.v[j], value);
		if (!dup && (rc = es_strv_push(&media, strdup(value))))
			goto out;
	}
	es_strv_sort_unique(&index);

	/* Facts for prepare: dataset_path, ray_address, the registry's identity. */
	const struct es_ynode *ds = es_yaml_get(root, "dataset_path");
	if (ds && ds->kind == ES_Y_STR && !es_pyval_is_blank(ds->text, ds->len)) {
		if (has_nul(ds)) {
			rc = es_error(ES_EINVAL, "dataset_path in %s must not contain a NUL character", path);
			goto out;
		}
		if (!(out->dataset_path = strdup(ds->text))) {
			rc = es_error(ES_ENOMEM, "out of memory");
			goto out;
		}
	}
	const struct es_ynode *ra = es_yaml_get(root, "ray_address");
	if (ra && ra->kind != ES_Y_NULL) {
		if (ra->kind == ES_Y_STR && has_nul(ra)) {
			rc = es_error(ES_EINVAL, "ray_address in %s must not contain a NUL character", path);
			goto out;
		}
		out->has_ray_address = 1;
		out->ray_address_str = es_pyval_str(ra);
		out->ray_address_repr = es_pyval_repr(ra);
		if (!out->ray_address_str || !out->ray_address_repr) {
			rc = es_error(ES_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (!(out->executor_type = strdup(executor))) {
		rc = es_error(ES_ENOMEM, "out of memory");
		goto out;
	}
	out->registry_consulted = reg.consulted;
	out->dj_version = reg.version;
	out->dj_commit = reg.commit;
	reg.version = reg.commit = NULL;
	out->warnings = warnings.v;
	out->n_warnings = warnings.n;
	out->media_keys = media.v;
	out->n_media = media.n;
	out->index_keys = index.v;
	out->n_index = index.n;
	memset(&warnings, 0, sizeof(warnings));
	memset(&media, 0, sizeof(media));
	memset(&index, 0, sizeof(index));
out:
	es_strv_free(&warnings);
	es_strv_free(&media);
	es_strv_free(&index);
	es_strv_free(&custom);
	registry_free(&reg);
	free(names);
	return rc;
}

int es_recipe_load(const char *path, const struct es_recipe_opts *opts, struct es_recipe *out)
{
	static const struct es_recipe_opts defaults = { NULL, NULL, NULL };
	memset(out, 0, sizeof(*out));
	if (!opts)
		opts = &defaults;
	struct stat st;
	if (stat(path, &st) != 0)
		return es_error_errno(ES_EIO, "cannot read recipe '%s'", path);
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > ES_RECIPE_MAX_BYTES)
		return es_error(ES_EINVAL, "Recipe %s is larger than %zu MiB", path, ES_RECIPE_MAX_BYTES >> 20);
	struct es_buf data = ES_BUF_INIT;
	int rc = es_fs_read_file(path, &data, ES_RECIPE_MAX_BYTES);
	if (rc) {
		es_buf_free(&data);
		return rc == ES_ENOMEM ? ES_EINVAL : ES_EIO; /* fs has reported it */
	}
	struct es_ydoc *doc;
	rc = es_yaml_parse(path, data.data, data.len, &doc);
	if (!rc)
		rc = validate(es_yaml_root(doc), path, opts, out);
	es_yaml_free(doc);
	es_buf_free(&data);
	if (rc) {
		es_recipe_free(out);
		if (rc != ES_EIO && rc != ES_EINVAL)
			rc = rc == ES_ENOMEM ? ES_EIO : ES_EINVAL;
	}
	return rc;
}

static void free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void es_recipe_free(struct es_recipe *r)
{
	if (!r)
		return;
	free(r->executor_type);
	free_strs(r->media_keys, r->n_media);
	free_strs(r->index_keys, r->n_index);
	free_strs(r->warnings, r->n_warnings);
	free(r->dataset_path);
	free(r->ray_address_str);
	free(r->ray_address_repr);
	free(r->dj_version);
	free(r->dj_commit);
	memset(r, 0, sizeof(*r));
}

char *es_recipe_dj_identity(const char *python, const char *helper)
{
	if (!helper)
		return NULL;
	char *argv[] = { (char *)(python && *python ? python : "python3"), (char *)helper, (char *)"--version", NULL };
	struct capture c;
	memset(&c, 0, sizeof(c));
	es_buf_init(&c.out, 0);
	es_buf_init(&c.err, 0);
	char *id = NULL;
	if (!run_capture(argv, &c) && !c.spawn_errno && !c.timed_out && WIFEXITED(c.status) &&
	    WEXITSTATUS(c.status) == 0) {
		cJSON *j = parse_answer_json(&c.out);
		const cJSON *commit = cJSON_GetObjectItemCaseSensitive(j, "commit");
		const cJSON *version = cJSON_GetObjectItemCaseSensitive(j, "data_juicer_version");
		if (cJSON_IsString(commit) && *commit->valuestring)
			id = strdup(commit->valuestring);
		else if (cJSON_IsString(version) && *version->valuestring)
			id = strdup(version->valuestring);
		cJSON_Delete(j);
	}
	es_buf_free(&c.out);
	es_buf_free(&c.err);
	return id;
}

const char *es_recipe_default_helper(void)
{
	const char *env = getenv("ESHARD_DJ_HELPER");
	if (env && *env)
		return env;
#ifdef ESHARD_SOURCE_DIR
	return ESHARD_SOURCE_DIR "/scripts/dj_op_kinds.py";
#else
	return NULL;
#endif
}
