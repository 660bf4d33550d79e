/*
 * Unit tests of the output lines of src/log.c: every line, with its prefix and its newline,
 * reaches the stream in one write even when the stream is unbuffered.
 *
 * MPICH's MPI_Init makes a rank's stdout unbuffered, stderr is unbuffered everywhere, and the
 * launcher forwards each rank's stream as it comes: a line written in pieces (its text, then its
 * "\n") was cut by another rank's line ("...44 rows)Worker vm:10754 started for job4"), and a
 * test that counts lines starting with "Worker " failed. Each line is written here into a
 * SOCK_SEQPACKET socket, which keeps the bounds of every write, so a line in pieces shows as
 * several packets.
 */
#include "testlib.h"

#include "eshard/clock.h"
#include "eshard/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LONG_LEN 10000 /* past the stack buffer of a line: the heap path */

/* The child's writes: stdout and stderr unbuffered, each the write end of a packet socket. */
static void child_lines(int out_fd, int err_fd)
{
	if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		_exit(3);
	setvbuf(stdout, NULL, _IONBF, 0);
	setvbuf(stderr, NULL, _IONBF, 0);
	es_say("Finished %s: %s (attempt %d)", "part-00000-of-00007", "done", 1);
	char *big = malloc(LONG_LEN + 1);
	if (!big)
		_exit(4);
	memset(big, 'x', LONG_LEN);
	big[LONG_LEN] = '\0';
	es_say("%s", big);
	es_log_set_prefix("[rank 3 node2] ");
	es_log_note("Worker %s:%d started", "node2", 42);
	es_warning("low %s", "disk");
	es_error(2, "cannot open %s", "/x/y");
	es_log_set_clock(es_time_mono());
	es_log_note("with the clock");
	free(big);
	fflush(NULL);
	_exit(0);
}

/* The next packet from fd, NUL-terminated, in buf; its length, or -1. */
static ssize_t next_packet(int fd, char *buf, size_t cap)
{
	ssize_t n = recv(fd, buf, cap - 1, 0);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

static void test_one_write_per_line(void)
{
	int out[2], err[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, out) == 0) ||
	    !CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, err) == 0))
		return;
	/* Big enough for the long line as one packet. */
	int sz = 4 * LONG_LEN;
	setsockopt(out[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(out[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	pid_t pid = fork();
	if (!CHECK(pid >= 0))
		return;
	if (pid == 0) {
		close(out[0]);
		close(err[0]);
		child_lines(out[1], err[1]);
	}
	close(out[1]);
	close(err[1]);
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	static char buf[4 * LONG_LEN];
	CHECK(next_packet(out[0], buf, sizeof(buf)) > 0);
	CHECK_STR_EQ(buf, "Finished part-00000-of-00007: done (attempt 1)\n");
	ssize_t n = next_packet(out[0], buf, sizeof(buf));
	CHECK_INT_EQ(n, LONG_LEN + 1);
	CHECK(n == LONG_LEN + 1 && buf[0] == 'x' && buf[LONG_LEN - 1] == 'x' && buf[LONG_LEN] == '\n');
	CHECK_INT_EQ(next_packet(out[0], buf, sizeof(buf)), 0); /* nothing else: the end */

	CHECK(next_packet(err[0], buf, sizeof(buf)) > 0);
	CHECK_STR_EQ(buf, "[rank 3 node2] Worker node2:42 started\n");
	CHECK(next_packet(err[0], buf, sizeof(buf)) > 0);
	CHECK_STR_EQ(buf, "[rank 3 node2] WARNING: low disk\n");
	CHECK(next_packet(err[0], buf, sizeof(buf)) > 0);
	CHECK_STR_EQ(buf, "[rank 3 node2] ERROR: cannot open /x/y\n");
	CHECK(next_packet(err[0], buf, sizeof(buf)) > 0);
	CHECK(strncmp(buf, "[+0.", 4) == 0);
	const char *rest = strchr(buf, ' ');
	CHECK(rest && strcmp(rest, " [rank 3 node2] with the clock\n") == 0);
	CHECK_INT_EQ(next_packet(err[0], buf, sizeof(buf)), 0);
	close(out[0]);
	close(err[0]);
}

int main(void)
{
	test_one_write_per_line();
	return test_done();
}
