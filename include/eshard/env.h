/*
 * env: environment entries ("NAME=value") by name, and the launcher's identity that no child
 * may inherit.
 */
#ifndef ESHARD_ENV_H
#define ESHARD_ENV_H

/* 1 when kv's name is name. */
int es_env_name_is(const char *kv, const char *name);
/* 1 when the environment entry kv ("NAME=value") tells a launcher's identity that a child
 * must not see (docs/design.md#a-clean-child-environment): Open MPI, PMIx/PMI, Slurm, torch-style
 * WORLD_SIZE and RANK, MASTER_*, the job ids that make newer Data-Juicer versions start an elastic
 * run of their own (PAI_JOB_ID, DLC_JOB_ID, JOB_ID, DJ_ELASTIC_*), and an inherited RAY_ADDRESS. */
int es_env_is_launcher_identity(const char *kv);

#endif
