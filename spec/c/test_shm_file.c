/* SPDX-License-Identifier: MIT */
/* test_shm_file.c - region files (runtime/src/core/shm_file.c): the checks
 * a file or directory passes before a table is mapped from it.
 *
 * Each case builds the hostile file itself in a fresh directory under
 * /tmp: a symbolic link, group or other access, another size, something
 * other than a regular file, a directory open to others. Another owner
 * needs root (chown); that case is skipped otherwise. A full filesystem is
 * spec/nginx/regions.sh's (a tmpfs mount); here posix_fallocate's blocks
 * are checked to be there (st_blocks), which a sparse ftruncate would not
 * give.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nres_test.h"
#include "nres/shm.h"

#define SIZE 8192u

static char dir[64];
static char path[128];
static char why[256];

static int setup(void **state) {
  (void) state;
  strcpy(dir, "/tmp/nres-shmfile.XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/t.shm", dir);
  return 0;
}

static int teardown(void **state) {
  char cmd[128];
  (void) state;
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int make(mode_t mode, off_t size) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, size), 0);
  assert_int_equal(fchmod(fd, mode), 0);
  return fd;
}

static void create_reserves_blocks_and_is_private(void **state) {
  struct stat st;
  int fd = -1;
  (void) state;
  assert_int_equal(nres_shm_file_create(path, SIZE, &fd, why, sizeof(why)), 0);
  assert_true(fd >= 0);
  assert_int_equal(fstat(fd, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(st.st_size, SIZE);
  assert_true((uint64_t) st.st_blocks * 512 >= SIZE);   /* not sparse */
  assert_int_equal(nres_shm_file_check(fd, SIZE, why, sizeof(why)), 0);
  close(fd);
  /* O_EXCL: an existing name is not taken over */
  assert_int_equal(nres_shm_file_create(path, SIZE, &fd, why, sizeof(why)), NRES_ESTATE);
  assert_int_equal(fd, -1);
  assert_string_equal(why, "open: File exists");
}

static void open_accepts_ours_and_says_when_absent(void **state) {
  int fd = -1;
  (void) state;
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), NRES_EAGAIN);
  assert_string_equal(why, "no such file");
  close(make(0600, SIZE));
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), 0);
  assert_true(fd >= 0);
  close(fd);
}

static void open_refuses_a_link_group_access_and_a_size(void **state) {
  char target[160];
  int fd = -1;
  (void) state;
  close(make(0640, SIZE));
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a file with group or other access (mode 0640, expected 0600 or 0700)");
  assert_int_equal(fd, -1);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(nres_shm_file_open(path, SIZE + 64, &fd, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a size of 8192 bytes (this layout: 8256)");
  snprintf(target, sizeof(target), "%s/target.shm", dir);
  assert_int_equal(rename(path, target), 0);
  assert_int_equal(symlink(target, path), 0);
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a symbolic link");
  assert_int_equal(unlink(path), 0);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "not a regular file");
}

static void open_refuses_another_owner(void **state) {
  int fd;
  (void) state;
  if (geteuid() != 0)
    skip();   /* chown to another user needs root */
  fd = make(0600, SIZE);
  assert_int_equal(fchown(fd, 65534, 65534), 0);
  close(fd);
  assert_int_equal(nres_shm_file_open(path, SIZE, &fd, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a file owned by uid 65534, not by this process's (0)");
}

static void check_sees_a_truncation_through_the_descriptor(void **state) {
  int fd;
  (void) state;
  assert_int_equal(nres_shm_file_create(path, SIZE, &fd, why, sizeof(why)), 0);
  assert_int_equal(truncate(path, 100), 0);   /* by path: another process's act */
  assert_int_equal(nres_shm_file_check(fd, SIZE, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a size of 100 bytes (this layout: 8192)");
  close(fd);
  assert_int_equal(nres_shm_file_check(-1, SIZE, NULL, 0), NRES_EINVAL);
}

static void dir_private_makes_0700_and_refuses_others(void **state) {
  char sub[160], link[160];
  struct stat st;
  (void) state;
  snprintf(sub, sizeof(sub), "%s/regions", dir);
  assert_int_equal(nres_shm_dir_private(sub, why, sizeof(why)), 0);
  assert_int_equal(stat(sub, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0700);
  assert_int_equal(nres_shm_dir_private(sub, why, sizeof(why)), 0);   /* again: kept */
  assert_int_equal(chmod(sub, 0755), 0);
  assert_int_equal(nres_shm_dir_private(sub, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a directory with group or other access (mode 0755, expected 0600 or 0700)");
  snprintf(link, sizeof(link), "%s/link", dir);
  assert_int_equal(symlink(sub, link), 0);
  assert_int_equal(nres_shm_dir_private(link, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "a symbolic link");
  close(make(0600, 1));
  assert_int_equal(nres_shm_dir_private(path, why, sizeof(why)), NRES_EINVAL);
  assert_string_equal(why, "not a directory");
  snprintf(sub, sizeof(sub), "%s/no/such", dir);
  assert_int_equal(nres_shm_dir_private(sub, why, sizeof(why)), NRES_ESTATE);
  assert_string_equal(why, "mkdir: No such file or directory");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(create_reserves_blocks_and_is_private, setup, teardown),
    cmocka_unit_test_setup_teardown(open_accepts_ours_and_says_when_absent, setup, teardown),
    cmocka_unit_test_setup_teardown(open_refuses_a_link_group_access_and_a_size, setup, teardown),
    cmocka_unit_test_setup_teardown(open_refuses_another_owner, setup, teardown),
    cmocka_unit_test_setup_teardown(check_sees_a_truncation_through_the_descriptor, setup, teardown),
    cmocka_unit_test_setup_teardown(dir_private_makes_0700_and_refuses_others, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
