#include "args.h"

#include "eshard/buf.h"
#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/suggest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_metavar(const struct es_opt *o)
{
	if (o->metavar)
		return o->metavar;
	switch (o->kind) {
	case ES_OPT_POS_INT:
	case ES_OPT_NONNEG_INT: return "N";
	case ES_OPT_POS_NUM: return "SECS";
	default: return "VALUE";
	}
}

void es_args_usage(const struct es_opt *opts, size_t n_opts, const struct es_cmd_help *help)
{
	printf("usage: eshard-mpi %s [options]\n\n%s\n\noptions:\n", help->command, help->summary);
	for (size_t i = 0; i < n_opts; i++) {
		char left[96];
		if (opts[i].kind == ES_OPT_FLAG)
			snprintf(left, sizeof(left), "--%s", opts[i].name);
		else
			snprintf(left, sizeof(left), "--%s %s", opts[i].name, kind_metavar(&opts[i]));
		printf("  %-30s %s\n", left, opts[i].help);
	}
	printf("  %-30s %s\n", "--help", "show this help and exit");
	printf("  %-30s %s\n", "--version", "show the version and exit");
	if (help->details)
		printf("\n%s\n", help->details);
}

/* "unknown option '--X'", with the closest option of the table when one is close. */
static int unknown_option(const char *cmd, const char *name, size_t len, const struct es_opt *opts, size_t n_opts)
{
	char word[128];
	const char *names[64];
	size_t n = 0;
	snprintf(word, sizeof(word), "%.*s", (int)len, name);
	for (size_t i = 0; i < n_opts && n < sizeof(names) / sizeof(names[0]) - 2; i++)
		names[n++] = opts[i].name;
	names[n++] = "help";
	names[n++] = "version";
	const char *near = len < sizeof(word) ? es_closest_name(word, names, n) : NULL;
	if (near)
		return es_error(ES_EUSAGE, "eshard-mpi %s: unknown option '--%.*s' (did you mean --%s?)", cmd, (int)len,
				name, near);
	return es_error(ES_EUSAGE, "eshard-mpi %s: unknown option '--%.*s' (see eshard-mpi %s --help)", cmd, (int)len,
			name, cmd);
}

static int set_value(const struct es_opt *o, const char *val, const char *cmd)
{
	int64_t i;
	double d;
	switch (o->kind) {
	case ES_OPT_STR:
		*(const char **)o->dest = val;
		return 0;
	case ES_OPT_STR_LIST: {
		struct es_str_list *l = o->dest;
		int rc = es_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v));
		if (!rc)
			l->v[l->n++] = val;
		return rc;
	}
	case ES_OPT_POS_INT:
	case ES_OPT_NONNEG_INT:
		if (es_parse_i64(val, &i) || (o->kind == ES_OPT_POS_INT ? i <= 0 : i < 0))
			return es_error(ES_EUSAGE, "eshard-mpi %s: --%s needs a %s integer, got '%s'", cmd, o->name,
					o->kind == ES_OPT_POS_INT ? "positive" : "non-negative", val);
		*(int64_t *)o->dest = i;
		return 0;
	case ES_OPT_POS_NUM:
		if (es_parse_double(val, &d) || d <= 0)
			return es_error(ES_EUSAGE, "eshard-mpi %s: --%s needs a positive number, got '%s'", cmd, o->name, val);
		*(double *)o->dest = d;
		return 0;
	case ES_OPT_FLAG:
		break;
	}
	return es_error(ES_EINTERNAL, "bad option table entry --%s", o->name);
}

int es_args_parse(int argc, char **argv, const struct es_opt *opts, size_t n_opts,
		  const struct es_cmd_help *help)
{
	const char *cmd = help->command;
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			es_args_usage(opts, n_opts, help);
			return 1;
		}
		if (!strcmp(arg, "--version")) {
			printf("%s\n", es_version_line());
			return 1;
		}
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
			es_error(ES_EUSAGE, "eshard-mpi %s: unexpected argument '%s' (see eshard-mpi %s --help)", cmd, arg, cmd);
			return ES_EUSAGE;
		}
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const struct es_opt *o = NULL;
		for (size_t i = 0; i < n_opts; i++)
			if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
				o = &opts[i];
		if (!o)
			return unknown_option(cmd, name, len, opts, n_opts);
		if (o->seen)
			*o->seen = 1;
		if (o->kind == ES_OPT_FLAG) {
			if (eq) {
				es_error(ES_EUSAGE, "eshard-mpi %s: --%s takes no value", cmd, o->name);
				return ES_EUSAGE;
			}
			*(int *)o->dest = 1;
			continue;
		}
		const char *val = eq ? eq + 1 : NULL;
		if (!val) {
			if (a + 1 >= argc) {
				es_error(ES_EUSAGE, "eshard-mpi %s: --%s needs a value", cmd, o->name);
				return ES_EUSAGE;
			}
			val = argv[++a];
		}
		int rc = set_value(o, val, cmd);
		if (rc)
			return rc;
	}
	return 0;
}

int es_opt_at_most(const char *cmd, const char *name, int64_t value, int64_t max, const char *why)
{
	if (value <= max)
		return 0;
	return es_error(ES_EUSAGE, "eshard-mpi %s: --%s %lld is out of range: at most %lld (%s)", cmd, name,
			(long long)value, (long long)max, why);
}

void es_str_list_free(struct es_str_list *l)
{
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}
