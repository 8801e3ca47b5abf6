/* SPDX-License-Identifier: MIT */
/* shm_file.c - region files: the checks a file or directory passes before
 * a shm table is mapped from it (nres/shm.h, "Region files").
 *
 * A region file is input: another local user may have made it, linked it
 * elsewhere, opened it up to the group, truncated it or filled the
 * filesystem under it. Each check here is made on the open file (fstat of
 * the descriptor that will be mapped, never a second lookup of the path),
 * so what was checked is what gets mapped. Space is reserved with
 * posix_fallocate before a page is touched: a full filesystem is an error
 * code here, not a SIGBUS at the first write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "nres/shm.h"

static int say(char *why, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int say(char *why, size_t cap, int rc, const char *fmt, ...) {
  va_list ap;

  if (why != NULL && cap > 0) {
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* The file's owner and access: ours, and no group or other bits. */
static int owned_privately(const struct stat *st, const char *what, char *why,
                           size_t cap) {
  if (st->st_uid != geteuid())
    return say(why, cap, NRES_EINVAL, "%s owned by uid %u, not by this process's (%u)",
               what, (unsigned) st->st_uid, (unsigned) geteuid());
  if (st->st_mode & 077)
    return say(why, cap, NRES_EINVAL, "%s with group or other access (mode %04o, expected 0600 or 0700)",
               what, (unsigned) (st->st_mode & 07777));
  return 0;
}

int nres_shm_file_check(int fd, uint64_t size, char *why, size_t cap) {
  struct stat st;
  int rc;

  if (fd < 0)
    return say(why, cap, NRES_EINVAL, "no file descriptor");
  if (fstat(fd, &st) != 0)
    return say(why, cap, NRES_ESTATE, "fstat: %s", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return say(why, cap, NRES_EINVAL, "not a regular file");
  rc = owned_privately(&st, "a file", why, cap);
  if (rc != 0)
    return rc;
  if (size == 0 && st.st_size == 0)
    return say(why, cap, NRES_EINVAL, "an empty file");
  if (size != 0 && (uint64_t) st.st_size != size)
    return say(why, cap, NRES_EINVAL, "a size of %llu bytes (this layout: %llu)",
               (unsigned long long) st.st_size, (unsigned long long) size);
  return 0;
}

int nres_shm_file_open(const char *path, uint64_t size, int *fd, char *why,
                       size_t cap) {
  int f, rc;

  if (fd == NULL)
    return NRES_EINVAL;
  *fd = -1;
  if (path == NULL)
    return say(why, cap, NRES_EINVAL, "no path");
  f = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
  if (f < 0) {
    if (errno == ENOENT)
      return say(why, cap, NRES_EAGAIN, "no such file");
    if (errno == ELOOP)
      return say(why, cap, NRES_EINVAL, "a symbolic link");
    if (errno == EACCES || errno == EPERM)
      return say(why, cap, NRES_EINVAL, "a file this process may not open (%s)",
                 strerror(errno));
    return say(why, cap, NRES_ESTATE, "open: %s", strerror(errno));
  }
  rc = nres_shm_file_check(f, size, why, cap);
  if (rc != 0) {
    close(f);
    return rc;
  }
  *fd = f;
  return 0;
}

int nres_shm_file_create(const char *path, uint64_t size, int *fd, char *why,
                         size_t cap) {
  int f, err;

  if (fd == NULL)
    return NRES_EINVAL;
  *fd = -1;
  if (path == NULL || size == 0 || size > (uint64_t) INT64_MAX)
    return say(why, cap, NRES_EINVAL, "no path or a size out of range");
  f = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY,
           0600);
  if (f < 0)
    return say(why, cap, NRES_ESTATE, "open: %s", strerror(errno));
  /* The blocks themselves, not a sparse length: a page the filesystem
   * cannot give is ENOSPC here rather than SIGBUS at its first write. */
  err = posix_fallocate(f, 0, (off_t) size);
  if (err != 0) {
    close(f);
    unlink(path);
    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
      return say(why, cap, NRES_EFULL, "no space for %llu bytes (%s)",
                 (unsigned long long) size, strerror(err));
    return say(why, cap, NRES_ESTATE, "posix_fallocate: %s", strerror(err));
  }
  *fd = f;
  return 0;
}

int nres_shm_dir_private(const char *path, char *why, size_t cap) {
  struct stat st;

  if (path == NULL || path[0] == '\0')
    return say(why, cap, NRES_EINVAL, "no directory");
  if (mkdir(path, 0700) != 0 && errno != EEXIST)
    return say(why, cap, errno == EACCES || errno == EROFS || errno == EPERM
                             ? NRES_EAGAIN : NRES_ESTATE,
               "mkdir: %s", strerror(errno));
  if (lstat(path, &st) != 0)
    return say(why, cap, NRES_ESTATE, "lstat: %s", strerror(errno));
  if (S_ISLNK(st.st_mode))
    return say(why, cap, NRES_EINVAL, "a symbolic link");
  if (!S_ISDIR(st.st_mode))
    return say(why, cap, NRES_EINVAL, "not a directory");
  return owned_privately(&st, "a directory", why, cap);
}
