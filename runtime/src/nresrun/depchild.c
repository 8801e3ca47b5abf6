/* SPDX-License-Identifier: MIT */
/* depchild.c - the dependency server of an http cell, as a child process.
 *
 * An http cell runs `nresrun serve --port 0` beside itself, so the server's
 * allocations and CPU never mix with the client's figures. This file owns
 * that child's life: start it with stdin a pipe (the server stops when the
 * pipe closes, so it dies with the cell even if the cell is killed) and
 * read its "port N" line within a time limit; stop it (close the pipe, then
 * SIGTERM, then SIGKILL, always reaping it); and the few control requests
 * the cell makes outside its measured path (/reset, /stats) as blocking
 * one-shot HTTP/1.0-style exchanges, which keeps them off the cell's loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nresrun/host.h"

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void reap(nres_host_server_t *srv, double timeout_s) {
  double deadline = seconds_now() + timeout_s;
  int wstatus = 0;
  for (;;) {
    pid_t done = waitpid(srv->pid, &wstatus, WNOHANG);
    if (done == srv->pid || (done < 0 && errno != EINTR))
      break;
    if (seconds_now() >= deadline) {
      srv->status = -1;
      return;
    }
    struct timespec nap = { 0, 2 * 1000 * 1000 };
    nanosleep(&nap, NULL);
  }
  srv->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus)
              : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : 0;
  srv->pid = 0;
}

int nres_host_server_stop(nres_host_server_t *srv) {
  if (srv == NULL)
    return NRES_EINVAL;
  if (srv->stdin_fd >= 0) {
    close(srv->stdin_fd);   /* the polite way: it stops at end of input */
    srv->stdin_fd = -1;
  }
  if (srv->pid <= 0)
    return 0;
  reap(srv, 2.0);
  if (srv->pid > 0) {
    kill(srv->pid, SIGTERM);
    reap(srv, 2.0);
  }
  if (srv->pid > 0) {
    kill(srv->pid, SIGKILL);
    reap(srv, 5.0);
  }
  return srv->pid > 0 ? NRES_ETIMEDOUT : 0;
}

int nres_host_server_start(const char *const *argv, double timeout_s,
                           nres_host_server_t *srv) {
  int in_pipe[2], out_pipe[2];
  char line[128];
  size_t len = 0;
  int ended = 0;
  double deadline;
  pid_t pid;

  if (argv == NULL || argv[0] == NULL || srv == NULL || !(timeout_s > 0))
    return NRES_EINVAL;
  memset(srv, 0, sizeof(*srv));
  srv->stdin_fd = -1;
  if (pipe2(in_pipe, O_CLOEXEC) != 0)
    return NRES_ENOMEM;
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return NRES_ENOMEM;
  }
  pid = fork();
  if (pid < 0) {
    close(in_pipe[0]); close(in_pipe[1]);
    close(out_pipe[0]); close(out_pipe[1]);
    return NRES_EAGAIN;
  }
  if (pid == 0) {
    /* Same process group as the cell: a cell killed for hanging takes its
     * server with it. stderr is the cell's (its failures show there). */
    signal(SIGPIPE, SIG_DFL);
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    execv(argv[0], (char *const *) argv);
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  srv->pid = pid;
  srv->stdin_fd = in_pipe[1];
  deadline = seconds_now() + timeout_s;
  for (;;) {
    struct pollfd pfd = { out_pipe[0], POLLIN, 0 };
    double left = deadline - seconds_now();
    char *nl;
    ssize_t n;
    if (left <= 0)
      break;
    if (poll(&pfd, 1, (int) (left * 1000) + 1) < 0 && errno != EINTR)
      break;
    if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    n = read(out_pipe[0], line + len, sizeof(line) - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ended = 1;   /* it exited (bad arguments, cannot listen) */
      break;
    }
    len += (size_t) n;
    line[len] = '\0';
    nl = strchr(line, '\n');
    if (nl != NULL || len == sizeof(line) - 1) {
      int port = 0;
      if (sscanf(line, "port %d", &port) == 1 && port > 0 && port < 65536)
        srv->port = port;
      break;
    }
  }
  close(out_pipe[0]);
  if (srv->port == 0) {
    nres_host_server_stop(srv);
    return ended ? NRES_ESTATE : NRES_ETIMEDOUT;
  }
  return 0;
}

int nres_host_http_get(int port, const char *path, double timeout_s,
                       char *out, size_t out_cap) {
  struct sockaddr_in a;
  struct timeval tv;
  char req[512], buf[8192];
  size_t have = 0;
  int fd, code = 0, n;
  char *body;

  if (port <= 0 || port > 65535 || path == NULL || path[0] != '/' ||
      !(timeout_s > 0) || strlen(path) > 256)
    return NRES_EINVAL;
  if (out_cap > 0)
    out[0] = '\0';
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  tv.tv_sec = (time_t) timeout_s;
  tv.tv_usec = (suseconds_t) ((timeout_s - (double) tv.tv_sec) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t) port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  n = snprintf(req, sizeof(req),
               "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
               path);
  if (send(fd, req, (size_t) n, MSG_NOSIGNAL) != n) {
    int e = -errno;
    close(fd);
    return e ? e : -EIO;
  }
  for (;;) {   /* Connection: close - the answer ends at end of file */
    ssize_t r = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = -errno;
      close(fd);
      return e;
    }
    if (r == 0 || (have += (size_t) r) == sizeof(buf) - 1)
      break;
  }
  close(fd);
  buf[have] = '\0';
  if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
    return -EIO;
  body = strstr(buf, "\r\n\r\n");
  if (body != NULL && out_cap > 0) {
    size_t blen = strlen(body + 4);
    if (blen > out_cap - 1)
      blen = out_cap - 1;
    memcpy(out, body + 4, blen);
    out[blen] = '\0';
  }
  return code;
}
