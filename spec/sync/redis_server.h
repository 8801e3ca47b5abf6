/* SPDX-License-Identifier: MIT */
/* redis_server.h - a redis-server of a test's or benchmark's own: started on
 * 127.0.0.1 at a free port with its own directory and no persistence,
 * killed with the process that started it (PR_SET_PDEATHSIG), stopped,
 * continued and restarted on demand. Header-only: the fleet sync test
 * (spec/c/test_sync.c) and benchmark (bench/fleet.c) share it.
 */
#ifndef NRES_REDIS_SERVER_H
#define NRES_REDIS_SERVER_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  char bin[512];
  char dir[256];
  int port;
  pid_t pid;
  const char *extra[16];        /* more arguments (NULL-ended), e.g.
                                   "--requirepass", "pw" */
  const char *conf;             /* a config file, first (a Sentinel's) */
} redis_server_t;

/* redis-server from $REDIS_SERVER or $PATH: 1, or 0 if there is none. */
static int redis_server_find(redis_server_t *r) {
  const char *env = getenv("REDIS_SERVER");
  char *path, *dir, *save;

  if (env != NULL && access(env, X_OK) == 0) {
    snprintf(r->bin, sizeof(r->bin), "%s", env);
    return 1;
  }
  path = strdup(getenv("PATH") != NULL ? getenv("PATH")
                                        : "/usr/bin:/usr/sbin:/bin");
  for (dir = strtok_r(path, ":", &save); dir != NULL;
       dir = strtok_r(NULL, ":", &save)) {
    snprintf(r->bin, sizeof(r->bin), "%s/redis-server", dir);
    if (access(r->bin, X_OK) == 0) {
      free(path);
      return 1;
    }
  }
  free(path);
  return 0;
}

/* A free port on 127.0.0.1 (free when asked), or -1. */
static __attribute__((unused)) int redis_server_free_port(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  int fd, port;

  fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *) &a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr *) &a, &len) != 0) {
    close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* A PING answered (+PONG, or -NOAUTH from a server with a password) on a
 * fresh connection. */
static int redis_server_ready(const redis_server_t *r) {
  struct sockaddr_in a;
  struct timeval tv = { 0, 200000 };
  char buf[16];
  int fd, ok = 0;

  fd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t) r->port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0 &&
      write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof(buf)) >= 5 &&
      (memcmp(buf, "+PONG", 5) == 0 || memcmp(buf, "-NOAUTH", 5) == 0))
    ok = 1;   /* answering (a server with a password says NOAUTH) */
  close(fd);
  return ok;
}

/* Start it (r->port and r->dir set) and wait for its PONG: 0, or -1. */
static int redis_server_start(redis_server_t *r) {
  struct timespec ts = { 0, 10 * 1000 * 1000 };
  char port[16];
  int i, fd;

  snprintf(port, sizeof(port), "%d", r->port);
  r->pid = fork();
  if (r->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* a crashed parent leaves none */
    fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(fd, 2);
    {
      const char *argv[34] = { r->bin };
      const char *fixed[] = { "--port", port, "--bind", "127.0.0.1", "--dir",
                              r->dir, "--save", "", "--appendonly", "no",
                              "--daemonize", "no" };
      int n = 1;

      if (r->conf != NULL)
        argv[n++] = r->conf;
      for (i = 0; i < 12; i++)
        argv[n++] = fixed[i];
      for (i = 0; i < 16 && r->extra[i] != NULL; i++)
        argv[n++] = r->extra[i];
      argv[n] = NULL;
      execv(r->bin, (char *const *) argv);
    }
    _exit(127);
  }
  for (i = 0; i < 500; i++) {
    if (redis_server_ready(r))
      return 0;
    nanosleep(&ts, NULL);
  }
  return -1;
}

static void redis_server_kill(redis_server_t *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGCONT);
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
  }
  r->pid = 0;
}

#endif /* NRES_REDIS_SERVER_H */
