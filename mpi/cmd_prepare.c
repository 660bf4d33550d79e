#include "commands.h"

#include "eshard/log.h"
#include "eshard/number.h"
#include "eshard/stop.h"
#include "eshard/template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void prepare_cli_init(struct prepare_cli *c)
{
	memset(c, 0, sizeof(*c));
	es_prepare_opts_init(&c->o);
}

size_t prepare_cli_options(struct prepare_cli *c, struct es_opt *opts)
{
	struct es_prepare_opts *o = &c->o;
	struct es_opt t[] = {
		{ "config", ES_OPT_STR, &o->config, NULL, "PATH", "Data-Juicer YAML recipe (required, except with --process-cmd)" },
		{ "dataset-path", ES_OPT_STR, &o->dataset_path, NULL, "PATH", "JSONL file or folder; overrides the recipe's dataset_path (required without --config)" },
		{ "job-dir", ES_OPT_STR, &o->job_dir, NULL, "DIR", "job folder on the shared file system (required): a new or empty folder (a mount point too) is prepared; this very job's folder is resumed (checked to be the same request)" },
		{ "num-shards", ES_OPT_STR, &c->num_shards, NULL, "N", "exact number of non-empty shards, or auto (the default): max(4 x ranks, input / --target-shard-mb), at most the rows" },
		{ "target-shard-mb", ES_OPT_POS_INT, &c->target_shard_mb, NULL, NULL, "--num-shards auto: the largest shard wanted, in MiB (default 128, at most 8796093022207)" },
		{ "lock-timeout-secs", ES_OPT_POS_INT, &o->policy.lock_timeout_secs, NULL, NULL, "a lock older than this is stale (default 126000)" },
		{ "max-retries", ES_OPT_NONNEG_INT, &o->policy.max_retries, NULL, NULL, "failed or stale attempts allowed after the first (default 3)" },
		{ "poll-interval-secs", ES_OPT_POS_INT, &o->policy.poll_interval_secs, NULL, NULL, "idle worker poll interval (default 20)" },
		{ "heartbeat-secs", ES_OPT_POS_NUM, &o->policy.heartbeat_secs, NULL, NULL, "lease refresh interval of a running shard (default 10)" },
		{ "lease-secs", ES_OPT_POS_NUM, &o->policy.lease_secs, NULL, NULL, "a lock unchanged this long is stale (default 120)" },
		{ "ray-address", ES_OPT_STR, &o->ray_address, NULL, "ADDR", "Ray address given to every shard (default local)" },
		{ "python", ES_OPT_STR, &c->python, NULL, "PATH", "Python that can import Data-Juicer (default python3)" },
		{ "dj-process", ES_OPT_STR, &c->dj_process, NULL, "CMD", "Data-Juicer process command (default dj-process on PATH)" },
		{ "dj-root", ES_OPT_STR, &c->dj_root, NULL, "DIR", "run tools/process_data.py of this Data-Juicer checkout" },
		{ "process-cmd", ES_OPT_STR, &c->process_cmd, NULL, "TEMPLATE", "any JSONL-to-JSONL command instead of Data-Juicer, e.g. 'prog --in {input} --out {output}'" },
		{ "keep-order", ES_OPT_FLAG, &c->keep_order, NULL, NULL, "order-stable output: each result lists its rows in input order (default for Data-Juicer; a --process-cmd must keep the hidden field __eshard_row__)" },
		{ "no-keep-order", ES_OPT_FLAG, &c->no_keep_order, NULL, NULL, "keep the processor's own output order (Data-Juicer's Ray export order is not guaranteed)" },
		{ "max-line-bytes", ES_OPT_POS_INT, &c->max_line_bytes, NULL, NULL, "longest input line accepted (default 268435456)" },
		{ "max-input-bytes", ES_OPT_POS_INT, &o->max_input_bytes, NULL, NULL, "stop once the input decodes to more than N bytes (default: no such cap, but a compressed file may decode to at most 1000 times its size: a decompression bomb)" },
		{ "compressed", ES_OPT_FLAG, &o->compressed, NULL, NULL, "a dataset folder's .jsonl.gz and .jsonl.zst files are read too, beside its .jsonl files (default: .jsonl only, as the reference; a compressed file named by --dataset-path is always read)" },
		{ "allow-unsharded", ES_OPT_FLAG, &o->allow_unsharded, NULL, NULL, "a recipe that is not shard-safe (a whole-dataset operator such as a deduplicator, export_shard_size, ...) runs once over the whole dataset as one shard, on rank 0 while the other ranks wait (default: refused)" },
		{ "threads", ES_OPT_POS_INT, &o->threads, NULL, NULL, "threads that read, validate and re-encode the input, cut into byte ranges at line ends (default: the CPUs this process may use; the job folder is the same for any count)" },
		{ "bad-lines", ES_OPT_STR, &c->bad_lines, NULL, "POLICY", "strict (the default, as the reference): a blank line or bad record stops prepare; skip: such lines are left out, counted per file and listed (the first 100) in the manifest's bad_lines" },
	};
	memcpy(opts, t, sizeof(t));
	return sizeof(t) / sizeof(t[0]);
}

