/* SPDX-License-Identifier: MIT */
/* child.c - run one child process with a time limit, capturing its output.
 *
 * The runner puts every cell in a fresh process: nresrun re-executing
 * itself. A cell that crashes or hangs must cost the run nothing but that
 * cell, so the child gets its own process group (the time limit kills the
 * whole group), stdin from /dev/null, and pipes for stdout and stderr that
 * are drained with poll while it runs, so a chatty child never blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nresrun/host.h"

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Append what fd has to buf (keeping a NUL); 0 at end of file. */
static int drain(int fd, char *buf, size_t cap, size_t *len) {
  char scratch[4096];
  ssize_t n = read(fd, scratch, sizeof(scratch));
  if (n <= 0)
    return n < 0 && (errno == EINTR || errno == EAGAIN) ? 1 : 0;
  if (cap > 0 && *len < cap - 1) {
    size_t room = cap - 1 - *len;
    size_t take = (size_t) n < room ? (size_t) n : room;
    memcpy(buf + *len, scratch, take);
    *len += take;
    buf[*len] = '\0';
  }
  return 1;
}

int nres_host_spawn(const char *const *argv, double timeout_s, char *out,
                    size_t out_cap, char *err, size_t err_cap,
                    nres_host_child_t *child) {
  int out_pipe[2], err_pipe[2], wstatus = 0;
  double start, deadline;
  pid_t pid;
  int open_fds = 2;

  if (argv == NULL || argv[0] == NULL || child == NULL || !(timeout_s > 0))
    return NRES_EINVAL;
  memset(child, 0, sizeof(*child));
  if (out_cap > 0) out[0] = '\0';
  if (err_cap > 0) err[0] = '\0';
  if (pipe(out_pipe) != 0)
    return NRES_ENOMEM;
  if (pipe(err_pipe) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return NRES_ENOMEM;
  }
  start = seconds_now();
  pid = fork();
  if (pid < 0) {
    close(out_pipe[0]); close(out_pipe[1]);
    close(err_pipe[0]); close(err_pipe[1]);
    return NRES_EAGAIN;
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    setpgid(0, 0);
    if (devnull >= 0)
      dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]); close(out_pipe[1]);
    close(err_pipe[0]); close(err_pipe[1]);
    execv(argv[0], (char *const *) argv);
    _exit(127);
  }
  setpgid(pid, pid);   /* also here: no race with the child's own call */
  close(out_pipe[1]);
  close(err_pipe[1]);
  deadline = start + timeout_s;

  while (open_fds > 0) {
    struct pollfd fds[2] = { { out_pipe[0], POLLIN, 0 }, { err_pipe[0], POLLIN, 0 } };
    double left = deadline - seconds_now();
    int ready;
    if (left <= 0) {
      child->timed_out = 1;
      break;
    }
    ready = poll(fds, 2, (int) (left * 1000) + 1);
    if (ready < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      if (!drain(fds[i].fd, i == 0 ? out : err, i == 0 ? out_cap : err_cap,
                 i == 0 ? &child->out_len : &child->err_len)) {
        close(fds[i].fd);
        if (i == 0) out_pipe[0] = -1; else err_pipe[0] = -1;
        open_fds--;
      }
    }
  }
  if (out_pipe[0] >= 0) close(out_pipe[0]);
  if (err_pipe[0] >= 0) close(err_pipe[0]);
  /* Its outputs may be closed while it still runs: wait within the limit. */
  for (;;) {
    pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid)
      break;
    if (done < 0 && errno != EINTR)
      break;
    if (child->timed_out || seconds_now() >= deadline) {
      child->timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
      break;
    }
    struct timespec nap = { 0, 5 * 1000 * 1000 };
    nanosleep(&nap, NULL);
  }
  kill(-pid, SIGKILL);   /* stragglers of the group, if any */
  child->seconds = seconds_now() - start;
  if (child->timed_out)
    child->status = -1;
  else if (WIFEXITED(wstatus))
    child->status = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus))
    child->status = 128 + WTERMSIG(wstatus);
  return 0;
}

long nres_host_peak_rss_kb(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return -1;
  return ru.ru_maxrss;
}

int nres_host_isatty(int fd) {
  return isatty(fd);
}
