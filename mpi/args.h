/*
 * args: a small table-driven parser for long options ("--name value" and "--name=value").
 * Abbreviations are not accepted (argparse's prefix matching is an accident of the
 * reference, docs/design.md#where-we-differ-from-the-reference). Every subcommand has --help and
 * --version. An unknown option is reported with the closest known one when there is one ("did you
 * mean --job-dir?").
 */
#ifndef ESHARD_ARGS_H
#define ESHARD_ARGS_H

#include <stddef.h>
#include <stdint.h>

enum es_opt_kind {
	ES_OPT_FLAG,     /* int *: set to 1 */
	ES_OPT_STR,      /* const char **: last one wins */
	ES_OPT_POS_INT,  /* int64_t *: > 0 */
	ES_OPT_NONNEG_INT, /* int64_t *: >= 0 */
	ES_OPT_POS_NUM,  /* double *: > 0 */
	ES_OPT_STR_LIST, /* struct es_str_list *: repeatable */
};

struct es_str_list {
	const char **v;
	size_t n, cap;
};

struct es_opt {
	const char *name;    /* without the leading "--" */
	enum es_opt_kind kind;
	void *dest;
	int *seen;           /* optional: set to 1 when given */
	const char *metavar; /* for --help */
	const char *help;
};

struct es_cmd_help {
	const char *command;   /* "prepare" */
	const char *summary;   /* one line */
	const char *details;   /* optional paragraph printed after the options */
};

/* Parses argv[1..] (argv[0] is the subcommand). Returns 0, 1 when --help or --version was
 * printed (exit 0), or ES_EUSAGE after printing "ERROR: <what>" and a usage hint. */
int es_args_parse(int argc, char **argv, const struct es_opt *opts, size_t n_opts,
		  const struct es_cmd_help *help);
void es_args_usage(const struct es_opt *opts, size_t n_opts, const struct es_cmd_help *help);
/* 0 when value <= max; else ES_EUSAGE after "eshard-mpi <cmd>: --<name> <value> is out of
 * range: at most <max> (<why>)": for the counts that something multiplies or converts, so that
 * a huge one is refused with its limit instead of wrapping. */
int es_opt_at_most(const char *cmd, const char *name, int64_t value, int64_t max, const char *why);
void es_str_list_free(struct es_str_list *l);
/* "eshard-mpi <version> (git <revision>)", what --version prints (mpi/version.c). */
const char *es_version_line(void);

#endif