int prepare_cli_finish(struct prepare_cli *c, const char *cmd)
{
	struct es_prepare_opts *o = &c->o;
	o->num_shards = 0;
	/* A command processor needs no recipe: the input then comes from --dataset-path alone. */
	if (!o->config && !c->process_cmd)
		return es_error(ES_EUSAGE, "eshard-mpi %s: --config is required (unless --process-cmd is given)", cmd);
	if (!o->config && !o->dataset_path)
		return es_error(ES_EUSAGE, "eshard-mpi %s: --dataset-path is required with --process-cmd and no --config", cmd);
	if (!o->job_dir)
		return es_error(ES_EUSAGE, "eshard-mpi %s: --job-dir is required", cmd);
	if (c->num_shards && strcmp(c->num_shards, "auto")) {
		if (es_parse_i64(c->num_shards, &o->num_shards) || o->num_shards <= 0)
			return es_error(ES_EUSAGE, "eshard-mpi %s: --num-shards must be a positive integer or 'auto', got '%s'",
					cmd, c->num_shards);
		if (c->target_shard_mb)
			return es_error(ES_EUSAGE, "eshard-mpi %s: --target-shard-mb goes with --num-shards auto, not with a count", cmd);
	}
	int rc = es_opt_at_most(cmd, "target-shard-mb", c->target_shard_mb, INT64_MAX >> 20,
				"it is counted in bytes, 1 MiB each");
	if (rc)
		return rc;
	o->target_shard_bytes = c->target_shard_mb << 20;
	if ((c->dj_process != NULL) + (c->dj_root != NULL) + (c->process_cmd != NULL) > 1)
		return es_error(ES_EUSAGE, "eshard-mpi %s: give at most one of --dj-process, --dj-root and --process-cmd", cmd);
	if (c->process_cmd && es_template_check(c->process_cmd))
		return ES_EUSAGE;
	if (c->keep_order && c->no_keep_order)
		return es_error(ES_EUSAGE, "eshard-mpi %s: give at most one of --keep-order and --no-keep-order", cmd);
	o->processor.kind = c->process_cmd ? ES_PROC_COMMAND : ES_PROC_DATA_JUICER;
	o->processor.command = (char *)c->process_cmd;
	o->processor.dj_process = (char *)c->dj_process;
	o->processor.dj_root = (char *)c->dj_root;
	o->processor.python = (char *)c->python;
	o->processor.keep_order = c->keep_order || (!c->no_keep_order && !c->process_cmd);
	o->max_line_bytes = (size_t)c->max_line_bytes;
	if (c->bad_lines && strcmp(c->bad_lines, "strict") && strcmp(c->bad_lines, "skip"))
		return es_error(ES_EUSAGE, "eshard-mpi %s: --bad-lines must be strict or skip, got '%s'", cmd, c->bad_lines);
	o->skip_bad_lines = c->bad_lines && !strcmp(c->bad_lines, "skip");
	return 0;
}

int cmd_prepare(int argc, char **argv)
{
	struct prepare_cli c;
	struct es_opt opts[ES_PREPARE_MAX_OPTS];
	prepare_cli_init(&c);
	size_t n = prepare_cli_options(&c, opts);
	int64_t progress_secs = 10;
	opts[n++] = (struct es_opt){ "progress-secs", ES_OPT_NONNEG_INT, &progress_secs, NULL, "N", "print a progress line of the input read (bytes done of the total, MB/s, ETA) on stderr every N seconds (default 10; 0: none)" };
	opts[n++] = (struct es_opt){ "nodes", ES_OPT_POS_INT, &c.o.auto_ranks, NULL, NULL, "--num-shards auto: the nodes (ranks) that will work, for at least 4 shards each (default: the size rule alone; at most 2147483647)" };
	static const struct es_cmd_help help = {
		"prepare",
		"Validate the recipe and the input, cut the input into deterministic shards and publish the job folder.",
		"An existing job folder is accepted only when it was prepared from the same request (same\n"
		"dataset, recipe bytes, shard count, processor command and order, input files re-hashed;\n"
		"--num-shards auto accepts the count the job was made with); then nothing is written and\n"
		"the exit code is 0. --bad-lines skip that left lines out is part of the request.\n"
		"Otherwise the error names each difference. --python, --dj-process,\n"
		"--dj-root and --ray-address say where things are on a node: an existing job keeps its own,\n"
		"and run and worker take them per process. Exit codes: 0 prepared or unchanged, 2 error.",
	};
	int rc = es_args_parse(argc, argv, opts, n, &help);
	if (rc)
		return rc > 0 ? 0 : 2;
	if ((rc = prepare_cli_finish(&c, "prepare")) ||
	    (rc = es_opt_at_most("prepare", "nodes", c.o.auto_ranks, ES_MAX_NODES, "MPI counts ranks in an int")))
		return 2;
	if (c.o.auto_ranks && c.o.num_shards) {
		es_error(ES_EUSAGE, "eshard-mpi prepare: --nodes goes with --num-shards auto, not with a count");
		return 2;
	}
	c.o.progress_secs = (double)progress_secs;
	install_stop_handlers(); /* SIGTERM/SIGINT: stop at once, removing the stage folder */
	struct es_prepare_result res;
	rc = es_prepare_run(&c.o, &res);
	free(res.job_dir);
	return es_exit_code(rc);
}
