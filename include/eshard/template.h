/*
 * template: the --process-cmd template of a command processor, split like a shell line but
 * never run through a shell, with its placeholders substituted.
 *
 * Contract: pure string work, nothing is read or written; a failure is reported once through
 * es_error(), and a bad template appends nothing to the output vector.
 */
#ifndef ESHARD_TEMPLATE_H
#define ESHARD_TEMPLATE_H

#include "eshard/buf.h"

/*
 * Validate a --process-cmd template (prepare calls it; ES_EUSAGE with a message naming the
 * problem). The rules, also used at run time:
 *  - the template is split into words on unquoted blanks (space, tab, newline); no shell
 *    runs, so there is no globbing, no variable expansion, no redirection or pipes;
 *  - '...' groups literally; "..." groups, and inside it a backslash escapes only '"' and
 *    '\' (as in sh); outside quotes a backslash escapes any next character; quotes and
 *    escapes are removed, and '' or "" make an empty word;
 *  - then, inside each word, {input} {output} {attempt_dir} {shard_id} {job_dir} are
 *    replaced (a value with blanks stays one word), "{{" and "}}" stand for '{' and '}', and
 *    any other '{' or '}' is an error (Python str.format's rule, so "awk '{{print}}'");
 *  - the template must have at least one word and use both {input} and {output}.
 */
int es_template_check(const char *tmpl);

/* The values of the placeholders. */
struct es_template_vars {
	const char *input, *output, *attempt_dir, *shard_id, *job_dir;
};

/* Append the words of tmpl, with the placeholders of v substituted, to argv. ES_EINVAL (a bad
 * template in a job is bad job state) with the reason in the message. */
int es_template_expand(const char *tmpl, const struct es_template_vars *v, struct es_strv *argv);

#endif
