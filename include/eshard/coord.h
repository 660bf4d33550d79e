/*
 * coord: the coordination of a worker-broadcast job (eshard-mpi dlc), where every worker runs
 * the same command and no launcher connects them. The instances of one submission meet in
 * files beside the job folder, with the names and JSON of the reference's dlc_job.py (README
 * "PAI-DLC worker-broadcast jobs"), so that reference instances and ours can share a submission:
 *
 *   <parent of job>/.<job name>.dlc-coordination/<run_key>/
 *     prepare.lock  finalize.lock  abort.lock          elections (O_EXCL create; one line)
 *     prepare-result.json  finalize-result.json        the coordinator's exit code
 *     abort.json                                       the first failing instance's code
 *
 * run_key is the first 20 hex characters of SHA-256 of the submission id, so a new id is a new
 * generation that ignores an old abort or a failed prepare.
 *
 * Every decision to do work comes from winning an exclusive create; an absent file only ever
 * makes an instance wait and look again. Results and abort.json are published exclusively (the
 * election's winner is their only writer, or an instance whose election failed half-way).
 * Every wait ends after the timeout with an error, or at a stop signal.
 *
 * Contract after a crash: a coordinator that dies between its election and its result leaves
 * the lock alone, and the other instances of that submission time out (exit 2); a new
 * submission id starts afresh. The finalize election is held only once an instance's work has
 * ended, so an instance that dies while it works blocks nobody.
 */
#ifndef ESHARD_COORD_H
#define ESHARD_COORD_H

struct es_coord {
	char *dir;             /* the generation's folder; free with es_coord_close */
	char run_key[21];
	double timeout_secs;   /* every cross-instance wait */
	double poll_secs;
};

/* The run key of a submission id: 20 lower-case hex characters + NUL. */
int es_coord_run_key(const char *run_id, char out[21]);
/* Resolve job_dir, make the generation's folder (mkdir -p). 0 or a negative ES_E* code. */
int es_coord_open(struct es_coord *c, const char *job_dir, const char *run_id, double timeout_secs,
		  double poll_secs);
void es_coord_close(struct es_coord *c);
/* The return_code of <name> ("prepare-result.json", "finalize-result.json", "abort.json"):
 * 1 with *code when it is there, 0 when it is not (yet), negative when it is unreadable or its
 * return_code is not an integer. */
int es_coord_result(const struct es_coord *c, const char *name, int *code);
/* The election of phase ("prepare", "finalize", "abort"): 0 won, 1 another instance won. */
int es_coord_elect(const struct es_coord *c, const char *phase);
/* Publish <phase>-result.json (error NULL: no "error" key). */
int es_coord_publish_result(const struct es_coord *c, const char *phase, int code, const char *error);
/* Wait for the prepare coordinator: 0 with *code from prepare-result.json, or 0 when the job's
 * manifest appears, as the reference accepts, but only when it was not seen before the
 * election (manifest_before) and it is newer than prepare.lock: "not seen" may be an NFS
 * client's cached "no such file" for an older job's manifest, which proves nothing. After the
 * timeout: ES_EINVAL with the reference's message. A stop signal: *code = 128 + signal. */
int es_coord_wait_prepare(const struct es_coord *c, const char *job_dir, int manifest_before, int *code);
/* Wait for finalize-result.json or abort.json: 0 with *code from the first found, or the
 * timeout's error. A stop signal: *code = 128 + signal. */
int es_coord_wait_finalize(const struct es_coord *c, int *code);
/* Abort the submission with code and reason unless an instance did so first, then wait for
 * abort.json: *final gets its return_code (the first aborter's), or 128 + signal when a stop
 * signal ends the wait. 0 or a negative error. */
int es_coord_abort(const struct es_coord *c, int code, const char *reason, int *final);
/* Has an instance aborted the submission? 1 yes, 0 no (errors count as no). */
int es_coord_aborted(const struct es_coord *c);
/* Wait until every shard of the job is terminal (strict mode's capped instances): 0 with
 * *code = 0 when all are done; otherwise the submission is aborted (failed shards, the
 * timeout) or was aborted, and *code is abort.json's code. */
int es_coord_wait_terminal(const struct es_coord *c, const char *job_dir, int *code);

#endif
