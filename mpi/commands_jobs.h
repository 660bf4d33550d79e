/*
 * The job-inspection subcommands: status, retry, merge, verify, report. Each returns the process exit
 * code and runs without MPI.
 */
#ifndef ESHARD_COMMANDS_JOBS_H
#define ESHARD_COMMANDS_JOBS_H

int cmd_status(int argc, char **argv);
int cmd_retry(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
